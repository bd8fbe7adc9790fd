# The two commands README promises: `make demo` (the main job) and `make test`. Each installs
# only what it needs (scripts/setup.sh TARGET: the .ci/apt lists naming it, the venv);
# `make setup` installs everything.
.PHONY: setup test demo bench clean

setup:
	bash scripts/setup.sh all

test:
	bash scripts/setup.sh test
	.venv/bin/python -m pytest

demo:
	bash scripts/demo.sh

bench: setup
	for b in bench/bench_*.py; do echo "== $$b"; .venv/bin/python $$b || exit 1; done

clean:
	rm -rf .venv build *.egg-info

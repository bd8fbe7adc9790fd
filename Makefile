# The two commands README promises: `make demo` (the main job) and `make test`.
.PHONY: setup test demo bench clean

setup:
	bash scripts/setup.sh

test: setup
	.venv/bin/python -m pytest

demo: setup
	bash scripts/demo.sh

bench: setup
	for b in bench/bench_*.py; do echo "== $$b"; .venv/bin/python $$b || exit 1; done

clean:
	rm -rf .venv build *.egg-info

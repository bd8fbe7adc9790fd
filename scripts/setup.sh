#!/usr/bin/env bash
# Idempotent setup of a fresh Debian bookworm machine for one make target:
#
#   scripts/setup.sh demo    what `make demo` needs
#   scripts/setup.sh test    what `make test` needs
#   scripts/setup.sh [all]   everything (`make setup`, `make bench`)
#
# Apt packages: each area's list .ci/apt/<area>.txt names the targets that need it on its
# "# targets:" line. Python: a venv in .venv with mallory installed editable, plus its dev
# extras (pytest, hypothesis, scipy) and Ray for test and all. apt's and pip's own lines show the
# progress (what is fetched, what is set up), without dpkg's per-file detail.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${1:-all}"
case "$target" in
    demo | test | all) ;;
    *) echo "usage: scripts/setup.sh [demo|test|all]" >&2; exit 2 ;;
esac
say() { echo "setup ($target): $*"; }

lists=()
for list in .ci/apt/*.txt; do
    if [ "$target" = all ] || grep -Eq "^# targets:.*\b$target\b" "$list"; then
        lists+=("$list")
    fi
done
mapfile -t wanted < <(cat "${lists[@]}" | sed 's/#.*//' | tr -s ' \t' '\n' | grep -v '^$' | sort -u)
missing=()
for pkg in "${wanted[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
    say "installing ${#missing[@]} apt packages (of ${#wanted[@]} in $(echo "${lists[@]##*/}")): ${missing[*]}"
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update
    # One line per package fetched and per package set up, and apt's size summary (the
    # filter never fails the pipeline: apt's own status does).
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends -o Dpkg::Use-Pty=0 "${missing[@]}" \
        | { grep --line-buffered -E '^(Get:|Setting up |Need to get |After this operation|[0-9]+ upgraded)' || true; }
else
    say "apt packages: all ${#wanted[@]} installed"
fi

PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    say "creating the venv .venv"
    "$PY" -m venv .venv
fi
# mallory with its dev extras (and Ray, for `fuzz --workers` and its tests) serves the demo too
installed() { [ -f "$1" ] && ! [ pyproject.toml -nt "$1" ]; }
extras="[dev,ray]" stamp=.venv/.mallory-installed-dev
if [ "$target" = demo ]; then
    extras="" stamp=.venv/.mallory-installed
fi
if installed "$stamp" || { [ "$target" = demo ] && installed .venv/.mallory-installed-dev; }; then
    say "python packages: installed"
else
    say "installing mallory$extras and its Python dependencies into .venv"
    quiet_satisfied() { grep --line-buffered -v '^Requirement already satisfied' || true; }
    .venv/bin/pip install --upgrade pip | quiet_satisfied
    .venv/bin/pip install -e ".$extras" | quiet_satisfied
    touch "$stamp"
fi

#!/usr/bin/env bash
# The Debian bookworm base image of every Mallory container, built without a registry:
# mmdebstrap with this machine's apt sources (it reaches the Debian mirror), the Python
# packages Mallory needs installed from wheels downloaded here first (pip on the host), then
# packed into a tarball that `docker import` turns into an image.
#
#   deploy/compose/build-base.sh [OUT.tar]      (default build/docker/mallory-base.tar)
#
# The tarball is cached: rebuilt only when it is missing or this script changed since.
# Needs root (mmdebstrap's root mode).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="${1:-$repo/build/docker/mallory-base.tar}"
if [ -s "$out" ] && [ "$out" -nt "$here/build-base.sh" ]; then
    echo "base image tarball cached: $out"
    exit 0
fi
mkdir -p "$(dirname "$out")"
wheels="$(dirname "$out")/wheels"
pip="${PIP:-$repo/.venv/bin/pip}"
# Mallory's runtime dependencies (pyproject.toml) plus the Engine API client, as wheels for
# this machine, which is the image's Debian bookworm (same Python 3.11, glibc, architecture).
"$pip" download -q --only-binary=:all: -d "$wheels" 'orjson>=3.9' 'numpy>=1.26' 'datasketch>=2.0' 'redis>=5.0' 'docker>=6.1' \
    'async-timeout>=4.0.3'  # redis needs it on bookworm's Python 3.11.2 (this pip may run a newer one)

sources=/etc/apt/sources.list.d/debian.sources
[ -f "$sources" ] || sources=/etc/apt/sources.list
packages=(
    python3 python3-pip iptables iproute2 procps ethtool libnetfilter-queue1 libnfnetlink0
    make ca-certificates tini
)
start=$(date +%s)
mmdebstrap --variant=minbase --mode=root --format=tar \
    --include="$(IFS=,; echo "${packages[*]}")" \
    --customize-hook="mkdir -p \"\$1/tmp/wheels\"" \
    --customize-hook="copy-in $wheels/. /tmp/wheels" \
    --customize-hook='chroot "$1" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin PIP_ROOT_USER_ACTION=ignore pip install -q --no-warn-script-location --break-system-packages --no-index --find-links /tmp/wheels orjson numpy datasketch redis docker' \
    --customize-hook='rm -rf "$1/tmp/wheels" "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/*' \
    bookworm "$out.tmp" "$sources" >&2
mv "$out.tmp" "$out"
echo "base image tarball built in $(( $(date +%s) - start )) s: $out ($(du -h "$out" | cut -f1))"

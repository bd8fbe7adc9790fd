#!/usr/bin/env bash
# Build Debian's Redis 7 with Mallory's annotations: redis-server and redis-sentinel,
# compiled with mallory-cc so the // INSTRUMENT_* comments of annotations.patch become
# code events in the node's shared-memory ring.
#
#   suts/redis/build.sh            # prints the build directory (bin/redis-server, bin/redis-sentinel)
#   suts/redis/build.sh --asan     # the same with AddressSanitizer (a separate cache entry)
#
# Idempotent and cached: build/redis/<debian version>-<hash of patch+script>[-asan]/ holds
# the result; a second run only prints that directory. The source is Debian's
# (`apt-get source redis`); when apt has no deb-src entry, a project-owned
# /etc/apt/sources.list.d/mallory-deb-src.sources is derived from debian.sources (needs root).
# Needs the packages of .ci/apt/redis.txt and the venv's mallory-cc (scripts/setup.sh).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
asan=""
for arg in "$@"; do
    case "$arg" in
        --asan) asan="-asan" ;;
        *) echo "build.sh: unknown argument $arg (use --asan)" >&2; exit 2 ;;
    esac
done
cc="${MALLORY_CC:-$repo/.venv/bin/mallory-cc}"
[ -x "$cc" ] || { echo "build.sh: no $cc (run scripts/setup.sh first)" >&2; exit 1; }

log() { echo "redis build: $*" >&2; }

# Runs "$@" (a make) with its output in the file $1, and says every 10 s how many files it
# has compiled, so a first build is never silent for long; its exit status is make's.
compile_with_progress() {
    local output=$1 waited=0 pid
    shift
    "$@" > "$output" 2>&1 &
    pid=$!
    while kill -0 "$pid" 2>/dev/null; do
        sleep 1
        waited=$((waited + 1))
        if ((waited % 10 == 0)); then
            log "building: ${waited} s, $(grep -c 'CC.*\.o' "$output") files compiled"
        fi
    done
    wait "$pid"
}

# Which Debian source `apt-get source redis` would fetch: its .dsc's version.
source_version() {
    apt-get source --print-uris -qq redis 2>/dev/null | awk '$2 ~ /^redis_.*\.dsc$/ {sub(/^redis_/, "", $2); sub(/\.dsc$/, "", $2); print $2}' | head -n1
}

ensure_deb_src() {
    [ -n "$(source_version)" ] && return 0
    local list
    if [ "$(id -u)" -ne 0 ]; then
        log "apt has no deb-src entry for redis; run once as root to add one under /etc/apt/sources.list.d/"
        exit 1
    fi
    if [ -f /etc/apt/sources.list.d/debian.sources ]; then  # deb822 (bookworm's default)
        list=/etc/apt/sources.list.d/mallory-deb-src.sources
        sed -e 's/^Types:.*/Types: deb-src/' /etc/apt/sources.list.d/debian.sources > "$list"
    elif [ -f /etc/apt/sources.list ]; then  # one-line format
        list=/etc/apt/sources.list.d/mallory-deb-src.list
        sed -n 's/^deb \(.*\)/deb-src \1/p' /etc/apt/sources.list > "$list"
    else
        log "no /etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list to derive a deb-src entry from"
        exit 1
    fi
    log "added $list (deb-src twin of the deb entries); running apt-get update"
    apt-get update >&2
    [ -n "$(source_version)" ] || { log "apt-get source still finds no redis after adding $list"; exit 1; }
}

ensure_deb_src
version="$(source_version)"
hash="$(cat "$here/annotations.patch" "$here/build.sh" | sha256sum | cut -c1-12)"
out="$repo/build/redis/${version}-${hash}${asan}"
if [ -f "$out/.done" ]; then
    echo "$out"
    exit 0
fi

mkdir -p "$repo/build/redis"
exec 9>"$repo/build/redis/.lock"
flock 9  # parallel callers (tests, demo) wait for one build
if [ -f "$out/.done" ]; then
    echo "$out"
    exit 0
fi

rm -rf "$out"
mkdir -p "$out/download"
start=$(date +%s)
jobs="$(nproc)"
log "fetching Debian's source of redis $version (apt-get source)"
(cd "$out/download" && apt-get source -q --download-only redis > "$out/fetch.log" 2>&1) \
    || { cat "$out/fetch.log" >&2; log "apt-get source redis failed"; exit 1; }
log "unpacking it (dpkg-source)"
dpkg-source -q -x "$out/download"/redis_*.dsc "$out/src" > "$out/unpack.log" 2>&1 \
    || { cat "$out/unpack.log" >&2; log "dpkg-source could not unpack the source"; exit 1; }
log "applying $here/annotations.patch"
patch -s -p1 -d "$out/src" < "$here/annotations.patch"
log "building redis-server with $cc${asan:+ (AddressSanitizer)}, $jobs jobs (about a minute on 2 cores; log: $out/build.log)"
# mallory-cc builds its plugin on first use; ids are relative to the repo (the nearest .git).
if ! MALLORY_ASAN="${asan:+1}" compile_with_progress "$out/build.log" make -C "$out/src/src" -j"$jobs" \
        CC="$cc" MALLOC=libc BUILD_TLS=no USE_SYSTEMD=no OPTIMIZATION=-O1 redis-server; then
    tail -n 30 "$out/build.log" >&2
    log "make failed; the whole log is $out/build.log"
    exit 1
fi
mkdir -p "$out/bin"
cp "$out/src/src/redis-server" "$out/bin/redis-server"
cp "$out/src/src/redis-server.mallory.json" "$out/bin/redis-server.mallory.json"
# Like upstream's install: the sentinel is the same binary under another name.
ln -sf redis-server "$out/bin/redis-sentinel"
cp "$out/bin/redis-server.mallory.json" "$out/bin/redis-sentinel.mallory.json"
echo "$(( $(date +%s) - start ))" > "$out/build-seconds"
rm -rf "$out/download"
touch "$out/.done"
log "built in $(cat "$out/build-seconds") s: $out/bin"
echo "$out"

#!/usr/bin/env bash
# Build the libFuzzer harnesses of tiers' C parsers and run each for a
# bounded time.  Called by `make fuzz`; the settings come from the
# environment:
#   FUZZ_SECONDS   seconds per harness (default 60)
#   FUZZ_TARGETS   harnesses to run (default: every fuzz_*.c here)
#   FUZZ_BUILD     build folder (default build/fuzz)
# Each harness starts from its seed corpus native/fuzz/corpus/NAME/ (kept in
# the repository) and adds what it finds to build/fuzz/corpus/NAME/, so that
# the repository corpus only changes when someone copies a case in on
# purpose.  A crash, leak, sanitizer report, timeout or out-of-memory stops
# the run with the input under build/fuzz/findings/NAME/ and a non-zero exit.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
seconds=${FUZZ_SECONDS:-60}
build=${FUZZ_BUILD:-$root/build/fuzz}
cc=${FUZZ_CC:-clang}

if ! command -v "$cc" >/dev/null; then
  echo "fuzz: $cc not found (scripts/install-deps.sh installs clang and libclang-rt-14-dev)" >&2
  exit 2
fi
case $seconds in ''|*[!0-9]*|0) echo "fuzz: FUZZ_SECONDS must be a positive whole number" >&2; exit 2;; esac

targets=${FUZZ_TARGETS:-$(cd "$here" && ls fuzz_*.c | sed 's/\.c$//')}
mkdir -p "$build"

flags=(-g -O1 -std=c11 -D_GNU_SOURCE -DTIERS_VERSION='"fuzz"'
       -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
       -I"$root/native/include" -I"$root/native/src")
hwloc_flags=$(pkg-config --cflags --libs hwloc)
# The parsers and what they call: the error state, the JSON writer, the
# option parsers and the topology loader.
sources=("$root/native/src/common/error.c" "$root/native/src/common/json.c"
         "$root/native/src/common/tool.c" "$root/native/src/topo/topo.c")

status=0
for t in $targets; do
  exe=$build/$t
  if [ ! -x "$exe" ] || [ -n "$(find "$here/$t.c" "$here/fuzz_common.h" "${sources[@]}" -newer "$exe")" ]; then
    echo "fuzz: building $t"
    # shellcheck disable=SC2086
    "$cc" "${flags[@]}" -o "$exe" "$here/$t.c" "${sources[@]}" $hwloc_flags -lm
  fi
  seeds=$here/corpus/$t
  work=$build/corpus/$t
  findings=$build/findings/$t
  mkdir -p "$seeds" "$work" "$findings"
  echo "fuzz: running $t for ${seconds}s"
  # -rss_limit_mb / -malloc_limit_mb: an input must not make a parser
  # allocate without bound; -timeout: nor run for long.
  if ! (cd "$findings" && HWLOC_XML_VERBOSE=0 HWLOC_SYNTHETIC_VERBOSE=0 \
        LSAN_OPTIONS="suppressions=$here/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}" \
        "$exe" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -malloc_limit_mb=1024 -print_final_stats=1 -artifact_prefix="$findings/" \
        "$work" "$seeds" >"$build/$t.log" 2>&1); then
    echo "fuzz: $t FOUND A PROBLEM: see $build/$t.log and $findings/" >&2
    tail -n 30 "$build/$t.log" >&2
    status=1
  else
    grep -E '^stat::number_of_executed_units|^#[0-9]+.*DONE' "$build/$t.log" | tail -n 2 | sed "s/^/fuzz: $t: /"
  fi
done
if [ $status -eq 0 ]; then
  echo "fuzz: no findings"
fi
exit $status

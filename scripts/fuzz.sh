#!/usr/bin/env bash
# Builds the libFuzzer targets (preset "fuzz", clang) and fuzzes the store's
# request parser, frame_fuzz (test/fuzz/frame_fuzz.cpp), for a bounded time.
#
#   scripts/fuzz.sh [SECONDS] [--merge] [-- LIBFUZZER_FLAGS...]
#
# SECONDS (default 60) bounds the run. The fuzzer works on a copy of the
# committed seed corpus (test/fuzz/corpus/frame) under build/fuzz/work/, so a
# run never changes the tree; with --merge, the inputs of that run that reach
# code the committed corpus does not are then merged into it (-merge=1, under
# their SHA-1 names). The merge counts edges, not hit counts
# (-use_counters=0), which keeps the committed corpus to a few hundred small
# files; the fuzzer rediscovers hit-count variety in seconds. Flags after --
# go to libFuzzer as they are (e.g. -- -jobs=8 -workers=8).
#
# Exits non-zero when the fuzzer finds a crash; the reproducer is left in
# build/fuzz/work/artifacts/. Replay one with
#   build/fuzz/test/fuzz/frame_fuzz FILE
# and minimise it with
#   build/fuzz/test/fuzz/frame_fuzz -minimize_crash=1 -runs=10000 FILE
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

usage() {
  echo "usage: scripts/fuzz.sh [SECONDS] [--merge] [-- LIBFUZZER_FLAGS...]" >&2
  exit 2
}

seconds=60
merge=0
extra=()
while (($#)); do
  case $1 in
    --merge) merge=1 ;;
    --) shift; extra=("$@"); break ;;
    -h | --help) usage ;;
    '' | *[!0-9]*) usage ;;
    *) seconds=$1 ;;
  esac
  shift
done
((seconds > 0)) || usage

max_len=4096
corpus=test/fuzz/corpus/frame
bin=build/fuzz/test/fuzz/frame_fuzz
work=$PWD/build/fuzz/work

cmake --preset fuzz >/dev/null
cmake --build --preset fuzz --target frame_fuzz

rm -rf "$work"
mkdir -p "$work/corpus" "$work/artifacts"
cp -R "$corpus/." "$work/corpus/"

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1 halt_on_error=1}"

echo "fuzz: frame_fuzz for ${seconds}s on a copy of $corpus ($(find "$corpus" -type f | wc -l) files)"
rc=0
"$bin" -max_total_time="$seconds" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 -artifact_prefix="$work/artifacts/" "${extra[@]}" "$work/corpus" || rc=$?

if ((rc != 0)); then
  echo "fuzz: frame_fuzz failed (exit $rc); reproducers:" >&2
  find "$work/artifacts" -type f -printf '  %p\n' >&2
  exit "$rc"
fi

if ((merge)); then
  before=$(find "$corpus" -type f | wc -l)
  "$bin" -merge=1 -use_counters=0 -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$work/artifacts/" "$corpus" "$work/corpus"
  after=$(find "$corpus" -type f | wc -l)
  echo "fuzz: merged $((after - before)) inputs into $corpus ($after files," \
    "$(du -s --apparent-size -B1 "$corpus" | cut -f1) bytes)"
fi

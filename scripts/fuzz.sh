#!/usr/bin/env bash
# Builds the C ABI fuzz target (tests/fuzz/fuzz_c_api.cpp: clang, libFuzzer, ASan, UBSan;
# the library instrumented too) into ${CLATTN_FUZZ_BUILD_DIR:-build-fuzz} and runs it for
# SECONDS (default 600) on the seed corpus tests/fuzz/corpus, then prints the iteration
# count. Extra arguments go to libFuzzer (e.g. -jobs=2, -only_ascii=1).
#   scripts/fuzz.sh [SECONDS] [libFuzzer flags...]
# New inputs go to $dir/fuzz-corpus; fold them into the seeds (minimised) with
#   $dir/tests/fuzz/fuzz_c_api -merge=1 tests/fuzz/corpus $dir/fuzz-corpus
# Crash, timeout and out-of-memory inputs go to $dir/fuzz-artifacts/; the full log to $dir/fuzz.log.
# Leaks: PoCL and its LLVM keep allocations for the process lifetime; tests/fuzz/lsan.supp
# lists them (ASAN_OPTIONS=detect_leaks=0 turns leak checks off altogether).
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-600}"
[ $# -gt 0 ] && shift
dir="${CLATTN_FUZZ_BUILD_DIR:-build-fuzz}"
CC="${CLATTN_FUZZ_CC:-clang}" CXX="${CLATTN_FUZZ_CXX:-clang++}" \
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCLATTN_BUILD_FUZZ=ON -DCLATTN_BUILD_SHARED=OFF \
  -DCLATTN_BUILD_BENCH=OFF -DCLATTN_BUILD_PYTHON=OFF >/dev/null
cmake --build "$dir" -j"$(nproc)" --target fuzz_c_api fuzz_replay
mkdir -p "$dir/fuzz-corpus" "$dir/fuzz-artifacts"
export CLATTN_CACHE_DIR="${CLATTN_CACHE_DIR:-$PWD/$dir/fuzz-cache}"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$PWD/tests/fuzz/lsan.supp:print_suppressions=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"
set +e
"$dir/tests/fuzz/fuzz_c_api" -max_total_time="$secs" -timeout=60 -rss_limit_mb=4096 -max_len=1024 \
  -print_final_stats=1 -artifact_prefix="$dir/fuzz-artifacts/" "$@" "$dir/fuzz-corpus" tests/fuzz/corpus \
  >"$dir/fuzz.log" 2>&1
rc=$?
set -e
grep -E "^(==[0-9]+==ERROR|SUMMARY|artifact_prefix|Test unit written)" "$dir/fuzz.log" || true
grep -E "^Done [0-9]+ runs|^stat::number_of_executed_units" "$dir/fuzz.log" || tail -5 "$dir/fuzz.log"
echo "fuzz.sh: exit $rc (log: $dir/fuzz.log)"
exit $rc

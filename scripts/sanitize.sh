#!/usr/bin/env bash
# The test suite under AddressSanitizer, UndefinedBehaviorSanitizer and LeakSanitizer: a
# separate build in ${CLATTN_BUILD_DIR:-build-asan} (gcc, -O1 -g, every target instrumented;
# no Python module, since the interpreter is not; no benchmarks), then ctest there.
#
#   bash scripts/sanitize.sh                      native-vendor tests (the default)
#   CLATTN_SANITIZE_ALL=1 bash scripts/sanitize.sh   also the forced-vendor duplicates
#   bash scripts/sanitize.sh -R decode            extra arguments go to ctest
#
# The forced-vendor duplicates (test.nvidia, .amd, .intel, .cpu, .generic) run the same host
# code with other kernel parameters and mostly add PoCL kernel compiles, which run inside the
# test process and take about twice as long under ASan (here: about 2 minutes for the
# default set, 13 for all). A -E given here replaces the default exclusion (ctest keeps the
# last -E). Leaks inside PoCL, LLVM, hwloc, the OpenCL ICD loader and the dynamic loader are
# suppressed (scripts/lsan.supp); see docs/testing.md.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
bash scripts/install-deps.sh
dir="${CLATTN_BUILD_DIR:-build-asan}"
san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g -O1"
link="-fsanitize=address,undefined"
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_C_FLAGS="$san" -DCMAKE_CXX_FLAGS="$san" -DCMAKE_EXE_LINKER_FLAGS="$link" \
  -DCMAKE_SHARED_LINKER_FLAGS="$link" -DCMAKE_MODULE_LINKER_FLAGS="$link" \
  -DCLATTN_BUILD_PYTHON=OFF -DCLATTN_BUILD_BENCH=OFF >/dev/null
cmake --build "$dir" -j"$(nproc)"

# abort_on_error: a report fails the test even where a caller ignores the exit code.
# detect_stack_use_after_return=0: fake stacks slow PoCL's in-process LLVM down for little
# gain here (clattn hands out no pointers to its stack frames).
# use_sigaltstack=0: LLVM (inside PoCL) replaces a thread's signal stack with a malloc'd one,
# which ASan then tries to munmap at thread exit ("unable to unmap", test_concurrent_init).
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:halt_on_error=1:detect_stack_use_after_return=0:use_sigaltstack=0:check_initialization_order=1:strict_init_order=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export LSAN_OPTIONS="suppressions=$root/scripts/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
# The install test builds a consumer project against the instrumented library; CMake takes
# its flags from these on a fresh configure.
export CFLAGS="$san" CXXFLAGS="$san" LDFLAGS="$link"

select=()
if [ "${CLATTN_SANITIZE_ALL:-0}" != 1 ]; then select=(-E '\.(nvidia|amd|intel|cpu|generic)$'); fi
cd "$dir"
ctest --output-on-failure -j"$(nproc)" "${select[@]}" "$@"

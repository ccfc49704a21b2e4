#!/usr/bin/env bash
# The whole test suite: install what is missing, build, run ctest (PoCL's CPU device
# where there is no GPU; every vendor's parameter set through CLATTN_FORCE_VENDOR), then
# list the GoogleTest cases that were skipped (ctest counts them as passed).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
dir="${CLATTN_BUILD_DIR:-build}"
rm -rf "$dir/gtest-results"
rc=0
(cd "$dir" && ctest --output-on-failure -j"$(nproc)" "$@") || rc=$?
python3 scripts/gtest_skips.py "$dir/gtest-results"
exit $rc

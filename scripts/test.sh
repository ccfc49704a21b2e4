#!/usr/bin/env bash
# The whole test suite: install what is missing, build, run ctest (PoCL's CPU device
# where there is no GPU; every vendor's parameter set through CLATTN_FORCE_VENDOR).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
dir="${CLATTN_BUILD_DIR:-build}"
cd "$dir"
ctest --output-on-failure -j"$(nproc)" "$@"

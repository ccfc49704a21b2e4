#!/usr/bin/env bash
# Configures and builds clattn (Release) into ${CLATTN_BUILD_DIR:-build}.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${CLATTN_BUILD_DIR:-build}"
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$dir" -j"$(nproc)"

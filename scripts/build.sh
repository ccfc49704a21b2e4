#!/usr/bin/env bash
# Configures and builds clattn (Release) into ${CLATTN_BUILD_DIR:-build}. Arguments, when
# given, are the targets to build (default: everything).
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${CLATTN_BUILD_DIR:-build}"
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release >/dev/null
if [ $# -gt 0 ]; then
  cmake --build "$dir" -j"$(nproc)" --target "$@"
else
  cmake --build "$dir" -j"$(nproc)"
fi

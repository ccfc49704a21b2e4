#!/usr/bin/env bash
# The main job: install what is missing, build, then probe every device and run the
# runtime self-check, bandwidth limits and build timings on the default device
# ($CLATTN_DEVICE, else the first GPU, else PoCL's CPU device).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
dir="${CLATTN_BUILD_DIR:-build}"
"$dir"/tools/clattn-probe
echo "== default device: self-check, limits, build times =="
"$dir"/tools/clattn-probe --self-check --bench

#!/bin/bash
# Parameter sweeps on the NVIDIA GPU machine (carry .device/, see bench/h100/h100-common.sh):
# builds clattn-bench only, then runs each argument as a clattn-bench command line, output
# to $OUT/sweep_<n>.txt and the result rows to the terminal. Example:
#   bash bench/h100/h100-sweep.sh "decode -B 1 -S 32768 --grid MAX_SPLITS=16,32,64" "mla -B 64 -H 16"
set -o pipefail
source bench/h100/h100-common.sh
# shellcheck disable=SC2086
h100_build clattn-bench ${TARGETS:-} || exit 1
n=0
for cmd in "$@"; do
  n=$((n + 1))
  echo "== clattn-bench $cmd"
  # shellcheck disable=SC2086
  timeout ${CASE_TIMEOUT:-200} ./build-gpu/bench/clattn-bench --device nvidia $cmd > "$OUT/sweep_$n.txt" 2>&1
  echo "   rc=$?"
  grep -E "^(decode|mla_decode|extend|gdn|gla|limits|#   last| +ceilings)|registers|spill" "$OUT/sweep_$n.txt" | cut -c1-210
done

#!/usr/bin/env bash
# Runs programs on one OpenCL implementation or one constrained device shape, one after the
# other; fails when any fails (docs/portability.md).
# Usage: run_on.sh TARGET -- PROGRAM [ARGS...] [-- PROGRAM [ARGS...]]...
#   TARGET: rusticl              Mesa's rusticl over llvmpipe (skipped, 77, where absent)
#           limits:SPEC[:VENDOR] PoCL (the default device) as if it had at most SPEC's limits
#                                (CLATTN_DEVICE_LIMITS), under VENDOR's parameter rows
set -uo pipefail
target=$1
shift
[ "${1:-}" = "--" ] && shift
case "$target" in
  rusticl)
    export RUSTICL_ENABLE=llvmpipe CLATTN_DEVICE=llvmpipe
    devices=$(command -v clinfo > /dev/null && clinfo -l 2> /dev/null)
    if ! grep -q llvmpipe <<< "$devices"; then
      echo "rusticl's llvmpipe device not found (apt-get install mesa-opencl-icd clinfo): skipped"
      exit 77
    fi ;;
  limits:*)
    spec=${target#limits:}
    vendor=${spec#*:}
    [ "$vendor" != "$spec" ] && export CLATTN_FORCE_VENDOR=$vendor
    export CLATTN_DEVICE_LIMITS=${spec%%:*} ;;
  *) echo "run_on.sh: unknown target '$target' (rusticl, limits:SPEC[:VENDOR])" >&2; exit 2 ;;
esac
failed=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
while [ $# -gt 0 ]; do
  cmd=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do cmd+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  t0=$SECONDS
  "${cmd[@]}" > "$log" 2>&1
  rc=$?
  if [ $rc -ne 0 ]; then
    echo "FAIL: $(basename "${cmd[0]}") ${cmd[*]:1}: exit $rc"
    grep -E "FAIL|Failure|rror|mismatch|Expected|Which is|Actual" "$log" | head -40
    tail -5 "$log"
    failed=1
  else
    echo "ok   $(basename "${cmd[0]}") ${cmd[*]:1} ($((SECONDS - t0)) s)"
  fi
done
exit $failed

#!/usr/bin/env bash
# Every kernel family on Oclgrind (a strict OpenCL 1.2 simulator) under --check-api and
# --data-races: the C API tests (decode with append_kv, extend with merge, MLA with the
# CLBlast absorb, GDN/GLA decode and prefill, metadata, RoPE and its fused append) under each
# vendor's parameters, and the variants that need sub-groups or matrix engines through their
# emulation headers
# (clattn-probe --self-check runs each on a small case). A run fails on a non-zero exit or on
# any report of Oclgrind's (invalid access, data race, API error, fatal error).
# Not run: the --uninitialized plugin (it cannot execute LLVM's `freeze` instruction and
# stops the kernel: dev/oclgrind_limits.c).
# Three parts, one ctest each so they run side by side: rows (every vendor's rows and the
# sparse programs), emulated (the sub-group and matrix variants through their emulation) and
# local (decode, extend and MLA with the simulator's local memory at 32 KiB and 16 KiB, the
# Mali / Adreno / Apple size and below it, under GPU rows whose tiles must shrink to fit).
# Usage: run_oclgrind.sh rows|emulated|local DETECTOR_CHECK PROBE TEST_C_PROGRAM... [--sparse TEST_C_PROGRAM...]
set -uo pipefail
if ! command -v oclgrind > /dev/null; then
  echo "oclgrind not installed (apt-get install oclgrind): skipped"
  exit 77
fi
part=$1 detector=$2 probe=$3
shift 3
tests=() sparse=()
while [ $# -gt 0 ] && [ "$1" != "--sparse" ]; do tests+=("$1"); shift; done
[ $# -gt 0 ] && shift && sparse=("$@")
# AMD's 64 KB of LDS (the simulator's default is 32 KB).
og=(oclgrind --check-api --data-races --local-mem-size 65536)
faults='^(Invalid (read|write)|(Read-write|Write-write) data race|Oclgrind - |OCLGRIND|Uninitiali[sz]ed|Work-group divergence|Unaligned)'
log=$(mktemp)
trap 'rm -f "$log"' EXIT
failed=0

# The gate must see the faults it exists for.
"${og[@]}" "$detector" > "$log" 2>&1
for want in 'Invalid write' 'Write-write data race at global' 'Read-write data race at local'; do
  if ! grep -q "^$want" "$log"; then
    echo "FAIL: oclgrind did not report '$want' in $(basename "$detector")"
    cat "$log"
    failed=1
  fi
done

run() {  # run LABEL ENV... -- PROGRAM ARGS...
  local label=$1 envs=()
  shift
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local t0=$SECONDS
  env "${envs[@]}" "${og[@]}" "$@" > "$log" 2>&1
  local rc=$?
  local n
  n=$(grep -cE "$faults" "$log")
  if [ $rc -ne 0 ] || [ "$n" -ne 0 ]; then
    echo "FAIL: $label $(basename "$1"): exit $rc, $n Oclgrind reports"
    grep -E -A6 "$faults" "$log" | head -60
    tail -5 "$log"
    failed=1
  else
    echo "ok   $label $(basename "$1") ($((SECONDS - t0)) s)"
  fi
}

rows() {
for vendor in native generic nvidia amd intel; do
  envs=()
  [ "$vendor" != native ] && envs=("CLATTN_FORCE_VENDOR=$vendor")
  for t in "${tests[@]}"; do run "$vendor" "${envs[@]}" -- "$t"; done
done
# The sparse tests (HSA, DSA: after --sparse) under the native rows (Oclgrind's device takes
# the CPU ones) and the cpu rows: their plans merge window and selected ranges, and under the
# GPU rows decode merges split-K parts in the launch (FUSE_MERGE: the last work-group reads
# the others' partial states after an atomic count), a handoff Oclgrind reports as a race
# between work-groups. decode.cl's SPARSE build runs in test_hsa's vendor runs on PoCL.
for vendor in native cpu; do
  envs=()
  [ "$vendor" != native ] && envs=("CLATTN_FORCE_VENDOR=$vendor")
  for t in "${sparse[@]}"; do run "$vendor" "${envs[@]}" -- "$t"; done
done
}
emulated() {
intel_mm=CLATTN_EMULATE=cl_intel_subgroups,cl_intel_subgroup_matrix_multiply_accumulate
for t in "${tests[@]}"; do run "intel+$intel_mm" CLATTN_FORCE_VENDOR=intel "$intel_mm" -- "$t"; done
# Without a cache: a verdict cached by an earlier run would skip the kernels.
run "intel+$intel_mm" CLATTN_CACHE_DIR=off CLATTN_FORCE_VENDOR=intel "$intel_mm" -- "$probe" --self-check
for emu in cl_khr_subgroups,amd_wmma amd_mfma; do
  for t in "${tests[@]}"; do run "amd+$emu" CLATTN_FORCE_VENDOR=amd CLATTN_EMULATE=$emu -- "$t"; done
  run "amd+$emu" CLATTN_CACHE_DIR=off CLATTN_FORCE_VENDOR=amd CLATTN_EMULATE=$emu -- "$probe" --self-check
done
}
local_mem() {
  for size in 32768 16384; do
    og=(oclgrind --check-api --data-races --local-mem-size $size)
    for vendor in generic amd; do
      for t in "${tests[@]}"; do
        case "$(basename "$t")" in test_c_decode | test_c_extend | test_c_mla) ;; *) continue ;; esac
        run "$vendor+local$size" CLATTN_FORCE_VENDOR=$vendor -- "$t"
      done
    done
  done
}
case "$part" in
  rows) rows ;;
  emulated) emulated ;;
  local) local_mem ;;
  *) echo "run_oclgrind.sh: unknown part '$part' (rows, emulated, local)"; exit 2 ;;
esac
exit $failed

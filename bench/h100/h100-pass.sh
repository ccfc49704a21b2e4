#!/bin/bash
# One full pass on the NVIDIA GPU machine (shared DEVICE notes: carry .device/, filled by
# fetch-debs.sh): build, probe, the GPU test suite (native = NVIDIA variants), every
# benchmark (with torch SDPA and shuffled page ids beside extend), a portable-only pass of the
# decode, extend and mla benchmarks (CLATTN_VARIANTS=portable: no vendor variant, the
# portable kernels against the same-process limits; PORTABLE_OPS="" skips it), and
# clattn-serve-sim --big for each model preset (SIM="" skips it). Results go to $OUT (or
# ./h100-out). Usage: OPS="decode extend" bash bench/h100/h100-pass.sh
set -o pipefail
source bench/h100/h100-common.sh
h100_build || exit 1
./build-gpu/tools/clattn-probe --self-check --bench --device nvidia 2>&1 | tee "$OUT"/probe.txt | tail -8
(cd build-gpu && CLATTN_DEVICE=nvidia ctest -E "\.(amd|intel|cpu|generic)$" -j4 --output-on-failure > "$OUT"/ctest_gpu.txt 2>&1; tail -15 "$OUT"/ctest_gpu.txt)
for op in ${OPS:-limits decode extend linear mla metadata}; do
  timeout 150 ./build-gpu/bench/clattn-bench --device nvidia "$op" > "$OUT/bench_$op.txt" 2>&1
  echo "== bench $op rc=$?"
  grep -vE "^#" "$OUT/bench_$op.txt" | head -40 | cut -c1-230
done
case " ${OPS:-extend} " in *" extend "*)
  timeout 150 ./build-gpu/bench/clattn-bench --device nvidia extend --variant nv_wgmma --scatter-pages \
    > "$OUT/bench_extend_scattered.txt" 2>&1
  echo "== bench extend --scatter-pages rc=$?"; grep -vE "^#" "$OUT/bench_extend_scattered.txt" | cut -c1-230
  if python3 -c "import torch" 2>/dev/null; then
    timeout 120 python3 bench/h100/torch_sdpa.py > "$OUT/torch_sdpa.txt" 2>&1
    echo "== torch SDPA rc=$?"; tail -3 "$OUT/torch_sdpa.txt"
  fi;;
esac
for op in ${PORTABLE_OPS-decode extend mla}; do
  CLATTN_VARIANTS=portable timeout 200 ./build-gpu/bench/clattn-bench --device nvidia "$op" \
    > "$OUT/bench_${op}_portable.txt" 2>&1
  echo "== bench $op, portable-only (CLATTN_VARIANTS=portable) rc=$?"
  grep -vE "^#" "$OUT/bench_${op}_portable.txt" | head -40 | cut -c1-230
done
for m in ${SIM-llama-8b qwen3-next deepseek-v3-tp8 gpt-oss}; do
  layers=""; case $m in qwen3-next|deepseek-v3-tp8) layers="--layers 16";; esac
  timeout 150 ./build-gpu/tools/clattn-serve-sim --device nvidia --model $m $layers --big --no-progress > "$OUT/sim_$m.txt" 2>&1
  echo "== serve-sim $m rc=$?"
  tail -9 "$OUT/sim_$m.txt"
done

#!/usr/bin/env bash
# The main job: install what is missing, build, list the devices, then play an inference
# engine on the default device ($CLATTN_DEVICE, else the first GPU, else PoCL's CPU device):
# clattn-serve-sim serves a queue of requests (shared system prompt, continuous batching,
# mixed prefill/decode steps) through the paged attention backend with a Llama-3-8B head
# configuration (4 layers), checks sampled layers against the double-precision reference,
# and prints tokens/s, attention share, KV memory and decode bandwidth.
# Extra arguments go to clattn-serve-sim (e.g. --model qwen3-next --layers 4).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh clattn-probe clattn-serve-sim
dir="${CLATTN_BUILD_DIR:-build}"
"$dir"/tools/clattn-probe
echo "== clattn-serve-sim on the default device =="
"$dir"/tools/clattn-serve-sim --model llama-8b --layers 4 "$@"

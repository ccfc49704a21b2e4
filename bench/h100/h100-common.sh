# Sourced by the GPU-machine scripts (h100-pass.sh, h100-sweep.sh; carry .device/, see the
# shared DEVICE notes): makes $OUT (default ./h100-out) absolute, enters the .device/
# environment and defines h100_build [targets...]: a Release configure of build-gpu and a
# build of the given targets (everything when none), log in $OUT/build.log.
OUT="${OUT:-h100-out}"
mkdir -p "$OUT" && OUT="$(cd "$OUT" && pwd)"
source .device/setup.sh > /dev/null
h100_build() {
  local targets=()
  [ $# -gt 0 ] && targets=(--target "$@")
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release > "$OUT"/build.log 2>&1 || { tail -30 "$OUT"/build.log; return 1; }
  cmake --build build-gpu -j16 "${targets[@]}" >> "$OUT"/build.log 2>&1 || { grep -E "error" "$OUT"/build.log | head -30; return 1; }
  echo "== build ok"
}

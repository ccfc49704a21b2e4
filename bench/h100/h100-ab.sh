#!/bin/bash
# A/B on the NVIDIA GPU machine (carry .device/ and two source trees, e.g. made here with
# `git archive REV | tar -x -C .base` and `git archive HEAD | tar -x -C .cur`, both listed in
# .git/info/exclude): builds each into a build dir at the repo root (kept between calls on a
# warm machine; a carried tree is replaced on every call), then runs the benchmarks of both
# alternately, ROUNDS times, so every comparison is made in one job. Results in $OUT.
#   BASE=.base CUR=.cur bash bench/h100/h100-ab.sh build
#   ROUNDS=2 BENCH="decode;mla;extend --variant nv_wgmma" bash bench/h100/h100-ab.sh bench
#   CTEST_ARGS='-R canary' bash bench/h100/h100-ab.sh test        (the CUR tree's GPU ctest)
set -o pipefail
OUT="${OUT:-h100-out}"; mkdir -p "$OUT" && OUT="$(cd "$OUT" && pwd)"
source .device/setup.sh > /dev/null
BASE="${BASE:-.base}" CUR="${CUR:-.cur}"
build() {  # src builddir jobs targets...
  local src=$1 bd=$2 j=$3; shift 3
  cmake -S "$src" -B "$bd" -DCMAKE_BUILD_TYPE=Release -DCLATTN_BUILD_PYTHON=OFF > "$OUT/cfg_$bd.log" 2>&1 \
    && cmake --build "$bd" -j"$j" --target "$@" > "$OUT/build_$bd.log" 2>&1
  echo "== build $src -> $bd rc=$?"
}
case "$1" in
build)
  build "$BASE" build-base 6 clattn-bench &
  build "$CUR" build-gpu 10 clattn-bench &
  wait
  build "$CUR" build-gpu 16 all;;
bench)
  IFS=';' read -ra cmds <<< "${BENCH:-decode;mla;extend --variant nv_wgmma}"
  for r in $(seq "${ROUNDS:-2}"); do
    for c in "${cmds[@]}"; do
      for t in base gpu; do
        f="$OUT/$(echo "$c" | tr -c 'a-z0-9' '_')${t}_$r.txt"
        timeout 150 ./build-$t/bench/clattn-bench --device nvidia $c > "$f" 2>&1
        echo "== $c ($t, round $r) rc=$?"; grep -vE "^#" "$f" | cut -c1-150 | head -8
      done
    done
  done;;
test)
  (cd build-gpu && CLATTN_DEVICE=nvidia timeout "${CTEST_S:-560}" ctest ${CTEST_ARGS:--E "\.(amd|intel|cpu|generic)$|^python$"} \
    -j4 --output-on-failure > "$OUT/ctest_gpu.txt" 2>&1; echo "== ctest rc=$?")
  grep -E "tests passed|Failed|Not Run|\*\*\*" "$OUT/ctest_gpu.txt" | head -30;;
*) echo "usage: bash bench/h100/h100-ab.sh build|bench|test" >&2; exit 2;;
esac

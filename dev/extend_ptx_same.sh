#!/usr/bin/env bash
# Checks that the NVIDIA tensor-core extend kernels of the working tree compile to the same
# PTX as those of a base revision (default HEAD) for every configuration the runtime can
# build: both variants (nv_mma_sync: extend_mma_nv.cl; nv_wgmma: extend_wgmma_nv.cl, or the
# base's single file with WGMMA=1), every head dim, KV dtype, MMA_WARPS, tile size (KEYS
# after the host's local-memory halving for NVIDIA's 48 KB), feed (register staging /
# cp.async / TMA) and TMA mode (PINGPONG, TMA_HEAD_FIRST, TMA_PAGES 1024 and 256), with the
# -D options backends/ops/extend.cpp passes (incl. CLATTN_PTX_SM90A and CLATTN_PTX_MAXNREG).
# Sources are expanded the way the runtime does (runtime/kernel_sources.cpp: each header once)
# and compiled by clang's NVPTX backend; the kernel's PTX is compared without comments,
# debug lines and blank lines, and with the "//@" markers of the sm_90a forms removed (what
# runtime/ptx_retarget does). No GPU is needed.
#
# A base from before the split (one extend_mma_nv.cl with MT and STAGGER) gets the options
# the runtime passed then (MT=1; for nv_wgmma also ASYNC=1, STAGGER=0, WGMMA=1), and is
# compared twice: as it is ("raw"), and after a mechanical rewrite of its source ("ref")
# that removes what the deletion of the modes removed: the single-trip loops
# `for (int mt = 0; mt < MT; ++mt)` with their [MT] / [mt] subscripts (arrays of one
# element become scalars), and the stagger's tile map TIX(T) (with offset 0, T for every
# T < ntiles it is used with). Both are semantically the identity at MT=1, STAGGER=0, but
# they change when LLVM promotes those arrays to registers, so the raw PTX differs in
# register numbering, block order and a few branches, selects and moves (the script checks
# that every instruction touching memory, the tensor cores or other threads occurs as often);
# the ref comparison shows that the split itself changed nothing. A base that already has
# extend_wgmma_nv.cl is compared once.
#
#   bash dev/extend_ptx_same.sh                 working tree against HEAD
#   BASE=<rev> bash dev/extend_ptx_same.sh      against another revision
#   ONLY=<regex> compares only the configurations whose id matches (ids: mma_d128_kv1_w8_k32_a1,
#   wgmma_d128_kv2_w12_k32_t1_p1_h0_n1024, ...).
#   LIST=1 lists the configurations' ids and compiles nothing.
#   JOBS=N (default: nproc), CLANG=clang-15, KEEP=1 keeps the work directory.
# Exit status 0 when every configuration matches (the ref comparison where there is one).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
CLANG="${CLANG:-clang-15}"
BASE="${BASE:-HEAD}"
JOBS="${JOBS:-$(nproc)}"
LMAX=49152  # NVIDIA OpenCL local memory per group

if [ "${1:-}" = "--one" ]; then
  # One configuration: id, base file and options, new file and options (';'-separated).
  IFS=';' read -r id ofile oopts nfile nopts <<<"$2"
  work="$3"
  cc() {  # $1 side, $2 file, $3 options -> $work/ptx/$id.$1.ptx(.norm)
    local out="$work/ptx/$id.$1.ptx"
    "$CLANG" -x cl -cl-std=CL1.2 -target nvptx64-nvidia-nvcl -Xclang -finclude-default-header \
      -Xclang -fgnu-keywords -O2 -S -o "$out" $3 "$work/$1/expanded/$2" 2>"$out.log" ||
      { echo "$id BUILD-FAIL $1 ($2 $3)"; sed 's/^/    /' "$out.log" | head -20; return 1; }
    # Comments (but the hidden sm_90a forms), .loc/.file lines, blank lines; the "//@" markers go.
    sed -e '/^[[:space:]]*\.loc[[:space:]]/d' -e '/^[[:space:]]*\.file[[:space:]]/d' \
      -e 's#//@##' -e 's#[[:space:]]*//.*$##' -e '/^[[:space:]]*$/d' "$out" >"$out.norm"
  }
  # Per-opcode counts of the instructions that touch memory, the tensor cores or other threads.
  ops() {
    sed -n 's/^[[:space:]]*\(@!*%p[0-9]*[[:space:]]*\)*\([a-z][a-z0-9_:.]*\).*/\2/p' "$1" |
      grep -E '^(mma|wgmma|ldmatrix|cp\.|ld\.|st\.|atom|red|bar|barrier|shfl|vote|mbarrier|fence|tensormap)' |
      sort | uniq -c
  }
  same() {  # $1 base side: SAME, or DIFF(<differing lines>) with "ops" when those counts agree
    local a="$work/ptx/$id.$1.ptx.norm" b="$work/ptx/$id.new.ptx.norm"
    if cmp -s "$a" "$b"; then echo SAME; else
      echo "DIFF($(diff "$a" "$b" | grep -c '^[<>]')$([ "$(ops "$a")" = "$(ops "$b")" ] && echo ',ops'))"; fi
  }
  cc new "$nfile" "$nopts" || exit 0
  cc old "$ofile" "$oopts" || exit 0
  line="$id raw=$(same old)"
  if [ -d "$work/ref" ]; then
    cc ref "$ofile" "$oopts" || exit 0
    line="$line ref=$(same ref)"
  fi
  echo "$line"
  case "$line" in *ref=DIFF* | *raw=DIFF*) [ -d "$work/ref" ] && [ "${line##*ref=}" = SAME ] ||
    diff "$work/ptx/$id.$([ -d "$work/ref" ] && echo ref || echo old).ptx.norm" "$work/ptx/$id.new.ptx.norm" |
    head -20 | sed 's/^/    /' ;; esac
  [ "${KEEP:-0}" = 1 ] || rm -f "$work/ptx/$id".*
  exit 0
fi

work="$(mktemp -d /tmp/extend_ptx_same.XXXXXX)"
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$work"' EXIT
mkdir -p "$work/old/src" "$work/new/src" "$work/ptx"
git archive "$BASE" cl_kernels | tar -x -C "$work/old/src"
cp -r cl_kernels "$work/new/src/"
if [ ! -f "$work/old/src/cl_kernels/extend_wgmma_nv.cl" ]; then
  mkdir -p "$work/ref/src"
  cp -r "$work/old/src/cl_kernels" "$work/ref/src/"
  python3 - "$work/ref/src/cl_kernels/extend_mma_nv.cl" <<'PY'
# The base's single file with the MT and STAGGER machinery removed, identity at MT=1, STAGGER=0.
import re, sys
path = sys.argv[1]
s = open(path).read()
def sub(pattern, repl, expect_min=1, flags=0):
    global s
    s, n = re.subn(pattern, repl, s, flags=flags)
    if n < expect_min:
        sys.exit("extend_ptx_same: the base does not have the expected form (%r)" % pattern)
# Loops over the one m-tile: the loop header goes, its body stays (a block where it had braces).
sub(r'#pragma unroll\n(\s*)for \(int mt = 0; mt < MT; \+\+mt\)\s*', r'\1')
sub(r'_Pragma\("unroll"\) for \(int mt = 0; mt < MT; \+\+mt\)\s*', '')
sub(r'16 \* mt \+ ', '')
sub(r'\[MT\]', '')
sub(r'\[mt\]', '')
# The nv_wgmma path spelt the one m-tile as [1] arrays and [0] subscripts.
for v in ('sn', 'pa', 'pn', 'alo', 'ahi'):
    sub(r'\b%s\[1\]' % v, v)
sub(r'\b(sn|qa|pa|pn)\[0\]\[', r'\1[')
sub(r'\b(tok_lo|tok_hi|pr_lo|pr_hi|ok_lo|ok_hi|alo|ahi)\[0\]', r'\1')
sub(r'\boacc\[0\] \+ 8 \* p', 'oacc + 8 * p')
sub(r'SOFTMAX_RESCALE\(alo, ahi, oacc\[0\], lsum\[0\]\)', 'SOFTMAX_RESCALE(alo, ahi, oacc, lsum)')
sub(r'WG_MMA_S\(sn\[0\],', 'WG_MMA_S(sn,')
sub(r'WG_KEEP4\(oacc\[0\]\[n\]\)', 'WG_KEEP4(oacc[n])')
# The stagger: offset t0 = 0, so tile T is walked T-th.
sub(r'  const int t0 = STAGGER[^\n]*\n', '')
sub(r'#define TIX\(T\) [^\n]*', '#define TIX(T) (T)')
if re.search(r'\bmt\b|\[MT\]', s):
    sys.exit("extend_ptx_same: m-tile index left in the rewritten base")
open(path, 'w').write(s)
PY
fi

source dev/expand_kernel.sh  # expand DIR FILE: the runtime's include expansion
for side in old ref new; do
  [ -d "$work/$side" ] || continue
  mkdir -p "$work/$side/expanded"
  for f in "$work/$side/src/cl_kernels/"extend*_nv.cl; do
    expand "$work/$side/src/cl_kernels" "$(basename "$f")" >"$work/$side/expanded/$(basename "$f")"
  done
done
new_wgmma_file=extend_wgmma_nv.cl
[ -f "$work/new/src/cl_kernels/$new_wgmma_file" ] || new_wgmma_file=extend_mma_nv.cl

# backends/ops/extend.cpp's local-memory estimates (bytes).
mma_local() {  # keys d async
  local keys=$1 d=$2 async=$3 half=$(($2 / 2)) cpr=$(($2 / 8)) krs
  krs=$half
  [ $((cpr % 8)) -eq 0 ] || krs=$((half + (48 - half % 32) % 32))
  if [ "$async" = 1 ]; then
    local vrs=$cpr
    [ $((cpr % 8)) -eq 0 ] || vrs=$((cpr | 1))
    echo $((2 * keys * krs * 4 + 2 * keys * vrs * 16 + keys * 2 * 8))
  else
    echo $((keys * krs * 4 + d * (keys / 2) * 4 + keys * 2 * 8))
  fi
}
wgmma_local() {  # keys d tma pages warps
  if [ "$3" = 1 ]; then echo $((5 * $1 * $2 * 2 + 1024 + 10 * 8 + 4 * $4 + 4 * $5)); else echo $((6 * $1 * $2 * 2)); fi
}

jobs="$work/jobs"
: >"$jobs"
n=0
for d in 64 80 96 128 192 256; do
  for kv in 1 2 3 4; do  # f16, bf16, fp8 e4m3, fp8 e5m2 (f32 KV keeps the generic kernel)
    bf16=$([ $kv = 2 ] && echo 1 || echo 0)
    es=$([ $kv -le 2 ] && echo 2 || echo 1)
    for warps in 1 2 3 4 5 6 7 8; do
      wg=$((32 * warps))
      for async_asked in 0 1; do
        async=$([ $async_asked = 1 ] && [ $es = 2 ] && echo 1 || echo 0)
        [ $async = 1 ] && [ "$(mma_local 32 $d 1)" -gt $LMAX ] && async=0
        [ $async_asked = 1 ] && [ $async = 0 ] && continue  # the same build as asked 0
        for keys_asked in 32 64 128; do
          keys=$keys_asked
          while [ $keys -gt 32 ] && { [ $keys -gt $wg ] || [ "$(mma_local $keys $d $async)" -gt $LMAX ]; }; do keys=$((keys / 2)); done
          [ "$(mma_local $keys $d $async)" -gt $LMAX ] && continue
          [ $keys != $keys_asked ] && continue  # the same build as a smaller KEYS asked
          common="-DHEAD_DIM=$d -DKEYS=$keys -DKV_DT=$kv -DMMA_BF16=$bf16 -DWARPS=$warps"
          echo "mma_d${d}_kv${kv}_w${warps}_k${keys}_a${async};extend_mma_nv.cl;-DASYNC=$async $common -DMT=1;extend_mma_nv.cl;-DASYNC=$async $common" >>"$jobs"
          n=$((n + 1))
        done
      done
    done
    # nv_wgmma: 16-bit KV in cp.async stages, head dims 64 and 128, MMA_WARPS 4 / 8 / 12.
    [ $es = 2 ] && [ $((d % 64)) = 0 ] && [ "$(mma_local 32 $d 1)" -le $LMAX ] && [ "$(wgmma_local 32 $d 0 0 0)" -le $LMAX ] || continue
    for warps in 4 8 12; do
      wg=$((32 * warps)) mwarps=$((warps > 8 ? 8 : warps))
      cap=$(((65536 / wg) & ~7))
      extra="-DCLATTN_PTX_SM90A=1"
      [ $cap -lt 255 ] && extra="$extra -DCLATTN_PTX_MAXNREG=$cap"
      for keys_asked in 32 64 128; do
        keys=$keys_asked
        while [ $keys -gt 32 ] && { [ $keys -gt $((32 * mwarps)) ] || [ "$(mma_local $keys $d 1)" -gt $LMAX ]; }; do keys=$((keys / 2)); done
        [ $keys = 32 ] || [ $keys = 64 ] || continue
        for tma in 1 0; do
          for pages in 1024 256; do
            [ $tma = 0 ] && [ $pages = 256 ] && continue
            wk=$keys
            while [ "$(wgmma_local $wk $d $tma $pages $warps)" -gt $LMAX ]; do wk=$((wk / 2)); done
            for pp in 0 1; do
              for hf in 0 1; do
                [ $tma = 0 ] && { [ $pp = 1 ] || [ $hf = 1 ]; } && continue
                common="-DHEAD_DIM=$d -DKEYS=$wk -DKV_DT=$kv -DMMA_BF16=$bf16 -DWARPS=$warps"
                tmaopt=""
                [ $tma = 1 ] && tmaopt="-DPINGPONG=$pp -DTMA=1 -DTMA_HEAD_FIRST=$hf -DTMA_PAGES=$pages"
                id="wgmma_d${d}_kv${kv}_w${warps}_k${wk}_t${tma}_p${pp}_h${hf}_n${pages}"
                grep -q "^$id;" "$jobs" && continue
                echo "$id;extend_mma_nv.cl;-DASYNC=1 $common -DMT=1 -DSTAGGER=0 $tmaopt -DWGMMA=1 $extra;$new_wgmma_file;$common $tmaopt $extra" >>"$jobs"
                n=$((n + 1))
              done
            done
          done
        done
      done
    done
  done
done

if [ -n "${ONLY:-}" ]; then
  grep -E "^[^;]*(${ONLY})[^;]*;" "$jobs" >"$jobs.only" || true
  mv "$jobs.only" "$jobs"
  n=$(wc -l <"$jobs")
fi
if [ "${LIST:-0}" = 1 ]; then cut -d';' -f1 "$jobs"; exit 0; fi
echo "extend_ptx_same: $n configurations, base $BASE ($(git rev-parse --short "$BASE")), $JOBS jobs"
xargs -P "$JOBS" -I{} -d '\n' bash "$0" --one {} "$work" <"$jobs" >"$work/results"
grep -v ' raw=SAME\( ref=SAME\)\?$' "$work/results" | grep -v '^\S* raw=DIFF([0-9]*,ops) ref=SAME$' || true
built=$(grep -c ' raw=' "$work/results" || true)
raw=$(grep -c ' raw=SAME' "$work/results" || true)
rawops=$(grep -c ' raw=DIFF([0-9]*,ops)' "$work/results" || true)
echo "extend_ptx_same: $built of $n configurations built; raw PTX identical to the base: $raw;" \
  "differing only outside the memory, MMA, barrier and shuffle instructions (same count of each): $rawops"
if [ -d "$work/ref" ]; then
  ref=$(grep -c ' ref=SAME' "$work/results" || true)
  echo "extend_ptx_same: identical to the rewritten base (ref): $ref"
  [ "$ref" = "$n" ]
else
  [ "$raw" = "$n" ]
fi

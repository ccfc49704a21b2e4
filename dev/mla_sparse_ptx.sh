#!/usr/bin/env bash
# Offline checks of the NVIDIA tensor-core MLA kernel (cl_kernels/mla_mma_nv.cl) for sparse
# decode, without a GPU:
#   1. every dense build the runtime makes (KV_DT f16 / bf16 / e4m3 / e5m2 x WARPS 2 / 4 x KEYS
#      16 / 32 x FUSE_MERGE 0 / 1; KEYS 32 at 4 warps exceeds NVIDIA's 48 KB and is halved by
#      the host) compiles to the same PTX as the base revision's, so SPARSE_IDX's macros leave
#      dense decode unchanged;
#   2. every sparse build (the same with SPARSE_IDX=1, and with L2_AHEAD=2: the L2 prefetch and
#      the lookup ring) and its dense twin go through ptxas for sm_90; registers, spills and
#      shared memory are printed side by side.
# Sources are expanded as the runtime does (each header once) and compiled by clang's NVPTX
# backend (clang-15, LLVM 15 targets sm_80 / PTX 7.5; the PTX is relabelled sm_90 / 8.0 for
# ptxas). The OpenCL builtins the kernel calls are linked from a small shim of NVVM builtins,
# so ptxas sees a whole kernel. Register counts are clang's, not NVIDIA's OpenCL compiler's:
# compare sparse with dense, not with the H100's figures.
#
#   BASE=<rev before the change> bash dev/mla_sparse_ptx.sh     (CLANG=clang-15, PTXAS=ptxas)
# Exit status 0 when every dense build matches and every build assembles.
set -euo pipefail
cd "$(dirname "$0")/.."
CLANG="${CLANG:-clang-15}"
LLVM_SUFFIX="${CLANG#clang}"
PTXAS="${PTXAS:-$(command -v ptxas || echo /usr/local/cuda/bin/ptxas)}"
BASE="${BASE:-HEAD}"
work="$(mktemp -d /tmp/mla_sparse_ptx.XXXXXX)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/old" "$work/out"
git archive "$BASE" cl_kernels | tar -x -C "$work/old"

source dev/expand_kernel.sh  # expand DIR FILE: the runtime's include expansion
expand "$work/old/cl_kernels" mla_mma_nv.cl >"$work/old.cl"
expand cl_kernels mla_mma_nv.cl >"$work/new.cl"

cat >"$work/shim.cl" <<'EOF'
#define OV __attribute__((overloadable))
OV size_t get_local_id(uint d) { return d == 0 ? __nvvm_read_ptx_sreg_tid_x() : d == 1 ? __nvvm_read_ptx_sreg_tid_y() : __nvvm_read_ptx_sreg_tid_z(); }
OV size_t get_group_id(uint d) { return d == 0 ? __nvvm_read_ptx_sreg_ctaid_x() : d == 1 ? __nvvm_read_ptx_sreg_ctaid_y() : __nvvm_read_ptx_sreg_ctaid_z(); }
OV void barrier(uint f) { __nvvm_bar_sync(0); }
OV void mem_fence(uint f) { __nvvm_membar_gl(); }
OV int atomic_inc(volatile __global int* p) { return __nvvm_atom_add_gen_i((volatile int*)p, 1); }
OV int atomic_xchg(volatile __global int* p, int v) { return __nvvm_atom_xchg_gen_i((volatile int*)p, v); }
OV int atomic_or(volatile __global int* p, int v) { return __nvvm_atom_or_gen_i((volatile int*)p, v); }
OV float exp(float x) { return __nvvm_ex2_approx_f(x * 1.4426950408889634f); }
OV float exp2(float x) { return __nvvm_ex2_approx_f(x); }
OV float log(float x) { return __nvvm_lg2_approx_f(x) * 0.6931471805599453f; }
OV float log2(float x) { return __nvvm_lg2_approx_f(x); }
OV float fmax(float a, float b) { return __nvvm_fmax_f(a, b); }
OV uint min(uint a, uint b) { return a < b ? a : b; }
OV int min(int a, int b) { return a < b ? a : b; }
OV int max(int a, int b) { return a > b ? a : b; }
EOF
cflags=(-x cl -cl-std=CL1.2 -target nvptx64-nvidia-nvcl -Xclang -finclude-default-header -Xclang -fgnu-keywords -O2)
"$CLANG" "${cflags[@]}" -cl-std=CL2.0 -c -emit-llvm -o "$work/shim.bc" "$work/shim.cl"

norm() {  # PTX without comments, debug lines and blank lines
  sed -e '/^[[:space:]]*\.loc[[:space:]]/d' -e '/^[[:space:]]*\.file[[:space:]]/d' -e 's#[[:space:]]*//.*$##' \
    -e '/^[[:space:]]*$/d' "$1"
}
assemble() {  # $1 source, $2 id, options...: "<registers, spills, smem>" or "FAIL ..."
  local src="$1" id="$2"
  shift 2
  local b="$work/out/$id"
  "$CLANG" "${cflags[@]}" -c -emit-llvm -o "$b.bc" "$@" "$src" &&
    "llvm-link$LLVM_SUFFIX" "$b.bc" "$work/shim.bc" -o "$b.l.bc" && "opt$LLVM_SUFFIX" -O2 "$b.l.bc" -o "$b.o.bc" &&
    "llc$LLVM_SUFFIX" -mcpu=sm_80 -mattr=+ptx75 "$b.o.bc" -o "$b.ptx" || { echo "FAIL (clang)"; return 1; }
  sed -i -e 's/^\.target sm_80/.target sm_90/' -e 's/^\.version 7\.5/.version 8.0/' "$b.ptx"
  local log
  log="$("$PTXAS" -arch=sm_90 -v "$b.ptx" -o "$b.cubin" 2>&1)" || { echo "FAIL (ptxas) $(echo "$log" | grep -m1 error)"; return 1; }
  echo "$log" | sed -n 's/.*Used \([0-9]*\) registers.*/\1 regs/p; s/.*, \([0-9]*\) bytes spill stores.*/\1 B spilled/p' |
    tr '\n' ' '
}

status=0
printf '%-36s %-10s %-28s %-28s %s\n' config dense-ptx dense sparse sparse-L2_AHEAD=2
for kv in 1 2 3 4; do
  for w in 2 4; do
    for k in 16 32; do
      [ $w = 4 ] && [ $k = 32 ] && continue
      for f in 0 1; do
        o=(-DKV_DT=$kv -DWARPS=$w -DKEYS=$k -DFUSE_MERGE=$f)
        id="kv${kv}_w${w}_k${k}_f${f}"
        "$CLANG" "${cflags[@]}" -S -o "$work/out/$id.old.ptx" "${o[@]}" "$work/old.cl"
        "$CLANG" "${cflags[@]}" -S -o "$work/out/$id.new.ptx" "${o[@]}" "$work/new.cl"
        if cmp -s <(norm "$work/out/$id.old.ptx") <(norm "$work/out/$id.new.ptx"); then same=SAME; else same=DIFF; status=1; fi
        d="$(assemble "$work/new.cl" "$id.dense" "${o[@]}")" || status=1
        s="$(assemble "$work/new.cl" "$id.sparse" "${o[@]}" -DSPARSE_IDX=1)" || status=1
        l="$(assemble "$work/new.cl" "$id.l2" "${o[@]}" -DSPARSE_IDX=1 -DL2_AHEAD=2)" || status=1
        printf '%-36s %-10s %-28s %-28s %s\n' "${o[*]}" "$same" "$d" "$s" "$l"
      done
    done
  done
done
exit $status

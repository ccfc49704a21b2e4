// MLA parameters (ops "mla_decode", "mla_extend"): generic, vendor rows. Each says where its
// numbers come from. Keys: "*" (all latent dtypes).
//
// Kernel tile (cl_kernels/mla.cl): a work-group = QB query vectors (head x row) of one
// request x LANES lanes each; LANES is also the tile (tokens per online-softmax step).
//   QB          query vectors per work-group (decode: min(QB, H) rounded to a power of two)
//   LANES       lanes per query vector = tokens per tile (4, 8 or 16; must divide the row's
//               32-bit words: fp8 kpe has 16 words); each lane holds 512/LANES accumulators
//               and 576/LANES q values in registers
//   LOAD_BYTES  latent load width (16 = one 128-bit load; lowered automatically for strides)
// Split-K (decode only; backends/planner/split_kv.hpp):
//   WGS_PER_CU  work-groups resident per compute unit (one wave = CUs x this)
//   MIN_CHUNK   never split below this many tokens; MAX_SPLITS chunks per request at most
// Local memory per group: LANES x 576 x dtype bytes (latent tile) + QB x LANES x (LANES+3) x 4.
// Register-blocked kernel (cl_kernels/mla_tiled.cl, variant "tiled"; docs/mla.md):
//   TILED       1: prefer it to the kernel above (falls back to it where it does not fit)
//   QB          query vectors per work-group, as above (work-group = QB / MS x DS work-items)
//   KT          tokens per tile = one online-softmax step (4..32; halved to fit local memory)
//   MS          S = Q K^T: query vectors per work-item (its micro-tile is MS x KT)
//   DS          S: work-items per query vector, each holding 576 / DS q values of its MS
//               vectors and dotting them with the tile (partials summed in local memory)
//   DSW         ... of which DSW are adjacent in the work-item order, then the vector groups:
//               a SIMD group reads DSW distinct float4s per load, each broadcast to the rest
//   MO          O += P V: query vectors per work-item; each owns MO x 512 MS / (MO DS) output
//               columns (512 MS / DS accumulators in all, float4 columns DS MO / MS apart)
//   UNROLL_HINTS  full-unroll pragmas; not in the rows: on for GPUs, off for CPU devices
//   local = 2304 KT + 4 QB KT (DS + 3) + 4 QB bytes (28 KB at QB 16, KT 8, DS 16); registers per
//   work-item ~ MS (576/DS q + KT scores) + 512 MS/DS accumulators + MO p + the prefetched chunks.
// Tensor-core kernel (cl_kernels/mla_mma_nv.cl, where variant_available("nv_mma_sync")):
//   MMA         1: prefer it (16 query vectors per group = one mma m-tile)
//   MMA_WARPS   warps per group (2 or 4): warp w owns 512 / MMA_WARPS latent dims of S and the
//               same output columns of O (2 warps: 128 accumulator registers per lane)
//   MMA_KEYS    tokens per tile (16 or 32); local = KEYS x 1024 + MMA_WARPS x KEYS x 128 bytes;
//               the latent of the next tile sits in registers (36 per lane per 16 tokens at 4
//               warps), so 32 costs 72 more registers
//   FUSE_MERGE  decode split-K: 1 = the group that finishes a request's last part merges the
//               parts (no merge pass; deterministic: parts summed in order), 0 = merge pass
//   FUSE_MAX_PARTS  fuse only when no request has more parts than this (the merging group
//               reads all of them alone; B=1 at 128 parts is faster with the merge pass)
//   L2_AHEAD    sparse decode (mla_sparse_decode_plan) only: the listed rows of the tile this
//               many tiles ahead are prefetched into L2 and their lookups kept in a local ring
//               (0: off, else 2..8); dense decode reads its rows in order and ignores it
// CPU kernel (cl_kernels/mla_cpu.cl, variant "cpu"; docs/mla.md): one work-item per group.
//   CPU_KERNEL  1: prefer it to the tiled and generic kernels (the cpu rows)
//   VW          vector width in floats (0: the device's CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT,
//               16 on AVX-512; else 4, 8 or 16; lowered where the heads fill less)
//   CPU_QB      query vectors per work-item (decode: at most H rounded up to a power of two);
//               each latent row is read and converted once per work-item for all of them.
//               Buffers (local memory where they fit, else private): CPU_QB x 4.4 KB (Q^T and
//               O) + BK x 2.3 KB (the block) + BK x CPU_QB x 4: 107 KB at 16 and 16
//   BK          keys per block (one online-softmax step, at most 64)
//   SK, SD      S^T = K Q^T micro-tile: SK keys x CPU_QB / VW accumulator vectors, over passes
//               of SD latent dims (a multiple of 16 dividing 576) that stay in L1
//   OH, OD      O += P V micro-tile: query vectors x output vectors of VW dims
//   TOUCH_AHEAD touch the latent rows of the block this many blocks ahead (0: off)
//   FP8_FAST    not in the rows: fp8 decoded by bit moves where the device keeps f32 denormals
#include "backends/params/database.hpp"

namespace clattn::params {
const std::vector<Row>& rows_mla() {
  static const std::vector<Row> rows = {
      // 256 work-items (16 heads x 16 lanes), 16-token tiles, 128-bit loads; ~38 KB local memory
      // for a bf16 tile (fits the 48 KB OpenCL minimum of GPUs); 2 groups per CU. Tiled: 16
      // vectors x 16 slices, 8-token tiles: 28 KB of local memory, inside the 32 KB floor of
      // OpenCL 1.2's full profile; DSW 8 x 4 vectors fill a 32-wide SIMD group.
      {"mla_decode", Level::Generic, "", "*",
       {{"QB", 16}, {"LANES", 16}, {"LOAD_BYTES", 16}, {"WGS_PER_CU", 2}, {"MIN_CHUNK", 256}, {"MAX_SPLITS", 64},
        {"TILED", 1}, {"KT", 8}, {"MS", 1}, {"DS", 16}, {"DSW", 8}, {"MO", 8}},
       "portable default (by design; not tuned)"},
      // Generic kernel: 256 threads at <= 128 registers (2 groups per SM by the register file);
      // 18 KB of bf16 latent in flight per group through the register prefetch; split-K
      // thresholds as the generic row. MMA=1: mla_mma_nv.cl where nv_inline_ptx and sm_80+ (4
      // warps, 16-token tiles, 24 KB local, merge fused; docs/mla.md). Without it (portable-only
      // mode) the tiled kernel: 32 query vectors per group (decode: at most the head count), two
      // per work-item in S, a warp = 4 slices x 8 vectors (the tuner's choice over the
      // by-design 16 / 1 / 8, which reads 8 distinct float4s per 128-byte wavefront). Figures:
      // docs/results-h100.md.
      {"mla_decode", Level::Vendor, "nvidia", "*",
       {{"QB", 32}, {"LANES", 16}, {"LOAD_BYTES", 16}, {"WGS_PER_CU", 2}, {"MIN_CHUNK", 256}, {"MAX_SPLITS", 64},
        {"MMA", 1}, {"MMA_WARPS", 4}, {"MMA_KEYS", 16}, {"TILED", 1}, {"KT", 8}, {"MS", 2}, {"DS", 16}, {"DSW", 4},
        {"MO", 8}},
       "by design: CUDA occupancy calculator (sm_90), CUDA C++ Best Practices Guide (shared-memory banks); the "
       "MMA tile by docs/mla.md's arithmetic; QB, MS, DSW (tiled): clattn-tune --ops mla_decode with "
       "CLATTN_VARIANTS=portable, NVIDIA H200, driver 580.159.04, 2026-11-26"},
      // 4 x wave64 per group; 64 KB LDS per CU holds one bf16 group plus change; dwordx4 loads;
      // split-K thresholds as the generic row. Tiled (CDNA / GCN, wave64): the LDS returns 128
      // bytes per clock (8 lanes of a ds_read_b128) against 64 FMA lanes per CU, so S takes two
      // vectors per work-item (MS 2: 8 FMAs per float4 read) in 128-work-item groups (2 waves of
      // 8 slices x 8 vector pairs); 28 KB of LDS; ~170 VGPRs (of 512) keep 2-3 waves per SIMD.
      {"mla_decode", Level::Vendor, "amd", "*",
       {{"QB", 16}, {"LANES", 16}, {"LOAD_BYTES", 16}, {"WGS_PER_CU", 2}, {"MIN_CHUNK", 256}, {"MAX_SPLITS", 64},
        {"TILED", 1}, {"KT", 8}, {"MS", 2}, {"DS", 16}, {"DSW", 8}, {"MO", 8}},
       "vendor guide: AMD CDNA3 ISA / tuning guide, LDS and occupancy; not tuned on hardware"},
      // RDNA (wave32, 1536 VGPRs per SIMD lane in RDNA3): a wave = 8 slices x 4 vectors as in the
      // generic row, one vector per work-item, 256 work-items = 8 waves per group.
      {"mla_decode", Level::Arch, "rdna", "*", {{"MS", 1}, {"DSW", 8}},
       "vendor guide: AMD RDNA3 ISA (wave32, LDS); not tuned on hardware"},
      // Xe: 256 work-items per group is the common maximum, 64 KB SLM per Xe-core; 16 lanes = one
      // SIMD16 sub-group per query vector (cl_intel_required_subgroup_size offers 8/16/32);
      // split-K thresholds as the generic row.
      // Tiled: a SIMD16 sub-group = 4 slices x 4 vectors, so a load reads 4 distinct float4s (64
      // bytes, one SLM access per clock); ~100 values per work-item fit the 128-GRF file in SIMD8
      // or the 256-GRF mode in SIMD16.
      {"mla_decode", Level::Vendor, "intel", "*",
       {{"QB", 16}, {"LANES", 16}, {"LOAD_BYTES", 16}, {"WGS_PER_CU", 2}, {"MIN_CHUNK", 256}, {"MAX_SPLITS", 64},
        {"TILED", 1}, {"KT", 8}, {"MS", 1}, {"DS", 16}, {"DSW", 4}, {"MO", 8}},
       "vendor guide: Intel oneAPI GPU optimization guide, SLM, sub-groups and GRF modes; not tuned on hardware"},
      // PoCL pthread device: a group is one vectorised loop per core; 64 work-items keep the
      // per-barrier work-item loops short; 2 groups per core; small so the CI suite stays fast.
      // Tiled, the CPU shape (llama.cpp's CPU flash attention): 4 work-items per group, each
      // scoring all 8 vectors over a quarter of the dims and owning 8 vectors x 128 output
      // columns, so the barriers cost little. Faster than the kernel above on every case of
      // `clattn-bench --device cpu mla --quick` (bf16 H=16 8.0 vs 10.4 ms, H=128 15.3 vs 19.6,
      // fp8 6.4 vs 12.0, B=1 split 8.2 vs 10.4; PoCL 3.1, 2-core EPYC VM, 2026-11-26).
      // CPU_KERNEL: the cpu variant (mla_cpu.cl; docs/mla.md) instead of both: one work-item per
      // group owning 32 query vectors (decode H=16: all 16 heads), 16-key blocks, VW 0 =
      // CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT; 11-18x faster than the tiled kernel on the
      // --quick cases (VM). CPU_QB 32 beats 16 at H=128 (Xeon 18.1 vs 22.1 ms); on the 16-core
      // Xeon, B=64 S=4096 H=16, BK 16 SK 8 SD 192 OH 4 OD 2 is the best of BK 16/32/64, SK
      // 8/16, SD 64/192, OH 4/8, OD 2/4 (11.4 ms on a run where 32/16/64 took 11.9-13.8 ms);
      // TOUCH_AHEAD 2 beats 0 by ~20 % on the VM (B=16 S=512). The fields above serve the
      // fallbacks.
      {"mla_decode", Level::Vendor, "cpu", "*",
       {{"QB", 8}, {"LANES", 8}, {"LOAD_BYTES", 16}, {"WGS_PER_CU", 2}, {"MIN_CHUNK", 128}, {"MAX_SPLITS", 16},
        {"TILED", 1}, {"KT", 8}, {"MS", 8}, {"DS", 4}, {"DSW", 4}, {"MO", 8},
        {"CPU_KERNEL", 1}, {"VW", 0}, {"CPU_QB", 32}, {"BK", 16}, {"SK", 8}, {"SD", 192}, {"OH", 4}, {"OD", 2}, {"TOUCH_AHEAD", 2}},
       "vendor docs: PoCL pthread device; sized for CI speed; TILED and its tile by clattn-bench --device cpu mla "
       "--quick (PoCL 3.1); CPU_KERNEL and its tile by clattn-bench --device cpu mla (--quick and -B 16 -S 4096 "
       "-H 16, -B 4 -S 2048 -H 128), 2-core AMD EPYC (AVX-512) VM, PoCL 3.1, 2026-11-26; BK SK SD OH OD and "
       "CPU_QB by clattn-bench --device cpu mla -B 64 -S 4096 -H 16 and -B 16 -H 128 --grid, 16-core Intel Xeon, "
       "PoCL, 2026-11-26; TOUCH_AHEAD by -B 16 -S 512 on the VM"},
      // The same tile as mla_decode: query vectors are (row, head) pairs of one request.
      {"mla_extend", Level::Generic, "", "*",
       {{"QB", 16}, {"LANES", 16}, {"LOAD_BYTES", 16}, {"TILED", 1}, {"KT", 8}, {"MS", 1}, {"DS", 16}, {"DSW", 8},
        {"MO", 8}},
       "portable default (by design, as mla_decode; not tuned)"},
      {"mla_extend", Level::Vendor, "nvidia", "*",
       {{"QB", 16}, {"LANES", 16}, {"LOAD_BYTES", 16}, {"MMA", 1}, {"MMA_WARPS", 4}, {"MMA_KEYS", 16}, {"TILED", 1},
        {"KT", 8}, {"MS", 1}, {"DS", 16}, {"DSW", 8}, {"MO", 8}},
       "by design, as mla_decode"},
      {"mla_extend", Level::Vendor, "amd", "*",
       {{"QB", 16}, {"LANES", 16}, {"LOAD_BYTES", 16}, {"TILED", 1}, {"KT", 8}, {"MS", 2}, {"DS", 16}, {"DSW", 8},
        {"MO", 8}},
       "vendor guide, as mla_decode; not tuned on hardware"},
      {"mla_extend", Level::Arch, "rdna", "*", {{"MS", 1}, {"DSW", 8}},
       "vendor guide, as mla_decode; not tuned on hardware"},
      {"mla_extend", Level::Vendor, "intel", "*",
       {{"QB", 16}, {"LANES", 16}, {"LOAD_BYTES", 16}, {"TILED", 1}, {"KT", 8}, {"MS", 1}, {"DS", 16}, {"DSW", 4},
        {"MO", 8}},
       "vendor guide, as mla_decode; not tuned on hardware"},
      {"mla_extend", Level::Vendor, "cpu", "*",
       {{"QB", 8}, {"LANES", 8}, {"LOAD_BYTES", 16}, {"TILED", 1}, {"KT", 8}, {"MS", 8}, {"DS", 4}, {"DSW", 4},
        {"MO", 8}, {"CPU_KERNEL", 1}, {"VW", 0}, {"CPU_QB", 32}, {"BK", 16}, {"SK", 8}, {"SD", 192}, {"OH", 4}, {"OD", 2},
        {"TOUCH_AHEAD", 2}},
       "vendor docs: PoCL pthread device, as mla_decode; sized for CI speed; the cpu variant's tile as mla_decode"},
      // Tuned on the machine itself with the tensor-core kernel (clattn-tune --time-budget 240,
      // docs/tuning.md; the figures: docs/results-h100.md). L2_AHEAD (sparse decode only, which
      // the tuner does not run): clattn-bench sparse --dsa --mla-param L2_AHEAD=0,2,3,4,5 on the
      // same machine and driver, 2026-11-26 (2 best: 0.077 ms; 0 0.089-0.090, 3 0.079-0.080, 4
      // 0.084-0.085, 5 0.092-0.094).
      {"mla_decode", Level::Device, "NVIDIA H100 80GB HBM3", "*",
       {{"LANES", 16}, {"LOAD_BYTES", 16}, {"MAX_SPLITS", 128}, {"MIN_CHUNK", 256}, {"MMA", 1}, {"MMA_KEYS", 16}, {"MMA_WARPS", 4}, {"QB", 16}, {"WGS_PER_CU", 2}, {"L2_AHEAD", 2}},
       "clattn-tune, NVIDIA H100 80GB HBM3, driver 580.159.04, 2026-11-22"},
      // Tuned on the machine itself with the tensor-core kernel (clattn-tune --time-budget 240,
      // docs/tuning.md; the figures: docs/results-h100.md).
      {"mla_extend", Level::Device, "NVIDIA H100 80GB HBM3", "*",
       {{"LANES", 16}, {"LOAD_BYTES", 16}, {"MMA", 1}, {"MMA_KEYS", 32}, {"MMA_WARPS", 4}, {"QB", 16}},
       "clattn-tune, NVIDIA H100 80GB HBM3, driver 580.159.04, 2026-11-22"},
  };
  return rows;
}
}  // namespace clattn::params

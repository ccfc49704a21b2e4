// decode parameters: generic, vendor, architecture and device rows. Each says where its numbers come from.
// Keys are the KV dtype class ("f32", "f16", "bf16", "fp8"); "*" rows apply to all.
//
// Kernel tile (cl_kernels/decode.cl; the dispatcher derives TPT and GMAX from these):
//   WG          work-items per work-group (a power of two; a multiple of 32 for the PTX variant)
//   QREGS       target floats of q per work-item (the output accumulator holds as many):
//               sets TPT (lanes per token) = GMAX_bucket * head_dim / QREGS
//   QREGS_MAX   hard cap: a GQA group whose q would exceed it even at the widest TPT is
//               split into query-head blocks (each block re-reads K/V, mostly from L2)
//   QREGS_LMEM, QREGS_MAX_LMEM  the same where the butterfly goes through local memory
//               (no shfl variant: other devices, portable-only mode); default QREGS, QREGS_MAX
//   UNROLL      tokens per slot per tile step (one softmax rescale per tile)
//   LOAD_BYTES  bytes per K/V load (16 = ld.global.v4; lowered automatically for strides)
//   PTX_SHFL    1: prefer the inline-PTX shfl.sync butterfly (NVIDIA variant "nv_ptx_shfl";
//               only used when the device's compiler takes inline PTX)
//   SUBGROUP    1: prefer sub-group shuffles for the butterfly: "intel_subgroups"
//               (cl_intel_subgroups), else "khr_subgroups" (cl_khr_subgroups, with
//               cl_khr_subgroup_shuffle where the device has it); used only where TPT divides
//               the sub-group size and WG is a multiple of it
//   SUBGROUP_SIZE  intel_subgroups: the required sub-group size (intel_reqd_sub_group_size;
//               0 = the compiler's choice, checked against the smallest size); khr_subgroups
//               checks the smallest size the device may pick (wavefront, warp); both: the
//               emulated size in tests (0 = 32)
//   QREGS_SG, QREGS_MAX_SG, UNROLL_SG  QREGS, QREGS_MAX and UNROLL where a sub-group variant can run (default:
//               the same)
//   SUBGROUP_SHUFFLE  khr_subgroups: -1 (default) xor shuffles where the device has
//               cl_khr_subgroup_shuffle, else local memory fenced by sub_group_barrier; 0 / 1
//               force one form (tests)
//   GMAX_CAP    largest query-head block per work-group
//   CPU_KERNEL  1: the cpu variant (decode_cpu.cl): one work-item per group, VW tokens per
//               step over vector types (CPU devices)
//   VW          its vector width in floats: 4, 8, 16, or 0 = the device's preferred width
//   TOUCH_AHEAD its prefetch distance in VW-token blocks (default 2; 0: none)
//   PREFETCH_LOCALITY  the prefetch's locality hint: 3 (default) into L1, 1 into L2 only (the cpu
//               row: no L1 miss slot held while the line is on its way)
//   MERGE_BATCH fused merge: partial states loaded per batch before use (default 8; speed
//               only, the parts still add in index order)
// Split-K planner (backends/planner/split_kv.hpp):
//   WGS_PER_CU  work-groups resident per compute unit: CUs x this = one wave; batches that
//               fill it are never split
//   MIN_CHUNK   never split below this many tokens; MAX_SPLITS chunks per request at most
//   DET_CHUNK   deterministic mode's fixed split tile (tokens)
#include "backends/params/database.hpp"

namespace clattn::params {
const std::vector<Row>& rows_decode() {
  static const std::vector<Row> rows = {
      // 128 work-items (4 warps / 2 wave64), 16-byte loads, <= 2x64 live floats of q/acc per
      // work-item, local-memory butterflies; split-K from 4 groups per CU, merged by the last
      // work-group of each request (global atomics + fences, OpenCL 1.2: no merge launch).
      {"decode", Level::Generic, "", "*",
       {{"WG", 128}, {"QREGS", 64}, {"QREGS_MAX", 128}, {"UNROLL", 2}, {"LOAD_BYTES", 16}, {"PTX_SHFL", 0},
        {"GMAX_CAP", 16}, {"WGS_PER_CU", 4}, {"MIN_CHUNK", 256}, {"MAX_SPLITS", 64}, {"DET_CHUNK", 1024},
        {"FUSE_MERGE", 1}},
       "portable default (by design; not tuned)"},
      // QREGS 32 = 16 lanes per token, one 16-byte load per lane per row; UNROLL 4 with V
      // loads issued with K; 4 blocks of 128 threads per SM. MAX_SPLITS 32: the fused merge
      // runs in one work-group per request and head block, so fewer parts win. The sweep's
      // figures: docs/results-h100.md.
      {"decode", Level::Vendor, "nvidia", "*",
       {{"WG", 128}, {"QREGS", 32}, {"QREGS_MAX", 64}, {"UNROLL", 4}, {"LOAD_BYTES", 16}, {"PTX_SHFL", 1},
        {"GMAX_CAP", 16}, {"WGS_PER_CU", 4}, {"MIN_CHUNK", 256}, {"MAX_SPLITS", 32}, {"DET_CHUNK", 1024},
        {"QREGS_LMEM", 64}, {"QREGS_MAX_LMEM", 128}},
       "clattn-bench decode --grid, NVIDIA H100 80GB HBM3, driver 580.159.04, 2026-11-22; WGS_PER_CU: CUDA "
       "occupancy calculator (sm_90); QREGS_LMEM / QREGS_MAX_LMEM: clattn-tune --ops decode with "
       "CLATTN_VARIANTS=portable, NVIDIA H200, driver 580.159.04, 2026-11-26"},
      // Tuned on the machine itself (clattn-tune --ops decode --time-budget 180 --emit-rows; the
      // tables: docs/results-h100.md). PREFETCH, added by hand, is used by split plans only.
      {"decode", Level::Device, "NVIDIA H100 80GB HBM3", "bf16",
       {{"DET_CHUNK", 1024}, {"FUSE_MERGE", 1}, {"GMAX_CAP", 16}, {"LOAD_BYTES", 16}, {"MAX_SPLITS", 32},
        {"MIN_CHUNK", 256}, {"PTX_SHFL", 1}, {"QREGS", 32}, {"QREGS_MAX", 64}, {"UNROLL", 4}, {"WG", 128},
        {"WGS_PER_CU", 2}, {"PREFETCH", 1}},
       "clattn-tune, NVIDIA H100 80GB HBM3, driver 580.159.04, 2026-11-22; PREFETCH: clattn-bench decode --grid, "
       "same day"},
      // 16-byte loads and UNROLL 4 with the denormal-path decode (FP8_FAST). fp8 decode is
      // ALU-bound at GQA-4 with f32 math (2 FMAs per element and head): a tensor-core variant
      // is the way past it.
      // int8 caches (this key too): the tensor-core kernel (MMA), one block of 16 keys per warp
      // and step (MMA_UNROLL 1 / 2 / 4: 87 / 66 / 75 % of the stream-read; 2 and 4 hold more
      // registers, fewer warps per SM).
      {"decode", Level::Vendor, "nvidia", "fp8",
       {{"LOAD_BYTES", 16}, {"UNROLL", 4}, {"MMA", 1}, {"MMA_UNROLL", 1}},
       "clattn-bench decode --grid (fp8 e4m3), NVIDIA H100 80GB HBM3, driver 580.159.04, 2026-11-22; MMA / "
       "MMA_UNROLL: clattn-bench decode --kv int8, same device, 2026-11-26"},
      // 4 x wave64 per group (one per SIMD of a CU); 128 VGPRs per lane keep 4 waves per SIMD;
      // dwordx4 global loads; split-K thresholds as the generic row. SUBGROUP: a token's lanes
      // (TPT <= 32) sit in one wavefront (32 or 64 work-items, the device's wavefront size), so
      // the butterfly needs no work-group barrier: khr_subgroups (ROCm's OpenCL device library
      // has the cl_khr_subgroups builtins but no cl_khr_subgroup_shuffle, so its
      // sub_group_barrier-fenced local-memory form).
      {"decode", Level::Vendor, "amd", "*",
       {{"WG", 256}, {"QREGS", 64}, {"QREGS_MAX", 128}, {"UNROLL", 2}, {"LOAD_BYTES", 16}, {"PTX_SHFL", 0},
        {"GMAX_CAP", 16}, {"WGS_PER_CU", 4}, {"MIN_CHUNK", 256}, {"MAX_SPLITS", 64}, {"DET_CHUNK", 1024},
        {"SUBGROUP", 1}, {"SUBGROUP_SIZE", 0}},
       "vendor guide: AMD Instinct MI200/MI300 ISA and CDNA3 tuning guide, occupancy tables; SUBGROUP: AMD ROCm "
       "OpenCL programming guide (wavefronts as sub-groups, cl_khr_subgroups) and the ROCm device library's "
       "OpenCL sub-group functions; not tuned on hardware"},
      // RDNA (wave32): 32 q floats per lane, at most 64 with the GQA group's rows: the wave32
      // build of clang-15 for gfx11 allots at most 128 VGPRs a lane, and 128 q floats per lane
      // (the amd row's QREGS_MAX) spill there and, for fp8 at GQA 8, on gfx1030
      // (clattn-kernel-report).
      {"decode", Level::Arch, "rdna", "*", {{"QREGS", 32}, {"QREGS_MAX", 64}},
       "vendor guide: AMD RDNA3 ISA (wave32, VGPR file); register budget from clattn-kernel-report "
       "(clang-15 gfx1030 / gfx1100 builds, 2026-11-26); not tuned on hardware"},
      // Xe: 128 GRF x 32 bytes per EU thread at SIMD16 leave ~48 floats per lane for q/acc after
      // addressing; sub-groups of 8/16/32 through cl_intel_required_subgroup_size, 16 the
      // compiler's usual choice; 16-byte block loads; split-K thresholds as the generic row.
      // SUBGROUP: the butterfly by intel_sub_group_shuffle_xor at sub-group size 16 (a token's
      // TPT <= 16 lanes in one sub-group; TPT 32 tiles keep the local-memory form). SIMD16 has
      // half the registers per lane of the SIMD8 build ocloc picks for the generic kernel: the
      // row's GMAX 4 x UNROLL 2 tile spills 4 KB per thread there (dg2, tgllp), 2 heads x 1
      // token per tile at 16 lanes per token (QREGS_SG / QREGS_MAX_SG 16, UNROLL_SG 1) far less.
      {"decode", Level::Vendor, "intel", "*",
       {{"WG", 128}, {"QREGS", 32}, {"QREGS_MAX", 64}, {"UNROLL", 2}, {"LOAD_BYTES", 16}, {"PTX_SHFL", 0},
        {"GMAX_CAP", 16}, {"WGS_PER_CU", 4}, {"MIN_CHUNK", 256}, {"MAX_SPLITS", 64}, {"DET_CHUNK", 1024},
        {"SUBGROUP", 1}, {"SUBGROUP_SIZE", 16}, {"QREGS_SG", 16}, {"QREGS_MAX_SG", 16}, {"UNROLL_SG", 1}},
       "vendor guide: Intel oneAPI GPU optimization guide, GRF and occupancy; SUBGROUP: the same guide's sub-group "
       "chapter (shuffles instead of SLM and barriers, SIMD16 sub-groups) and the cl_intel_subgroups / "
       "cl_intel_required_subgroup_size specs; QREGS_SG / QREGS_MAX_SG / UNROLL_SG: ocloc dg2 / tgllp builds (scratch per "
       "thread); not tuned on hardware"},
      // Xe-LP (Tiger Lake and later integrated GPUs): no large register file, so the vendor
      // row's tiles (32 q floats and 2 tokens of K and V per lane) spill 1-4 KB per thread
      // even at SIMD8 (clattn-kernel-report, tgllp): 16 q floats, one token per step; and the
      // local-memory butterfly (SIMD8), since the SIMD16 sub-group builds spill 1-2 KB there.
      {"decode", Level::Arch, "xe-lp", "*", {{"QREGS", 16}, {"QREGS_MAX", 32}, {"UNROLL", 1}, {"SUBGROUP", 0}},
       "vendor guide: Intel oneAPI GPU optimization guide (128 GRF per thread on Xe-LP); register budget from "
       "clattn-kernel-report (ocloc 22.43 tgllp builds, 2026-11-26); not tuned on hardware"},
      // CPU devices: the cpu variant (decode_cpu.cl), one work-item per group (PoCL's pthread
      // device runs a work-group as one loop on one core thread), VW 0 = the device's
      // preferred float vector width; the whole GQA group per work-item (its q and output
      // rows are private arrays in L1). The tile fields serve the generic fallback: a token
      // per work-item (TPT 1, no butterfly barriers). 2 groups per core before splitting.
      {"decode", Level::Vendor, "cpu", "*",
       {{"WG", 32}, {"QREGS", 512}, {"QREGS_MAX", 4096}, {"UNROLL", 4}, {"LOAD_BYTES", 16}, {"PTX_SHFL", 0},
        {"GMAX_CAP", 16}, {"WGS_PER_CU", 2}, {"MIN_CHUNK", 128}, {"MAX_SPLITS", 32}, {"DET_CHUNK", 1024},
        {"CPU_KERNEL", 1}, {"VW", 0}, {"TOUCH_AHEAD", 2}, {"PREFETCH_LOCALITY", 1}},
       "vendor docs: PoCL pthread device (work-group = one loop per core thread); VW: "
       "CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT; clattn-bench decode --quick, PoCL on the 2-core CI host, 2026-11-26; "
       "TOUCH_AHEAD and PREFETCH_LOCALITY: clattn-bench --device cpu decode --grid, 16-core Intel Xeon and 2-core AMD "
       "EPYC VM, PoCL, 2026-11-26"},
  };
  return rows;
}
}  // namespace clattn::params

// extend / prefill parameters: generic, vendor rows. Each says where its numbers come from
// and which kernel variant they select. Keys: "d128" (head_dim <= 128), "d256" (192, 256);
// "*" rows apply to both.
//
// Portable kernel (variant "generic", cl_kernels/extend.cl):
//   WG    work-items per group
//   ROWS  packed query rows (tokens x GQA group) per group; WG / ROWS lanes share a row
//   KEYS  keys per step; local memory = (ROWS*D + KEYS*(D+1) + ROWS*KEYS) floats + KEYS
//         longs (the dispatcher halves KEYS, then ROWS, while it exceeds the device's)
// Tensor-core kernel (variant "nv_mma_sync", cl_kernels/extend_mma_nv.cl):
//   MMA        1: prefer the tensor-core kernel where variant_available() says the device
//              runs it (NVIDIA inline PTX, compute capability >= 8.0), else generic (logged)
//   MMA_WARPS  warps per group, 16 packed query rows each (FlashAttention-2 layout)
//   MMA_KEYS   keys per tile (32, 64 or 128); local memory = K tile (KEYS x D halves, rows
//              padded for D = 80) + transposed V tile (D x KEYS halves) + KEYS row offsets
//              (halved while it exceeds the device's local memory; below 32 -> generic)
#include "backends/params/database.hpp"

namespace clattn::params {
const std::vector<Row>& rows_extend() {
  static const std::vector<Row> rows = {
      {"extend", Level::Generic, "", "*",
       {{"WG", 128}, {"ROWS", 16}, {"KEYS", 32}, {"MMA", 0}, {"MMA_WARPS", 4}, {"MMA_KEYS", 64}},
       "variant generic: 128 work-items (4 warps / 2 wave64), 16 rows x 8 lanes, 32-key steps: 27 KB of local "
       "memory at D=128, inside OpenCL's 32 KB minimum; not tuned. MMA_WARPS / MMA_KEYS are read only where MMA=1 "
       "(the nvidia row explains them)"},
      {"extend", Level::Generic, "", "d256", {{"KEYS", 16}, {"MMA_KEYS", 32}},
       "variant generic: 16-key steps keep D=256 at 34 KB of local memory (48 KB on NVIDIA, 64 KB on AMD/Intel)"},
      {"extend", Level::Vendor, "nvidia", "*",
       {{"WG", 128}, {"ROWS", 32}, {"KEYS", 32}, {"MMA", 1}, {"MMA_WARPS", 8}, {"MMA_KEYS", 64}},
       "variant nv_mma_sync: FlashAttention-2 (Dao 2023) layout, 8 warps x 16 rows, 64-key K and transposed-V "
       "tiles = 33 KB at D=128 within the 48 KB OpenCL local limit (DEVICE.md); the next K and V tiles wait in "
       "registers (16 each per work-item with 8 warps) during the current tile's mma.sync m16n8k16 (PTX ISA "
       "8.x, warp-level matrix fragments). Generic fallback: 32 rows x 4 lanes, 37 KB"},
      {"extend", Level::Vendor, "nvidia", "d256", {{"ROWS", 16}, {"KEYS", 16}, {"MMA_KEYS", 32}},
       "variant nv_mma_sync: 32-key K and transposed-V tiles keep D=256 at 32 KB of local memory"},
      {"extend", Level::Vendor, "amd", "*", {{"WG", 256}, {"ROWS", 32}, {"KEYS", 32}, {"MMA", 0}},
       "variant generic: 4 x wave64 per group, 32 rows x 8 lanes; 37 KB of the 64 KB LDS at D=128 (AMD CDNA3 ISA, "
       "LDS size); not tuned on hardware"},
      {"extend", Level::Vendor, "amd", "d256", {{"ROWS", 16}, {"KEYS", 16}},
       "variant generic: 16 x 16 lanes keeps D=256 under 34 KB of LDS"},
      {"extend", Level::Vendor, "intel", "*", {{"WG", 128}, {"ROWS", 16}, {"KEYS", 32}, {"MMA", 0}},
       "variant generic: 8 x SIMD16 per group; 27 KB of SLM at D=128 (oneAPI GPU optimization guide, SLM 64 KB "
       "per Xe-core); not tuned on hardware"},
      {"extend", Level::Vendor, "cpu", "*", {{"WG", 16}, {"ROWS", 16}, {"KEYS", 32}, {"MMA", 0}},
       "variant generic: PoCL runs a group as one vectorised loop, so one lane per row (no redundant row "
       "reductions) and 16 rows = one AVX-512 float vector (PoCL pthread device docs); not tuned"},
      // Tuned on the machine itself (clattn-tune, docs/tuning.md).
      {"extend", Level::Device, "NVIDIA H100 80GB HBM3", "d128",
       {{"KEYS", 32}, {"MMA", 1}, {"MMA_KEYS", 128}, {"MMA_WARPS", 8}, {"ROWS", 32}, {"WG", 128}},
       "clattn-tune 2026-11-22 (driver 580.159.04, clattn-tune --time-budget 300): 166.9 TFLOP/s; vendor default 163.3, generic 4.368 (geomean over B=4 qo=1024 kv=2048 Hq=32 Hkv=8 D=128 bf16 causal; B=1 qo=4096 kv=4096 Hq=32 Hkv=8 D=128 bf16 causal); 18 candidates, 0 rejected as wrong"},

// backends/params/rows_mla.cpp
      {"mla_decode", Level::Device, "NVIDIA H100 80GB HBM3", "*",
       {{"LANES", 16}, {"LOAD_BYTES", 16}, {"MAX_SPLITS", 128}, {"MIN_CHUNK", 256}, {"MMA", 1}, {"QB", 16}, {"WGS_PER_CU", 2}},
       "clattn-tune 2026-11-22 (driver 580.159.04, clattn-tune --time-budget 300): 519.2 GB/s = 17% of stream-read 2993 GB/s; vendor default 483.6, generic 484.8 (geomean over B=64 S=4096 H=16 P=64 bf16; B=1 S=32768 H=16 P=64 bf16; B=64 S=4096 H=128 P=64 bf16); 28 candidates, 0 rejected as wrong"},

// backends/params/rows_mla.cpp
      {"mla_extend", Level::Device, "NVIDIA H100 80GB HBM3", "*",
       {{"LANES", 16}, {"LOAD_BYTES", 16}, {"MMA", 1}, {"MMA_KEYS", 16}, {"MMA_WARPS", 4}, {"QB", 16}},
       "clattn-tune 2026-11-22 (driver 580.159.04, clattn-tune --time-budget 300): 61.98 TFLOP/s; vendor default 61.98, generic 61.97 (geomean over B=4 qo=512 kv=2048 H=16 P=64 bf16 causal); 11 candidates, 0 rejected as wrong"},

// backends/params/rows_linear.cpp
      {"linear_decode", Level::Device, "NVIDIA H100 80GB HBM3", "*",
       {{"DEC_DVT", 64}, {"DEC_ROWS", 8}, {"DEC_VEC", 4}},
       "clattn-tune 2026-11-22 (driver 580.159.04, clattn-tune --time-budget 300): 2699 GB/s = 90% of stream-read 2993 GB/s; vendor default 2634, generic 2545 (geomean over gdn B=256 H=16 Dk=128 Dv=128 bf16, f32 state; gla B=256 H=16 Dk=128 Dv=128 bf16, f32 state); 11 candidates, 0 rejected as wrong"},

// backends/params/rows_linear.cpp
      {"linear_prefill", Level::Device, "NVIDIA H100 80GB HBM3", "*",
       {{"PF_C", 32}, {"PF_DKT", 32}, {"PF_DVT", 32}, {"PF_WG", 256}},
       "clattn-tune 2026-11-22 (driver 580.159.04, clattn-tune --time-budget 300): 3.616 TFLOP/s; vendor default 3.616, generic 2.166 (geomean over gdn B=4 L=2048 H=16 Dk=128 Dv=128 bf16; gla B=4 L=2048 H=16 Dk=128 Dv=128 bf16); 11 candidates, 0 rejected as wrong"},

// backends/params/rows_merge.cpp
      {"merge", Level::Device, "NVIDIA H100 80GB HBM3", "*",
       {{"MERGE_WG", 128}},
       "clattn-tune 2026-11-22 (driver 580.159.04, clattn-tune --time-budget 300): 199.9 GB/s = 7% of stream-read 2993 GB/s; vendor default 199.9, generic 157.4 (geomean over T=1 states=128 H=32 D=128 f32; T=256 states=8 H=32 D=128 f32); 5 candidates, 0 rejected as wrong"},

// backends/params/rows_metadata.cpp
      {"metadata", Level::Device, "NVIDIA H100 80GB HBM3", "*",
       {{"WG", 128}},
       "clattn-tune 2026-11-22 (driver 580.159.04, clattn-tune --time-budget 300): 33.91 GB/s = 1% of stream-read 2993 GB/s; vendor default 33.91, generic 31.88 (geomean over page_table B=256 max_ctx=8192 P=16); 5 candidates, 0 rejected as wrong"},
  };
  return rows;
}
}  // namespace clattn::params

// append_kv parameters: generic, vendor, architecture and device rows. Each says where its numbers come from.
//
// APPEND_WG is the work-group size of cl_kernels/append_kv.cl, whose work-items each
// convert APPEND_ITEMS consecutive elements of a token's [Hkv, D] K and V rows (a scatter
// of a few KiB per token). On GPUs one element per lane, and any size that fills whole
// SIMD units works (not tuned); on CPUs one head row per work-item.
#include "backends/params/database.hpp"

namespace clattn::params {
const std::vector<Row>& rows_append_kv() {
  static const std::vector<Row> rows = {
      // 64 work-items: one AMD wavefront or two NVIDIA warps, under every driver's work-group limit.
      {"append_kv", Level::Generic, "", "*", {{"APPEND_WG", 64}, {"APPEND_ITEMS", 1}}, "portable default (by design; not tuned)"},
      // 4 warps per block, one head row of D=128 per block.
      {"append_kv", Level::Vendor, "nvidia", "*", {{"APPEND_WG", 128}},
       "vendor guide: CUDA C++ Best Practices Guide, execution configuration"},
      // One wave64.
      {"append_kv", Level::Vendor, "amd", "*", {{"APPEND_WG", 64}},
       "vendor guide: AMD GCN/CDNA ISA guide, wavefront size 64"},
      // Two wave32: the same 64 work-items as GCN, listed so that the RDNA choice is explicit.
      {"append_kv", Level::Arch, "rdna", "*", {{"APPEND_WG", 64}},
       "vendor guide: AMD RDNA3 ISA reference guide, wave32 native; not tuned on hardware"},
      // Four SIMD16 sub-groups.
      {"append_kv", Level::Vendor, "intel", "*", {{"APPEND_WG", 64}},
       "vendor guide: Intel oneAPI GPU optimization guide, thread mapping"},
      // One work-item per head row (APPEND_ITEMS is lowered to D): the dtype switch is taken
      // once per row and each case is a loop LLVM vectorises; PoCL runs one work-group per
      // core thread at a time.
      {"append_kv", Level::Vendor, "cpu", "*", {{"APPEND_WG", 1}, {"APPEND_ITEMS", 256}},
       "vendor docs: PoCL pthread device; clattn-serve-sim decode steps, 2-core EPYC VM, PoCL 3.1, 2026-11-26"},
  };
  return rows;
}
}  // namespace clattn::params

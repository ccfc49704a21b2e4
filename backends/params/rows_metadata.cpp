// metadata parameters: generic, vendor, architecture and device rows. Each says where its numbers come from.
//
// WG is the work-group size of the metadata builders (cl_kernels/metadata.cl): one group
// per request, whose work-items sum the page counts of the requests before it and then
// copy that request's page ids. The work is a few thousand integer loads per group, so
// the size only has to fill the SIMD width a few times over without idling lanes on
// short requests; it is rounded down to a power of two and to the kernel's limit.
// Only the H100 device row is tuned; `clattn-bench metadata` measures the builders.
#include "backends/params/database.hpp"

namespace clattn::params {
const std::vector<Row>& rows_metadata() {
  static const std::vector<Row> rows = {
      // 64 work-items: one AMD wavefront or two NVIDIA warps, below the max work-group size of
      // every GPU driver listed in the vendor rows (clamped to CL_KERNEL_WORK_GROUP_SIZE anyway).
      {"metadata", Level::Generic, "", "*", {{"WG", 64}}, "portable default (by design; not tuned)"},
      // 4 warps of 32 per block: the smallest block that keeps an SM's 4 schedulers busy.
      {"metadata", Level::Vendor, "nvidia", "*", {{"WG", 128}},
       "vendor guide: CUDA C++ Best Practices Guide, execution configuration"},
      // 2 x wave64 per work-group, one per SIMD pair of a CU.
      {"metadata", Level::Vendor, "amd", "*", {{"WG", 128}},
       "vendor guide: AMD GCN/CDNA ISA guide, wavefront size 64"},
      // 2 x wave32, one per SIMD32 of an RDNA CU (2 SIMD32 per CU, wave32 native).
      {"metadata", Level::Arch, "rdna", "*", {{"WG", 64}},
       "vendor guide: AMD RDNA whitepaper / RDNA3 ISA guide; not tuned on hardware"},
      // 8 sub-groups of 16, the SIMD16 width Intel's compiler picks for integer kernels.
      {"metadata", Level::Vendor, "intel", "*", {{"WG", 128}},
       "vendor guide: Intel oneAPI GPU optimization guide, sub-groups and thread mapping"},
      // PoCL runs a work-group as one loop on one core thread, vectorised over work-items; 16 is
      // one AVX-512 int32 vector and keeps the per-group barrier loops short.
      {"metadata", Level::Vendor, "cpu", "*", {{"WG", 16}}, "vendor docs: PoCL pthread device"},
      // Tuned on the machine itself (clattn-tune --time-budget 300, docs/tuning.md; the table:
      // docs/results-h100.md).
      {"metadata", Level::Device, "NVIDIA H100 80GB HBM3", "*",
       {{"WG", 128}},
       "clattn-tune, NVIDIA H100 80GB HBM3, driver 580.159.04, 2026-11-22"},
  };
  return rows;
}
}  // namespace clattn::params

// The GPUs the offline gate builds for, as clattn's profile would read them. Figures are those
// the vendors' OpenCL drivers report (clinfo of the Intel compute runtime and of ROCm; the
// vendors' spec sheets for compute units): they steer parameter clamps (work-group size, local
// memory) the same way the real device would.
#include "tools/kernel_report/report.hpp"

namespace clattn::kreport {
namespace {

DeviceProfile intel(const std::string& name, const std::string& arch, unsigned eus, size_t max_wg,
                    unsigned long long slm, bool fp64, bool dpas, std::vector<unsigned> sg) {
  DeviceProfile p;
  p.vendor = "intel";
  p.device_name = name, p.device_vendor = "Intel(R) Corporation";
  p.platform_name = "Intel(R) OpenCL Graphics", p.platform_vendor = "Intel(R) Corporation";
  p.opencl_c_version = "OpenCL C 1.2 ";
  p.architecture = arch;
  p.is_gpu = true;
  p.compute_units = eus, p.max_work_group_size = max_wg, p.local_mem_bytes = slm;
  p.global_mem_bytes = 16ull << 30, p.max_alloc_bytes = 4ull << 30;
  p.fp16 = true, p.fp64 = fp64;
  p.subgroups = true, p.intel_subgroups = true, p.intel_required_subgroup_size = true;
  p.integer_dot_product = true;
  p.subgroup_sizes = std::move(sg);
  p.extensions = {"cl_khr_fp16", "cl_khr_subgroups", "cl_intel_subgroups", "cl_intel_required_subgroup_size",
                  "cl_intel_subgroups_short", "cl_khr_integer_dot_product", "cl_intel_device_attribute_query"};
  if (fp64) p.extensions.push_back("cl_khr_fp64");
  if (dpas) p.extensions.push_back("cl_intel_subgroup_matrix_multiply_accumulate");
  return p;
}

DeviceProfile amd(const std::string& name, unsigned cus, unsigned wave) {
  DeviceProfile p;
  p.vendor = "amd";
  p.device_name = name, p.device_vendor = "Advanced Micro Devices, Inc.";
  p.platform_name = "AMD Accelerated Parallel Processing", p.platform_vendor = "Advanced Micro Devices, Inc.";
  p.opencl_c_version = "OpenCL C 2.0 ";
  p.architecture = name.substr(0, name.find(':'));
  p.is_gpu = true;
  p.compute_units = cus, p.max_work_group_size = 256, p.local_mem_bytes = 65536;
  p.global_mem_bytes = 32ull << 30, p.max_alloc_bytes = 16ull << 30;
  p.fp16 = true, p.fp64 = true, p.subgroups = true;
  p.amd_wavefront = wave, p.warp_size = wave, p.subgroup_sizes = {wave};
  p.extensions = {"cl_khr_fp16", "cl_khr_fp64", "cl_khr_subgroups", "cl_amd_device_attribute_query"};
  return p;
}

Target make(std::string name, std::string compiler, std::string device, std::string iga, std::string about,
            DeviceProfile p) {
  Target t;
  t.name = std::move(name), t.compiler = std::move(compiler), t.device = std::move(device), t.iga = std::move(iga);
  t.about = std::move(about);
  t.ops.profile = std::move(p);
  t.ops.preferred_float_width = 1;  // (GPU drivers report 1; only CPU variants read it)
  t.ops.fp32_denorms = true;        // both vendors' GPUs keep f32 denormals
  return t;
}

}  // namespace

const std::vector<Target>& all_targets() {
  static const std::vector<Target> t = {
      make("dg2", "ocloc", "dg2", "xehpg", "Intel Arc A770 (Xe-HPG, DPAS)",
           intel("Intel(R) Arc(TM) A770 Graphics", "xe-hpg", 512, 1024, 65536, false, true, {8, 16, 32})),
      make("tgllp", "ocloc", "tgllp", "xelp", "Intel Iris Xe, Tiger Lake (Xe-LP, no DPAS)",
           intel("Intel(R) Iris(R) Xe Graphics", "xe-lp", 96, 512, 65536, false, false, {8, 16, 32})),
      make("pvc", "ocloc", "pvc", "xehpc", "Intel Data Center GPU Max 1100 (Xe-HPC, DPAS)",
           intel("Intel(R) Data Center GPU Max 1100", "xe-hpc", 448, 1024, 131072, true, true, {16, 32})),
      make("gfx90a", "amdgcn", "gfx90a", "", "AMD Instinct MI210 (CDNA2, wave64, MFMA)",
           amd("gfx90a:sramecc+:xnack-", 104, 64)),
      make("gfx940", "amdgcn", "gfx940", "", "AMD Instinct MI300 family (CDNA3, wave64, MFMA; clang-15 has no gfx942)",
           amd("gfx940:sramecc+:xnack-", 304, 64)),
      make("gfx1030", "amdgcn", "gfx1030", "", "AMD Radeon RX 6800 XT (RDNA2, wave32)", amd("gfx1030", 72, 32)),
      make("gfx1100", "amdgcn", "gfx1100", "", "AMD Radeon RX 7900 XTX (RDNA3, wave32, WMMA)", amd("gfx1100", 96, 32)),
  };
  return t;
}

}  // namespace clattn::kreport

// Portable-only mode in the variant gate: on a synthetic Hopper profile every vendor variant
// (nv_*) is unavailable with the mode as the reason, the generic kernel stays, and the
// per-op choices fall back to it; with the mode off the same profile keeps its NVIDIA
// variants. Also the parsing of the mode's values.
#include "backends/params/variants.hpp"
#include "runtime/profile.hpp"
#include "support/test_support.hpp"

using namespace clattn;

namespace {
DeviceProfile hopper(bool portable) {
  DeviceProfile p;
  p.vendor = "nvidia";
  p.device_name = "NVIDIA H100 80GB HBM3";
  p.is_gpu = true;
  p.nv_inline_ptx = true;
  p.nv_compute_capability = 90;
  p.local_mem_bytes = 49152;
  p.portable_only = portable;
  return p;
}
}  // namespace

TEST(ParamsPortable, VendorVariantsAreOffInPortableMode) {
  const DeviceProfile p = hopper(true);
  for (const char* v : {"nv_ptx_shfl", "nv_mma_sync", "nv_wgmma"}) EXPECT_TRUE(params::vendor_specific(v)) << v;
  EXPECT_TRUE(params::variant_available(p, "generic"));
  for (const std::string& v : params::all_variants()) {
    std::string why;
    const bool ok = params::variant_available(p, v, &why);
    if (params::vendor_specific(v)) {
      EXPECT_FALSE(ok) << v;
      EXPECT_NE(why.find("portable-only mode (CLATTN_VARIANTS=portable)"), std::string::npos) << v << ": " << why;
    } else {
      // Portable variants are what they are without the mode.
      EXPECT_EQ(ok, params::variant_available(hopper(false), v)) << v;
    }
  }
  for (const params::OpChoice& c : params::op_choices(p)) EXPECT_FALSE(params::vendor_specific(c.variant)) << c.op;
}

TEST(ParamsPortable, VendorVariantsStayWithoutTheMode) {
  const DeviceProfile p = hopper(false);
  for (const char* v : {"generic", "nv_ptx_shfl", "nv_mma_sync", "nv_wgmma"})
    EXPECT_TRUE(params::variant_available(p, v)) << v;
  bool tensor_cores = false;
  for (const params::OpChoice& c : params::op_choices(p))
    tensor_cores = tensor_cores || (c.op == "extend" && c.variant != "generic");
  EXPECT_TRUE(tensor_cores);  // NVIDIA's extend rows ask for MMA
  EXPECT_FALSE(params::vendor_specific("generic"));
  EXPECT_FALSE(params::vendor_specific("khr_subgroups"));
  EXPECT_TRUE(params::vendor_specific("intel_dpas"));
}

TEST(ParamsPortable, ModeValues) {
  EXPECT_FALSE(rt::parse_portable_only("", "CLATTN_VARIANTS"));
  EXPECT_FALSE(rt::parse_portable_only("all", "CLATTN_VARIANTS"));
  EXPECT_TRUE(rt::parse_portable_only("portable", "CLATTN_VARIANTS"));
  EXPECT_TRUE(rt::parse_portable_only("Portable", "CLATTN_VARIANTS"));
  EXPECT_TRUE(test::throws_error([] { rt::parse_portable_only("generic", "CLATTN_VARIANTS"); },
                                 Status::InvalidArgument, "CLATTN_VARIANTS='generic'"));
}

// Parameter database lookup order: tuned -> device -> arch -> vendor -> generic, with
// CLATTN_FORCE_VENDOR switching vendor tables, and variant gating by capability.
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "backends/params/database.hpp"
#include "backends/params/variants.hpp"
#include "support/test_support.hpp"

using namespace clattn;

TEST(Params, VendorTablesApplyAndForcedVendorSwitchesThem) {
  DeviceProfile p = test::ctx().profile();
  p.vendor_forced.clear();
  p.vendor = "nvidia";
  auto e = params::lookup(p, "stream_read");
  EXPECT_EQ(e.source, "vendor:nvidia");
  p.vendor = "generic";
  EXPECT_EQ(params::lookup(p, "stream_read").source, "generic");
  p.vendor = "nvidia";
  p.vendor_forced = "cpu";
  EXPECT_EQ(params::lookup(p, "stream_read").source, "vendor:cpu");
  EXPECT_EQ(params::lookup(p, "stream_read").get("WG"), 64);
}

TEST(Params, UnknownOpIsAnInternalError) {
  EXPECT_TRUE(test::throws_error([] { params::lookup(test::ctx().profile(), "no_such_op"); }, Status::Internal,
                                 "no_such_op"));
}

TEST(Params, TunedFileOverridesForItsDeviceOnly) {
  DeviceProfile p = test::ctx().profile();
  p.vendor_forced.clear();
  p.device_name = "clattn test device " + std::to_string(::getpid());  // fresh name: the tuned cache is per name
  auto file = std::filesystem::temp_directory_path() / ("clattn-tuned-" + std::to_string(::getpid()) + ".json");
  std::ofstream(file) << R"({"device": ")" << p.device_name
                      << R"(", "driver": "x", "date": "2026-11-22", "ops": {"stream_read": {"*": {"params": {"WG": 128}, "gbps": 1.0}}}})";
  setenv("CLATTN_TUNED_FILE", file.c_str(), 1);
  auto e = params::lookup(p, "stream_read");
  EXPECT_EQ(e.level, params::Level::Tuned);
  EXPECT_EQ(e.get("WG"), 128);
  EXPECT_GT(e.get("WGS_PER_CU"), 0);  // untuned values still come from lower levels
  p.vendor_forced = "amd";            // a forced vendor never sees the real device's tuned rows
  EXPECT_EQ(params::lookup(p, "stream_read").source, "vendor:amd");
  unsetenv("CLATTN_TUNED_FILE");
  std::filesystem::remove(file);
}

TEST(Params, VariantsFollowCapabilities) {
  DeviceProfile p;
  p.vendor = "nvidia";
  EXPECT_FALSE(params::variant_available(p, "nv_mma_sync"));
  p.nv_inline_ptx = true;
  p.nv_compute_capability = 75;
  EXPECT_FALSE(params::variant_available(p, "nv_mma_sync"));
  p.nv_compute_capability = 90;
  EXPECT_TRUE(params::variant_available(p, "nv_mma_sync"));
  EXPECT_TRUE(params::variant_available(p, "nv_wgmma"));  // Hopper only: sm_90a
  EXPECT_TRUE(params::variant_available(p, "generic"));
  p.nv_compute_capability = 89;
  EXPECT_FALSE(params::variant_available(p, "nv_wgmma"));
  p.nv_compute_capability = 100;
  EXPECT_FALSE(params::variant_available(p, "nv_wgmma"));
  EXPECT_TRUE(params::variant_available(p, "nv_mma_sync"));
  DeviceProfile cpu;
  cpu.vendor = "cpu";
  cpu.vendor_forced = "nvidia";  // forcing NVIDIA's parameters cannot make PTX run on a CPU
  EXPECT_FALSE(params::variant_available(cpu, "nv_ptx_shfl"));
}

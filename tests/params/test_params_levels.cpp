// Parameter database levels beyond the vendor: AMD architecture families (RDNA wave32 vs
// GCN/CDNA wave64), the process-wide override hook, and forced vendors.
#include <gtest/gtest.h>

#include <set>

#include "backends/params/database.hpp"
#include "support/test_support.hpp"

namespace clattn {
namespace {

DeviceProfile amd(const std::string& arch) {
  DeviceProfile p = test::ctx().profile();
  p.vendor = "amd", p.vendor_forced.clear(), p.architecture = arch;
  p.device_name = "clattn test amd " + arch;  // no tuned file for this name
  return p;
}

TEST(ParamLevels, AmdFamilies) {
  EXPECT_EQ(params::arch_family("amd", "gfx1100"), "rdna");
  EXPECT_EQ(params::arch_family("amd", "gfx1030"), "rdna");
  EXPECT_EQ(params::arch_family("amd", "gfx10"), "rdna");
  EXPECT_EQ(params::arch_family("amd", "gfx90a"), "gcn");
  EXPECT_EQ(params::arch_family("amd", "gfx942"), "gcn");
  EXPECT_EQ(params::arch_family("amd", "gfx9"), "gcn");
  EXPECT_EQ(params::arch_family("nvidia", "sm_90"), "");
  auto rdna = params::lookup(amd("gfx1100"), "merge");
  EXPECT_EQ(rdna.source, "arch:rdna");
  EXPECT_EQ(rdna.get("MERGE_WG"), 32);
  auto cdna = params::lookup(amd("gfx90a"), "merge");
  EXPECT_EQ(cdna.source, "vendor:amd");
  EXPECT_EQ(cdna.get("MERGE_WG"), 64);
}

TEST(ParamLevels, OverrideBeatsEveryLevelUntilCleared) {
  DeviceProfile p = test::ctx().profile();
  const int before = params::lookup(p, "merge").get("MERGE_WG");
  params::set_override("merge", {{"MERGE_WG", 8}});
  auto e = params::lookup(p, "merge");
  EXPECT_EQ(e.source, "override");
  EXPECT_EQ(e.get("MERGE_WG"), 8);
  params::set_override("merge", {});
  EXPECT_EQ(params::lookup(p, "merge").get("MERGE_WG"), before);
  params::set_override("merge", {{"MERGE_WG", 8}});
  params::clear_overrides();
  EXPECT_NE(params::lookup(p, "merge").source, "override");
}

}  // namespace
}  // namespace clattn

TEST(ParamLevels, EachBuiltinRowIsDefinedOnce) {
  // Two rows for the same (op, level, match, key) merge silently in table order, so a row
  // pasted into the wrong file would override the real one: forbid duplicates.
  std::set<std::string> seen;
  for (const auto& r : clattn::params::builtin_rows()) {
    const std::string id = r.op + "|" + std::to_string(int(r.level)) + "|" + r.match + "|" + r.key;
    EXPECT_TRUE(seen.insert(id).second) << "duplicate parameter row " << id;
  }
}

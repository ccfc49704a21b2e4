// clattn-probe (tools/probe) as a user runs it, in child processes: --json parses and lists
// this device; a second process finds the first one's programs in the disk cache; a bad
// device selector fails clearly; with a tuned file, the JSON names the file the runtime
// reads and the entry of a tuned op and key comes from it ("tuned:<file>"), with the
// tuner's origin string; --self-check shows each listed variant's self-validation verdict.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "support/test_support.hpp"

namespace {
std::string run(const std::string& cmd, int* status = nullptr) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int st = pclose(p);
  if (status) *status = st;
  return out;
}
}  // namespace

TEST(Probe, JsonListsThisDevice) {
  int st = -1;
  std::string out = run(std::string(CLATTN_PROBE_EXE) + " --json", &st);
  ASSERT_EQ(st, 0) << out;
  auto doc = nlohmann::json::parse(out);
  ASSERT_FALSE(doc["devices"].empty());
  bool found = false;
  for (auto& d : doc["devices"]) {
    EXPECT_TRUE(d["profile"].contains("CL_DEVICE_NAME"));
    EXPECT_TRUE(d["choices"]["ops"].contains("stream_read"));
    EXPECT_FALSE(d["choices"]["variants"].empty());
    if (d["profile"]["CL_DEVICE_NAME"] == clattn::test::ctx().profile().device_name) found = true;
  }
  EXPECT_TRUE(found);
}

TEST(Probe, SecondProcessIsADiskCacheHit) {
  auto dir = std::filesystem::temp_directory_path() / ("clattn-probe-cache-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::string cmd = "CLATTN_CACHE_DIR=" + dir.string() + " CLATTN_LOG_LEVEL=debug " + CLATTN_PROBE_EXE +
                    " --self-check 2>&1";
  int st = -1;
  std::string first = run(cmd, &st);
  ASSERT_EQ(st, 0) << first;
  EXPECT_NE(first.find("program built: selfcheck.cl"), std::string::npos) << first;
  std::string second = run(cmd, &st);
  ASSERT_EQ(st, 0) << second;
  EXPECT_NE(second.find("program cache hit: selfcheck.cl"), std::string::npos) << second;
  EXPECT_EQ(second.find("program built: selfcheck.cl"), std::string::npos) << second;
  std::filesystem::remove_all(dir);
}

TEST(Probe, BadDeviceSelectorFailsClearly) {
  int st = -1;
  std::string out = run(std::string(CLATTN_PROBE_EXE) + " --device no-such-device-xyz 2>&1", &st);
  EXPECT_NE(st, 0);
  EXPECT_NE(out.find("available devices"), std::string::npos) << out;
}

TEST(Probe, ShowsTheTunedFileAndWhereEachEntryComesFrom) {
  const auto& prof = clattn::test::ctx().profile();
  auto file = std::filesystem::temp_directory_path() / ("clattn-probe-tuned-" + std::to_string(::getpid()) + ".json");
  std::ofstream(file) << nlohmann::json{
      {"device", prof.device_name},
      {"date", "2026-11-22"},
      {"ops", {{"decode", {{"bf16", {{"params", {{"UNROLL", 8}}}, {"value", 123.4}, {"metric", "GB/s"}}}}}}}}
                             .dump();
  int st = -1;
  std::string out = run("CLATTN_TUNED_FILE=" + file.string() + " " + CLATTN_PROBE_EXE + " --json --device '" + prof.device_name + "'", &st);
  ASSERT_EQ(st, 0) << out;
  auto doc = nlohmann::json::parse(out);
  ASSERT_FALSE(doc["devices"].empty());
  auto& ch = doc["devices"][0]["choices"];
  ASSERT_EQ(doc["devices"][0]["profile"]["CL_DEVICE_NAME"], prof.device_name);
  EXPECT_EQ(ch["tuned_file"]["path"], file.string());
  EXPECT_EQ(ch["tuned_file"]["present"], true);
  EXPECT_EQ(ch["tuned_file"]["rows"], 1);
  auto& bf16 = ch["ops"]["decode"]["keys"]["bf16"];
  EXPECT_EQ(bf16["source"], "tuned:" + file.string());
  EXPECT_EQ(bf16["level"], "tuned");
  EXPECT_EQ(bf16["params"]["UNROLL"], 8);
  EXPECT_NE(bf16["origins"].back().get<std::string>().find("clattn-tune 2026-11-22 (123.4 GB/s)"), std::string::npos)
      << bf16["origins"];
  // The op's "*" entry is not tuned (the file only has bf16) and says where it comes from.
  EXPECT_NE(ch["ops"]["decode"]["source"], "tuned:" + file.string());
  std::filesystem::remove(file);
}

TEST(Probe, ShowsTheVariantsModeAndTheChoicePerOp) {
  const std::string dev = " --device '" + clattn::test::ctx().profile().device_name + "'";
  int st = -1;
  std::string out = run("CLATTN_VARIANTS=portable " + std::string(CLATTN_PROBE_EXE) + " --json" + dev, &st);
  ASSERT_EQ(st, 0) << out;
  auto doc = nlohmann::json::parse(out);
  ASSERT_FALSE(doc["devices"].empty());
  auto& d = doc["devices"][0];
  EXPECT_EQ(d["profile"]["clattn_portable_only"], true);
  EXPECT_EQ(d["choices"]["variants_mode"], "portable");
  for (auto& [op, variant] : d["choices"]["op_variants"].items())
    EXPECT_NE(variant.get<std::string>().rfind("nv_", 0), 0u) << op << " " << variant;
  for (auto& v : d["choices"]["variants"])
    if (v["name"].get<std::string>().rfind("nv_", 0) == 0)
      EXPECT_NE(v["reason"].get<std::string>().find("portable-only"), std::string::npos) << v;
  std::string text = run("CLATTN_VARIANTS=portable " + std::string(CLATTN_PROBE_EXE) + dev, &st);
  ASSERT_EQ(st, 0) << text;
  EXPECT_NE(text.find("variants mode portable"), std::string::npos) << text;
  EXPECT_NE(text.find("chosen variant per op"), std::string::npos) << text;
  text = run(std::string(CLATTN_PROBE_EXE) + dev, &st);
  ASSERT_EQ(st, 0) << text;
  EXPECT_NE(text.find("variants mode all"), std::string::npos) << text;
}

TEST(Probe, UnknownVariantsModeFailsClearly) {
  int st = -1;
  std::string out = run("CLATTN_VARIANTS=fastest " + std::string(CLATTN_PROBE_EXE) + " 2>&1", &st);
  EXPECT_NE(st, 0);
  EXPECT_NE(out.find("CLATTN_VARIANTS='fastest'"), std::string::npos) << out;
}

// --self-check shows the self-validation verdict of each listed variant: under
// CLATTN_EMULATE=amd_wmma (the kernel's emulation header) amd_wmma is checked in the first
// process and found cached beside its program binary in the second; the variants the device
// lacks are "not applicable" with the reason; the JSON carries the same.
TEST(Probe, SelfCheckShowsEachVariantsSelfValidation) {
  auto dir = std::filesystem::temp_directory_path() / ("clattn-probe-selfval-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const std::string env = "CLATTN_CACHE_DIR=" + dir.string() + " CLATTN_EMULATE=amd_wmma CLATTN_FORCE_VENDOR=amd ";
  const std::string cmd = env + CLATTN_PROBE_EXE + " --self-check --device '" +
                          clattn::test::ctx().profile().device_name + "'";
  int st = -1;
  std::string first = run(cmd + " 2>&1", &st);
  ASSERT_EQ(st, 0) << first;
  EXPECT_NE(first.find("extend amd_wmma: pass (max error"), std::string::npos) << first;
  {
    const size_t at = first.find("extend amd_wmma: pass");
    ASSERT_NE(at, std::string::npos) << first;
    EXPECT_EQ(first.substr(at, first.find('\n', at) - at).find("(cached)"), std::string::npos) << first;  // checked now
  }
  EXPECT_NE(first.find("extend amd_mfma: not applicable: needs AMD MFMA"), std::string::npos) << first;
  EXPECT_NE(first.find("extend intel_dpas: not applicable: needs cl_intel_subgroup_matrix_multiply_accumulate"),
            std::string::npos)
      << first;
  std::string second = run(cmd + " 2>&1", &st);
  ASSERT_EQ(st, 0) << second;
  const size_t at = second.find("extend amd_wmma: pass");
  ASSERT_NE(at, std::string::npos) << second;
  EXPECT_NE(second.substr(at, second.find('\n', at) - at).find("(cached)"), std::string::npos) << second;

  std::string out = run(cmd + " --json", &st);
  ASSERT_EQ(st, 0) << out;
  auto doc = nlohmann::json::parse(out);
  ASSERT_FALSE(doc["devices"].empty());
  bool seen = false;
  for (auto& v : doc["devices"][0]["bench"]["variant_checks"]) {
    EXPECT_TRUE(v["op"] == "extend" || v["op"] == "decode") << v;
    if (v["variant"] == "amd_wmma") {
      seen = true;
      EXPECT_EQ(v["status"], "pass") << v;
      EXPECT_EQ(v["cached"], true) << v;
      EXPECT_LE(v["max_error"].get<double>(), v["tolerance"].get<double>()) << v;
    } else {
      EXPECT_EQ(v["status"], "not applicable") << v;
    }
  }
  EXPECT_TRUE(seen) << out;
  std::filesystem::remove_all(dir);
}

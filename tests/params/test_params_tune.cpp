// clattn-tune's library on the test device (PoCL in CI) with --quick shapes and a small
// time budget: valid JSON, picked up by params::lookup as Level::Tuned, wrong candidates
// rejected, malformed files ignored with a warning.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "backends/params/database.hpp"
#include "harness/harness.hpp"
#include "support/test_support.hpp"
#include "tools/tune/tuner.hpp"

namespace clattn {
namespace {

std::string temp_file(const std::string& tag) {
  return (std::filesystem::temp_directory_path() / ("clattn-tune-" + tag + "-" + std::to_string(::getpid()) + ".json"))
      .string();
}

bench::Harness harness() {
  bench::Harness h;
  h.ctx_ = std::make_unique<Context>(test::ctx());
  return h;
}

TEST(Tune, WritesJsonThatLookupReadsAsTuned) {
  auto h = harness();
  tune::Options opt;
  opt.ops = {"decode", "merge"};
  opt.quick = true;
  opt.time_budget_s = 12;
  opt.passes = 1;
  tune::Report rep = tune::run(h, opt, stderr);
  ASSERT_EQ(rep.ops.size(), 2u);
  for (auto& o : rep.ops) {
    EXPECT_TRUE(o.error.empty()) << o.op << ": " << o.error;
    EXPECT_TRUE(o.tuned.ok) << o.op;
    EXPECT_TRUE(o.generic.ok) << o.op;
    EXPECT_GE(o.tried, 2) << o.op;  // generic + vendor at least
    EXPECT_EQ(o.rejected_wrong, 0) << o.op << ": a parameter set the tuner tried computes a wrong result (stderr says which)";
  }
  const std::string file = temp_file("ok");
  tune::write_json(tune::to_json(rep), file);
  // Valid JSON in the documented shape.
  std::ifstream in(file);
  nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j.at("device"), test::ctx().profile().device_name);
  EXPECT_TRUE(j.contains("driver") && j.contains("date") && j.contains("platform"));
  const auto& dec = j.at("ops").at("decode").at("bf16");
  EXPECT_GT(dec.at("value").get<double>(), 0.0);
  EXPECT_EQ(dec.at("metric"), "GB/s");
  EXPECT_TRUE(dec.at("vendor_default").contains("value"));
  EXPECT_TRUE(dec.at("generic").contains("params"));
  // The runtime's lookup picks it up at Level::Tuned with the chosen values.
  DeviceProfile p = test::ctx().profile();
  p.vendor_forced.clear();
  setenv("CLATTN_TUNED_FILE", file.c_str(), 1);
  for (auto& o : rep.ops) {
    params::Entry e = params::lookup(p, o.op, o.key);
    EXPECT_EQ(e.level, params::Level::Tuned) << o.op;
    EXPECT_EQ(e.source, "tuned:" + file) << o.op;
    for (auto& [k, v] : o.tuned.params) EXPECT_EQ(e.get(k), v) << o.op << " " << k;
  }
  // The round trip used by --from / --emit-rows keeps the figures.
  tune::Report back = tune::from_json(j);
  ASSERT_EQ(back.ops.size(), 2u);
  EXPECT_NE(tune::emit_rows(back).find("Level::Device, \"" + p.device_name + "\""), std::string::npos);
  EXPECT_NE(tune::table(back).find("vendor default"), std::string::npos);
  unsetenv("CLATTN_TUNED_FILE");
  std::filesystem::remove(file);
}

TEST(Tune, WrongCandidateIsRejected) {
  auto h = harness();
  tune::Options opt;
  opt.ops = {"merge"};
  opt.quick = true;
  opt.passes = 1;
  // A "fast" candidate that computes garbage: its output is corrupted through the hook.
  opt.extra["merge"] = {{{"MERGE_WG", 32}}};
  opt.corrupt_output = [](const std::string&, const tune::Params& p, std::vector<float>& out) {
    if (p.at("MERGE_WG") == 32 && !out.empty()) out[out.size() / 2] += 1.0f;
  };
  tune::Report rep = tune::run(h, opt, stderr);
  ASSERT_EQ(rep.ops.size(), 1u);
  const auto& o = rep.ops[0];
  EXPECT_GE(o.rejected_wrong, 1);
  EXPECT_TRUE(o.tuned.ok);
  EXPECT_NE(o.tuned.params.at("MERGE_WG"), 32);
  // The process-wide override the merge candidates used is gone afterwards.
  EXPECT_NE(params::lookup(test::ctx().profile(), "merge").source, "override");
}

TEST(Tune, MalformedTunedFileIsIgnored) {
  DeviceProfile p = test::ctx().profile();
  p.vendor_forced.clear();
  const std::string file = temp_file("bad");
  std::ofstream(file) << R"({"device": ")" << p.device_name << R"(", "ops": {"decode": {"bf16": {"params": {"WG": )";
  setenv("CLATTN_TUNED_FILE", file.c_str(), 1);
  std::string used;
  EXPECT_TRUE(params::tuned_rows(p, &used).empty());  // logged as a warning, not fatal
  EXPECT_EQ(used, file);
  params::Entry e;
  EXPECT_NO_THROW(e = params::lookup(p, "decode", "bf16"));
  EXPECT_NE(e.level, params::Level::Tuned);
  // A non-integer parameter is malformed too.
  std::ofstream(file) << R"({"device": ")" << p.device_name
                      << R"(", "ops": {"merge": {"*": {"params": {"MERGE_WG": "wide"}}}}})";
  EXPECT_TRUE(params::tuned_rows(p).empty());
  unsetenv("CLATTN_TUNED_FILE");
  std::filesystem::remove(file);
}

TEST(Tune, WritesItsFilePrivatelyAndAtomically) {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("clattn-tune-write-" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  fs::permissions(root, fs::perms::owner_all, fs::perm_options::replace);
  auto mode = [](const fs::path& p) {
    struct stat st {};
    return ::lstat(p.c_str(), &st) == 0 ? unsigned(st.st_mode & 07777) : 0u;
  };
  const nlohmann::json j = {{"device", "x"}, {"ops", nlohmann::json::object()}};
  // --out FILE: missing parents created 0700, the file 0600.
  const fs::path named = root / "a" / "b" / "tuned.json";
  tune::write_json(j, named.string());
  EXPECT_EQ(mode(named), 0600u);
  EXPECT_EQ(mode(root / "a"), 0700u);
  EXPECT_EQ(mode(root / "a" / "b"), 0700u);
  // A symlink planted at the name is replaced, never written through.
  const fs::path victim = root / "victim";
  std::ofstream(victim) << "keep";
  fs::remove(named);
  fs::create_symlink(victim, named);
  tune::write_json(j, named.string());
  EXPECT_FALSE(fs::is_symlink(named));
  EXPECT_EQ(std::ifstream(victim).rdbuf()->sgetc(), 'k');
  // The default location: <cache>/tuned/ private, and what is written there is read back.
  params::TunedLocation at{(root / "cache" / "tuned" / "dev.json").string(), false, (root / "cache").string(), "dev.json"};
  tune::write_json(j, at);
  EXPECT_EQ(mode(root / "cache" / "tuned"), 0700u);
  EXPECT_EQ(mode(root / "cache" / "tuned" / "dev.json"), 0600u);
  auto back = params::read_tuned_text(at);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(nlohmann::json::parse(*back), j);
  fs::remove_all(root);
}

TEST(Tune, UnknownOpIsAnError) {
  auto h = harness();
  tune::Options opt;
  opt.ops = {"no_such_op"};
  EXPECT_TRUE(test::throws_error([&] { tune::run(h, opt, stderr); }, Status::InvalidArgument, "no_such_op"));
}

}  // namespace
}  // namespace clattn

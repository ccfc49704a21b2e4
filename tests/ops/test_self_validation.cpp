// Self-validation of variants never run on hardware of their kind (dispatch/self_validation.hpp),
// through the extend op on the device at hand. The ctest runs it under
// CLATTN_FORCE_VENDOR=amd with CLATTN_EMULATE=amd_wmma (the kernel's emulation header on
// PoCL). Each test points CLATTN_CACHE_DIR at a fresh directory before making its contexts.
//  - amd_wmma passes its check, the plan uses it, and the verdict is cached: the same context
//    and a second one (through <key>.verdict) reuse it without checking again.
//  - A deliberately wrong candidate (the generic kernel built for f16 KV, planned over bf16
//    KV, listed as needing validation) is rejected with a warning naming it, the device and
//    the error; the plan falls back to the generic kernel, whose output the run returns; the
//    cached verdict is "fail" and a second context reuses it. A verdict file group or others
//    may write, or one that does not parse, is not trusted: the check runs again.
//  - With the disk cache off, verdicts live in the context only.
#include <spdlog/sinks/ostream_sink.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "backends/ops/extend/check.hpp"
#include "backends/dispatch/self_validation.hpp"
#include "backends/params/variants.hpp"
#include "runtime/context_impl.hpp"
#include "runtime/kernel_sources.hpp"
#include "runtime/log.hpp"
#include "support/test_support.hpp"

using namespace clattn;
namespace fs = std::filesystem;

namespace {

// A fresh cache directory for this test ("off" disables the cache), restored after.
class SelfValidation : public ::testing::Test {
 protected:
  void use_cache(const std::string& name) {
    const char* old = std::getenv("CLATTN_CACHE_DIR");
    saved_ = old ? old : "";
    had_ = old != nullptr;
    if (name == "off") {
      setenv("CLATTN_CACHE_DIR", "off", 1);
      return;
    }
    dir_ = fs::temp_directory_path() / ("clattn-selfval-" + name + "-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    setenv("CLATTN_CACHE_DIR", dir_.c_str(), 1);
  }
  void TearDown() override {
    ops::set_extend_test_candidate(std::nullopt);
    if (had_) setenv("CLATTN_CACHE_DIR", saved_.c_str(), 1);
    else unsetenv("CLATTN_CACHE_DIR");
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  fs::path dir_;
  std::string saved_;
  bool had_ = false;
};

// A tiny paged bf16 case: 2 requests (4 new tokens after 5 cached, 3 after 12), Hkv 1, group 2.
struct Case {
  static constexpr int D = 64, P = 16, Hkv = 1, Hq = 2;
  PagedCsr csr;
  PagedKV cache;
  Case() {
    csr.page_size = P, csr.qo_indptr = {0, 4, 7}, csr.kv_indptr = {0, 1, 2}, csr.kv_indices = {1, 0};
    csr.kv_last_page_len = {9, 15};
    cache.num_pages = 2, cache.page_size = P, cache.num_kv_heads = Hkv, cache.head_dim = D, cache.dtype = DType::BF16;
  }
  ExtendOptions options(const std::string& variant = "") const {
    ExtendOptions o;
    o.num_qo_heads = Hq, o.q_dtype = DType::BF16, o.o_dtype = DType::F32, o.variant = variant;
    return o;
  }
  // Runs `plan` on fixed random data; o as f32.
  std::vector<float> run(const Context& ctx, const ExtendPlan& plan) const {
    test::Rng rng(7);
    const size_t kv = size_t(cache.required_bytes()) / 2, T = 7;
    auto up = [&](const std::vector<uint8_t>& bytes) {
      DeviceBuffer b(ctx, bytes.size());
      b.write(ctx, bytes.data(), bytes.size());
      return b;
    };
    DeviceBuffer q = up(test::pack(rng.vec(T * Hq * D), DType::BF16));
    DeviceBuffer k = up(test::pack(rng.vec(kv), DType::BF16)), v = up(test::pack(rng.vec(kv), DType::BF16));
    std::vector<uint8_t> ids(csr.kv_indices.size() * 4);
    std::memcpy(ids.data(), csr.kv_indices.data(), ids.size());
    DeviceBuffer pid = up(ids), o(ctx, T * Hq * D * 4);
    ExtendBuffers b;
    b.q = q.get(), b.k = k.get(), b.v = v.get(), b.page_ids = pid.get(), b.o = o.get();
    extend_run(ctx, plan, b);
    std::vector<float> out(T * Hq * D);
    o.read(ctx, out.data(), out.size() * 4);
    return out;
  }
};

// The verdict file of a record, "" when absent.
std::string verdict_file(const fs::path& dir, const Context& ctx, const ops::VerdictRecord& r) {
  const std::string key = rt::impl(ctx).programs.key(rt::kernel_source(r.file), r.options);
  std::ifstream in(dir / (key + ".verdict"));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

const ops::VerdictRecord* find(const ops::VerdictLog& log, const std::string& variant) {
  for (const auto& r : log.records())
    if (r.variant == variant) return &r;
  return nullptr;
}

// Warnings of the library's logger while it lives.
struct Captured {
  std::ostringstream text;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(text);
  Captured() { rt::log().sinks().push_back(sink); }
  ~Captured() {
    auto& s = rt::log().sinks();
    s.erase(std::remove(s.begin(), s.end(), sink), s.end());
  }
};

}  // namespace

TEST_F(SelfValidation, AmdWmmaPassesAndTheVerdictIsCached) {
  if (!params::variant_available(test::ctx().profile(), "amd_wmma"))
    GTEST_SKIP() << "amd_wmma unavailable here (run with CLATTN_EMULATE=amd_wmma)";
  use_cache("wmma");
  const Case cs;
  const int runs = ops::self_validations_run();
  Context a = Context::create();
  {
    ops::VerdictLog log;
    ExtendPlan plan = extend_plan(a, cs.csr, cs.cache, cs.options("amd_wmma"));
    EXPECT_EQ(plan.variant, "amd_wmma");
    EXPECT_EQ(ops::self_validations_run(), runs + 1);
    ASSERT_NE(find(log, "amd_wmma"), nullptr);
    const ops::VerdictRecord rec = *find(log, "amd_wmma"), *r = &rec;
    EXPECT_TRUE(r->verdict.pass) << ops::describe(r->verdict);
    EXPECT_EQ(r->verdict.origin, "ran");
    EXPECT_LT(r->verdict.max_error, r->verdict.tolerance);
    EXPECT_EQ(verdict_file(dir_, a, *r).rfind("pass ", 0), 0u) << verdict_file(dir_, a, *r);
    // The plan's output: the check left nothing behind, and the variant agrees with generic.
    const std::vector<float> got = cs.run(a, plan);
    const std::vector<float> want = cs.run(a, extend_plan(a, cs.csr, cs.cache, cs.options("generic")));
    EXPECT_LE(ops::max_abs_diff(got, want), 3e-2);
  }
  {
    ops::VerdictLog log;  // same context: from memory
    EXPECT_EQ(extend_plan(a, cs.csr, cs.cache, cs.options("amd_wmma")).variant, "amd_wmma");
    ASSERT_NE(find(log, "amd_wmma"), nullptr);
    EXPECT_EQ(find(log, "amd_wmma")->verdict.origin, "memory");
  }
  Context b = Context::create();
  {
    ops::VerdictLog log;  // another context: from the disk, not checked again
    EXPECT_EQ(extend_plan(b, cs.csr, cs.cache, cs.options("amd_wmma")).variant, "amd_wmma");
    ASSERT_NE(find(log, "amd_wmma"), nullptr);
    EXPECT_EQ(find(log, "amd_wmma")->verdict.origin, "disk");
    EXPECT_EQ(ops::describe(find(log, "amd_wmma")->verdict).find("pass"), 0u);
  }
  EXPECT_EQ(ops::self_validations_run(), runs + 1);
}

TEST_F(SelfValidation, AWrongVariantIsRejectedAndTheAnswerStaysRight) {
  use_cache("wrong");
  params::add_self_validation_for_testing("test_wrong_kv_dt");
  ops::set_extend_test_candidate(ops::ExtendTestCandidate{"test_wrong_kv_dt", "KV_DT", std::to_string(int(DType::F16))});
  const Case cs;
  const int runs = ops::self_validations_run();
  Context a = Context::create();
  Captured warn;
  ops::VerdictLog log;
  ExtendPlan plan = extend_plan(a, cs.csr, cs.cache, cs.options());
  EXPECT_EQ(plan.variant, "generic");
  EXPECT_EQ(ops::self_validations_run(), runs + 1);
  ASSERT_NE(find(log, "test_wrong_kv_dt"), nullptr);
  const ops::VerdictRecord rec = *find(log, "test_wrong_kv_dt"), *r = &rec;
  EXPECT_FALSE(r->verdict.pass);
  EXPECT_GT(r->verdict.max_error, r->verdict.tolerance) << ops::describe(r->verdict);
  EXPECT_EQ(r->options.find("-DKV_DT=" + std::to_string(int(DType::F16))) != std::string::npos, true) << r->options;
  const std::string w = warn.text.str();
  EXPECT_NE(w.find("variant test_wrong_kv_dt failed self-validation on " + a.profile().device_name), std::string::npos)
      << w;
  EXPECT_NE(w.find("max error"), std::string::npos) << w;
  EXPECT_EQ(verdict_file(dir_, a, *r).rfind("fail ", 0), 0u) << verdict_file(dir_, a, *r);

  // The answer is the generic kernel's.
  const std::vector<float> got = cs.run(a, plan);
  const std::vector<float> want = cs.run(a, extend_plan(a, cs.csr, cs.cache, cs.options("generic")));
  EXPECT_EQ(ops::max_abs_diff(got, want), 0.0);

  // A second context takes the cached verdict (and warns once).
  Context b = Context::create();
  ops::VerdictLog log2;
  EXPECT_EQ(extend_plan(b, cs.csr, cs.cache, cs.options()).variant, "generic");
  ASSERT_NE(find(log2, "test_wrong_kv_dt"), nullptr);
  EXPECT_EQ(find(log2, "test_wrong_kv_dt")->verdict.origin, "disk");
  EXPECT_EQ(ops::self_validations_run(), runs + 1);

  // A verdict file others may write, or one that does not parse, is checked again.
  const std::string key = rt::impl(a).programs.key(rt::kernel_source(r->file), r->options);
  const fs::path file = dir_ / (key + ".verdict");
  ::chmod(file.c_str(), 0666);
  EXPECT_EQ(extend_plan(Context::create(), cs.csr, cs.cache, cs.options()).variant, "generic");
  EXPECT_EQ(ops::self_validations_run(), runs + 2);
  EXPECT_NE(warn.text.str().find("writable by group or others"), std::string::npos);
  std::ofstream(file, std::ios::trunc) << "pass maybe\n";
  ::chmod(file.c_str(), 0600);
  EXPECT_EQ(extend_plan(Context::create(), cs.csr, cs.cache, cs.options()).variant, "generic");
  EXPECT_EQ(ops::self_validations_run(), runs + 3);
}

TEST_F(SelfValidation, WithTheCacheOffVerdictsStayInTheContext) {
  use_cache("off");
  params::add_self_validation_for_testing("test_wrong_kv_dt");
  ops::set_extend_test_candidate(ops::ExtendTestCandidate{"test_wrong_kv_dt", "KV_DT", std::to_string(int(DType::F16))});
  const Case cs;
  const int runs = ops::self_validations_run();
  Context a = Context::create();
  EXPECT_FALSE(rt::impl(a).programs.disk().enabled());
  EXPECT_EQ(extend_plan(a, cs.csr, cs.cache, cs.options()).variant, "generic");
  EXPECT_EQ(extend_plan(a, cs.csr, cs.cache, cs.options()).variant, "generic");
  EXPECT_EQ(ops::self_validations_run(), runs + 1);
  EXPECT_EQ(extend_plan(Context::create(), cs.csr, cs.cache, cs.options()).variant, "generic");
  EXPECT_EQ(ops::self_validations_run(), runs + 2);
}

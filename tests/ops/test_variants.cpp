// The variant registry against the driver: the host's local-memory estimate of each chosen
// kernel (a pre-filter for parameter choices) equals what the driver reports for the
// compiled kernel (CL_KERNEL_LOCAL_MEM_SIZE). Asserted on CPU devices (PoCL reports the
// kernel's __local arrays exactly); on GPUs the figures are printed (drivers may add their
// own reservations). MLA: the vendor rows' choice, then both portable kernels by name (tiled,
// also with a tile of other proportions, and generic), for bf16, fp8, f32 and int8 latents.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include <clattn/clattn.hpp>

#include "backends/dispatch/variant.hpp"
#include "support/test_support.hpp"

namespace clattn {
namespace {

using test::ctx;

PagedCsr csr(bool extend) {
  PagedCsr c;
  c.page_size = 16, c.kv_indptr = {0, 3, 8}, c.kv_indices = {0, 1, 2, 3, 4, 5, 6, 7}, c.kv_last_page_len = {5, 16};
  if (extend) c.qo_indptr = {0, 4, 9};
  return c;
}

void expect_estimates_match(const char* what) {
  const auto recs = ops::recent_builds();
  ASSERT_FALSE(recs.empty()) << what;
  const auto& r = recs.back();
  std::printf("%s: %s %s estimate %llu, driver %llu bytes\n", what, r.op.c_str(), r.variant.c_str(),
              (unsigned long long)r.estimate, (unsigned long long)r.driver);
  if (ctx().profile().is_cpu && r.estimate) EXPECT_EQ(r.estimate, r.driver) << what << " (" << r.variant << ")";
}

TEST(Variants, LocalMemoryEstimatesMatchTheDriver) {
  for (int head_dim : {64, 128, 256}) {
    for (DType kv : {DType::F32, DType::BF16, DType::FP8_E4M3}) {
      PagedKV cache;
      cache.num_pages = 8, cache.page_size = 16, cache.num_kv_heads = 2, cache.head_dim = head_dim, cache.dtype = kv;
      for (int split : {0, 16}) {
        DecodeOptions o;
        o.num_qo_heads = 8, o.deterministic = split > 0, o.split_tokens = split;
        decode_plan(ctx(), csr(false), cache, o);
        expect_estimates_match("decode");
      }
    }
  }
  for (int head_dim : {64, 128, 256}) {
    for (DType kv : {DType::BF16, DType::I8}) {  // (int8: the generic kernel's row-scale arrays)
      PagedKV cache;
      cache.num_pages = 8, cache.page_size = 16, cache.num_kv_heads = 2, cache.head_dim = head_dim, cache.dtype = kv;
      ExtendOptions o;
      o.num_qo_heads = 4;
      extend_plan(ctx(), csr(true), cache, o);
      expect_estimates_match("extend");
    }
  }
  for (DType kv : {DType::BF16, DType::FP8_E4M3, DType::F32, DType::I8}) {
    MlaCache m;
    m.num_pages = 8, m.page_size = 16, m.dtype = kv;
    MlaOptions o;
    o.num_heads = 16, o.sm_scale = 0.1f;
    mla_decode_plan(ctx(), csr(false), m, o);
    expect_estimates_match("mla_decode");
    mla_extend_plan(ctx(), csr(true), m, o);
    expect_estimates_match("mla_extend");
    // The portable kernels by name, the tiled one also with a tile of other proportions (the
    // CPU variant uses no local memory: the driver's figure is not compared, the name is).
    const std::map<std::string, int> tiled = {{"MMA", 0}, {"CPU_KERNEL", 0}, {"TILED", 1}};
    const std::map<std::string, int> shaped = {{"MMA", 0}, {"CPU_KERNEL", 0}, {"TILED", 1}, {"KT", 16},
                                               {"MS", 2},  {"DS", 8},         {"QB", 32}};
    const std::map<std::string, int> generic = {{"MMA", 0}, {"CPU_KERNEL", 0}, {"TILED", 0}};
    const std::map<std::string, int> cpu = {{"MMA", 0}, {"CPU_KERNEL", 1}, {"TILED", 1}};
    for (const auto* params : {&tiled, &shaped, &generic, &cpu}) {
      o.params = *params;
      const char* want = params->at("CPU_KERNEL") ? "cpu" : params->at("TILED") ? "tiled" : "generic";
      for (bool extend : {false, true}) {
        MlaPlan plan = extend ? mla_extend_plan(ctx(), csr(true), m, o) : mla_decode_plan(ctx(), csr(false), m, o);
        EXPECT_EQ(plan.variant, want);
        expect_estimates_match(extend ? "mla_extend" : "mla_decode");
      }
    }
  }
}

}  // namespace
}  // namespace clattn

// A parameter override the op does not have (a typo in DecodeOptions::params and the like)
// is an InvalidArgument naming it, raised at plan time, for every op that takes overrides;
// the op's own names are accepted.
#include <gtest/gtest.h>

#include <clattn/clattn.hpp>

#include "support/test_support.hpp"

namespace clattn {
namespace {

using test::ctx;

PagedCsr csr(bool extend) {
  PagedCsr c;
  c.page_size = 16, c.kv_indptr = {0, 2}, c.kv_indices = {0, 1}, c.kv_last_page_len = {5};
  if (extend) c.qo_indptr = {0, 3};
  return c;
}

PagedKV cache() {
  PagedKV k;
  k.num_pages = 4, k.page_size = 16, k.num_kv_heads = 1, k.head_dim = 64, k.dtype = DType::F32;
  return k;
}

TEST(UnknownParams, DecodeAndExtendNameTheParameter) {
  DecodeOptions d;
  d.num_qo_heads = 4, d.q_dtype = d.o_dtype = DType::F32;
  d.params = {{"NOPE", 3}};
  EXPECT_TRUE(test::throws_error([&] { decode_plan(ctx(), csr(false), cache(), d); }, Status::InvalidArgument,
                                 "DecodeOptions::params: decode has no parameter 'NOPE'"));
  d.params = {{"UNROLL", 2}};
  EXPECT_NO_THROW(decode_plan(ctx(), csr(false), cache(), d));

  ExtendOptions e;
  e.num_qo_heads = 4, e.q_dtype = e.o_dtype = DType::F32;
  e.params = {{"NOPE", 3}};
  EXPECT_TRUE(test::throws_error([&] { extend_plan(ctx(), csr(true), cache(), e); }, Status::InvalidArgument,
                                 "ExtendOptions::params: extend has no parameter 'NOPE'"));
}

TEST(UnknownParams, MlaNamesTheParameter) {
  MlaCache m;
  m.num_pages = 4, m.page_size = 16, m.dtype = DType::BF16;
  MlaOptions o;
  o.num_heads = 16, o.sm_scale = 0.1f;
  o.params = {{"NOPE", 3}};
  EXPECT_TRUE(test::throws_error([&] { mla_decode_plan(ctx(), csr(false), m, o); }, Status::InvalidArgument,
                                 "MlaOptions::params: mla_decode has no parameter 'NOPE'"));
  EXPECT_TRUE(test::throws_error([&] { mla_extend_plan(ctx(), csr(true), m, o); }, Status::InvalidArgument,
                                 "MlaOptions::params: mla_extend has no parameter 'NOPE'"));
}

TEST(UnknownParams, LinearNamesTheParameter) {
  LinearConfig cfg;
  cfg.num_qk_heads = 1, cfg.num_v_heads = 1, cfg.head_dim_k = 64, cfg.head_dim_v = 64, cfg.dtype = DType::F32;
  cfg.params = {{"NOPE", 3}};
  LinearStatePool pool;
  LinearBatch batch;
  EXPECT_TRUE(test::throws_error([&] { gdn_decode(ctx(), cfg, LinearTensors{}, pool, batch); },
                                 Status::InvalidArgument, "LinearConfig::params: linear_decode/linear_prefill has no parameter 'NOPE'"));
}

}  // namespace
}  // namespace clattn

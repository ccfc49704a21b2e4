// Hostile shapes and plan data at the op entry points: sizes that would overflow are
// rejected with InvalidArgument before anything is enqueued (the caller's buffers keep
// their bytes), plans with absurd head counts finish planning (or are rejected) instead of
// looping or asking for gigabytes, and a forged plan vector is refused.
#include <gtest/gtest.h>

#include <clattn/clattn.hpp>
#include <climits>
#include <vector>

#include "support/test_support.hpp"

namespace clattn {
namespace {

using test::ctx;

PagedKV f32_cache(int num_pages) {
  PagedKV c;
  c.num_pages = num_pages, c.page_size = 16, c.num_kv_heads = 1, c.head_dim = 64, c.dtype = DType::F32;
  return c;
}

// A stride near 2^62 elements once wrapped the cache's byte size to 3840 bytes, so a
// 4096-byte buffer passed and the kernel wrote 256 bytes in front of it.
TEST(HostileShapes, AppendWithAWrappingStrideIsRejectedUntouched) {
  PagedKV c = f32_cache(2);
  c.stride_page = (int64_t(1) << 62) - 64;
  DeviceBuffer kc(ctx(), 4096), vc(ctx(), 4096), k(ctx(), 64 * 4), v(ctx(), 64 * 4);
  kc.fill_bytes(ctx(), 0x5a), vc.fill_bytes(ctx(), 0x5a);
  DeviceBuffer slots = test::upload(std::vector<int64_t>{16});
  AppendKVArgs a;
  a.k = k.get(), a.v = v.get(), a.src_dtype = DType::F32, a.slot_mapping = slots.get(), a.num_tokens = 1;
  a.k_cache = kc.get(), a.v_cache = vc.get(), a.cache = c;
  EXPECT_TRUE(test::throws_error([&] { append_kv(ctx(), a); }, Status::InvalidArgument, "overflows"));
  ctx().finish();
  for (const DeviceBuffer* b : {&kc, &vc})
    for (uint8_t x : test::download<uint8_t>(*b, 4096)) ASSERT_EQ(x, 0x5a);
}

TEST(HostileShapes, CacheGeometriesThatOverflowAreRejectedByEveryPlan) {
  PagedCsr csr;
  csr.page_size = 16, csr.kv_indptr = {0, 1}, csr.kv_indices = {0}, csr.kv_last_page_len = {4};
  for (int64_t stride : {(int64_t(1) << 62) - 64, INT64_MAX / 2}) {
    PagedKV c = f32_cache(2);
    c.stride_page = stride;
    DecodeOptions d;
    d.num_qo_heads = 1, d.q_dtype = d.o_dtype = DType::F32;
    EXPECT_TRUE(test::throws_error([&] { decode_plan(ctx(), csr, c, d); }, Status::InvalidArgument, "overflows"));
    // One page: the size never multiplies by the page stride, the stride in bytes still must fit.
    c.num_pages = 1;
    c.stride_page = INT64_MAX / 2;
    EXPECT_TRUE(test::throws_error([&] { decode_plan(ctx(), csr, c, d); }, Status::InvalidArgument, "overflows"));
    ExtendOptions e;
    e.num_qo_heads = 1, e.q_dtype = e.o_dtype = DType::F32;
    PagedCsr ecsr = csr;
    ecsr.qo_indptr = {0, 1};
    EXPECT_TRUE(test::throws_error([&] { extend_plan(ctx(), ecsr, c, e); }, Status::InvalidArgument, "overflows"));
  }
  MlaCache m;
  m.num_pages = 1, m.page_size = 16, m.stride_page = INT64_MAX;
  MlaOptions mo;
  mo.num_heads = 1, mo.sm_scale = 0.1f;
  EXPECT_TRUE(test::throws_error([&] { mla_decode_plan(ctx(), csr, m, mo); }, Status::InvalidArgument, "overflows"));
}

// num_qo_heads > 2^30 once made pow2_ceil overflow to 0 and loop forever.
TEST(HostileShapes, HugeHeadCountsFinishPlanning) {
  PagedCsr csr;
  csr.page_size = 16, csr.kv_indptr = {0, 1}, csr.kv_indices = {0}, csr.kv_last_page_len = {4};
  DecodeOptions d;
  d.num_qo_heads = (1 << 30) + 1, d.q_dtype = d.o_dtype = DType::F32;
  try {
    DecodePlan p = decode_plan(ctx(), csr, f32_cache(2), d);
    EXPECT_GT(p.tile.head_blocks, 0);  // a valid (huge) plan; its run checks the caller's buffers
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::InvalidArgument) << e.what();
  }
  // Extend: 3 query rows x 2^30 heads once asked for a 2 GiB work list before any limit.
  ExtendOptions e;
  e.num_qo_heads = 1 << 30, e.q_dtype = e.o_dtype = DType::F32;
  csr.qo_indptr = {0, 3};
  EXPECT_TRUE(test::throws_error([&] { extend_plan(ctx(), csr, f32_cache(2), e); }, Status::InvalidArgument,
                                 "packed rows"));
  // Two requests of 7 rows x 2^28 heads: each fits int32, the work list (over 2^24 items
  // for any tile of up to 128 rows) does not.
  e.num_qo_heads = 1 << 28;
  PagedCsr two;
  two.page_size = 16, two.kv_indptr = {0, 1, 2}, two.kv_indices = {0, 1}, two.kv_last_page_len = {8, 8};
  two.qo_indptr = {0, 7, 14};
  EXPECT_TRUE(test::throws_error([&] { extend_plan(ctx(), two, f32_cache(2), e); }, Status::InvalidArgument,
                                 "work items"));
}

// Indptr arrays whose differences overflow int32 (INT_MIN after a positive entry).
TEST(HostileShapes, IndptrDifferencesNeverWrap) {
  PagedCsr csr;
  csr.page_size = 16, csr.kv_indptr = {0, 1, INT_MIN}, csr.kv_indices = {0}, csr.kv_last_page_len = {4, 4};
  DecodeOptions d;
  d.num_qo_heads = 1, d.q_dtype = d.o_dtype = DType::F32, d.validate = false;
  EXPECT_TRUE(test::throws_error([&] { decode_plan(ctx(), csr, f32_cache(2), d); }, Status::InvalidArgument,
                                 "kv_indptr[2]"));
  csr.kv_indptr = {0, 1, 1};
  csr.qo_indptr = {0, 1, INT_MIN};
  ExtendOptions e;
  e.num_qo_heads = 1, e.q_dtype = e.o_dtype = DType::F32, e.validate = false;
  EXPECT_TRUE(test::throws_error([&] { extend_plan(ctx(), csr, f32_cache(2), e); }, Status::InvalidArgument,
                                 "qo_indptr[2]"));
  RaggedKV r;
  r.num_tokens = 8, r.num_kv_heads = 1, r.head_dim = 64, r.dtype = DType::F32;
  EXPECT_TRUE(test::throws_error([&] { prefill_plan(ctx(), {0, 1, 2}, {0, 19, INT_MIN}, r, e); },
                                 Status::InvalidArgument, "kv_indptr[2]"));
}

// A plan vector names every table index the kernels follow: a forged one is refused.
TEST(HostileShapes, ForgedDecodePlanVectorsAreRefused) {
  PagedCsr csr;
  csr.page_size = 16, csr.kv_indptr = {0, 2}, csr.kv_indices = {0, 1}, csr.kv_last_page_len = {4};
  DecodeOptions d;
  d.num_qo_heads = 2, d.q_dtype = d.o_dtype = DType::F32;
  const std::vector<int64_t> v = decode_plan(ctx(), csr, f32_cache(2), d).to_vector();
  ASSERT_NO_THROW(DecodePlan::from_vector(ctx(), v));
  // Every table word and header field, nudged far out of range, one at a time.
  for (size_t i = 2; i < v.size(); ++i) {
    for (int64_t bad : {int64_t(-100000), int64_t(1) << 40}) {
      std::vector<int64_t> w = v;
      w[i] = bad;
      try {
        DecodePlan p = DecodePlan::from_vector(ctx(), w);
        // Accepted: the field does not index anything (a scale, say); the plan is still sane.
        EXPECT_EQ(p.batch_size, 1) << "field " << i;
      } catch (const Error& e) {
        EXPECT_TRUE(e.status() == Status::InvalidArgument || e.status() == Status::Unsupported) << e.what();
      }
    }
  }
}

}  // namespace
}  // namespace clattn

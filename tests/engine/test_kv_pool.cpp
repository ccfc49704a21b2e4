// KVPool allocation limits: a pool larger than the device fails at creation (not at first
// use, which is where lazily-allocating platforms such as PoCL would fail), a buffer above
// CL_DEVICE_MAX_MEM_ALLOC_SIZE is refused, hostile geometries are rejected by checked
// arithmetic, and a new pool starts zeroed.
#include <gtest/gtest.h>

#include <climits>
#include <vector>

#include "support/test_support.hpp"

namespace clattn {
namespace {

using test::ctx;

LayerSpec mha(int id) {
  LayerSpec l;
  l.layer_id = id;
  l.kind = LayerKind::MHA;
  l.num_qo_heads = 8;
  l.num_kv_heads = 8;
  l.head_dim = 128;
  return l;
}

KVPoolConfig pages(int64_t n) {
  KVPoolConfig c;
  c.num_pages = int(n);
  c.page_size = 16;
  c.kv_dtype = DType::BF16;
  return c;
}

constexpr int64_t kPageBytes = 16 * 8 * 128 * 2;  // one page of K (or V) of mha()

std::vector<LayerSpec> mha_layers(int n) {
  std::vector<LayerSpec> v;
  for (int i = 0; i < n; ++i) v.push_back(mha(i));
  return v;
}

// 128 layers of 1.56 GiB buffers: each one is under the per-buffer limit of common devices,
// so only the total shows the pool cannot fit (PoCL accepted every buffer).
TEST(KVPoolLimits, FourHundredGiBFailsAtCreation) {
  const auto layers = mha_layers(128);
  const int64_t n = (int64_t(400) << 30) / (2 * 128 * kPageBytes);
  EXPECT_TRUE(test::throws_error([&] { KVPool(ctx(), pages(n), layers); }, Status::OutOfMemory,
                                 "num_pages = " + std::to_string(n)));
  EXPECT_TRUE(test::throws_error([&] { KVPool(ctx(), pages(n), layers); }, Status::OutOfMemory,
                                 "CL_DEVICE_GLOBAL_MEM_SIZE"));
}

TEST(KVPoolLimits, OneByteMoreThanGlobalMemoryFails) {
  const auto global = ctx().profile().global_mem_bytes;
  ASSERT_GT(global, 0u);
  // Four layers so that no single buffer is above the per-buffer limit on common devices.
  const int64_t n = int64_t(global / (8 * kPageBytes)) + 1;
  if (n > INT_MAX) GTEST_SKIP() << "global memory too large for an int page count";
  EXPECT_TRUE(test::throws_error([&] { KVPool(ctx(), pages(n), mha_layers(4)); }, Status::OutOfMemory,
                                 "CL_DEVICE_GLOBAL_MEM_SIZE"));
}

TEST(KVPoolLimits, BufferAboveMaxAllocFails) {
  const auto& p = ctx().profile();
  const int64_t n = int64_t(p.max_alloc_bytes / kPageBytes) + 1;  // K is one page over the limit
  if (uint64_t(2 * n * kPageBytes) > p.global_mem_bytes || n > INT_MAX)
    GTEST_SKIP() << "max allocation too close to global memory to separate the checks";
  EXPECT_TRUE(test::throws_error([&] { KVPool(ctx(), pages(n), {mha(0)}); }, Status::OutOfMemory,
                                 "layer 0 K cache ("));
  EXPECT_TRUE(test::throws_error([&] { KVPool(ctx(), pages(n), {mha(0)}); }, Status::OutOfMemory,
                                 "CL_DEVICE_MAX_MEM_ALLOC_SIZE"));
}

TEST(KVPoolLimits, OverflowingGeometryIsInvalid) {
  LayerSpec lin;
  lin.kind = LayerKind::Linear;
  lin.linear.num_qk_heads = 1;
  lin.linear.num_v_heads = INT_MAX;
  lin.linear.head_dim_k = INT_MAX;
  lin.linear.head_dim_v = INT_MAX;
  KVPoolConfig c;
  c.num_state_slots = 4;
  EXPECT_TRUE(test::throws_error([&] { KVPool(ctx(), c, {lin}); }, Status::InvalidArgument,
                                 "linear state slot bytes"));
  lin.linear.num_v_heads = -1;
  lin.linear.head_dim_k = -128;  // a positive product of negative sizes is still refused
  EXPECT_TRUE(test::throws_error([&] { KVPool(ctx(), c, {lin}); }, Status::InvalidArgument, "num_v_heads"));
  LayerSpec wide = mha(0);
  wide.head_dim = INT_MAX;
  EXPECT_TRUE(test::throws_error([&] { KVPool(ctx(), pages(INT_MAX), {wide}); }, Status::InvalidArgument,
                                 "paged cache size"));
}

// An int8 pool allocates each MHA layer's two scale caches beside the caches (zeroed, sized
// by PagedKV::scale_required_bytes, counted per page) and each MLA layer's one scale-pair
// cache (MlaCache::scale_required_bytes, in k_scale_cache); MLA layers refuse int4 by name.
TEST(KVPoolLimits, Int8PoolAllocatesScaleCaches) {
  KVPoolConfig c = pages(3);
  c.kv_dtype = DType::I8;
  c.scale_dtype = DType::F16;
  KVPool pool(ctx(), c, {mha(0)});
  const auto& L = pool.layer(0);
  const int64_t sb = L.kv.scale_required_bytes();
  EXPECT_EQ(sb, 3 * L.kv.page_size * L.kv.num_kv_heads * 2);
  EXPECT_EQ(pool.bytes_allocated(), 2 * L.kv.required_bytes() + 2 * sb);
  for (cl_mem m : {L.k_scale_cache, L.v_scale_cache}) {
    ASSERT_NE(m, nullptr);
    std::vector<uint8_t> b(size_t(sb), 0xff);
    ASSERT_EQ(clEnqueueReadBuffer(ctx().cl_queue(), m, CL_TRUE, 0, b.size(), b.data(), 0, nullptr, nullptr), CL_SUCCESS);
    for (size_t i = 0; i < b.size(); ++i) ASSERT_EQ(b[i], 0) << "byte " << i;
  }
  LayerSpec mla;
  mla.kind = LayerKind::MLA;
  mla.num_qo_heads = 16;
  KVPool mp(ctx(), c, {mla});
  const auto& M = mp.layer(0);
  const int64_t msb = M.latent.scale_required_bytes();
  EXPECT_EQ(msb, 3 * M.latent.page_size * 2 * 2);  // a (ckv, kpe) pair of f16 per token
  EXPECT_EQ(mp.bytes_allocated(), M.latent.ckv_required_bytes() + M.latent.kpe_required_bytes() + msb);
  ASSERT_NE(M.k_scale_cache, nullptr);
  EXPECT_EQ(M.v_scale_cache, nullptr);
  std::vector<uint8_t> b(size_t(msb), 0xff);
  ASSERT_EQ(clEnqueueReadBuffer(ctx().cl_queue(), M.k_scale_cache, CL_TRUE, 0, b.size(), b.data(), 0, nullptr, nullptr),
            CL_SUCCESS);
  for (size_t i = 0; i < b.size(); ++i) ASSERT_EQ(b[i], 0) << "byte " << i;
  c.kv_dtype = DType::I4;
  EXPECT_TRUE(test::throws_error([&] { KVPool(ctx(), c, {mla}); }, Status::Unsupported, "int4 with MLA layer 0"));
}

TEST(KVPoolLimits, NewPoolIsZeroedAndCountsItsBytes) {
  KVPool pool(ctx(), pages(3), {mha(0)});
  EXPECT_EQ(pool.bytes_allocated(), 3 * 2 * kPageBytes);
  std::vector<uint8_t> k(size_t(3 * kPageBytes), 0xff);
  ASSERT_EQ(clEnqueueReadBuffer(ctx().cl_queue(), pool.layer(0).k, CL_TRUE, 0, k.size(), k.data(), 0, nullptr,
                                nullptr),
            CL_SUCCESS);
  for (size_t i = 0; i < k.size(); ++i) ASSERT_EQ(k[i], 0) << "byte " << i;
}

}  // namespace
}  // namespace clattn

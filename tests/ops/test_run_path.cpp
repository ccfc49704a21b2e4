// The run path of every planned op allocates nothing on success: plans hold everything a
// run needs, checks are integer compares and messages are built only on failure. Counted
// through the global operator new of this test binary (the library's C++ allocations; the
// OpenCL driver's own are not the library's).
#include <gtest/gtest.h>

#include <atomic>
#include <clattn/clattn.hpp>
#include <cstdlib>
#include <new>
#include <vector>

#include "support/test_support.hpp"

namespace {
std::atomic<long> g_news{0};
}  // namespace

void* operator new(std::size_t n) {
  g_news.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace clattn {
namespace {

using test::ctx;

// Allocations made by `fn` called `n` times after one warm-up call.
template <class F>
long news_in(F&& fn, int n = 5) {
  fn();
  ctx().finish();
  const long before = g_news.load();
  for (int i = 0; i < n; ++i) fn();
  const long made = g_news.load() - before;
  ctx().finish();
  return made;
}

PagedCsr two_requests(bool extend) {
  PagedCsr c;
  c.page_size = 16, c.kv_indptr = {0, 3, 8}, c.kv_indices = {0, 1, 2, 3, 4, 5, 6, 7}, c.kv_last_page_len = {5, 16};
  if (extend) c.qo_indptr = {0, 4, 9};
  return c;
}

TEST(RunPath, DecodeSplitAndUnsplitAllocateNothing) {
  PagedKV cache;
  cache.num_pages = 8, cache.page_size = 16, cache.num_kv_heads = 2, cache.head_dim = 64;
  PagedCsr csr = two_requests(false);
  DeviceBuffer k(ctx(), size_t(cache.required_bytes())), v(ctx(), size_t(cache.required_bytes()));
  DeviceBuffer q(ctx(), 2 * 8 * 64 * 4), o(ctx(), 2 * 8 * 64 * 4), lse(ctx(), 2 * 8 * 4);
  DeviceBuffer ids = test::upload(csr.kv_indices);
  for (bool split : {false, true}) {
    DecodeOptions opt;
    opt.num_qo_heads = 8, opt.q_dtype = opt.o_dtype = DType::F32, opt.deterministic = split, opt.split_tokens = 16;
    const DecodePlan plan = decode_plan(ctx(), csr, cache, opt);
    DeviceBuffer ws(ctx(), size_t(std::max<int64_t>(16, plan.workspace_bytes)));
    DecodeBuffers b;
    b.q = q.get(), b.k_cache = k.get(), b.v_cache = v.get(), b.page_ids = ids.get(), b.o = o.get(), b.lse = lse.get();
    b.workspace = ws.get();
    EXPECT_EQ(news_in([&] { decode_run(ctx(), plan, b); }), 0) << (split ? "split" : "unsplit");
  }
}

TEST(RunPath, ExtendAndMlaAllocateNothing) {
  PagedKV cache;
  cache.num_pages = 8, cache.page_size = 16, cache.num_kv_heads = 2, cache.head_dim = 64, cache.dtype = DType::F16;
  PagedCsr csr = two_requests(true);
  ExtendOptions eo;
  eo.num_qo_heads = 4, eo.q_dtype = eo.o_dtype = DType::F16;
  const ExtendPlan ep = extend_plan(ctx(), csr, cache, eo);
  DeviceBuffer k(ctx(), size_t(cache.required_bytes())), v(ctx(), size_t(cache.required_bytes()));
  DeviceBuffer q(ctx(), 9 * 4 * 64 * 2), o(ctx(), 9 * 4 * 64 * 2), ids = test::upload(csr.kv_indices);
  DeviceBuffer ews(ctx(), size_t(std::max<int64_t>(16, ep.workspace_bytes)));
  ExtendBuffers eb;
  eb.q = q.get(), eb.k = k.get(), eb.v = v.get(), eb.page_ids = ids.get(), eb.o = o.get(), eb.workspace = ews.get();
  EXPECT_EQ(news_in([&] { extend_run(ctx(), ep, eb); }), 0) << "extend";

  MlaCache mc;
  mc.num_pages = 8, mc.page_size = 16;
  MlaOptions mo;
  mo.num_heads = 8, mo.q_dtype = mo.o_dtype = DType::F32, mo.sm_scale = 0.1f, mo.max_splits = 2;
  const MlaPlan mp = mla_decode_plan(ctx(), two_requests(false), mc, mo);
  DeviceBuffer ckv(ctx(), size_t(mc.ckv_required_bytes())), kpe(ctx(), size_t(mc.kpe_required_bytes()));
  DeviceBuffer qn(ctx(), 2 * 8 * kMlaCkvDim * 4), qp(ctx(), 2 * 8 * kMlaKpeDim * 4), mo_(ctx(), 2 * 8 * kMlaCkvDim * 4);
  DeviceBuffer mws(ctx(), size_t(std::max<int64_t>(16, mp.workspace_bytes)));
  MlaBuffers mb;
  mb.q_nope = qn.get(), mb.q_pe = qp.get(), mb.ckv = ckv.get(), mb.kpe = kpe.get(), mb.page_ids = ids.get();
  mb.o = mo_.get(), mb.workspace = mws.get();
  EXPECT_EQ(news_in([&] { mla_run(ctx(), mp, mb); }), 0) << "mla";
}

// DSA: the indexer (scores, then top-k) and sparse MLA decode (split, so with the merge).
TEST(RunPath, DsaIndexAndSparseMlaAllocateNothing) {
  PagedKV kc;
  kc.num_pages = 8, kc.page_size = 16, kc.num_kv_heads = 1, kc.head_dim = 64, kc.dtype = DType::BF16;
  const PagedCsr csr = two_requests(false);
  DsaIndexOptions io;
  io.num_index_heads = 4, io.topk = 16, io.q_dtype = DType::F32;
  const DsaIndexPlan ip = dsa_index_plan(ctx(), csr, kc, io);
  DeviceBuffer k(ctx(), size_t(kc.required_bytes())), q(ctx(), 2 * 4 * 64 * 4), w(ctx(), 2 * 4 * 4);
  DeviceBuffer idx(ctx(), 2 * 16 * 4), ids = test::upload(csr.kv_indices);
  DeviceBuffer iws(ctx(), size_t(ip.workspace_bytes));
  DsaIndexBuffers ib;
  ib.q = q.get(), ib.weights = w.get(), ib.k_cache = k.get(), ib.page_ids = ids.get(), ib.indices = idx.get();
  ib.workspace = iws.get();
  EXPECT_EQ(news_in([&] { dsa_index_run(ctx(), ip, ib); }), 0) << "dsa_index";

  MlaCache mc;
  mc.num_pages = 8, mc.page_size = 16;
  MlaOptions mo;
  mo.num_heads = 8, mo.q_dtype = mo.o_dtype = DType::F32, mo.sm_scale = 0.1f, mo.max_splits = 2;
  mo.params = {{"MIN_CHUNK", 4}, {"WGS_PER_CU", 1024}};
  const MlaPlan mp = mla_sparse_decode_plan(ctx(), csr, mc, mo, 16);
  DeviceBuffer ckv(ctx(), size_t(mc.ckv_required_bytes())), kpe(ctx(), size_t(mc.kpe_required_bytes()));
  DeviceBuffer qn(ctx(), 2 * 8 * kMlaCkvDim * 4), qp(ctx(), 2 * 8 * kMlaKpeDim * 4), mo_(ctx(), 2 * 8 * kMlaCkvDim * 4);
  DeviceBuffer mws(ctx(), size_t(std::max<int64_t>(16, mp.workspace_bytes)));
  MlaBuffers mb;
  mb.q_nope = qn.get(), mb.q_pe = qp.get(), mb.ckv = ckv.get(), mb.kpe = kpe.get(), mb.page_ids = ids.get();
  mb.o = mo_.get(), mb.workspace = mws.get();
  EXPECT_EQ(news_in([&] { mla_sparse_run(ctx(), mp, mb, idx.get()); }), 0) << "mla_sparse";
}

}  // namespace
}  // namespace clattn

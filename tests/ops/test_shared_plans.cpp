// One plan shared by threads that run it on their own queues at the same time (each with
// its own workspace and outputs): plans hold no per-run state, so every run gives the
// bits of a run made alone. Split decode with the fused merge (per-run counters), MLA
// decode split, and extend (nv_wgmma TMA maps on Hopper) are the plans that once kept
// per-run state.
#include <gtest/gtest.h>

#include <clattn/clattn.hpp>
#include <thread>
#include <vector>

#include "support/test_support.hpp"

namespace clattn {
namespace {

using test::ctx;

constexpr int kThreads = 4, kRuns = 60;

cl_command_queue new_queue() {
  cl_int err = CL_SUCCESS;
  cl_command_queue q = clCreateCommandQueueWithProperties(ctx().cl_ctx(), ctx().cl_device(), nullptr, &err);
  if (err != CL_SUCCESS) throw Error(Status::OpenCLError, "clCreateCommandQueueWithProperties failed", err);
  return q;
}

// One long request per slot of the batch, pages in order.
PagedCsr long_csr(int B, int pages, int P, bool extend) {
  PagedCsr c;
  c.page_size = P;
  c.kv_indptr = {0};
  for (int i = 0; i < B; ++i) {
    for (int p = 0; p < pages; ++p) c.kv_indices.push_back(i * pages + p);
    c.kv_indptr.push_back(int32_t(c.kv_indices.size()));
    c.kv_last_page_len.push_back(P - i % P);
  }
  if (extend) {
    c.qo_indptr = {0};
    for (int i = 0; i < B; ++i) c.qo_indptr.push_back(c.qo_indptr.back() + 24);
  }
  return c;
}

std::vector<uint8_t> random_bytes(size_t n, uint64_t salt, bool bf16) {
  test::Rng rng(salt);
  std::vector<uint8_t> b(n);
  if (bf16) {
    std::vector<double> v = rng.vec(n / 2);
    b = test::pack(v, DType::BF16);
  } else {
    for (auto& x : b) x = uint8_t(rng.uniform_int(0, 255));
  }
  return b;
}

// Per-run buffers of slot 0 (the run made alone) and of each thread.
struct Slots {
  std::vector<DeviceBuffer> out, ws;
  Slots(size_t out_bytes, int64_t ws_bytes) {
    for (int s = 0; s <= kThreads; ++s) {
      out.emplace_back(ctx(), out_bytes);
      ws.emplace_back(ctx(), size_t(std::max<int64_t>(16, ws_bytes)));
    }
  }
  std::vector<uint8_t> read(int s) const { return test::download<uint8_t>(out[size_t(s)], out[size_t(s)].bytes()); }
};

// Runs `run(queue, slot)` once alone, then kThreads x kRuns times concurrently on separate
// queues; `out(slot)` reads a slot's output. Every concurrent output must equal the first.
template <class Run, class Out>
void expect_shareable(Run run, Out out) {
  cl_command_queue q0 = new_queue();
  run(q0, 0);
  clFinish(q0);
  clReleaseCommandQueue(q0);
  const std::vector<uint8_t> want = out(0);
  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::thread> th;
  for (int t = 0; t < kThreads; ++t)
    th.emplace_back([&, t] {
      cl_command_queue q = new_queue();
      for (int r = 0; r < kRuns; ++r) {
        run(q, t + 1);
        clFinish(q);
        if (out(t + 1) != want) ++mismatches[size_t(t)];
      }
      clReleaseCommandQueue(q);
    });
  for (auto& x : th) x.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(mismatches[size_t(t)], 0) << "thread " << t;
}

TEST(SharedPlans, SplitDecodeOnManyQueues) {
  CLATTN_SEED_TRACE();
  const int B = 8, pages = 32, P = 16, Hq = 8, Hkv = 2, D = 64;
  PagedKV cache;
  cache.num_pages = B * pages, cache.page_size = P, cache.num_kv_heads = Hkv, cache.head_dim = D;
  PagedCsr csr = long_csr(B, pages, P, false);
  DecodeOptions o;
  o.num_qo_heads = Hq, o.q_dtype = o.o_dtype = DType::F32, o.deterministic = true, o.split_tokens = 64;
  const DecodePlan plan = decode_plan(ctx(), csr, cache, o);
  ASSERT_GT(plan.num_merges, 0);
  DeviceBuffer k(ctx(), size_t(cache.required_bytes())), v(ctx(), size_t(cache.required_bytes()));
  auto kb = random_bytes(k.bytes(), 1, true), vb = random_bytes(v.bytes(), 2, true);
  k.write(ctx(), kb.data(), kb.size()), v.write(ctx(), vb.data(), vb.size());
  std::vector<float> qf(size_t(B) * Hq * D);
  test::Rng r3(3);
  for (auto& x : qf) x = float(r3.uniform());
  DeviceBuffer ids = test::upload(csr.kv_indices), q = test::upload(qf);
  Slots sl(size_t(B) * Hq * D * 4, plan.workspace_bytes);
  expect_shareable(
      [&](cl_command_queue qu, int s) {
        DecodeBuffers b;
        b.q = q.get(), b.k_cache = k.get(), b.v_cache = v.get(), b.page_ids = ids.get(), b.o = sl.out[size_t(s)].get();
        b.workspace = sl.ws[size_t(s)].get();
        decode_run(ctx(), plan, b, Enqueue{qu, 0, nullptr, nullptr});
      },
      [&](int s) { return sl.read(s); });
}

TEST(SharedPlans, SplitMlaDecodeOnManyQueues) {
  CLATTN_SEED_TRACE();
  const int B = 2, pages = 16, P = 16, H = 16;
  MlaCache cache;
  cache.num_pages = B * pages, cache.page_size = P;
  PagedCsr csr = long_csr(B, pages, P, false);
  MlaOptions o;
  o.num_heads = H, o.q_dtype = o.o_dtype = DType::F32, o.sm_scale = 0.1f, o.max_splits = 4;
  const MlaPlan plan = mla_decode_plan(ctx(), csr, cache, o);
  DeviceBuffer ckv(ctx(), size_t(cache.ckv_required_bytes())), kpe(ctx(), size_t(cache.kpe_required_bytes()));
  auto cb = random_bytes(ckv.bytes(), 4, true), pb = random_bytes(kpe.bytes(), 5, true);
  ckv.write(ctx(), cb.data(), cb.size()), kpe.write(ctx(), pb.data(), pb.size());
  std::vector<float> qn(size_t(B) * H * kMlaCkvDim), qp(size_t(B) * H * kMlaKpeDim);
  test::Rng r6(6);
  for (auto& x : qn) x = float(r6.uniform());
  for (auto& x : qp) x = float(r6.uniform());
  DeviceBuffer qnb = test::upload(qn), qpb = test::upload(qp), ids = test::upload(csr.kv_indices);
  Slots sl(size_t(B) * H * kMlaCkvDim * 4, plan.workspace_bytes);
  expect_shareable(
      [&](cl_command_queue qu, int s) {
        MlaBuffers b;
        b.q_nope = qnb.get(), b.q_pe = qpb.get(), b.ckv = ckv.get(), b.kpe = kpe.get(), b.page_ids = ids.get();
        b.o = sl.out[size_t(s)].get(), b.workspace = sl.ws[size_t(s)].get();
        mla_run(ctx(), plan, b, Enqueue{qu, 0, nullptr, nullptr});
      },
      [&](int s) { return sl.read(s); });
}

TEST(SharedPlans, ExtendOnManyQueues) {
  CLATTN_SEED_TRACE();
  const int B = 2, pages = 8, P = 16, Hq = 4, Hkv = 2, D = 128;
  PagedKV cache;
  cache.num_pages = B * pages, cache.page_size = P, cache.num_kv_heads = Hkv, cache.head_dim = D;
  cache.dtype = DType::F16;
  PagedCsr csr = long_csr(B, pages, P, true);
  ExtendOptions o;
  o.num_qo_heads = Hq, o.q_dtype = o.o_dtype = DType::F16;
  const ExtendPlan plan = extend_plan(ctx(), csr, cache, o);
  DeviceBuffer k(ctx(), size_t(cache.required_bytes())), v(ctx(), size_t(cache.required_bytes()));
  auto kb = test::pack(test::Rng(7).vec(k.bytes() / 2), DType::F16), vb = test::pack(test::Rng(8).vec(v.bytes() / 2), DType::F16);
  k.write(ctx(), kb.data(), kb.size()), v.write(ctx(), vb.data(), vb.size());
  const size_t rows = size_t(plan.num_tokens) * Hq;
  auto qb = test::pack(test::Rng(9).vec(rows * D), DType::F16);
  DeviceBuffer q = test::upload(qb), ids = test::upload(csr.kv_indices);
  Slots sl(rows * D * 2, plan.workspace_bytes);
  expect_shareable(
      [&](cl_command_queue qu, int s) {
        ExtendBuffers b;
        b.q = q.get(), b.k = k.get(), b.v = v.get(), b.page_ids = ids.get(), b.o = sl.out[size_t(s)].get();
        b.workspace = sl.ws[size_t(s)].get();
        extend_run(ctx(), plan, b, Enqueue{qu, 0, nullptr, nullptr});
      },
      [&](int s) { return sl.read(s); });
}

}  // namespace
}  // namespace clattn

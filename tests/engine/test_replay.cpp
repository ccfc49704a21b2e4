// Capture and replay ("paged", "paged_table"): decode steps replayed per batch-size bucket
// against the normal path of the same backend kind on an identical pool, with the same
// inputs: the outputs and the caches must be the same bits, through bucket padding
// (bs < bucket), sequences growing across steps (past the split tile, so requests split and
// merge), requests finishing mid-bucket and new ones joining; with the command buffer
// (where the device has one) and without. The normal path is checked against the reference
// by test_backend; here its bits are the reference. Errors: bad configs and batches.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <numeric>

#include "clattn/backend.hpp"
#include "clattn/capture.hpp"
#include "served_checks.hpp"
#include "sim.hpp"
#include "support/test_support.hpp"

namespace clattn {
namespace {

using test::ctx;

constexpr int kHq = 4, kHkv = 2, kD = 64, kP = 8, kPool = 6, kMaxCtx = 160, kPages = 160;

std::vector<LayerSpec> layers() {
  std::vector<LayerSpec> l(3);
  for (int i = 0; i < 3; ++i) l[size_t(i)].layer_id = i, l[size_t(i)].num_qo_heads = kHq, l[size_t(i)].num_kv_heads = kHkv,
                               l[size_t(i)].head_dim = kD;
  l[0].apply_rope = true, l[0].rope.rotary_dim = 32, l[0].rope.theta = 500.0f;  // positions from the refresh
  l[1].window_left = 21, l[1].logits_soft_cap = 30.0f;                           // a plan of its own
  return l;
}

// One side of the comparison: a pool, a backend and per-layer buffers of `rows` rows.
struct Side {
  KVPool pool;
  std::unique_ptr<AttentionBackend> be;
  std::vector<DeviceBuffer> q, k, v, o;
  Side(const std::string& name, DType kv, int rows, BackendConfig bc) {
    KVPoolConfig pc;
    pc.num_pages = kPages, pc.page_size = kP, pc.kv_dtype = kv;
    pool = KVPool(ctx(), pc, bc.layers);
    be = create_backend(name, ctx(), pool, bc);
    for (size_t i = 0; i < bc.layers.size(); ++i) {
      q.emplace_back(ctx(), size_t(rows) * kHq * kD * 4), o.emplace_back(ctx(), size_t(rows) * kHq * kD * 4);
      k.emplace_back(ctx(), size_t(rows) * kHkv * kD * 4), v.emplace_back(ctx(), size_t(rows) * kHkv * kD * 4);
    }
  }
  LayerIO io(size_t li) {
    LayerIO x;
    x.q = q[li].get(), x.k = k[li].get(), x.v = v[li].get(), x.o = o[li].get();
    return x;
  }
};

std::vector<float> f32(const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); }

struct Req {
  int row, len, stop;  // pool row, tokens cached, finish after this many
};

// An engine's own kernel between layers 0 and 1 (a "projection": q of layer 1 = o of layer 0
// / 2), enqueued by the normal path and recorded with capture_kernel into the step.
struct Projection {
  cl_program prog = nullptr;
  cl_kernel k = nullptr;
  Projection() {
    const char* src =
        "__kernel void proj(__global const float* o, __global float* q, int n) {"
        "  const int i = get_global_id(0); if (i < n) q[i] = 0.5f * o[i]; }";
    cl_int err = CL_SUCCESS;
    const cl_device_id dev = ctx().cl_device();
    prog = clCreateProgramWithSource(ctx().cl_ctx(), 1, &src, nullptr, &err);
    EXPECT_EQ(err, CL_SUCCESS);
    EXPECT_EQ(clBuildProgram(prog, 1, &dev, "", nullptr, nullptr), CL_SUCCESS);
    k = clCreateKernel(prog, "proj", &err);
    EXPECT_EQ(err, CL_SUCCESS);
  }
  ~Projection() {
    clReleaseKernel(k);
    clReleaseProgram(prog);
  }
  // Sets the arguments and enqueues on the context's queue, or records into its capture.
  void run(cl_mem o, cl_mem q, int rows, bool record) {
    const cl_int n = rows * kHq * kD;
    clSetKernelArg(k, 0, sizeof o, &o), clSetKernelArg(k, 1, sizeof q, &q), clSetKernelArg(k, 2, sizeof n, &n);
    const size_t g = (size_t(n) + 63) / 64 * 64, l = 64;
    if (record)
      capture_kernel(ctx().cl_queue(), k, 1, &g, &l);
    else
      ASSERT_EQ(clEnqueueNDRangeKernel(ctx().cl_queue(), k, 1, nullptr, &g, &l, 0, nullptr, nullptr), CL_SUCCESS);
  }
};

void serve(const std::string& name, DType kv, bool command_buffer, bool projection = false) {
  SCOPED_TRACE(name + " kv " + dtype_name(kv) + (command_buffer ? " command buffer" : " launches") +
               (projection ? " with an engine kernel" : ""));
  Projection proj;
  test::Rng rng(7);
  const int max_bs = 5;
  BackendConfig bc;
  bc.layers = layers();
  bc.act_dtype = DType::F32;
  bc.split_tokens = 32;  // requests past 32 keys split: merges are replayed too
  Side normal(name, kv, max_bs, bc), replayed(name, kv, max_bs, bc);
  const size_t L = bc.layers.size();

  // req_to_token: row r's token t at page (r * 26 + t / kP) scattered by a fixed permutation.
  std::vector<int32_t> r2t(size_t(kPool) * kMaxCtx);
  for (int r = 0; r < kPool; ++r)
    for (int t = 0; t < kMaxCtx; ++t) r2t[size_t(r) * kMaxCtx + t] = ((r * 26 + t / kP) * 37 % kPages) * kP + t % kP;
  DeviceBuffer r2t_dev = test::upload(r2t);

  ReplayConfig rc;
  rc.max_bs = max_bs, rc.buckets = {1, 2, 4, 5}, rc.req_to_token = r2t_dev.get(), rc.pool_size = kPool,
  rc.max_ctx = kMaxCtx, rc.command_buffer = command_buffer;
  normal.be->init_replay_state(rc);  // the normal path splits as replay does from here on
  replayed.be->init_replay_state(rc);
  for (int b : rc.buckets) {
    replayed.be->begin_capture(b);
    for (size_t li = 0; li < L; ++li) {
      if (projection && li == 1) proj.run(replayed.o[0].get(), replayed.q[1].get(), b, true);
      replayed.be->forward(int(li), replayed.io(li));
    }
    replayed.be->end_capture();
  }
  for (const auto& info : replayed.be->replay_buckets()) {
    std::printf("bucket %d: %d launches, %s%s\n", info.batch_size, info.launches,
                info.command_buffer ? "command buffer" : "launch by launch: ", info.fallback.c_str());
    EXPECT_GT(info.launches, 0) << "bucket " << info.batch_size;
    if (!command_buffer) EXPECT_FALSE(info.command_buffer);
  }

  // Requests: three start, one finishes at step 9 (mid-bucket), two join later; lengths grow
  // from a few keys past the 32-key split tile and the 22-key window.
  std::vector<Req> running = {{0, 0, 60}, {1, 3, 9}, {2, 10, 70}};
  std::vector<Req> joining = {{3, 0, 40}, {4, 20, 50}};
  int steps = 0, padded = 0;
  for (int step = 0; step < 60 && !running.empty(); ++step, ++steps) {
    if (step == 12 || step == 20) running.push_back(joining[step == 12 ? 0 : 1]);
    const int bs = int(running.size());
    if (replayed.be->replay_bucket(bs) > bs) ++padded;
    std::vector<int32_t> rpi(static_cast<size_t>(bs)), seq(static_cast<size_t>(bs));
    for (int i = 0; i < bs; ++i) rpi[size_t(i)] = running[size_t(i)].row, seq[size_t(i)] = running[size_t(i)].len + 1;
    for (size_t li = 0; li < L; ++li) {
      const auto qh = f32(rng.vec(size_t(bs) * kHq * kD)), kh = f32(rng.vec(size_t(bs) * kHkv * kD)),
                 vh = f32(rng.vec(size_t(bs) * kHkv * kD));
      for (Side* s : {&normal, &replayed}) {
        s->q[li].write(ctx(), qh.data(), qh.size() * 4);
        s->k[li].write(ctx(), kh.data(), kh.size() * 4);
        s->v[li].write(ctx(), vh.data(), vh.size() * 4);
      }
    }
    ForwardBatch fb;
    fb.mode = ForwardMode::Decode, fb.batch_size = bs, fb.req_to_token = r2t.data(), fb.pool_size = kPool,
    fb.max_ctx = kMaxCtx, fb.req_pool_indices = rpi.data(), fb.seq_lens = seq.data();
    normal.be->init_forward_metadata(fb);
    for (size_t li = 0; li < L; ++li) {
      if (projection && li == 1) proj.run(normal.o[0].get(), normal.q[1].get(), bs, false);
      normal.be->forward(int(li), normal.io(li));
    }
    replayed.be->replay(bs, rpi.data(), seq.data());
    ctx().finish();
    for (size_t li = 0; li < L; ++li) {
      const size_t n = size_t(bs) * kHq * kD;
      const auto a = test::download<float>(normal.o[li], n), b = test::download<float>(replayed.o[li], n);
      ASSERT_EQ(0, std::memcmp(a.data(), b.data(), n * 4)) << "step " << step << " layer " << li << " bs " << bs;
      const auto qa = test::download<float>(normal.q[li], n), qb = test::download<float>(replayed.q[li], n);
      ASSERT_EQ(0, std::memcmp(qa.data(), qb.data(), n * 4)) << "rotated q, step " << step << " layer " << li;
    }
    for (auto& r : running) ++r.len;
    running.erase(std::remove_if(running.begin(), running.end(), [](const Req& r) { return r.len >= r.stop; }),
                  running.end());
  }
  EXPECT_GT(padded, 0) << "no step ran in a padded bucket";
  EXPECT_GE(steps, 40);
  // The caches hold the same bits (appends at the refreshed slots, padded rows skipped).
  for (size_t li = 0; li < L; ++li) {
    const auto& la = normal.pool.layer(int(li)), &lb = replayed.pool.layer(int(li));
    const size_t bytes = size_t(la.kv.required_bytes());
    std::vector<uint8_t> a(bytes), b(bytes);
    for (auto [x, y] : {std::pair{la.k, lb.k}, std::pair{la.v, lb.v}}) {
      clEnqueueReadBuffer(ctx().cl_queue(), x, CL_TRUE, 0, bytes, a.data(), 0, nullptr, nullptr);
      clEnqueueReadBuffer(ctx().cl_queue(), y, CL_TRUE, 0, bytes, b.data(), 0, nullptr, nullptr);
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), bytes)) << "cache of layer " << li;
    }
  }
}

TEST(Replay, PagedBitIdentical) { serve("paged", DType::BF16, true); }
TEST(Replay, PagedTableWithoutCommandBuffer) { serve("paged_table", DType::BF16, false); }
TEST(Replay, Int8Cache) { serve("paged", DType::I8, true); }
TEST(Replay, EngineKernelBetweenLayers) { serve("paged", DType::BF16, true, true); }
TEST(Replay, EngineKernelBetweenLayersLaunches) { serve("paged_table", DType::F16, false, true); }

// Served models with every decode step replayed (continuous batching: batches grow, shrink
// and pad) and every layer of every step checked against the double-precision reference.
sim::Config served(const std::string& model) {
  sim::Config c;
  c.model = model, c.num_layers = 2, c.num_requests = 7, c.max_running = 5, c.system_prompt = 16;
  c.prompt_min = 1, c.prompt_max = 14, c.output_min = 4, c.output_max = 12, c.prefill_token_budget = 24;
  c.check_every = 1, c.check_all_layers = true, c.check_requests = 5, c.seed = test::seed();
  c.replay = true;
  return c;
}

void expect_replayed(const sim::Report& r) {
  test::expect_served_clean(r, 3);
  EXPECT_EQ(r.replayed_steps, r.decode_steps);
  EXPECT_EQ(r.steady_decode_allocations, 0u) << "replayed decode steps must not allocate device memory";
}

TEST(Replay, ServedTiny) {  // layer 1: window + soft cap
  CLATTN_SEED_TRACE();
  expect_replayed(sim::run(ctx(), served("tiny")));
}

TEST(Replay, ServedSinksWindowsTable) {  // gpt-oss: sinks, sliding/full alternating; page-table backend
  CLATTN_SEED_TRACE();
  auto c = served("gpt-oss");
  c.backend = "paged_table", c.act_dtype = DType::F32, c.kv_dtype = DType::F32;
  expect_replayed(sim::run(ctx(), c));
}

TEST(Replay, ServedInt4) {
  CLATTN_SEED_TRACE();
  auto c = served("tiny");
  c.kv_dtype = DType::I4, c.kv_quant_group = 32;
  expect_replayed(sim::run(ctx(), c));
}

TEST(Replay, Errors) {
  BackendConfig bc;
  bc.layers = layers();
  bc.act_dtype = DType::F32;
  Side s("paged", DType::BF16, 4, bc);
  DeviceBuffer r2t(ctx(), size_t(kPool) * kMaxCtx * 4);
  ReplayConfig rc;
  rc.max_bs = 4, rc.req_to_token = r2t.get(), rc.pool_size = kPool, rc.max_ctx = kMaxCtx;
  auto expect = [&](auto&& fn, const std::string& what) {
    try {
      fn();
      ADD_FAILURE() << "no error; wanted one naming " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect([&] { s.be->replay(1, nullptr, nullptr); }, "init_replay_state");
  ReplayConfig bad = rc;
  bad.max_ctx = kMaxCtx * 2;
  expect([&] { s.be->init_replay_state(bad); }, "req_to_token has");
  bad = rc, bad.buckets = {2, 1, 4};
  expect([&] { s.be->init_replay_state(bad); }, "buckets[1]");
  bad = rc, bad.buckets = {1, 2};
  expect([&] { s.be->init_replay_state(bad); }, "below max_bs");
  s.be->init_replay_state(rc);
  expect([&] { s.be->begin_capture(3); }, "not a bucket");
  expect([&] { s.be->replay(1, nullptr, nullptr); }, "was not captured");
  s.be->begin_capture(1);
  for (int li = 0; li < 3; ++li) s.be->forward(li, s.io(size_t(li)));
  s.be->end_capture();
  const int32_t rpi[2] = {0, kPool}, seq[2] = {5, 5}, seq0[1] = {0};
  expect([&] { s.be->replay(5, rpi, seq); }, "outside 1 .. max_bs");
  expect([&] { s.be->replay(1, rpi, seq0); }, "seq_lens[0]");
  // bucket 1 holds batch 1; a batch of 2 runs in bucket 2, which was not captured
  expect([&] { s.be->replay(2, rpi, seq); }, "bucket 2");
  EXPECT_EQ(s.be->replay_bucket(3), 4);
  EXPECT_EQ(s.be->replay_bucket(5), 0);
  // Other backends refuse replay with Unsupported.
  KVPoolConfig pc;
  pc.num_pages = 8, pc.page_size = kP, pc.num_state_slots = 2;
  LayerSpec lin;
  lin.kind = LayerKind::Linear, lin.linear.num_qk_heads = 1, lin.linear.num_v_heads = 1, lin.linear.head_dim_k = 64,
  lin.linear.head_dim_v = 64;
  BackendConfig lc;
  lc.layers = {lin};
  KVPool lp(ctx(), pc, lc.layers);
  auto be = create_backend("linear", ctx(), lp, lc);
  try {
    be->init_replay_state(rc);
    ADD_FAILURE() << "linear backend accepted replay";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::Unsupported) << e.what();
  }
}

}  // namespace
}  // namespace clattn

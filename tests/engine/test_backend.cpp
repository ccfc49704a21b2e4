// AttentionBackend tests: multi-layer random models served step by step (extend, mixed,
// decode; shared prefix pages; continuous batching) with every layer of every step checked
// against the double-precision reference; registry and batch errors; no allocations in
// steady-state decode steps.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "one_request.hpp"
#include "reference/rope_reference.hpp"
#include "served_checks.hpp"
#include "sim.hpp"
#include "support/test_support.hpp"

namespace clattn {
namespace {

using test::ctx;

sim::Config small(const std::string& model, int layers) {
  sim::Config c;
  c.model = model;
  c.num_layers = layers;
  c.num_requests = 6;
  c.max_running = 4;
  c.system_prompt = 16;
  c.prompt_min = 1, c.prompt_max = 14;
  c.output_min = 5, c.output_max = 10;
  c.prefill_token_budget = 24;
  c.check_every = 1;
  c.check_all_layers = true;
  c.check_requests = 4;
  c.seed = test::seed();
  return c;
}

void expect_clean(const sim::Report& r) {
  test::expect_served_clean(r, 3);
  EXPECT_EQ(r.steady_decode_allocations, 0u) << "steady-state decode steps must not allocate device memory";
}

TEST(Backend, PagedCsr) {
  CLATTN_SEED_TRACE();
  auto c = small("tiny", 3);  // layer 1: window + soft cap
  expect_clean(sim::run(ctx(), c));
}

TEST(Backend, PagedTableSeparateSteps) {
  CLATTN_SEED_TRACE();
  auto c = small("tiny", 2);
  c.backend = "paged_table";
  c.mixed = false;
  c.system_prompt = 0;  // no shared prefix: requests start from scratch
  expect_clean(sim::run(ctx(), c));
}

TEST(Backend, PagedFp8AndF16) {
  CLATTN_SEED_TRACE();
  auto c = small("tiny", 2);
  c.act_dtype = DType::F16;
  c.kv_dtype = DType::FP8_E4M3;
  c.page_size = 8;
  expect_clean(sim::run(ctx(), c));
}

TEST(Backend, SinksAndWindows) {  // gpt-oss head config: sinks, sliding/full alternating
  CLATTN_SEED_TRACE();
  auto c = small("gpt-oss", 2);
  c.act_dtype = DType::F32;
  c.kv_dtype = DType::F32;
  expect_clean(sim::run(ctx(), c));
}

TEST(Backend, HybridRoutesModesAndKinds) {  // Qwen3-Next: GDN layers + full attention, table decode
  CLATTN_SEED_TRACE();
  auto c = small("qwen3-next", 4);
  c.num_requests = 4, c.prompt_max = 8, c.output_max = 7;
  c.decode_backend = "paged_table";
  expect_clean(sim::run(ctx(), c));
}

TEST(Backend, Mla) {
  CLATTN_SEED_TRACE();
  auto c = small("deepseek-v3-tp8", 2);
  c.page_size = 16;
  expect_clean(sim::run(ctx(), c));
}

// Speculative-decoding tree verification through the backend: a 5-token prompt, then 3
// draft tokens as a tree (row 2 is a sibling of row 1, so it must not see key 6) in an
// extend step with a packed custom mask.
TEST(Backend, TreeMaskVerify) {
  CLATTN_SEED_TRACE();
  auto layers = sim::preset("tiny", 1).layers;
  const int Hq = 4, Hkv = 2, D = 64, P = 4, N = 8;
  KVPoolConfig pc;
  pc.num_pages = 4, pc.page_size = P, pc.kv_dtype = DType::F32;
  KVPool pool(ctx(), pc, layers);
  BackendConfig bc;
  bc.layers = layers;
  bc.act_dtype = DType::F32;
  auto be = create_backend("paged", ctx(), pool, bc);
  test::Rng rng(7);
  auto q = rng.vec(size_t(N) * Hq * D), k = rng.vec(size_t(N) * Hkv * D), v = rng.vec(size_t(N) * Hkv * D);
  auto f32 = [](const std::vector<double>& x, size_t from, size_t n) {
    return std::vector<float>(x.begin() + std::ptrdiff_t(from), x.begin() + std::ptrdiff_t(from + n));
  };
  std::vector<int32_t> r2t = test::two_page_slots(N, P);
  int32_t row = 0, seq = 5, prefix = 0, ext = 5;
  ForwardBatch fb;
  fb.mode = ForwardMode::Extend, fb.batch_size = 1, fb.req_to_token = r2t.data(), fb.pool_size = 1, fb.max_ctx = N;
  fb.req_pool_indices = &row, fb.seq_lens = &seq, fb.prefix_lens = &prefix, fb.extend_lens = &ext;
  auto run_step = [&](int from, int n, std::vector<double>& out) {
    auto qb = test::upload(f32(q, size_t(from) * Hq * D, size_t(n) * Hq * D));
    auto kb = test::upload(f32(k, size_t(from) * Hkv * D, size_t(n) * Hkv * D));
    auto vb = test::upload(f32(v, size_t(from) * Hkv * D, size_t(n) * Hkv * D));
    DeviceBuffer ob(ctx(), size_t(n) * Hq * D * 4);
    LayerIO io;
    io.q = qb.get(), io.k = kb.get(), io.v = vb.get(), io.o = ob.get();
    be->init_forward_metadata(fb);
    be->forward(0, io);
    auto o = test::download<float>(ob, size_t(n) * Hq * D);
    out.assign(o.begin(), o.end());
  };
  std::vector<double> got;
  run_step(0, 5, got);
  // Draft rows at positions 5, 6, 7: row 0 sees the prompt and itself, row 1 adds key 5,
  // row 2 (a sibling of row 1) sees keys 5 and 7 only among the drafts.
  std::vector<uint8_t> mask(3, 0);
  auto allow = [&](int r, int key) { const int bit = r * N + key; mask[size_t(bit / 8)] |= uint8_t(1u << (bit % 8)); };
  for (int r = 0; r < 3; ++r)
    for (int key = 0; key < 5; ++key) allow(r, key);
  allow(0, 5), allow(1, 5), allow(1, 6), allow(2, 5), allow(2, 7);
  const int32_t mask_indptr[2] = {0, 3};
  auto mb = test::upload(mask);
  seq = 8, prefix = 5, ext = 3;
  fb.mask_indptr = mask_indptr, fb.custom_mask = mb.get();
  run_step(5, 3, got);
  std::vector<double> want(size_t(3) * Hq * D);
  ref::AttnOptions o;
  o.sm_scale = 1.0 / std::sqrt(double(D));
  o.custom_mask = mask.data();
  ref::attention(q.data() + 5 * Hq * D, k.data(), v.data(), 3, N, Hq, Hkv, D, D, o, want.data(), nullptr);
  EXPECT_TRUE(test::all_close(got, want, 2e-5, 2e-5, "tree-masked extend"));
  // The mask changes row 2: without it, row 2 would also see key 6.
  ref::AttnOptions causal = o;
  causal.custom_mask = nullptr;
  std::vector<double> plain(want.size());
  ref::attention(q.data() + 5 * Hq * D, k.data(), v.data(), 3, N, Hq, Hkv, D, D, causal, plain.data(), nullptr);
  EXPECT_FALSE(test::all_close(got, plain, 2e-5, 2e-5, "unmasked"));
  // A mask in decode mode is rejected.
  fb.mode = ForwardMode::Decode, fb.prefix_lens = nullptr, fb.extend_lens = nullptr;
  EXPECT_TRUE(test::throws_error([&] { be->init_forward_metadata(fb); }, Status::InvalidArgument, "custom mask"));
}

// A layer with apply_rope: forward takes pre-RoPE q and k, rotates q in place and k into the
// cache at each token's position (extend of 5, then two decode steps), checked against the
// reference attention over rows rotated by the reference RoPE.
TEST(Backend, RopeInForward) {
  CLATTN_SEED_TRACE();
  auto layers = sim::preset("tiny", 1).layers;
  const int Hq = 4, Hkv = 2, D = 64, P = 4, N = 7;
  layers[0].num_qo_heads = Hq, layers[0].num_kv_heads = Hkv, layers[0].head_dim = D, layers[0].window_left = -1;
  layers[0].logits_soft_cap = 0.0f;
  layers[0].apply_rope = true;
  layers[0].rope.style = RopeStyle::NeoX, layers[0].rope.rotary_dim = 32, layers[0].rope.theta = 500.0f;
  KVPoolConfig pc;
  pc.num_pages = 4, pc.page_size = P, pc.kv_dtype = DType::F32;
  KVPool pool(ctx(), pc, layers);
  BackendConfig bc;
  bc.layers = layers;
  bc.act_dtype = DType::F32;
  auto be = create_backend("paged", ctx(), pool, bc);
  test::Rng rng(8);
  auto q = rng.vec(size_t(N) * Hq * D), k = rng.vec(size_t(N) * Hkv * D), v = rng.vec(size_t(N) * Hkv * D);
  for (auto* x : {&q, &k, &v}) *x = test::quantize(*x, DType::F32);
  auto qr = q, kr = k;  // rotated by the reference at positions 0 .. N-1
  for (int t = 0; t < N; ++t) {
    for (int h = 0; h < Hq; ++h) ref::rope_row(&qr[size_t((t * Hq + h) * D)], D, 32, false, t, 500.0, 1.0, nullptr);
    for (int h = 0; h < Hkv; ++h) ref::rope_row(&kr[size_t((t * Hkv + h) * D)], D, 32, false, t, 500.0, 1.0, nullptr);
  }
  test::OneRequest r{Hq, Hkv, D, P, q, k, v, qr, kr, v};
  r.q_in_place = true;
  test::extend_then_decode(*be, r, 5);
  // A bad rotary dim is rejected at creation, naming it.
  BackendConfig bad = bc;
  bad.layers[0].rope.rotary_dim = 65;
  EXPECT_TRUE(test::throws_error([&] { create_backend("paged", ctx(), pool, bad); }, Status::InvalidArgument, "rotary_dim"));
}

// ------------------------------------------------------------------ errors and registry
struct Tiny {
  std::vector<LayerSpec> layers;
  KVPool pool;
  Tiny() {
    layers = sim::preset("tiny", 1).layers;
    KVPoolConfig pc;
    pc.num_pages = 8;
    pc.page_size = 4;
    pool = KVPool(ctx(), pc, layers);
  }
  BackendConfig cfg() const {
    BackendConfig b;
    b.layers = layers;
    return b;
  }
};

TEST(BackendErrors, Registry) {
  Tiny t;
  EXPECT_TRUE(test::throws_error([&] { create_backend("flash", ctx(), t.pool, t.cfg()); }, Status::InvalidArgument,
                                 "unknown backend \"flash\""));
  auto lin = sim::preset("qwen3-next", 1).layers;  // layer 0 is Gated DeltaNet
  KVPoolConfig pc;
  pc.num_state_slots = 2;
  KVPool lp(ctx(), pc, lin);
  BackendConfig bc;
  bc.layers = lin;
  EXPECT_TRUE(test::throws_error([&] { create_backend("paged", ctx(), lp, bc); }, Status::InvalidArgument,
                                 "layer 0 (linear)"));
  auto mla = sim::preset("deepseek-v3-tp8", 1).layers;
  EXPECT_TRUE(test::throws_error([&] { create_backend("mla", ctx(), t.pool, BackendConfig{mla}); },
                                 Status::InvalidArgument, "the KVPool holds a mha layer"));
  KVPool mp(ctx(), KVPoolConfig{4, 16}, mla);
  mla[0].sm_scale = 0;
  EXPECT_TRUE(test::throws_error([&] { create_backend("mla", ctx(), mp, BackendConfig{mla}); },
                                 Status::InvalidArgument, "sm_scale"));
  auto bad = t.layers;
  bad[0].head_dim = 72;
  EXPECT_TRUE(test::throws_error([&] { create_backend("paged", ctx(), t.pool, BackendConfig{bad}); },
                                 Status::InvalidArgument, "head_dim 72"));
  BackendConfig hy = t.cfg();
  hy.decode_backend = "flash";
  EXPECT_TRUE(test::throws_error([&] { create_backend("hybrid", ctx(), t.pool, hy); }, Status::InvalidArgument,
                                 "decode_backend"));
  KVPool empty(KVPoolConfig{8, 4}, t.layers);  // engine-owned pool, buffers never set
  EXPECT_TRUE(test::throws_error([&] { create_backend("paged", ctx(), empty, t.cfg()); }, Status::InvalidArgument,
                                 "no buffers"));
  for (const auto& n : backend_names()) EXPECT_FALSE(n.empty());
}

TEST(BackendErrors, BatchAndForward) {
  Tiny t;
  auto b = create_backend("paged", ctx(), t.pool, t.cfg());
  const int Hq = 4, D = 64;
  DeviceBuffer q(ctx(), Hq * D * 2), kv(ctx(), 2 * D * 2), o(ctx(), Hq * D * 2);
  o.fill_bytes(ctx(), 0x5a);
  LayerIO io;
  io.q = q.get(), io.k = kv.get(), io.v = kv.get(), io.o = o.get();
  EXPECT_TRUE(test::throws_error([&] { b->forward(0, io); }, Status::InvalidArgument, "before a successful"));

  std::vector<int32_t> r2t(2 * 8, 0);
  for (int i = 0; i < 8; ++i) r2t[size_t(i)] = i;  // row 0: slots 0..7 (pages 0, 1)
  int32_t pool_idx = 0, seq = 3, ext = 3, pre = 0;
  ForwardBatch fb;
  fb.batch_size = 1, fb.req_to_token = r2t.data(), fb.pool_size = 2, fb.max_ctx = 8;
  fb.req_pool_indices = &pool_idx, fb.seq_lens = &seq;
  fb.extend_lens = &ext, fb.prefix_lens = &pre;  // extend fields in decode mode
  EXPECT_TRUE(test::throws_error([&] { b->init_forward_metadata(fb); }, Status::InvalidArgument, "decode mode"));
  fb.mode = ForwardMode::Extend;
  pool_idx = 5;
  EXPECT_TRUE(test::throws_error([&] { b->init_forward_metadata(fb); }, Status::InvalidArgument, "req_pool_indices[0]"));
  pool_idx = 0;
  ext = 2;  // prefix + extend != seq
  EXPECT_TRUE(test::throws_error([&] { b->init_forward_metadata(fb); }, Status::InvalidArgument, "[0]"));
  fb.mode = ForwardMode::Decode, fb.extend_lens = nullptr, fb.prefix_lens = nullptr;
  seq = 0;
  EXPECT_TRUE(test::throws_error([&] { b->init_forward_metadata(fb); }, Status::InvalidArgument, "seq_lens[0]"));
  seq = 3;
  b->init_forward_metadata(fb);
  EXPECT_TRUE(test::throws_error([&] { b->forward(7, io); }, Status::InvalidArgument, "layer_id 7"));
  LayerIO no_q = io;
  no_q.q = nullptr;
  EXPECT_TRUE(test::throws_error([&] { b->forward(0, no_q); }, Status::InvalidArgument, "LayerIO.q"));
  ctx().finish();
  auto after = test::download<uint8_t>(o, size_t(Hq) * D * 2);
  for (uint8_t x : after) ASSERT_EQ(x, 0x5a) << "a rejected call wrote the output";
}

}  // namespace
}  // namespace clattn

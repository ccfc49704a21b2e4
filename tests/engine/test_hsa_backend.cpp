// The "hsa" engine backend: an HSA layer's decode equals hsa_run on the same cache and
// metadata (and, with every candidate selected and the window covering the rest, dense
// decode); a dense layer equals the paged backend; the window merged by LSE equals the
// fused call; served models (HSA beside sliding and linear layers, both strategies) with
// every layer of every step checked against the sparse reference; config errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "served_checks.hpp"
#include "sim.hpp"
#include "sim_hsa.hpp"
#include "support/test_support.hpp"

namespace clattn {
namespace {

using test::ctx;

// ------------------------------------------------------------- served models (serve-sim)
sim::Config served(const std::string& model, int layers) {
  sim::Config c;
  c.model = model;
  c.num_layers = layers;
  c.num_requests = 5;
  c.max_running = 4;
  c.system_prompt = 16;
  c.prompt_min = 8, c.prompt_max = 30;
  c.output_min = 5, c.output_max = 9;
  c.prefill_token_budget = 48;
  c.check_every = 1;
  c.check_all_layers = true;
  c.check_requests = 4;
  c.hsa_topk = 2, c.hsa_window = 6;
  c.seed = test::seed();
  return c;
}

void expect_clean(const sim::Report& r) {
  test::expect_served_clean(r, 3);
  EXPECT_GT(r.hsa_read_bytes, 0.0);
  EXPECT_LT(r.hsa_read_bytes, r.hsa_dense_bytes) << "topk 2 of up to 12 candidate pages reads less than dense";
  EXPECT_EQ(r.steady_decode_allocations, 0u) << "steady-state decode steps must not allocate device memory";
}

TEST(HsaBackend, GroupFusedBesideSlidingLayer) {  // tiny: layer 1 slides (dense), layers 0 and 2 HSA
  CLATTN_SEED_TRACE();
  auto c = served("tiny", 3);
  auto r = sim::run(ctx(), c);
  EXPECT_EQ(r.backend, "hsa");
  EXPECT_EQ(r.hsa_layers, 2);
  expect_clean(r);
}

TEST(HsaBackend, HeadStrategyWindowMerged) {
  CLATTN_SEED_TRACE();
  auto c = served("tiny", 2);
  c.hsa_strategy = "head", c.hsa_no_fuse = true;
  c.act_dtype = c.kv_dtype = DType::F32;
  expect_clean(sim::run(ctx(), c));
}

TEST(HsaBackend, HybridDecodesFullLayersWithHsa) {  // Qwen3-Next: GDN layers + one full layer on hsa
  CLATTN_SEED_TRACE();
  auto c = served("qwen3-next", 4);
  c.page_size = 4, c.num_requests = 4;
  auto r = sim::run(ctx(), c);
  EXPECT_EQ(r.backend, "hybrid");
  EXPECT_EQ(r.hsa_layers, 1);
  expect_clean(r);
}

// ------------------------------------------------- one decode step against the ops
// Two GQA layers (one shape) over one pool; requests of 38 and 22 keys after the decode
// step, page size 4, so with window 6 the candidates end where the window starts.
struct Step {
  static constexpr int Hq = 8, Hkv = 2, D = 64, P = 4, Pages = 24, B = 2, MaxCtx = 40;
  std::vector<LayerSpec> layers;
  KVPool pool;
  std::vector<int32_t> r2t, rows{0, 1}, prompt{37, 21}, zero{0, 0}, seq{38, 22};
  std::vector<DeviceBuffer> q, k, v;  // per layer: decode-step rows
  Step() {
    for (int i = 0; i < 2; ++i) {
      LayerSpec l;
      l.layer_id = i, l.num_qo_heads = Hq, l.num_kv_heads = Hkv, l.head_dim = D;
      layers.push_back(l);
    }
    KVPoolConfig pc;
    pc.num_pages = Pages, pc.page_size = P, pc.kv_dtype = DType::F32;
    pool = KVPool(ctx(), pc, layers);
    test::Rng rng(41);
    std::vector<int32_t> perm(Pages);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng.gen);
    r2t.assign(size_t(B) * MaxCtx, 0);
    for (int b = 0, next = 0; b < B; ++b)
      for (int t = 0; t < seq[size_t(b)]; ++t) {
        if (t % P == 0) ++next;
        r2t[size_t(b) * MaxCtx + size_t(t)] = perm[size_t(next - 1)] * P + t % P;
      }
    auto rows_of = [&](int n, int w) {
      auto x = rng.vec(size_t(n) * w);
      return test::upload(std::vector<float>(x.begin(), x.end()));
    };
    // Prefill every layer through a paged backend, then keep the decode step's rows.
    BackendConfig bc;
    bc.layers = layers, bc.act_dtype = DType::F32;
    auto paged = create_backend("paged", ctx(), pool, bc);
    ForwardBatch fb = batch(ForwardMode::Extend);
    paged->init_forward_metadata(fb);
    const int T = prompt[0] + prompt[1];
    DeviceBuffer o(ctx(), size_t(T) * Hq * D * 4);
    for (int i = 0; i < 2; ++i) {
      auto pq = rows_of(T, Hq * D), pk = rows_of(T, Hkv * D), pv = rows_of(T, Hkv * D);
      LayerIO io;
      io.q = pq.get(), io.k = pk.get(), io.v = pv.get(), io.o = o.get();
      paged->forward(i, io);
      q.push_back(rows_of(B, Hq * D)), k.push_back(rows_of(B, Hkv * D)), v.push_back(rows_of(B, Hkv * D));
    }
    ctx().finish();
  }
  ForwardBatch batch(ForwardMode mode) {
    ForwardBatch fb;
    fb.mode = mode, fb.batch_size = B, fb.req_to_token = r2t.data(), fb.pool_size = B, fb.max_ctx = MaxCtx;
    fb.req_pool_indices = rows.data();
    if (mode == ForwardMode::Extend)
      fb.seq_lens = prompt.data(), fb.prefix_lens = zero.data(), fb.extend_lens = prompt.data();
    else
      fb.seq_lens = seq.data();
    return fb;
  }
  // The decode step's output of `layer` on `backend` (first call appends the new K/V).
  std::vector<double> decode(AttentionBackend& be, int layer, bool save) {
    DeviceBuffer o(ctx(), size_t(B) * Hq * D * 4);
    LayerIO io;
    io.q = q[size_t(layer)].get(), io.k = k[size_t(layer)].get(), io.v = v[size_t(layer)].get(), io.o = o.get();
    be.init_forward_metadata(batch(ForwardMode::Decode));
    be.forward(layer, io, save);
    auto got = test::download<float>(o, size_t(B) * Hq * D);
    return {got.begin(), got.end()};
  }
  BackendConfig hsa_config(int topk, int window, HsaStrategy s, bool fuse) const {
    BackendConfig bc;
    bc.layers = layers, bc.act_dtype = DType::F32;
    bc.hsa.topk = topk, bc.hsa.window_size = window, bc.hsa.strategy = s, bc.hsa.fuse_window = fuse;
    bc.hsa.layers = {0};
    return bc;
  }
};

TEST(HsaBackend, DecodeMatchesHsaRunDensePagedAndMergedWindow) {
  CLATTN_SEED_TRACE();
  Step st;
  auto paged = create_backend("paged", ctx(), st.pool, BackendConfig{st.layers, DType::F32});
  for (HsaStrategy s : {HsaStrategy::Group, HsaStrategy::Head}) {
    SCOPED_TRACE(s == HsaStrategy::Head ? "head" : "group");
    const BackendConfig bc = st.hsa_config(2, 6, s, true);
    auto be = create_backend("hsa", ctx(), st.pool, bc);
    const auto got0 = st.decode(*be, 0, true);  // appends the decode token of layer 0
    const auto got1 = st.decode(*be, 1, true);
    const auto dense0 = st.decode(*paged, 0, false), dense1 = st.decode(*paged, 1, false);

    // Layer 0 against hsa_run itself on the pool's cache and the step's CSR.
    EngineBatch eb;
    eb.req_to_token = st.r2t.data(), eb.pool_size = st.B, eb.max_ctx = st.MaxCtx;
    eb.req_pool_indices = st.rows.data(), eb.seq_lens = st.seq.data(), eb.batch_size = st.B;
    const PagedCsr csr = build_csr(eb, st.P);
    HsaOptions ho;
    ho.num_qo_heads = st.Hq, ho.topk = 2, ho.strategy = s, ho.window_size = 6;
    ho.q_dtype = ho.o_dtype = DType::F32;
    const HsaPlan plan = hsa_plan(ctx(), csr, st.pool.layer(0).kv, ho);
    DeviceBuffer ids = test::upload(csr.kv_indices), o(ctx(), size_t(st.B) * st.Hq * st.D * 4);
    DeviceBuffer sel(ctx(), size_t(st.B) * plan.num_sel_heads * plan.topk * 4);
    DeviceBuffer ws(ctx(), size_t(std::max<int64_t>(plan.workspace_bytes, 4)));
    HsaBuffers hb;
    hb.q = st.q[0].get(), hb.k_cache = st.pool.layer(0).k, hb.v_cache = st.pool.layer(0).v, hb.page_ids = ids.get();
    hb.selected_page_ids = sel.get(), hb.o = o.get(), hb.workspace = ws.get();
    hsa_run(ctx(), plan, hb);
    auto direct = test::download<float>(o, size_t(st.B) * st.Hq * st.D);
    EXPECT_TRUE(test::all_close(got0, std::vector<double>(direct.begin(), direct.end()), 0, 0, "hsa layer vs hsa_run"));
    // 8 and 4 candidate pages, 2 selected: not the dense result.
    EXPECT_FALSE(test::all_close(got0, dense0, 1e-3, 1e-3, "hsa layer vs dense (expected to differ)"));
    // Layer 1 is dense: the paged backend's result.
    EXPECT_TRUE(test::all_close(got1, dense1, 0, 0, "dense layer vs paged"));

    // Every candidate selected (topk 16 >= 8) and the window over the rest: dense decode.
    auto all = create_backend("hsa", ctx(), st.pool, st.hsa_config(16, 6, s, true));
    EXPECT_TRUE(test::all_close(st.decode(*all, 0, false), dense0, 2e-5, 2e-5, "hsa covering every key vs dense"));
    // The window as its own decode merged by LSE: the fused result.
    auto merged = create_backend("hsa", ctx(), st.pool, st.hsa_config(2, 6, s, false));
    EXPECT_TRUE(test::all_close(st.decode(*merged, 0, false), got0, 2e-5, 2e-5, "merged window vs fused"));
  }
}

// The sim's reference: landmark scores within 1e-4 at the top-k boundary give the output of
// the other selection too (f32 may order them either way); a clear gap gives none.
TEST(HsaBackend, SimReferenceNearTie) {
  const int P = 4, L = 13, D = 64;  // candidates: pages 0, 1, 2 (keys 0..11); key 12 is on page 3
  LayerSpec l;
  l.num_qo_heads = 1, l.num_kv_heads = 1, l.head_dim = D;
  sim::HsaSetup h;
  h.on = true, h.cfg.topk = 1;
  std::vector<double> q(D, 0.0), k(size_t(L) * D, 0.0), v(size_t(L) * D, 0.0);
  q[0] = 1.0;
  for (int t = 0; t < L; ++t) v[size_t(t) * D] = t;  // each key's value tells which keys were attended
  const std::vector<int32_t> pages{5, 2, 7, 0};
  k[size_t(3) * D] = 0.5, k[size_t(7) * D] = 0.9, k[size_t(11) * D] = 0.9 + 1e-7;  // landmarks of pages 0, 1, 2
  std::vector<double> want, alt;
  sim::hsa_reference(h, l, L, P, 8, q.data(), k.data(), v.data(), pages.data(), nullptr, want, alt);
  ASSERT_EQ(alt.size(), want.size());
  EXPECT_GT(want[0], 8.0);  // page 2 (keys 8..11) selected
  EXPECT_LT(alt[0], 8.0);   // page 1 (keys 4..7) instead
  k[size_t(11) * D] = 2.0;
  sim::hsa_reference(h, l, L, P, 8, q.data(), k.data(), v.data(), pages.data(), nullptr, want, alt);
  EXPECT_TRUE(alt.empty());
}

// ------------------------------------------------------------------------- errors
TEST(HsaBackendErrors, ConfigNamesTheField) {
  Step st;
  auto bad = [&](BackendConfig bc, const std::string& needle, const std::string& name = "hsa") {
    return test::throws_error([&] { create_backend(name, ctx(), st.pool, bc); }, Status::InvalidArgument, needle);
  };
  BackendConfig bc = st.hsa_config(0, 6, HsaStrategy::Group, true);
  EXPECT_TRUE(bad(bc, "BackendConfig.hsa.topk = 0, must be >= 1"));
  bc.hsa.topk = -3;
  EXPECT_TRUE(bad(bc, "BackendConfig.hsa.topk = -3"));
  bc = st.hsa_config(2, 6, static_cast<HsaStrategy>(5), true);
  EXPECT_TRUE(bad(bc, "BackendConfig.hsa.strategy = 5 is not group (0) or head (1)"));
  bc = st.hsa_config(2, -1, HsaStrategy::Group, true);
  EXPECT_TRUE(bad(bc, "BackendConfig.hsa.window_size = -1"));
  bc = st.hsa_config(2, 6, HsaStrategy::Group, true);
  bc.hsa.layers = {1, 9};
  EXPECT_TRUE(bad(bc, "BackendConfig.hsa.layers[1] = 9 is not one of this backend's layers"));
  bc.hsa.layers = {1, 1};
  EXPECT_TRUE(bad(bc, "hsa.layers[1] = 1 is listed twice"));
  bc.hsa.layers = {0};
  bc.layers[0].window_left = 7;
  EXPECT_TRUE(bad(bc, "hsa.layers[0] = 0 has a sliding window"));
  bc = st.hsa_config(2, 6, HsaStrategy::Group, true);
  bc.prefill_backend = "hsa";
  EXPECT_TRUE(bad(bc, "prefill_backend = \"hsa\"", "hybrid"));
  // Pages of one slot hold no landmark.
  KVPoolConfig pc;
  pc.num_pages = 8, pc.page_size = 1, pc.kv_dtype = DType::F32;
  KVPool p1(ctx(), pc, st.layers);
  EXPECT_TRUE(test::throws_error([&] { create_backend("hsa", ctx(), p1, st.hsa_config(2, 0, HsaStrategy::Group, true)); },
                                 Status::InvalidArgument, "page_size 1"));
  // An MLA layer is not the hsa backend's.
  auto mla = sim::preset("deepseek-v3-tp8", 1).layers;
  KVPool mp(ctx(), KVPoolConfig{4, 16}, mla);
  BackendConfig m;
  m.layers = mla, m.hsa.topk = 2;
  EXPECT_TRUE(test::throws_error([&] { create_backend("hsa", ctx(), mp, m); }, Status::InvalidArgument, "layer 0 (mla)"));
  const auto names = backend_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "hsa"), names.end());
}

TEST(HsaBackendErrors, SimSettingsNameTheOption) {
  auto problem = [](sim::Config c) { auto p = sim::check(c); return p ? p->option + ": " + p->why : std::string(); };
  sim::Config c;
  c.model = "tiny", c.hsa_window = 8;
  EXPECT_EQ(problem(c), "--hsa-window: needs --hsa-topk (model tiny runs no HSA)");
  c = sim::Config{};
  c.model = "gpt-oss", c.num_layers = 4, c.hsa_topk = 2, c.hsa_layers = {0};
  EXPECT_EQ(problem(c), "--hsa-layers: layer 0 of gpt-oss is a sliding-window layer (it stays dense)");
  c.hsa_layers = {1, 7};
  EXPECT_EQ(problem(c), "--hsa-layers: 7 is not a layer of model gpt-oss (layers 0..3)");
  c = sim::Config{};
  c.model = "deepseek-v3-tp8", c.hsa_topk = 2;
  EXPECT_EQ(problem(c), "--hsa-topk: model deepseek-v3-tp8 has no full-attention MHA layer (HSA serves those)");
  c = sim::Config{};
  c.model = "llama-8b-hsa", c.page_size = 1;
  EXPECT_EQ(problem(c), "--page-size: is 1: HSA needs at least 2 (a page's last slot is its landmark)");
  c.page_size = 0, c.backend = "paged";
  EXPECT_EQ(problem(c), "--backend: is paged: with HSA, model llama-8b-hsa runs on hsa");
  c.backend = "", c.hsa_strategy = "row";
  EXPECT_EQ(problem(c), "--hsa-strategy: 'row' is not group or head");
}

}  // namespace
}  // namespace clattn

// int8 KV caches through the engine backends: a KVPool of int8 layers allocates the scale
// caches (MHA: K and V scale caches; MLA: the latent's scale-pair cache), forward appends
// int8 rows with their scales and runs extend and decode over them (checked against the
// reference over the dequantised rows), the serve-sim loop runs int8 end to end; what int8
// does not serve in the engine is refused naming it.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

#include "one_request.hpp"
#include "reference/kv_formats_reference.hpp"
#include "reference/mla_int8_reference.hpp"
#include "reference/reference.hpp"
#include "served_checks.hpp"
#include "sim.hpp"
#include "support/test_support.hpp"

namespace clattn {
namespace {

using test::ctx;

struct Int8Case {
  KVLayout layout;
  DType scale_dtype;
};

class BackendInt8 : public ::testing::TestWithParam<Int8Case> {};

// One layer, one request: an extend of 5 tokens, then two decode steps. After each step the
// output matches the reference over the dequantised rows ref::int8_quantize_row gives, and
// the scale caches hold that quantiser's scales.
TEST_P(BackendInt8, ExtendThenDecode) {
  CLATTN_SEED_TRACE();
  const auto prm = GetParam();
  auto layers = sim::preset("tiny", 1).layers;
  const int Hq = 4, Hkv = 2, D = 64, P = 4, N = 7, pages = 4;
  KVPoolConfig pc;
  pc.num_pages = pages, pc.page_size = P, pc.kv_dtype = DType::I8, pc.layout = prm.layout;
  pc.scale_dtype = prm.scale_dtype;
  KVPool pool(ctx(), pc, layers);
  const KVPool::Layer& L = pool.layer(0);
  ASSERT_NE(L.k_scale_cache, nullptr);
  ASSERT_NE(L.v_scale_cache, nullptr);
  const int64_t ss = int64_t(dtype_size(prm.scale_dtype));
  EXPECT_EQ(pool.bytes_allocated(), 2 * int64_t(pages) * P * Hkv * D + 2 * int64_t(pages) * P * Hkv * ss);
  BackendConfig bc;
  bc.layers = layers;
  bc.act_dtype = DType::F32;
  auto be = create_backend("paged", ctx(), pool, bc);

  test::Rng rng(test::seed());
  auto q = rng.vec(size_t(N) * Hq * D), k = rng.vec(size_t(N) * Hkv * D), v = rng.vec(size_t(N) * Hkv * D);
  for (auto* x : {&q, &k, &v}) *x = test::quantize(*x, DType::F32);
  // What the cache holds: every (token, head) row quantised, then dequantised.
  std::vector<double> kd(k.size()), vd(v.size());
  std::vector<float> ks(size_t(N) * Hkv), vs(size_t(N) * Hkv);
  for (int r = 0; r < N * Hkv; ++r) {
    for (auto [src, dst, sc] : {std::tuple{&k, &kd, &ks}, std::tuple{&v, &vd, &vs}}) {
      std::vector<float> row(src->begin() + r * D, src->begin() + (r + 1) * D);
      std::vector<int8_t> qr(static_cast<size_t>(D));
      ref::int8_quantize_row(row.data(), D, prm.scale_dtype == DType::F16, qr.data(), &(*sc)[size_t(r)]);
      ref::int8_dequantize_row(qr.data(), D, (*sc)[size_t(r)], dst->data() + r * D);
    }
  }
  test::extend_then_decode(*be, {Hq, Hkv, D, P, q, k, v, q, kd, vd}, 5);
  // The scale caches hold the quantiser's scales at each token's (page, offset, head).
  const size_t n_sc = size_t(pages) * P * Hkv;
  const std::vector<int32_t> r2t = test::two_page_slots(N, P);
  const auto got_ks = test::read_scales(L.k_scale_cache, n_sc, prm.scale_dtype);
  const auto got_vs = test::read_scales(L.v_scale_cache, n_sc, prm.scale_dtype);
  for (int t = 0; t < N; ++t)
    for (int h = 0; h < Hkv; ++h) {
      const int slot = r2t[size_t(t)], page = slot / P, off = slot % P;
      const size_t at = prm.layout == KVLayout::NHD ? size_t((page * P + off) * Hkv + h) : size_t((page * Hkv + h) * P + off);
      EXPECT_EQ(got_ks[at], ks[size_t(t * Hkv + h)]) << "k scale of token " << t << " head " << h;
      EXPECT_EQ(got_vs[at], vs[size_t(t * Hkv + h)]) << "v scale of token " << t << " head " << h;
    }
}

INSTANTIATE_TEST_SUITE_P(Layouts, BackendInt8,
                         ::testing::Values(Int8Case{KVLayout::NHD, DType::F32}, Int8Case{KVLayout::HND, DType::F16}),
                         [](const auto& i) {
                           return std::string(i.param.layout == KVLayout::NHD ? "NHD" : "HND") + "_" +
                                  dtype_name(i.param.scale_dtype);
                         });

// One int8 MLA layer, one request: an extend of 5 tokens, then two decode steps at the slots
// two_page_slots gives. After each step the output matches ref::mla_attention over the rows
// ref::int8_quantize_latent stores, and the pool's scale cache holds that quantiser's
// (ckv, kpe) pairs.
class BackendInt8Mla : public ::testing::TestWithParam<DType> {};

TEST_P(BackendInt8Mla, ExtendThenDecode) {
  CLATTN_SEED_TRACE();
  const DType sdt = GetParam();
  const int H = 2, P = 4, N = 7, pages = 4, extend = 5, Dc = kMlaCkvDim, Dr = kMlaKpeDim;
  const double sm = 1.0 / std::sqrt(192.0);
  LayerSpec spec;
  spec.kind = LayerKind::MLA, spec.num_qo_heads = H, spec.sm_scale = float(sm);
  KVPoolConfig pc;
  pc.num_pages = pages, pc.page_size = P, pc.kv_dtype = DType::I8, pc.scale_dtype = sdt;
  KVPool pool(ctx(), pc, {spec});
  const KVPool::Layer& L = pool.layer(0);
  ASSERT_NE(L.k_scale_cache, nullptr) << "the latent's scale cache";
  EXPECT_EQ(L.v_scale_cache, nullptr);
  const int64_t ss = int64_t(dtype_size(sdt));
  EXPECT_EQ(pool.bytes_per_page(), int64_t(P) * (Dc + Dr) + int64_t(P) * 2 * ss);
  EXPECT_EQ(pool.bytes_allocated(), int64_t(pages) * P * (Dc + Dr) + int64_t(pages) * P * 2 * ss);
  BackendConfig bc;
  bc.layers = {spec};
  bc.act_dtype = DType::F32;
  auto be = create_backend("mla", ctx(), pool, bc);

  test::Rng rng(test::seed());
  auto qn = rng.vec(size_t(N) * H * Dc), qp = rng.vec(size_t(N) * H * Dr);
  auto ckv = rng.vec(size_t(N) * Dc), kpe = rng.vec(size_t(N) * Dr, -4.0, 4.0);  // parts of different range
  for (auto* x : {&qn, &qp, &ckv, &kpe}) *x = test::quantize(*x, DType::F32);
  // What the cache holds: every token's parts quantised with their own scales, dequantised.
  std::vector<double> ckv_d(ckv.size()), kpe_d(kpe.size());
  std::vector<float> pairs(size_t(N) * 2);
  for (int t = 0; t < N; ++t) {
    std::vector<float> c(ckv.begin() + t * Dc, ckv.begin() + (t + 1) * Dc), k(kpe.begin() + t * Dr, kpe.begin() + (t + 1) * Dr);
    std::vector<int8_t> qc(static_cast<size_t>(Dc)), qk(static_cast<size_t>(Dr));
    ref::int8_quantize_latent(c.data(), k.data(), sdt == DType::F16, qc.data(), qk.data(), &pairs[size_t(t) * 2]);
    ref::int8_dequantize_latent(qc.data(), qk.data(), &pairs[size_t(t) * 2], &ckv_d[size_t(t) * Dc], &kpe_d[size_t(t) * Dr]);
  }

  std::vector<int32_t> r2t = test::two_page_slots(N, P);
  int32_t row = 0, seq = extend, prefix = 0, ext = extend;
  ForwardBatch fb;
  fb.mode = ForwardMode::Extend, fb.batch_size = 1, fb.req_to_token = r2t.data(), fb.pool_size = 1, fb.max_ctx = N;
  fb.req_pool_indices = &row, fb.seq_lens = &seq, fb.prefix_lens = &prefix, fb.extend_lens = &ext;
  auto f32 = [](const std::vector<double>& x, size_t from, size_t n) {
    return std::vector<float>(x.begin() + std::ptrdiff_t(from), x.begin() + std::ptrdiff_t(from + n));
  };
  auto step = [&](int from, int n) {
    SCOPED_TRACE(std::string(from ? "decode" : "extend") + " step at token " + std::to_string(from));
    auto qnb = test::upload(f32(qn, size_t(from) * H * Dc, size_t(n) * H * Dc));
    auto qpb = test::upload(f32(qp, size_t(from) * H * Dr, size_t(n) * H * Dr));
    auto cb = test::upload(f32(ckv, size_t(from) * Dc, size_t(n) * Dc));
    auto kb = test::upload(f32(kpe, size_t(from) * Dr, size_t(n) * Dr));
    DeviceBuffer ob(ctx(), size_t(n) * H * Dc * 4);
    LayerIO io;
    io.q = qnb.get(), io.q_pe = qpb.get(), io.k = cb.get(), io.v = kb.get(), io.o = ob.get();
    be->init_forward_metadata(fb);
    be->forward(0, io);
    const auto got = test::download<float>(ob, size_t(n) * H * Dc);
    std::vector<double> want(size_t(n) * H * Dc);
    ref::mla_attention(qn.data() + size_t(from) * H * Dc, qp.data() + size_t(from) * H * Dr, ckv_d.data(), kpe_d.data(),
                       n, from + n, H, Dc, Dr, sm, true, want.data(), nullptr);
    EXPECT_TRUE(test::all_close(std::vector<double>(got.begin(), got.end()), want, 1e-4, 1e-4, "mla attention"));
  };
  step(0, extend);
  fb.mode = ForwardMode::Decode, fb.prefix_lens = nullptr, fb.extend_lens = nullptr;
  for (int t = extend; t < N; ++t) {
    seq = t + 1;
    step(t, 1);
  }
  // The scale cache ([pages, P, 2]) holds each token's pair at its (page, offset).
  const auto got = test::read_scales(L.k_scale_cache, size_t(pages) * P * 2, sdt);
  for (int t = 0; t < N; ++t)
    for (int part = 0; part < 2; ++part)
      EXPECT_EQ(got[size_t(r2t[size_t(t)]) * 2 + size_t(part)], pairs[size_t(t) * 2 + size_t(part)])
          << (part ? "kpe" : "ckv") << " scale of token " << t;
  ctx().finish();
  EXPECT_EQ(ctx().device_faults(true), 0u);
}

INSTANTIATE_TEST_SUITE_P(ScaleDtypes, BackendInt8Mla, ::testing::Values(DType::F32, DType::F16),
                         [](const auto& i) { return std::string(dtype_name(i.param)); });

// The serve-sim loop on an MLA model (two deepseek-v3-tp8 layers) with int8 latents, every
// layer of every step checked against the reference over the dequantised rows, and the same
// trace on a bf16 latent cache compared.
TEST(BackendInt8Sim, ServedMlaModel) {
  CLATTN_SEED_TRACE();
  sim::Config c;
  c.model = "deepseek-v3-tp8";
  c.num_layers = 2;
  c.page_size = 16;
  c.num_requests = 4, c.max_running = 3, c.system_prompt = 8;
  c.prompt_min = 1, c.prompt_max = 12, c.output_min = 3, c.output_max = 6, c.prefill_token_budget = 20;
  c.check_every = 1, c.check_all_layers = true, c.check_requests = 3;
  c.kv_dtype = DType::I8;
  c.kv_scale_dtype = DType::F16;
  c.compare_kv = DType::BF16;
  c.seed = test::seed();
  const auto r = sim::run(ctx(), c);
  test::expect_served_clean(r, 2);
  EXPECT_GT(r.compare_outputs, 0);
}

// The serve-sim loop (shared prefix pages, mixed steps, continuous batching) on int8 caches,
// every layer of every step checked against the reference over the dequantised rows.
TEST(BackendInt8Sim, ServedModel) {
  CLATTN_SEED_TRACE();
  sim::Config c;
  c.model = "tiny";  // layer 1: window + soft cap
  c.num_requests = 5, c.max_running = 3, c.system_prompt = 8;
  c.prompt_min = 1, c.prompt_max = 12, c.output_min = 4, c.output_max = 8, c.prefill_token_budget = 20;
  c.check_every = 1, c.check_all_layers = true, c.check_requests = 3;
  c.kv_dtype = DType::I8;
  c.seed = test::seed();
  const auto r = sim::run(ctx(), c);
  test::expect_served_clean(r, 2);
}

TEST(BackendInt8Errors, Refused) {
  auto layers = sim::preset("tiny", 1).layers;
  KVPoolConfig pc;
  pc.num_pages = 4, pc.page_size = 4, pc.kv_dtype = DType::I8;
  pc.scale_dtype = DType::BF16;
  EXPECT_TRUE(test::throws_error([&] { KVPool(ctx(), pc, layers); }, Status::InvalidArgument, "scale_dtype bf16"));
  pc.scale_dtype = DType::F32;
  pc.k_scale = 0.5f;
  EXPECT_TRUE(test::throws_error([&] { KVPool(ctx(), pc, layers); }, Status::InvalidArgument, "k_scale"));
  pc.k_scale = 1.0f;
  // An engine-owned int8 MLA layer without its scale cache is refused by name.
  auto mla = sim::preset("deepseek-v3-tp8", 1).layers;
  KVPool owned_mla(pc, mla);
  {
    KVPool::Layer l = owned_mla.layer(0);
    ASSERT_GT(l.latent.scale_required_bytes(), 0);
    DeviceBuffer cc(ctx(), size_t(l.latent.ckv_required_bytes())), kc(ctx(), size_t(l.latent.kpe_required_bytes()));
    l.k = cc.get(), l.v = kc.get();
    owned_mla.set_layer(0, l);
    BackendConfig mb;
    mb.layers = mla;
    mb.act_dtype = DType::F32;
    EXPECT_TRUE(test::throws_error([&] { create_backend("mla", ctx(), owned_mla, mb); }, Status::InvalidArgument,
                                   "latent cache has no scale cache"));
  }
  // An engine-owned int8 pool: the caches without their scale caches are refused by name.
  KVPool owned(pc, layers);
  DeviceBuffer kc(ctx(), size_t(owned.layer(0).kv.required_bytes())), vc(ctx(), size_t(owned.layer(0).kv.required_bytes()));
  KVPool::Layer l = owned.layer(0);
  l.k = kc.get(), l.v = vc.get();
  owned.set_layer(0, l);
  BackendConfig bc;
  bc.layers = layers;
  bc.act_dtype = DType::F32;
  EXPECT_TRUE(test::throws_error([&] { create_backend("paged", ctx(), owned, bc); }, Status::InvalidArgument,
                                 "no scale caches"));
  // RoPE in forward writes the int8 cache through rope_append_kv (its int8 path: test_ops_rope).
  KVPool pool(ctx(), pc, layers);
  BackendConfig rb = bc;
  rb.layers[0].apply_rope = true;
  rb.layers[0].rope.rotary_dim = 64;
  auto be = create_backend("paged", ctx(), pool, rb);
  std::vector<int32_t> r2t{0, 1};
  int32_t row = 0, seq = 1;
  ForwardBatch fb;
  fb.batch_size = 1, fb.req_to_token = r2t.data(), fb.pool_size = 1, fb.max_ctx = 2;
  fb.req_pool_indices = &row, fb.seq_lens = &seq;
  be->init_forward_metadata(fb);
  DeviceBuffer q(ctx(), 4 * 64 * 4), kv(ctx(), 2 * 64 * 4), o(ctx(), 4 * 64 * 4);
  LayerIO io;
  io.q = q.get(), io.k = kv.get(), io.v = kv.get(), io.o = o.get();
  EXPECT_NO_THROW(be->forward(0, io));
  ctx().finish();
  EXPECT_EQ(ctx().device_faults(true), 0u);
  // HSA selects pages by landmark keys of float caches only.
  BackendConfig hb = bc;
  hb.hsa.topk = 1;
  EXPECT_TRUE(test::throws_error([&] { create_backend("hsa", ctx(), pool, hb); }, Status::Unsupported, "int8"));
}

}  // namespace
}  // namespace clattn

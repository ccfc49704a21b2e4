// int8 KV caches through the engine backends: a KVPool of int8 layers allocates the scale
// caches, forward appends int8 rows with their scales and runs extend and decode over them
// (checked against the reference over the dequantised rows), the serve-sim loop runs int8
// end to end; what int8 does not serve in the engine is refused naming it.
#include <gtest/gtest.h>

#include <tuple>

#include "one_request.hpp"
#include "reference/kv_formats_reference.hpp"
#include "reference/reference.hpp"
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
  for (const auto& f : r.failures) ADD_FAILURE() << f;
  EXPECT_EQ(r.mismatches, 0);
  EXPECT_GT(r.checks, 0);
  EXPECT_GT(r.decode_steps, 2);
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
  auto mla = sim::preset("deepseek-v3-tp8", 1).layers;
  EXPECT_TRUE(test::throws_error([&] { KVPool(ctx(), pc, mla); }, Status::Unsupported, "MLA layer 0"));
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

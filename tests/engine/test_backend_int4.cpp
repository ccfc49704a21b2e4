// int4 KV caches through the engine backends: a KVPool of int4 layers allocates nibble caches
// and [scale, zero] pair caches of its quant_group, forward appends int4 rows with their pairs
// and runs extend and decode over them (checked against the reference over the dequantised
// rows), an apply_rope layer writes what rope_append_kv writes; what int4 does not serve in
// the engine is refused naming it.
#include <gtest/gtest.h>

#include <tuple>

#include "clattn/rope.hpp"
#include "one_request.hpp"
#include "reference/kv_formats_reference.hpp"
#include "reference/reference.hpp"
#include "sim.hpp"
#include "support/test_support.hpp"

namespace clattn {
namespace {

using test::ctx;

struct Int4Case {
  KVLayout layout;
  DType scale_dtype;
  int group;
};

std::vector<uint8_t> bytes_of(cl_mem m, size_t n) {
  std::vector<uint8_t> out(n);
  EXPECT_EQ(clEnqueueReadBuffer(ctx().cl_queue(), m, CL_TRUE, 0, n, out.data(), 0, nullptr, nullptr), CL_SUCCESS);
  return out;
}

class BackendInt4 : public ::testing::TestWithParam<Int4Case> {};

// One layer, one request: an extend of 5 tokens, then two decode steps. After each step the
// output matches the reference over the rows ref::int4_quantize_group stores (each group
// quantised, then dequantised), and the scale caches hold that quantiser's pairs.
TEST_P(BackendInt4, ExtendThenDecode) {
  CLATTN_SEED_TRACE();
  const auto prm = GetParam();
  auto layers = sim::preset("tiny", 1).layers;
  const int Hq = 4, Hkv = 2, D = 64, P = 4, N = 7, pages = 4, G = prm.group, ng = D / G;
  KVPoolConfig pc;
  pc.num_pages = pages, pc.page_size = P, pc.kv_dtype = DType::I4, pc.layout = prm.layout;
  pc.scale_dtype = prm.scale_dtype, pc.quant_group = G;
  KVPool pool(ctx(), pc, layers);
  const KVPool::Layer& L = pool.layer(0);
  ASSERT_NE(L.k_scale_cache, nullptr);
  ASSERT_NE(L.v_scale_cache, nullptr);
  EXPECT_EQ(L.kv.quant_group, G);
  const int64_t ss = int64_t(dtype_size(prm.scale_dtype));
  EXPECT_EQ(pool.bytes_allocated(), 2 * int64_t(pages) * P * Hkv * D / 2 + 2 * int64_t(pages) * P * Hkv * ng * 2 * ss);
  EXPECT_EQ(pool.bytes_per_page() * pages, pool.bytes_allocated());
  BackendConfig bc;
  bc.layers = layers;
  bc.act_dtype = DType::F32;
  auto be = create_backend("paged", ctx(), pool, bc);  // needs extend over int4 (its kernels are built here)

  test::Rng rng(test::seed());
  auto q = rng.vec(size_t(N) * Hq * D), k = rng.vec(size_t(N) * Hkv * D), v = rng.vec(size_t(N) * Hkv * D);
  for (auto* x : {&q, &k, &v}) *x = test::quantize(*x, DType::F32);
  // What the cache holds: every group of every (token, head) row quantised, then dequantised.
  std::vector<double> kd(k.size()), vd(v.size());
  std::vector<float> kp(size_t(N) * Hkv * ng * 2), vp(kp.size());  // [scale, zero] per group
  for (int gi = 0; gi < N * Hkv * ng; ++gi) {
    for (auto [src, dst, pairs] : {std::tuple{&k, &kd, &kp}, std::tuple{&v, &vd, &vp}}) {
      std::vector<float> x(src->begin() + gi * G, src->begin() + (gi + 1) * G);
      std::vector<uint8_t> u(static_cast<size_t>(G));
      float* pr = &(*pairs)[size_t(2 * gi)];
      ref::int4_quantize_group(x.data(), G, prm.scale_dtype == DType::F16, u.data(), &pr[0], &pr[1]);
      ref::int4_dequantize_group(u.data(), G, pr[0], pr[1], dst->data() + gi * G);
    }
  }
  test::extend_then_decode(*be, {Hq, Hkv, D, P, q, k, v, q, kd, vd}, 5);
  // The scale caches hold the quantiser's pairs at each token's (page, offset, head, group).
  const size_t n_sc = size_t(pages) * P * Hkv * ng * 2;
  const std::vector<int32_t> r2t = test::two_page_slots(N, P);
  const auto got_k = test::read_scales(L.k_scale_cache, n_sc, prm.scale_dtype);
  const auto got_v = test::read_scales(L.v_scale_cache, n_sc, prm.scale_dtype);
  for (int t = 0; t < N; ++t)
    for (int h = 0; h < Hkv; ++h) {
      const int slot = r2t[size_t(t)], page = slot / P, off = slot % P;
      const size_t at = (prm.layout == KVLayout::NHD ? size_t((page * P + off) * Hkv + h)
                                                     : size_t((page * Hkv + h) * P + off)) * size_t(ng * 2);
      for (int i = 0; i < ng * 2; ++i) {
        const size_t w = size_t((t * Hkv + h) * ng * 2 + i);
        EXPECT_EQ(got_k[at + size_t(i)], kp[w]) << "k pair element " << i << " of token " << t << " head " << h;
        EXPECT_EQ(got_v[at + size_t(i)], vp[w]) << "v pair element " << i << " of token " << t << " head " << h;
      }
    }
}

INSTANTIATE_TEST_SUITE_P(Layouts, BackendInt4,
                         ::testing::Values(Int4Case{KVLayout::NHD, DType::F32, 32},
                                           Int4Case{KVLayout::HND, DType::F16, 64}),
                         [](const auto& i) {
                           return std::string(i.param.layout == KVLayout::NHD ? "NHD" : "HND") + "_" +
                                  dtype_name(i.param.scale_dtype) + "_g" + std::to_string(i.param.group);
                         });

// An apply_rope layer's forward writes the int4 cache through rope_append_kv: the nibbles and
// pairs it stores for a decode token are those rope_append_kv stores for the same rows at the
// token's position into a cache of the pool's geometry.
TEST(BackendInt4Rope, ForwardWritesWhatRopeAppendWrites) {
  auto layers = sim::preset("tiny", 1).layers;
  const int Hq = 4, Hkv = 2, D = 64;
  KVPoolConfig pc;
  pc.num_pages = 4, pc.page_size = 4, pc.kv_dtype = DType::I4, pc.quant_group = 32, pc.scale_dtype = DType::F16;
  KVPool pool(ctx(), pc, layers);
  BackendConfig bc;
  bc.layers = layers;
  bc.act_dtype = DType::F32;
  bc.layers[0].apply_rope = true;
  bc.layers[0].rope.rotary_dim = 48;  // partial: a NeoX pair straddles the two groups
  auto be = create_backend("paged", ctx(), pool, bc);
  std::vector<int32_t> r2t{0, 5};
  int32_t row = 0, seq = 2;  // the decode token sits at position 1, slot 5
  ForwardBatch fb;
  fb.batch_size = 1, fb.req_to_token = r2t.data(), fb.pool_size = 1, fb.max_ctx = 2;
  fb.req_pool_indices = &row, fb.seq_lens = &seq;
  be->init_forward_metadata(fb);
  test::Rng rng(2807);
  const auto qv = rng.vec(size_t(Hq) * D), kv = rng.vec(size_t(Hkv) * D), vv = rng.vec(size_t(Hkv) * D);
  auto q = test::upload(std::vector<float>(qv.begin(), qv.end()));
  auto k = test::upload(std::vector<float>(kv.begin(), kv.end())), v = test::upload(std::vector<float>(vv.begin(), vv.end()));
  DeviceBuffer o(ctx(), size_t(Hq) * D * 4);
  LayerIO io;
  io.q = q.get(), io.k = k.get(), io.v = v.get(), io.o = o.get();
  be->forward(0, io);
  ctx().finish();
  EXPECT_EQ(ctx().device_faults(true), 0u);
  const KVPool::Layer& L = pool.layer(0);
  const size_t cb = size_t(L.kv.required_bytes()), sb = size_t(L.kv.scale_required_bytes());
  // The same rows through rope_append_kv directly.
  auto kc = test::upload(std::vector<uint8_t>(cb, 0)), vc = test::upload(std::vector<uint8_t>(cb, 0));
  auto ksc = test::upload(std::vector<uint8_t>(sb, 0)), vsc = test::upload(std::vector<uint8_t>(sb, 0));
  auto q2 = test::upload(std::vector<float>(qv.begin(), qv.end()));
  auto pos = test::upload(std::vector<int64_t>{1}), slot = test::upload(std::vector<int64_t>{5});
  RopeAppendKVArgs r;
  r.append.k = k.get(), r.append.v = v.get(), r.append.src_dtype = DType::F32, r.append.slot_mapping = slot.get();
  r.append.slot_dtype = DType::I64, r.append.num_tokens = 1, r.append.cache = L.kv;
  r.append.k_cache = kc.get(), r.append.v_cache = vc.get(), r.append.k_scale_cache = ksc.get();
  r.append.v_scale_cache = vsc.get();
  r.q = r.q_out = q2.get(), r.num_qo_heads = Hq, r.q_out_dtype = DType::F32;
  r.pos.positions = pos.get(), r.rope = bc.layers[0].rope;
  rope_append_kv(ctx(), r);
  ctx().finish();
  EXPECT_EQ(bytes_of(L.k, cb), test::download<uint8_t>(kc, cb)) << "k cache";
  EXPECT_EQ(bytes_of(L.v, cb), test::download<uint8_t>(vc, cb)) << "v cache";
  EXPECT_EQ(bytes_of(L.k_scale_cache, sb), test::download<uint8_t>(ksc, sb)) << "k pairs";
  EXPECT_EQ(bytes_of(L.v_scale_cache, sb), test::download<uint8_t>(vsc, sb)) << "v pairs";
  EXPECT_NE(test::download<uint8_t>(ksc, sb), std::vector<uint8_t>(sb, 0)) << "nothing written";
}

TEST(BackendInt4Errors, Refused) {
  auto layers = sim::preset("tiny", 1).layers;  // head_dim 64
  KVPoolConfig pc;
  pc.num_pages = 4, pc.page_size = 4, pc.kv_dtype = DType::I4;
  EXPECT_EQ(pc.quant_group, 64);
  for (int g : {0, 16, 48, 128}) {  // not 32 / 64 / 128, or not dividing 64
    pc.quant_group = g;
    EXPECT_TRUE(test::throws_error([&] { KVPool(ctx(), pc, layers); }, Status::InvalidArgument,
                                   "quant_group = " + std::to_string(g)))
        << g;
  }
  pc.quant_group = 32, pc.scale_dtype = DType::BF16;
  EXPECT_TRUE(test::throws_error([&] { KVPool(ctx(), pc, layers); }, Status::InvalidArgument, "scale_dtype bf16"));
  pc.scale_dtype = DType::F32, pc.v_scale = 2.0f;
  EXPECT_TRUE(test::throws_error([&] { KVPool(ctx(), pc, layers); }, Status::InvalidArgument, "kv_dtype int4"));
  pc.v_scale = 1.0f;
  auto mla = sim::preset("deepseek-v3-tp8", 1).layers;
  EXPECT_TRUE(test::throws_error([&] { KVPool(ctx(), pc, mla); }, Status::Unsupported, "int4 with MLA layer 0"));
  // An engine-owned int4 pool: the caches without their scale caches are refused by name.
  KVPool owned(pc, layers);
  EXPECT_EQ(owned.layer(0).kv.quant_group, 32);
  DeviceBuffer kc(ctx(), size_t(owned.layer(0).kv.required_bytes())), vc(ctx(), size_t(owned.layer(0).kv.required_bytes()));
  KVPool::Layer l = owned.layer(0);
  l.k = kc.get(), l.v = vc.get();
  owned.set_layer(0, l);
  BackendConfig bc;
  bc.layers = layers;
  bc.act_dtype = DType::F32;
  EXPECT_TRUE(test::throws_error([&] { create_backend("paged", ctx(), owned, bc); }, Status::InvalidArgument,
                                 "no scale caches"));
  // HSA selects pages by landmark keys of float caches only.
  KVPool pool(ctx(), pc, layers);
  BackendConfig hb = bc;
  hb.hsa.topk = 1;
  EXPECT_TRUE(test::throws_error([&] { create_backend("hsa", ctx(), pool, hb); }, Status::Unsupported, "int4"));
}

}  // namespace
}  // namespace clattn

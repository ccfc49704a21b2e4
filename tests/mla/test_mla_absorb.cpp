// Absorbed MLA == unabsorbed attention, end to end through the CLBlast helpers, on small
// random weights (DeepSeek shapes per head: qk_nope 128, rope 64, kv_lora_rank 512,
// v_head_dim 128):
//   absorbed:   q_abs = q_nope x W_UK (mla_absorb) -> mla_run over the paged latent ->
//               o_v = o_lat x W_UV (mla_absorb, W_UV stored [H, 128, 512] like kv_b_proj,
//               w_transposed)
//   unabsorbed: K[t, h] = [W_UK[h] c_t, kpe_t], V[t, h] = W_UV[h]^T c_t, q = [q_nope, q_pe],
//               ordinary ref::attention (double) with D = 192, Dv = 128.
// Decode (split-K forced) and causal extend. f32 GEMMs, bf16 latent (the reference
// up-projects the same quantised latent). Tolerance 2e-4 abs + rel: f32 GEMMs and f32
// attention over 512/576-wide dots.
#include <cmath>

#include "mla_fixture.hpp"

using namespace clattn;
using namespace clattn::test::mla;
using test::ctx;

namespace {

constexpr int Dn = 128, Dv = 128;

void absorbed_vs_unabsorbed(Batch b, uint64_t salt) {
  SCOPED_TRACE(b.describe());
  const int H = b.H;
  test::Rng rng(salt);
  b.qd = b.od = DType::F32;
  Data d = make_data(b, rng);
  const int T = d.T;
  // Weights ~ U(-1, 1) / sqrt(fan-in) keep scores O(1).
  auto wuk = rng.vec(size_t(H) * Dn * Dc, -1.0 / std::sqrt(Dn), 1.0 / std::sqrt(Dn));      // [H, 128, 512]
  auto wuv_t = rng.vec(size_t(H) * Dv * Dc, -1.0 / std::sqrt(Dc), 1.0 / std::sqrt(Dc));    // [H, 128(v), 512]
  auto qnh = rng.vec(size_t(T) * H * Dn);                                                   // [T, H, 128]
  wuk = test::quantize(wuk, DType::F32), wuv_t = test::quantize(wuv_t, DType::F32), qnh = test::quantize(qnh, DType::F32);

  // ---- absorbed, on the device ----
  DeviceBuffer wuk_b = test::upload(test::pack(wuk, DType::F32)), wuv_b = test::upload(test::pack(wuv_t, DType::F32));
  DeviceBuffer qnh_b = test::upload(test::pack(qnh, DType::F32));
  DeviceBuffer qabs(ctx(), size_t(T) * H * Dc * 4), ov(ctx(), size_t(T) * H * Dv * 4);
  AbsorbArgs a1;
  a1.num_tokens = T, a1.num_heads = H, a1.in_dim = Dn, a1.out_dim = Dc, a1.dtype = DType::F32;
  a1.x = qnh_b.get(), a1.w = wuk_b.get(), a1.y = qabs.get();
  mla_absorb(ctx(), a1);

  Dev v = upload_data(d, b);
  MlaOptions opt;
  opt.num_heads = H, opt.q_dtype = opt.o_dtype = DType::F32, opt.sm_scale = float(b.sm_scale), opt.causal = b.causal;
  opt.params = {{"MIN_CHUNK", 16}, {"WGS_PER_CU", 1024}};  // force split-K on decode
  MlaPlan plan = plan_for(b, d, opt);
  MlaBuffers mb = buffers(v, b);
  mb.q_nope = qabs.get();
  if (plan.workspace_bytes > 0) v.ws = DeviceBuffer(ctx(), size_t(plan.workspace_bytes)), mb.workspace = v.ws.get();
  mla_run(ctx(), plan, mb);

  AbsorbArgs a2;
  a2.num_tokens = T, a2.num_heads = H, a2.in_dim = Dc, a2.out_dim = Dv, a2.dtype = DType::F32, a2.w_transposed = true;
  a2.x = v.o.get(), a2.w = wuv_b.get(), a2.y = ov.get();
  mla_absorb(ctx(), a2);
  clFinish(ctx().cl_queue());
  auto got = test::unpack(test::download<uint8_t>(ov, size_t(T) * H * Dv * 4), DType::F32);
  auto got_lse = test::download<float>(v.lse, size_t(T) * H);

  // ---- unabsorbed, in double ----
  std::vector<double> want(size_t(T) * H * Dv), want_lse(size_t(T) * H);
  for (size_t i = 0; i < b.kv.size(); ++i) {
    const int kv = b.kv[i], qo = b.qo[i], r0 = d.qo_start[i];
    std::vector<double> K(size_t(kv) * H * (Dn + Dr)), V(size_t(kv) * H * Dv), Q(size_t(qo) * H * (Dn + Dr));
    for (int t = 0; t < kv; ++t)
      for (int h = 0; h < H; ++h) {
        const double* c = &d.ckv[i][size_t(t) * Dc];
        double* k = &K[(size_t(t) * H + h) * (Dn + Dr)];
        for (int n = 0; n < Dn; ++n) {
          double s = 0;
          for (int j = 0; j < Dc; ++j) s += wuk[(size_t(h) * Dn + n) * Dc + j] * c[j];
          k[n] = s;
        }
        for (int r = 0; r < Dr; ++r) k[Dn + r] = d.kpe[i][size_t(t) * Dr + r];
        for (int e = 0; e < Dv; ++e) {
          double s = 0;
          for (int j = 0; j < Dc; ++j) s += wuv_t[(size_t(h) * Dv + e) * Dc + j] * c[j];
          V[(size_t(t) * H + h) * Dv + e] = s;
        }
      }
    for (int r = 0; r < qo; ++r)
      for (int h = 0; h < H; ++h) {
        const size_t row = size_t(r0 + r) * H + h;
        for (int n = 0; n < Dn; ++n) Q[(size_t(r) * H + h) * (Dn + Dr) + n] = qnh[row * Dn + n];
        for (int e = 0; e < Dr; ++e) Q[(size_t(r) * H + h) * (Dn + Dr) + Dn + e] = d.q_pe[row * Dr + e];
      }
    ref::AttnOptions ao;
    ao.sm_scale = b.sm_scale;
    ao.causal = b.extend && b.causal;
    ref::attention(Q.data(), K.data(), V.data(), qo, kv, H, H, Dn + Dr, Dv, ao, &want[size_t(r0) * H * Dv],
                   &want_lse[size_t(r0) * H]);
  }
  // The tensor-core variant rounds q and the probabilities to bf16/f16 before its products
  // (2^-9 relative): 4e-3 covers it (H100: worst 6e-4 on o, 7e-4 on lse).
  const double tol = plan.variant == "nv_mma_sync" ? 4e-3 : 2e-4;
  EXPECT_TRUE(test::all_close(got, want, tol, tol, "o_v (absorbed vs unabsorbed)"))
      << plan.num_merges << " merges, variant " << plan.variant;
  std::vector<double> gl(got_lse.begin(), got_lse.end());
  EXPECT_TRUE(test::all_close(gl, want_lse, tol, tol, "lse"));
}

TEST(MlaAbsorb, Warmup) { EXPECT_TRUE(mla_absorb_warmup(ctx(), true, false)); }

TEST(MlaAbsorb, DecodeAbsorbedEqualsUnabsorbed) {
  CLATTN_SEED_TRACE();
  Batch b;
  b.H = 4, b.P = 16, b.kv = {70, 7, 33}, b.qo = {1, 1, 1};
  absorbed_vs_unabsorbed(b, 1);
}

TEST(MlaAbsorb, ExtendAbsorbedEqualsUnabsorbed) {
  CLATTN_SEED_TRACE();
  Batch b;
  b.H = 4, b.P = 32, b.kv = {20, 41}, b.qo = {3, 5}, b.extend = true, b.single = true, b.table = true;
  absorbed_vs_unabsorbed(b, 2);
}

// f16 GEMM against a host product (inputs f16-exact; f32 accumulation in CLBlast, f16 output).
TEST(MlaAbsorb, HalfGemm) {
  CLATTN_SEED_TRACE();
  const int T = 3, H = 2, in = 16, out = 24;
  test::Rng rng(5);
  auto x = test::quantize(rng.vec(size_t(T) * H * in), DType::F16);
  auto w = test::quantize(rng.vec(size_t(H) * in * out), DType::F16);
  DeviceBuffer xb = test::upload(test::pack(x, DType::F16)), wb = test::upload(test::pack(w, DType::F16));
  DeviceBuffer yb(ctx(), size_t(T) * H * out * 2);
  AbsorbArgs a;
  a.num_tokens = T, a.num_heads = H, a.in_dim = in, a.out_dim = out, a.dtype = DType::F16;
  a.x = xb.get(), a.w = wb.get(), a.y = yb.get();
  if (!ctx().profile().fp16) {
    EXPECT_TRUE(test::throws_error([&] { mla_absorb(ctx(), a); }, Status::Unsupported, "cl_khr_fp16"));
    return;
  }
  mla_absorb(ctx(), a);
  auto got = test::unpack(test::download<uint8_t>(yb, size_t(T) * H * out * 2), DType::F16);
  std::vector<double> want(size_t(T) * H * out, 0.0);
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h)
      for (int o = 0; o < out; ++o)
        for (int i = 0; i < in; ++i)
          want[(size_t(t) * H + h) * out + o] += x[(size_t(t) * H + h) * in + i] * w[(size_t(h) * in + i) * out + o];
  // f16 products/accumulation inside CLBlast's half kernel: allow a few f16 ulps of |sum|.
  EXPECT_TRUE(test::all_close(got, want, 2e-2, 1e-2, "f16 absorb"));
}

TEST(MlaAbsorb, RejectsBadArguments) {
  AbsorbArgs a;
  a.num_tokens = 1, a.num_heads = 0, a.in_dim = 8, a.out_dim = 8;
  EXPECT_TRUE(test::throws_error([&] { mla_absorb(ctx(), a); }, Status::InvalidArgument, "num_heads"));
  a.num_heads = 2, a.dtype = DType::BF16;
  EXPECT_TRUE(test::throws_error([&] { mla_absorb(ctx(), a); }, Status::Unsupported, "dtype"));
  a.dtype = DType::F32;
  DeviceBuffer small(ctx(), 16);
  a.x = a.w = a.y = small.get();
  EXPECT_TRUE(test::throws_error([&] { mla_absorb(ctx(), a); }, Status::InvalidArgument, "absorb x"));
}

}  // namespace

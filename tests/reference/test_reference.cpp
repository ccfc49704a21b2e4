// Self-test of the double-precision reference.
#include "reference/reference.hpp"

#include "ref_test_util.hpp"
#include <gtest/gtest.h>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

using namespace clattn::ref;

namespace {
const double kInf = std::numeric_limits<double>::infinity();
float bits_f(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
using clattn::ref_test::expect_near_vec;
using clattn::ref_test::randv;
}  // namespace

// ------------------------------------------------------------------ formats
struct Enc { float in; uint32_t want; };
template <class E, class Dc>
void check_format(E enc, Dc dec, std::initializer_list<Enc> cases, uint32_t ncodes, bool (*is_nan_code)(uint32_t)) {
  for (const Enc& c : cases) EXPECT_EQ(uint32_t(enc(c.in)), c.want) << "input " << c.in;
  for (uint32_t c = 0; c < ncodes; ++c) {  // exhaustive decode -> encode round trip of non-nan codes
    if (!is_nan_code(c)) { ASSERT_EQ(uint32_t(enc(dec(c))), c) << "code " << c; }
  }
}

TEST(Formats, Half) {
  const float tiny = std::ldexp(1.0f, -24);
  check_format(float_to_half, [](uint32_t c) { return half_to_float(uint16_t(c)); },
               {{1.0f, 0x3c00}, {-2.5f, 0xc100}, {65504.0f, 0x7bff}, {tiny, 0x0001}, {-0.0f, 0x8000},
                {0.5f * tiny, 0x0000}, {1.5f * tiny, 0x0002},                  // subnormal ties -> even
                {1.0f + std::ldexp(1.0f, -11), 0x3c00}, {1.0f + std::ldexp(3.0f, -11), 0x3c02},  // ties
                {65519.0f, 0x7bff}, {65520.0f, 0x7c00}, {-1e30f, 0xfc00}},     // overflow -> inf
               0x10000, [](uint32_t c) { return (c & 0x7c00) == 0x7c00 && (c & 0x3ff) != 0; });
  EXPECT_EQ(half_to_float(0x0001), tiny);
  EXPECT_TRUE(std::isinf(half_to_float(0x7c00)) && std::isnan(half_to_float(0x7e00)));
  EXPECT_TRUE(std::isnan(half_to_float(float_to_half(NAN))));
}
TEST(Formats, Bf16) {
  check_format(float_to_bf16, [](uint32_t c) { return bf16_to_float(uint16_t(c)); },
               {{1.0f, 0x3f80}, {-2.5f, 0xc020}, {bits_f(0x3f808000u), 0x3f80}, {bits_f(0x3f818000u), 0x3f82},
                {bits_f(0x3f808001u), 0x3f81}, {bits_f(0x7f7fffffu), 0x7f80}, {bits_f(0x00008000u), 0x0000},
                {bits_f(0xffc00000u), 0xffc0}},
               0x10000, [](uint32_t c) { return (c & 0x7f80) == 0x7f80 && (c & 0x7f) != 0; });
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(bits_f(0x7f800001u)))));  // low payload stays nan
}
TEST(Formats, Fp8E4m3) {
  check_format(float_to_fp8_e4m3, [](uint32_t c) { return fp8_e4m3_to_float(uint8_t(c)); },
               {{1.0f, 0x38}, {448.0f, 0x7e}, {464.0f, 0x7e}, {1e6f, 0x7e}, {-1e6f, 0xfe}, {INFINITY, 0x7e},
                {NAN, 0x7f}, {1.0625f, 0x38}, {1.1875f, 0x3a}, {std::ldexp(1.0f, -9), 0x01}},
               256, [](uint32_t c) { return (c & 0x7f) == 0x7f; });
  EXPECT_EQ(fp8_e4m3_to_float(0x7e), 448.0f);
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_float(0x7f)) && std::isnan(fp8_e4m3_to_float(0xff)));
}
TEST(Formats, Fp8E5m2) {
  check_format(float_to_fp8_e5m2, [](uint32_t c) { return fp8_e5m2_to_float(uint8_t(c)); },
               {{1.0f, 0x3c}, {57344.0f, 0x7b}, {1e9f, 0x7b}, {INFINITY, 0x7b}, {-INFINITY, 0xfb}, {NAN, 0x7f},
                {1.125f, 0x3c}, {1.375f, 0x3e}},
               256, [](uint32_t c) { return (c & 0x7c) == 0x7c; });  // inf codes too: they saturate
  EXPECT_EQ(fp8_e5m2_to_float(0x7b), 57344.0f);
  EXPECT_TRUE(std::isinf(fp8_e5m2_to_float(0x7c)) && std::isnan(fp8_e5m2_to_float(0x7d)));
}

// ------------------------------------------------------------------ attention
struct Out { std::vector<double> o, lse; };
Out attn(const double* q, const double* k, const double* v, int qo, int kv, int Hq, int Hkv, int D, int Dv,
         const AttnOptions& opt) {
  Out r{std::vector<double>(size_t(qo) * Hq * Dv), std::vector<double>(size_t(qo) * Hq)};
  attention(q, k, v, qo, kv, Hq, Hkv, D, Dv, opt, r.o.data(), r.lse.data());
  return r;
}

TEST(Attention, OneKeyEqualsV) {
  auto q = randv(4, 1), k = randv(4, 2), v = randv(3, 3);
  AttnOptions opt; opt.sm_scale = 0.5;
  Out r = attn(q.data(), k.data(), v.data(), 1, 1, 1, 1, 4, 3, opt);
  expect_near_vec(r.o.data(), v.data(), 3);
  EXPECT_NEAR(r.lse[0], 0.5 * (q[0] * k[0] + q[1] * k[1] + q[2] * k[2] + q[3] * k[3]), 1e-12);
}

TEST(Attention, UniformScoresAverageV) {
  const int L = 5;
  std::vector<double> q(2, 0.0), k = randv(L * 2, 4), v = randv(L * 2, 5);
  Out r = attn(q.data(), k.data(), v.data(), 1, L, 1, 1, 2, 2, AttnOptions{});
  for (int d = 0; d < 2; ++d)
    EXPECT_NEAR(r.o[d], (v[d] + v[2 + d] + v[4 + d] + v[6 + d] + v[8 + d]) / L, 1e-12);
  EXPECT_NEAR(r.lse[0], std::log(double(L)), 1e-12);
}

TEST(Attention, SinkLowersWeights) {
  std::vector<double> q(1, 0.0), k = {1.0, 2.0}, v = {2.0, 6.0};
  const double sink = std::log(2.0);  // weight 2 vs 1 + 1 for the keys
  AttnOptions opt; opt.sinks = &sink;
  Out r = attn(q.data(), k.data(), v.data(), 1, 2, 1, 1, 1, 1, opt);
  EXPECT_NEAR(r.o[0], (2.0 + 6.0) / 4.0, 1e-12);
  EXPECT_NEAR(r.lse[0], std::log(4.0), 1e-12);
  const uint8_t none = 0; opt.custom_mask = &none;  // sink alone: o = 0, lse = sink
  r = attn(q.data(), k.data(), v.data(), 1, 2, 1, 1, 1, 1, opt);
  EXPECT_EQ(r.o[0], 0.0);
  EXPECT_NEAR(r.lse[0], sink, 1e-12);
}

TEST(Attention, SoftCapAfterScale) {
  std::vector<double> q = {3.0}, k = {1.0, -2.0}, v = {1.0, 0.0};
  AttnOptions opt; opt.sm_scale = 2.0; opt.logits_soft_cap = 4.0; opt.causal = false;
  Out r = attn(q.data(), k.data(), v.data(), 1, 2, 1, 1, 1, 1, opt);
  const double e0 = std::exp(4.0 * std::tanh(6.0 / 4.0)), e1 = std::exp(4.0 * std::tanh(-12.0 / 4.0));
  EXPECT_NEAR(r.o[0], e0 / (e0 + e1), 1e-12);
  EXPECT_NEAR(r.lse[0], std::log(e0 + e1), 1e-12);
}

TEST(Attention, CausalWindowMask) {
  // q = 0 so visible keys are averaged; v_j = j*j makes the visible set readable.
  std::vector<double> k(5, 1.0), v = {0, 1, 4, 9, 16}, q(3, 0.0);
  const double* Q = q.data(); const double* K = k.data(); const double* V = v.data();
  AttnOptions opt;  // causal: 3 rows over 5 keys sit at positions 2,3,4
  Out r = attn(Q, K, V, 3, 5, 1, 1, 1, 1, opt);
  EXPECT_NEAR(r.o[0], 5.0 / 3.0, 1e-12);
  EXPECT_NEAR(r.o[2], 30.0 / 5.0, 1e-12);
  opt.window_left = 1;  // position p sees p-1, p
  r = attn(Q, K, V, 3, 5, 1, 1, 1, 1, opt);
  EXPECT_NEAR(r.o[0], 2.5, 1e-12); EXPECT_NEAR(r.o[1], 6.5, 1e-12); EXPECT_NEAR(r.o[2], 12.5, 1e-12);
  EXPECT_NEAR(r.lse[2], std::log(2.0), 1e-12);
  opt.window_left = 0;
  EXPECT_NEAR(attn(Q, K, V, 3, 5, 1, 1, 1, 1, opt).o[1], 9.0, 1e-12);
  // Custom mask, 2 rows x 3 keys: row0 = {0,2}, row1 = {1}: bits 101 010 -> 0x15.
  const uint8_t mask = 0x15, mask2 = 0x07;  // mask2: row0 = all, row1 = none
  AttnOptions m; m.causal = false; m.custom_mask = &mask;
  r = attn(Q, K, V, 2, 3, 1, 1, 1, 1, m);
  EXPECT_NEAR(r.o[0], 2.0, 1e-12); EXPECT_NEAR(r.o[1], 1.0, 1e-12);
  m.causal = true;  // AND with causal (rows at positions 1, 2): row0 sees {0}, row1 sees {1}
  r = attn(Q, K, V, 2, 3, 1, 1, 1, 1, m);
  EXPECT_NEAR(r.o[0], 0.0, 1e-12); EXPECT_NEAR(r.lse[0], 0.0, 1e-12); EXPECT_NEAR(r.o[1], 1.0, 1e-12);
  m.causal = false; m.custom_mask = &mask2;  // fully masked row: o = 0, lse = -inf
  r = attn(Q, K, V, 2, 3, 1, 1, 1, 1, m);
  EXPECT_EQ(r.o[1], 0.0); EXPECT_EQ(r.lse[1], -kInf);
}

TEST(Attention, GqaHeadMapping) {
  const int L = 4, Hq = 4, Hkv = 2, D = 3, Dv = 2;
  auto q = randv(Hq * D, 6), k = randv(L * Hkv * D, 7), v = randv(L * Hkv * Dv, 8);
  AttnOptions opt; opt.sm_scale = 0.7;
  Out r = attn(q.data(), k.data(), v.data(), 1, L, Hq, Hkv, D, Dv, opt);
  for (int h = 0; h < Hq; ++h) {
    const int kh = h / (Hq / Hkv);
    std::vector<double> k1, v1;
    for (int j = 0; j < L; ++j) {
      k1.insert(k1.end(), &k[(j * Hkv + kh) * D], &k[(j * Hkv + kh) * D] + D);
      v1.insert(v1.end(), &v[(j * Hkv + kh) * Dv], &v[(j * Hkv + kh) * Dv] + Dv);
    }
    Out r1 = attn(q.data() + h * D, k1.data(), v1.data(), 1, L, 1, 1, D, Dv, opt);
    expect_near_vec(r.o.data() + h * Dv, r1.o.data(), Dv);
    EXPECT_NEAR(r.lse[h], r1.lse[0], 1e-12);
  }
}

// ------------------------------------------------------------------ merge
TEST(Merge, PrefixPlusCausalSuffixEqualsWhole) {
  // Cascade: 3 causal query rows over 9 keys == merge(non-causal over keys 0..3, causal over keys 4..8).
  const int qo = 3, L = 9, H = 2, D = 4, Dv = 3, split = 4;
  auto q = randv(qo * H * D, 9), k = randv(L * H * D, 10), v = randv(L * H * Dv, 11);
  AttnOptions causal; causal.sm_scale = 0.8;
  AttnOptions full = causal; full.causal = false;
  Out w = attn(q.data(), k.data(), v.data(), qo, L, H, H, D, Dv, causal);
  Out a = attn(q.data(), k.data(), v.data(), qo, split, H, H, D, Dv, full);
  Out b = attn(q.data(), &k[split * H * D], &v[split * H * Dv], qo, L - split, H, H, D, Dv, causal);
  for (int r = 0; r < qo * H; ++r) {
    std::vector<double> om(Dv); double lm;
    merge_state(&a.o[r * Dv], a.lse[r], &b.o[r * Dv], b.lse[r], Dv, om.data(), &lm);
    expect_near_vec(om.data(), &w.o[r * Dv], Dv);
    EXPECT_NEAR(lm, w.lse[r], 1e-12);
  }
}

TEST(Merge, ManyPartsAndEmpty) {
  const int L = 10, D = 3, Dv = 2, cuts[4] = {0, 3, 7, 10};
  auto q = randv(D, 12), k = randv(L * D, 13), v = randv(L * Dv, 14);
  AttnOptions opt; opt.causal = false;
  Out w = attn(q.data(), k.data(), v.data(), 1, L, 1, 1, D, Dv, opt);
  std::vector<double> parts(4 * Dv, NAN), lses(4, -kInf);  // part 3: empty state with garbage o
  for (int p = 0; p < 3; ++p)
    attention(q.data(), &k[cuts[p] * D], &v[cuts[p] * Dv], 1, cuts[p + 1] - cuts[p], 1, 1, D, Dv, opt,
              &parts[p * Dv], &lses[p]);
  const double* ptrs[4] = {&parts[0], &parts[Dv], &parts[2 * Dv], &parts[3 * Dv]};
  std::vector<double> om(Dv);
  double lm;
  merge_states(ptrs, lses.data(), 4, Dv, om.data(), &lm);
  expect_near_vec(om.data(), w.o.data(), Dv);
  EXPECT_NEAR(lm, w.lse[0], 1e-12);
  const double e[2] = {1.0, 2.0};  // both empty
  merge_state(e, -kInf, e, -kInf, 2, om.data(), &lm);
  EXPECT_EQ(om[0], 0.0); EXPECT_EQ(lm, -kInf);
}

// ------------------------------------------------------------------ MLA
TEST(Mla, HandComputedRow) {
  const int T = 2, L = 5, H = 2, Dc = 4, Dr = 2, t = 1, h = 1;  // checked row: position 4 sees all keys
  auto qn = randv(T * H * Dc, 15), qp = randv(T * H * Dr, 16), ckv = randv(L * Dc, 17), kpe = randv(L * Dr, 18);
  std::vector<double> o(T * H * Dc), lse(T * H), w(L), acc(Dc, 0.0);
  mla_attention(qn.data(), qp.data(), ckv.data(), kpe.data(), T, L, H, Dc, Dr, 0.3, true, o.data(), lse.data());
  double den = 0;  // scores are O(1): no max subtraction needed here
  for (int j = 0; j < L; ++j) {
    double s = 0;
    for (int d = 0; d < Dc; ++d) s += qn[(t * H + h) * Dc + d] * ckv[j * Dc + d];
    for (int d = 0; d < Dr; ++d) s += qp[(t * H + h) * Dr + d] * kpe[j * Dr + d];
    den += w[j] = std::exp(0.3 * s);
    for (int d = 0; d < Dc; ++d) acc[d] += w[j] * ckv[j * Dc + d];
  }
  for (int d = 0; d < Dc; ++d) EXPECT_NEAR(o[(t * H + h) * Dc + d], acc[d] / den, 1e-12);
  EXPECT_NEAR(lse[t * H + h], std::log(den), 1e-12);
}

// ------------------------------------------------------------------ linear attention
TEST(Linear, GdnBetaZeroKeepsState) {
  const int T = 3, H = 2, Dk = 3, Dv = 2;
  auto q = randv(T * H * Dk, 19), k = randv(T * H * Dk, 20), v = randv(T * H * Dv, 21), S0 = randv(H * Dk * Dv, 22);
  std::vector<double> g(T * H, 0.0), beta(T * H, 0.0), o(T * H * Dv), S = S0;
  gdn_recurrent(q.data(), k.data(), v.data(), g.data(), beta.data(), T, H, H, Dk, Dv, 0.5, false, S.data(), o.data());
  expect_near_vec(S.data(), S0.data(), S.size(), 0.0);
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h)
      for (int j = 0; j < Dv; ++j) {
        double acc = 0; for (int i = 0; i < Dk; ++i) acc += S0[(h * Dk + i) * Dv + j] * q[(t * H + h) * Dk + i] * 0.5;
        EXPECT_NEAR(o[(t * H + h) * Dv + j], acc, 1e-12);
      }
}

TEST(Linear, GdnDeltaRuleWritesValue) {
  // beta = 1, (normalised) unit key e0: row 0 of the decayed S is replaced by ~v, row 1 only decays.
  std::vector<double> q = {1.0, 0.0}, k = {2.0, 0.0}, v = {3.0, -1.0}, g = {std::log(0.5)}, beta = {1.0};
  std::vector<double> S = {10.0, 20.0, 30.0, 40.0}, o(2);
  gdn_recurrent(q.data(), k.data(), v.data(), g.data(), beta.data(), 1, 1, 1, 2, 2, 1.0, true, S.data(), o.data());
  const double kn = 2.0 / std::sqrt(4.0 + 1e-6), qn = 1.0 / std::sqrt(1.0 + 1e-6);
  for (int j = 0; j < 2; ++j) {
    const double s0 = 0.5 * (10.0 + 10.0 * j);
    EXPECT_NEAR(S[j], s0 + kn * (v[j] - s0 * kn), 1e-12);
    EXPECT_NEAR(S[j], v[j], 1e-5);
    EXPECT_NEAR(S[2 + j], 0.5 * (30.0 + 10.0 * j), 1e-12);
    EXPECT_NEAR(o[j], S[j] * qn, 1e-12);
  }
}

TEST(Linear, GlaClosedForm) {
  // S_t = exp(sum_{r<=t} g_r) S0 + sum_{s<=t} exp(sum_{s<r<=t} g_r) k_s v_s^T ; o_t = S_t^T q_t * scale
  const int T = 4, Hv = 2, Dk = 3, Dv = 2;  // one q/k head shared by both value heads
  auto q = randv(T * Dk, 23), k = randv(T * Dk, 24), v = randv(T * Hv * Dv, 25), g = randv(T * Hv, 26);
  for (double& x : g) x = -std::fabs(x) * 0.3;
  auto S0 = randv(Hv * Dk * Dv, 27), S = S0;
  std::vector<double> o(T * Hv * Dv);
  gla_recurrent(q.data(), k.data(), v.data(), g.data(), T, 1, Hv, Dk, Dv, 0.25, S.data(), o.data());
  auto G = [&](int from, int to, int hv) { double x = 0; for (int r = from; r <= to; ++r) x += g[r * Hv + hv]; return x; };
  for (int hv = 0; hv < Hv; ++hv)
    for (int t = 0; t < T; ++t)
      for (int j = 0; j < Dv; ++j) {
        double acc = 0;
        for (int i = 0; i < Dk; ++i) {
          double Sij = std::exp(G(0, t, hv)) * S0[(hv * Dk + i) * Dv + j];
          for (int s = 0; s <= t; ++s) Sij += std::exp(G(s + 1, t, hv)) * k[s * Dk + i] * v[(s * Hv + hv) * Dv + j];
          acc += Sij * q[t * Dk + i] * 0.25;
          if (t == T - 1) { EXPECT_NEAR(S[(hv * Dk + i) * Dv + j], Sij, 1e-12); }
        }
        EXPECT_NEAR(o[(t * Hv + hv) * Dv + j], acc, 1e-12);
      }
}

// merge_state / merge_states against ref::merge_state(s): every o dtype, empty (-inf)
// parts, in-place aliasing, optional lse output, and rejected calls leaving outputs
// untouched.
#include <cmath>
#include <limits>

#include "support/test_support.hpp"

using namespace clattn;
using test::ctx;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

double tol(DType t) { return t == DType::F32 ? 2e-6 : t == DType::F16 ? 2e-3 : 1.6e-2; }

std::vector<double> to_f64(const std::vector<float>& v) { return {v.begin(), v.end()}; }
std::vector<float> to_f32(const std::vector<double>& v) { return {v.begin(), v.end()}; }

// lse values: mostly finite, some -inf (empty states), some rows both -inf.
std::vector<double> random_lse(test::Rng& rng, size_t n) {
  std::vector<double> s(n);
  for (auto& x : s) x = rng.uniform_int(0, 5) == 0 ? -kInf : rng.uniform(-8.0, 8.0);
  return s;
}

}  // namespace

TEST(MergeState, TwoWayMatchesReference) {
  CLATTN_SEED_TRACE();
  test::Rng rng(1);
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    const int T = 7, H = 3, D = 80;
    const size_t rows = size_t(T) * H, n = rows * D;
    auto va = test::quantize(rng.vec(n), dt), vb = test::quantize(rng.vec(n), dt);
    auto sa = random_lse(rng, rows), sb = random_lse(rng, rows);
    sa[0] = sb[0] = -kInf;  // both empty -> o = 0, lse = -inf
    // The device reads f32 lse: compare against the reference on the same f32 values.
    sa = to_f64(to_f32(sa)), sb = to_f64(to_f32(sb));
    std::vector<double> o_ref(n), s_ref(rows);
    for (size_t r = 0; r < rows; ++r)
      ref::merge_state(&va[r * D], sa[r], &vb[r * D], sb[r], D, &o_ref[r * D], &s_ref[r]);

    auto dva = test::upload(test::pack(va, dt)), dvb = test::upload(test::pack(vb, dt));
    auto dsa = test::upload(to_f32(sa)), dsb = test::upload(to_f32(sb));
    DeviceBuffer dvo(ctx(), n * dtype_size(dt)), dso(ctx(), rows * 4);
    MergeStateArgs a;
    a.v_a = dva.get(), a.s_a = dsa.get(), a.v_b = dvb.get(), a.s_b = dsb.get();
    a.v_out = dvo.get(), a.s_out = dso.get();
    a.num_tokens = T, a.num_heads = H, a.head_dim = D, a.dtype = dt;
    merge_state(ctx(), a);
    auto o = test::unpack(test::download<uint8_t>(dvo, n * dtype_size(dt)), dt);
    auto s = to_f64(test::download<float>(dso, rows));
    EXPECT_TRUE(test::all_close(o, o_ref, tol(dt), tol(dt), std::string("o ") + dtype_name(dt)));
    EXPECT_TRUE(test::all_close(s, s_ref, 1e-5, 1e-6, "lse"));
    for (int d = 0; d < D; ++d) EXPECT_EQ(o[size_t(d)], 0.0);
    EXPECT_EQ(s[0], -kInf);

    // In place: v_out = v_a, s_out = s_a.
    a.v_out = dva.get(), a.s_out = dsa.get();
    merge_state(ctx(), a);
    auto o2 = test::unpack(test::download<uint8_t>(dva, n * dtype_size(dt)), dt);
    auto s2 = to_f64(test::download<float>(dsa, rows));
    EXPECT_EQ(o2, o) << "in-place merge differs";
    EXPECT_EQ(s2, s);
  }
}

TEST(MergeState, KWayMatchesReferenceAndIsTheTwoWayMerge) {
  CLATTN_SEED_TRACE();
  test::Rng rng(2);
  for (DType dt : {DType::F32, DType::BF16}) {
    for (int S : {1, 2, 5, 17}) {
      const int T = 4, H = 2, D = 128;
      const size_t rows = size_t(T) * H;
      auto v = test::quantize(rng.vec(rows * S * D), dt);
      auto s = to_f64(to_f32(random_lse(rng, rows * S)));
      for (int p = 0; p < S; ++p) s[size_t(p) * H] = -kInf;  // token 0, head 0: all parts empty
      std::vector<double> o_ref(rows * D), s_ref(rows);
      for (int t = 0; t < T; ++t)
        for (int h = 0; h < H; ++h) {
          std::vector<const double*> parts;
          std::vector<double> lses;
          for (int p = 0; p < S; ++p) {
            size_t i = (size_t(t) * S + p) * H + h;
            parts.push_back(&v[i * D]);
            lses.push_back(s[i]);
          }
          size_t r = size_t(t) * H + h;
          ref::merge_states(parts.data(), lses.data(), S, D, &o_ref[r * D], &s_ref[r]);
        }
      auto dv = test::upload(test::pack(v, dt));
      auto ds = test::upload(to_f32(s));
      DeviceBuffer dvo(ctx(), rows * D * dtype_size(dt)), dso(ctx(), rows * 4);
      MergeStatesArgs a;
      a.v = dv.get(), a.s = ds.get(), a.v_out = dvo.get(), a.s_out = dso.get();
      a.num_tokens = T, a.num_states = S, a.num_heads = H, a.head_dim = D, a.dtype = dt;
      merge_states(ctx(), a);
      auto o = test::unpack(test::download<uint8_t>(dvo, rows * D * dtype_size(dt)), dt);
      EXPECT_TRUE(test::all_close(o, o_ref, tol(dt), tol(dt), "o S=" + std::to_string(S)));
      EXPECT_TRUE(test::all_close(to_f64(test::download<float>(dso, rows)), s_ref, 1e-5, 1e-6, "lse"));
    }
  }
}

TEST(MergeState, CascadeEqualsAttentionOverTheUnion) {
  // Two attention states over disjoint halves of the keys merge to attention over all.
  CLATTN_SEED_TRACE();
  test::Rng rng(3);
  const int H = 4, D = 64, n1 = 37, n2 = 50;
  auto q = rng.vec(size_t(H) * D, -2, 2), k = rng.vec(size_t(n1 + n2) * D), v = rng.vec(size_t(n1 + n2) * D);
  ref::AttnOptions opt;
  opt.causal = false;
  std::vector<double> o1(size_t(H) * D), o2(o1.size()), oall(o1.size()), l1(H), l2(H), lall(H);
  ref::attention(q.data(), k.data(), v.data(), 1, n1, H, 1, D, D, opt, o1.data(), l1.data());
  ref::attention(q.data(), k.data() + size_t(n1) * D, v.data() + size_t(n1) * D, 1, n2, H, 1, D, D, opt, o2.data(),
                 l2.data());
  ref::attention(q.data(), k.data(), v.data(), 1, n1 + n2, H, 1, D, D, opt, oall.data(), lall.data());
  auto da = test::upload(to_f32(o1)), db = test::upload(to_f32(o2));
  auto sa = test::upload(to_f32(l1)), sb = test::upload(to_f32(l2));
  DeviceBuffer vo(ctx(), size_t(H) * D * 4), so(ctx(), size_t(H) * 4);
  MergeStateArgs a;
  a.v_a = da.get(), a.s_a = sa.get(), a.v_b = db.get(), a.s_b = sb.get(), a.v_out = vo.get(), a.s_out = so.get();
  a.num_tokens = 1, a.num_heads = H, a.head_dim = D;
  merge_state(ctx(), a);
  EXPECT_TRUE(test::all_close(to_f64(test::download<float>(vo, size_t(H) * D)), oall, 1e-5, 1e-5, "o"));
  EXPECT_TRUE(test::all_close(to_f64(test::download<float>(so, H)), lall, 1e-5, 1e-6, "lse"));
}

TEST(MergeState, RejectedCallsLeaveOutputsUntouched) {
  const int T = 3, H = 2, D = 64;
  const size_t rows = size_t(T) * H;
  DeviceBuffer va(ctx(), rows * D * 4), vb(ctx(), rows * D * 4), sa(ctx(), rows * 4), sb(ctx(), rows * 4);
  DeviceBuffer small(ctx(), rows * D * 2), vo(ctx(), rows * D * 4), so(ctx(), rows * 4);
  vo.fill_bytes(ctx(), 0x5a);
  so.fill_bytes(ctx(), 0x5a);
  MergeStateArgs a;
  a.v_a = va.get(), a.s_a = sa.get(), a.v_b = vb.get(), a.s_b = sb.get(), a.v_out = vo.get(), a.s_out = so.get();
  a.num_tokens = T, a.num_heads = H, a.head_dim = D, a.dtype = DType::F32;
  auto bad = a;
  bad.v_b = small.get();
  EXPECT_TRUE(test::throws_error([&] { merge_state(ctx(), bad); }, Status::InvalidArgument, "v_b"));
  bad = a;
  bad.dtype = DType::FP8_E4M3;
  EXPECT_TRUE(test::throws_error([&] { merge_state(ctx(), bad); }, Status::Unsupported, "dtype"));
  bad = a;
  bad.head_dim = 0;
  EXPECT_TRUE(test::throws_error([&] { merge_state(ctx(), bad); }, Status::InvalidArgument, "head_dim"));
  MergeStatesArgs k;
  k.v = va.get(), k.s = sa.get(), k.v_out = vo.get(), k.s_out = so.get();
  k.num_tokens = T, k.num_states = 2, k.num_heads = H, k.head_dim = D;  // v holds one state only
  EXPECT_TRUE(test::throws_error([&] { merge_states(ctx(), k); }, Status::InvalidArgument, "v:"));
  for (auto b : test::download<uint8_t>(vo, rows * D * 4)) ASSERT_EQ(b, 0x5a);
  for (auto b : test::download<uint8_t>(so, rows * 4)) ASSERT_EQ(b, 0x5a);
}

// apply_rope and rope_append_kv against the double-precision reference (reference/rope_reference):
// NeoX and GPT-J, full and partial rotary dims, the theta/scale form and the cos/sin cache
// form, int32 and int64 positions, padded strides, in place and out of place, every io dtype;
// rope_append_kv into every cache dtype (scales, NHD and HND, negative slots) with q_out in
// another dtype; int8 and int4 caches against the reference quantisers and, byte for byte,
// against apply_rope then append_kv, as are fp8 and float caches with per-KV-head scales. Device
// faults (a position outside the cache), and rejected calls that write nothing.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "clattn/rope.hpp"
#include "reference/kv_formats_reference.hpp"
#include "reference/rope_reference.hpp"
#include "support/test_support.hpp"

using namespace clattn;
using test::ctx;

namespace {

constexpr uint8_t kSentinel = 0x5a;

double eps_of(DType dt) {
  switch (dt) {
    case DType::BF16: return 1.0 / 256;
    case DType::F16: return 1.0 / 2048;
    case DType::FP8_E4M3: return 1.0 / 16;
    case DType::FP8_E5M2: return 1.0 / 8;
    default: return 1e-6;
  }
}

struct RopeCase {
  int T = 0, Hq = 0, Hk = 0, D = 0, R = 0;
  bool gptj = false, with_cache = false, i64 = true;
  double theta = 10000.0, scale = 1.0;
  int64_t cache_rows = 0;
  std::vector<int64_t> pos;
  std::vector<float> cs;  // [cache_rows, R]
  std::string describe() const {
    return "T=" + std::to_string(T) + " Hq=" + std::to_string(Hq) + " Hk=" + std::to_string(Hk) + " D=" +
           std::to_string(D) + " R=" + std::to_string(R) + (gptj ? " gptj" : " neox") +
           (with_cache ? " cache" : " theta=" + std::to_string(theta) + " scale=" + std::to_string(scale)) +
           (i64 ? " i64" : " i32");
  }
  // Tolerance of a rotated value: the angle in f32 (theta form) and the output rounding.
  double angle_err() const {
    const int64_t pmax = pos.empty() ? 0 : *std::max_element(pos.begin(), pos.end());
    return with_cache ? 1e-6 : 3e-7 * double(pmax) / scale + 1e-6;
  }
};

RopeCase make_case(test::Rng& rng, int T, int Hq, int Hk, int D, int R, bool gptj, bool with_cache, bool i64) {
  RopeCase c;
  c.T = T, c.Hq = Hq, c.Hk = Hk, c.D = D, c.R = R, c.gptj = gptj, c.with_cache = with_cache, c.i64 = i64;
  c.theta = rng.uniform_int(0, 1) ? 10000.0 : 500000.0;
  c.scale = rng.uniform_int(0, 2) == 0 ? 4.0 : 1.0;
  const int pmax = 3000;
  for (int t = 0; t < T; ++t) c.pos.push_back(rng.uniform_int(0, pmax));
  if (with_cache) {
    c.cache_rows = pmax + 1;
    c.cs.resize(size_t(c.cache_rows) * R);
    // Any numbers do (the cache form reads them as they are): angles of a scaled schedule.
    for (int64_t p = 0; p < c.cache_rows; ++p)
      for (int i = 0; i < R / 2; ++i) {
        const double ang = double(p) * 0.7 * std::pow(c.theta, -2.0 * i / R) + 0.01 * i;
        c.cs[size_t(p * R + i)] = float(std::cos(ang)), c.cs[size_t(p * R + R / 2 + i)] = float(std::sin(ang));
      }
  }
  return c;
}

RopeConfig config_of(const RopeCase& c, const DeviceBuffer* cs) {
  RopeConfig r;
  r.style = c.gptj ? RopeStyle::GptJ : RopeStyle::NeoX;
  r.rotary_dim = c.R == c.D ? 0 : c.R;
  r.theta = float(c.theta), r.scale = float(c.scale);
  if (cs) r.cos_sin_cache = cs->get(), r.cache_positions = c.cache_rows;
  return r;
}

// Reference rotation of the rows x [T, H, D] at strides (st, sh).
std::vector<double> rotate_rows(const RopeCase& c, std::vector<double> x, int H, int64_t st, int64_t sh) {
  std::vector<double> row(size_t(c.D)), csd(size_t(c.R));
  for (int t = 0; t < c.T; ++t) {
    const double* cs = nullptr;
    if (c.with_cache) {
      for (int i = 0; i < c.R; ++i) csd[size_t(i)] = c.cs[size_t(c.pos[size_t(t)] * c.R + i)];
      cs = csd.data();
    }
    for (int h = 0; h < H; ++h) {
      double* r = &x[size_t(t * st + h * sh)];
      ref::rope_row(r, c.D, c.R, c.gptj, c.pos[size_t(t)], c.theta, c.scale, cs);
    }
  }
  return x;
}

// The elements of rows [T, H, D] at strides (st, sh) of a flat buffer.
std::vector<double> gather(const std::vector<double>& flat, int T, int H, int D, int64_t st, int64_t sh) {
  std::vector<double> out;
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h)
      for (int d = 0; d < D; ++d) out.push_back(flat[size_t(t * st + h * sh + d)]);
  return out;
}

DeviceBuffer upload_positions(const RopeCase& c) {
  if (c.i64) return test::upload(c.pos);
  std::vector<int32_t> p32(c.pos.begin(), c.pos.end());
  return test::upload(p32);
}

}  // namespace

TEST(ApplyRope, MatchesTheReference) {
  CLATTN_SEED_TRACE();
  test::Rng rng(2801);
  struct S { int Hq, Hk, D, R; };
  const S shapes[] = {{4, 2, 64, 64}, {3, 1, 128, 32}, {2, 0, 32, 16}, {0, 3, 80, 80}, {5, 5, 256, 128}};
  const DType dts[] = {DType::BF16, DType::F32, DType::F16};
  int k = 0;
  for (const S& s : shapes)
    for (int variant = 0; variant < 2; ++variant, ++k) {
      const bool gptj = k % 2 == 1, with_cache = k % 3 == 2, i64 = k % 4 != 1, in_place = k % 3 == 0;
      const DType dt = dts[k % 3];
      RopeCase c = make_case(rng, rng.uniform_int(1, 9), s.Hq, s.Hk, s.D, s.R, gptj, with_cache, i64);
      SCOPED_TRACE(c.describe() + " " + dtype_name(dt) + (in_place ? " in place" : ""));
      const int64_t qsh = s.D + (k % 2 ? 8 : 0), qst = s.Hq * qsh + (k % 2 ? 16 : 0);
      const int64_t ksh = s.D, kst = s.Hk * ksh;
      const auto q = test::quantize(rng.vec(size_t(std::max<int64_t>(1, c.T * qst)), -2, 2), dt);
      const auto kk = test::quantize(rng.vec(size_t(std::max<int64_t>(1, c.T * kst)), -2, 2), dt);
      auto dq = test::upload(test::pack(q, dt)), dk = test::upload(test::pack(kk, dt));
      std::vector<uint8_t> sentinel_q(test::pack(q, dt).size(), kSentinel), sentinel_k(test::pack(kk, dt).size(), kSentinel);
      auto dqo = test::upload(sentinel_q), dko = test::upload(sentinel_k);
      auto dpos = upload_positions(c);
      DeviceBuffer dcs;
      if (with_cache) dcs = test::upload(c.cs);
      RopeArgs a;
      a.q = dq.get(), a.q_out = in_place ? dq.get() : dqo.get(), a.k = dk.get(), a.k_out = in_place ? dk.get() : dko.get();
      a.dtype = dt, a.num_tokens = c.T, a.num_qo_heads = s.Hq, a.num_kv_heads = s.Hk, a.head_dim = s.D;
      a.q_stride_token = qst, a.q_stride_head = qsh, a.k_stride_token = kst, a.k_stride_head = ksh;
      a.pos.positions = dpos.get(), a.pos.dtype = i64 ? DType::I64 : DType::I32;
      a.rope = config_of(c, with_cache ? &dcs : nullptr);
      apply_rope(ctx(), a);
      ctx().finish();
      EXPECT_EQ(ctx().device_faults(true), 0u);
      const double tol = (eps_of(dt) + c.angle_err()) * 3.0;
      const auto wq = gather(rotate_rows(c, q, s.Hq, qst, qsh), c.T, s.Hq, s.D, qst, qsh);
      const auto wk = gather(rotate_rows(c, kk, s.Hk, kst, ksh), c.T, s.Hk, s.D, kst, ksh);
      const auto gq = gather(test::unpack(test::download<uint8_t>(in_place ? dq : dqo, sentinel_q.size()), dt), c.T,
                             s.Hq, s.D, qst, qsh);
      const auto gk = gather(test::unpack(test::download<uint8_t>(in_place ? dk : dko, sentinel_k.size()), dt), c.T,
                             s.Hk, s.D, kst, ksh);
      EXPECT_TRUE(test::all_close(gq, wq, tol, eps_of(dt), "q_out"));
      EXPECT_TRUE(test::all_close(gk, wk, tol, eps_of(dt), "k_out"));
      if (!in_place && s.Hq && qsh > s.D) {  // the padding between head rows is untouched
        const auto raw = test::download<uint8_t>(dqo, sentinel_q.size());
        EXPECT_EQ(raw[size_t(s.D) * dtype_size(dt)], kSentinel);
      }
      if (::testing::Test::HasFailure()) return;
    }
}

TEST(RopeAppendKV, MatchesTheReference) {
  CLATTN_SEED_TRACE();
  test::Rng rng(2802);
  const DType kvs[] = {DType::BF16, DType::FP8_E4M3, DType::F32, DType::F16, DType::FP8_E5M2};
  const DType srcs[] = {DType::BF16, DType::F32, DType::F16};
  for (int k = 0; k < 10; ++k) {
    const DType kv = kvs[k % 5], src = srcs[k % 3], qo = srcs[(k + 1) % 3];
    const int D = k % 2 ? 128 : 64, R = k % 4 == 3 ? D / 2 : D, Hkv = 1 + k % 3, Hq = Hkv * (k % 2 ? 4 : 1);
    const int P = k % 3 == 1 ? 1 : 16;
    RopeCase c = make_case(rng, rng.uniform_int(1, 12), Hq, Hkv, D, R, k % 2 == 0, k % 3 == 2, k % 4 != 2);
    SCOPED_TRACE(c.describe() + " kv " + dtype_name(kv) + " src " + dtype_name(src) + " q_out " + dtype_name(qo) +
                 " P=" + std::to_string(P));
    PagedKV cache = test::cache_geometry(P, Hkv, D, k % 2 ? KVLayout::HND : KVLayout::NHD, kv, k % 4 == 1 ? 4 : 0);
    cache.num_pages = (c.T + P - 1) / P + 2;
    const double ks = (kv == DType::FP8_E4M3 || kv == DType::FP8_E5M2) ? 0.25 : 1.0, vs = ks * 2;
    std::vector<int64_t> all(size_t(cache.num_pages) * P);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng.gen);
    std::vector<int64_t> slots;
    for (int t = 0; t < c.T; ++t) slots.push_back(rng.uniform_int(0, 4) == 0 ? -1 : all[size_t(t)]);
    const int64_t row = int64_t(Hkv) * D, qrow = int64_t(Hq) * D;
    const auto q = test::quantize(rng.vec(size_t(c.T * qrow), -2, 2), src);
    const auto kk = test::quantize(rng.vec(size_t(c.T * row), -2, 2), src);
    const auto vv = test::quantize(rng.vec(size_t(c.T * row), -2, 2), src);
    auto dq = test::upload(test::pack(q, src)), dk = test::upload(test::pack(kk, src)), dv = test::upload(test::pack(vv, src));
    const size_t qo_bytes = size_t(c.T * qrow) * dtype_size(qo);
    auto dqo = test::upload(std::vector<uint8_t>(qo_bytes, kSentinel));
    auto kc = test::upload(std::vector<uint8_t>(size_t(cache.required_bytes()), kSentinel));
    auto vc = test::upload(std::vector<uint8_t>(size_t(cache.required_bytes()), kSentinel));
    auto dpos = upload_positions(c);
    std::vector<int32_t> s32(slots.begin(), slots.end());
    DeviceBuffer dslots = k % 2 ? test::upload(slots) : test::upload(s32);
    DeviceBuffer dcs;
    if (c.with_cache) dcs = test::upload(c.cs);
    RopeAppendKVArgs a;
    a.append.k = dk.get(), a.append.v = dv.get(), a.append.src_dtype = src;
    a.append.slot_mapping = dslots.get(), a.append.slot_dtype = k % 2 ? DType::I64 : DType::I32;
    a.append.num_tokens = c.T, a.append.k_cache = kc.get(), a.append.v_cache = vc.get(), a.append.cache = cache;
    a.append.k_scale = float(ks), a.append.v_scale = float(vs);
    a.q = dq.get(), a.q_out = dqo.get(), a.num_qo_heads = Hq, a.q_out_dtype = qo;
    a.pos.positions = dpos.get(), a.pos.dtype = c.i64 ? DType::I64 : DType::I32;
    a.rope = config_of(c, c.with_cache ? &dcs : nullptr);
    rope_append_kv(ctx(), a);
    ctx().finish();
    EXPECT_EQ(ctx().device_faults(true), 0u);

    const auto wq = rotate_rows(c, q, Hq, qrow, D);
    const auto gq = test::unpack(test::download<uint8_t>(dqo, qo_bytes), qo);
    EXPECT_TRUE(test::all_close(gq, wq, (eps_of(qo) + eps_of(src) + c.angle_err()) * 3.0, eps_of(qo), "q_out"));
    const auto wk = rotate_rows(c, kk, Hkv, row, D);
    const auto kb = test::download<uint8_t>(kc, size_t(cache.required_bytes()));
    const auto vb = test::download<uint8_t>(vc, size_t(cache.required_bytes()));
    const size_t es = dtype_size(kv);
    std::vector<double> gk, wantk, gv, wantv;
    std::vector<bool> written(size_t(cache.required_bytes() / int64_t(es)), false);
    for (int t = 0; t < c.T; ++t) {
      if (slots[size_t(t)] < 0) continue;
      const int64_t sl = slots[size_t(t)];
      for (int h = 0; h < Hkv; ++h)
        for (int d = 0; d < D; ++d) {
          const int64_t off = (sl / P) * cache.page_stride() + (sl % P) * cache.token_stride() + h * cache.head_stride() + d;
          written[size_t(off)] = true;
          std::vector<uint8_t> e1(kb.begin() + off * es, kb.begin() + (off + 1) * es), e2(vb.begin() + off * es, vb.begin() + (off + 1) * es);
          gk.push_back(test::unpack(e1, kv, ks)[0]), gv.push_back(test::unpack(e2, kv, vs)[0]);
          wantk.push_back(wk[size_t(t * row + h * D + d)]), wantv.push_back(test::quantize({vv[size_t(t * row + h * D + d)]}, kv, vs)[0]);
        }
    }
    EXPECT_TRUE(test::all_close(gk, wantk, (eps_of(kv) + c.angle_err()) * 3.0 * std::max(1.0, ks), eps_of(kv), "k cache"));
    EXPECT_TRUE(test::all_close(gv, wantv, 0.0, 0.0, "v cache (exactly append_kv's conversion)"));
    for (size_t i = 0; i < written.size(); ++i)
      if (!written[i]) {
        ASSERT_EQ(kb[i * es], kSentinel) << "k cache element " << i << " written";
        ASSERT_EQ(vb[i * es], kSentinel) << "v cache element " << i << " written";
      }
    if (::testing::Test::HasFailure()) return;
  }
}

// int8 caches: the rotated k row and the v row quantised as append_kv quantises them (a scale
// per (token, head) row from its max). v rows and scales are bit-equal to the reference
// quantiser; k's scale is within f32 rounding of the reference-rotated row's max / 127 (the
// device rotates in f32) and each dequantised k value within half a step of the rotated value.
TEST(RopeAppendKV, Int8CacheMatchesTheReference) {
  CLATTN_SEED_TRACE();
  test::Rng rng(2803);
  for (int k = 0; k < 4; ++k) {
    const int D = k % 2 ? 128 : 64, R = k == 3 ? D / 2 : D, Hkv = 1 + k % 2, Hq = Hkv * 2, P = k == 2 ? 1 : 16;
    const bool f16s = k % 2 == 1;
    RopeCase c = make_case(rng, rng.uniform_int(1, 9), Hq, Hkv, D, R, k % 2 == 0, k == 1, true);
    SCOPED_TRACE(c.describe() + (f16s ? " f16 scales" : " f32 scales") + " P=" + std::to_string(P));
    PagedKV cache = test::cache_geometry(P, Hkv, D, k % 2 ? KVLayout::HND : KVLayout::NHD, DType::I8, 0);
    cache.num_pages = (c.T + P - 1) / P + 2;
    cache.scale_dtype = f16s ? DType::F16 : DType::F32;
    std::vector<int64_t> slots;
    for (int t = 0; t < c.T; ++t) slots.push_back(t == 1 ? -1 : int64_t(t) + P);
    const int64_t row = int64_t(Hkv) * D, qrow = int64_t(Hq) * D;
    const auto q = test::quantize(rng.vec(size_t(c.T * qrow), -2, 2), DType::F32);
    const auto kk = test::quantize(rng.vec(size_t(c.T * row), -2, 2), DType::F32);
    const auto vv = test::quantize(rng.vec(size_t(c.T * row), -2, 2), DType::F32);
    auto dq = test::upload(test::pack(q, DType::F32)), dk = test::upload(test::pack(kk, DType::F32));
    auto dv = test::upload(test::pack(vv, DType::F32));
    auto dqo = test::upload(std::vector<float>(size_t(c.T * qrow), 0.0f));
    const size_t cb = size_t(cache.required_bytes()), sb = size_t(cache.scale_required_bytes());
    auto kc = test::upload(std::vector<uint8_t>(cb, kSentinel)), vc = test::upload(std::vector<uint8_t>(cb, kSentinel));
    auto ksc = test::upload(std::vector<uint8_t>(sb, kSentinel)), vsc = test::upload(std::vector<uint8_t>(sb, kSentinel));
    auto dpos = upload_positions(c);
    auto dslots = test::upload(slots);
    DeviceBuffer dcs;
    if (c.with_cache) dcs = test::upload(c.cs);
    RopeAppendKVArgs a;
    a.append.k = dk.get(), a.append.v = dv.get(), a.append.src_dtype = DType::F32;
    a.append.slot_mapping = dslots.get(), a.append.slot_dtype = DType::I64;
    a.append.num_tokens = c.T, a.append.k_cache = kc.get(), a.append.v_cache = vc.get(), a.append.cache = cache;
    a.append.k_scale_cache = ksc.get(), a.append.v_scale_cache = vsc.get();
    a.q = dq.get(), a.q_out = dqo.get(), a.num_qo_heads = Hq, a.q_out_dtype = DType::F32;
    a.pos.positions = dpos.get(), a.pos.dtype = DType::I64;
    a.rope = config_of(c, c.with_cache ? &dcs : nullptr);
    rope_append_kv(ctx(), a);
    ctx().finish();
    EXPECT_EQ(ctx().device_faults(true), 0u);
    const auto gq = test::download<float>(dqo, size_t(c.T * qrow));
    EXPECT_TRUE(test::all_close(std::vector<double>(gq.begin(), gq.end()), rotate_rows(c, q, Hq, qrow, D),
                                c.angle_err() * 3.0 + 1e-6, 1e-6, "q_out"));
    const auto wk = rotate_rows(c, kk, Hkv, row, D);
    const auto kb = test::download<uint8_t>(kc, cb), vb = test::download<uint8_t>(vc, cb);
    const auto ksb = test::download<uint8_t>(ksc, sb), vsb = test::download<uint8_t>(vsc, sb);
    const size_t ses = f16s ? 2 : 4;
    auto scale_at = [&](const std::vector<uint8_t>& b, int64_t i) {
      return test::unpack(std::vector<uint8_t>(b.begin() + i * ses, b.begin() + (i + 1) * ses), cache.scale_dtype)[0];
    };
    int bad_v = 0, bad_k = 0;
    for (int t = 0; t < c.T; ++t) {
      const int64_t sl = slots[size_t(t)];
      if (sl < 0) continue;
      for (int h = 0; h < Hkv; ++h) {
        const int64_t co = (sl / P) * cache.page_stride() + (sl % P) * cache.token_stride() + h * cache.head_stride();
        const int64_t so = (sl / P) * cache.scale_page_stride() + (sl % P) * cache.scale_token_stride() +
                           h * cache.scale_head_stride();
        std::vector<float> x(static_cast<size_t>(D));
        for (int d = 0; d < D; ++d) x[size_t(d)] = float(vv[size_t(t * row + h * D + d)]);
        std::vector<int8_t> want(static_cast<size_t>(D));
        float want_scale = 0.0f;
        ref::int8_quantize_row(x.data(), D, f16s, want.data(), &want_scale);
        if (scale_at(vsb, so) != double(want_scale) || std::memcmp(&vb[size_t(co)], want.data(), size_t(D)) != 0) ++bad_v;
        double amax = 0.0;
        for (int d = 0; d < D; ++d) amax = std::max(amax, std::fabs(wk[size_t(t * row + h * D + d)]));
        const double ks = scale_at(ksb, so);
        const double tol_s = amax / 127.0 * ((f16s ? 1.0 / 1024 : 1e-6) + c.angle_err());
        if (std::fabs(ks - amax / 127.0) > tol_s) ++bad_k;
        for (int d = 0; d < D; ++d) {
          const double got = double(int8_t(kb[size_t(co + d)])) * ks, w = wk[size_t(t * row + h * D + d)];
          if (std::fabs(got - w) > ks * 0.5 + amax * (c.angle_err() + 1e-6)) ++bad_k;
        }
      }
    }
    EXPECT_EQ(bad_v, 0) << "v rows or scales differ from the reference quantiser";
    EXPECT_EQ(bad_k, 0) << "k rows or scales off the rotated rows";
    if (::testing::Test::HasFailure()) return;
  }
}

// int4 caches: the rotated k row and the v row quantised group by group as append_kv quantises
// them. The stored nibbles and [scale, zero] pairs equal ref::int4_quantize_group (packed low
// nibble first) applied to the k rows apply_rope writes in f32 (the same rotation on the same
// device: rope.cl's one rope_turn, so the comparison is bit for bit) and to the v rows; those
// rotated rows are within f32 rounding of the double reference rotation. Nothing else in the
// caches or scale caches is written.
TEST(RopeAppendKV, Int4CacheMatchesTheReference) {
  CLATTN_SEED_TRACE();
  test::Rng rng(2805);
  struct C {
    int D, R, G, Hkv, P;
    bool gptj, with_cache, f16s, hnd;
    DType src;
  };
  const C cases[] = {
      // NeoX with G dividing R/2: groups quantised in first-half / second-half couples.
      {64, 64, 32, 1, 16, false, false, false, false, DType::F32},
      {128, 64, 32, 2, 1, false, true, false, true, DType::F32},    // partial: groups 2 and 3 pass through
      {256, 192, 32, 1, 16, false, false, true, false, DType::BF16},  // three couples, two plain groups
      // NeoX otherwise, element by element: a group holding both halves, one holding rotated
      // and plain dims.
      {128, 128, 128, 1, 16, false, true, false, true, DType::F32},
      {64, 32, 64, 2, 16, false, false, true, false, DType::BF16},
      // GPT-J: a byte is a pair.
      {128, 128, 64, 2, 16, true, true, true, true, DType::BF16},
      {128, 96, 128, 1, 16, true, false, true, false, DType::F16},
  };
  for (const C& k : cases) {
    const int D = k.D, G = k.G, Hkv = k.Hkv, Hq = 2 * Hkv, P = k.P, ng = D / G;
    RopeCase c = make_case(rng, rng.uniform_int(2, 9), Hq, Hkv, D, k.R, k.gptj, k.with_cache, true);
    SCOPED_TRACE(c.describe() + " G=" + std::to_string(G) + (k.f16s ? " f16 scales" : " f32 scales") + " P=" +
                 std::to_string(P) + (k.hnd ? " HND" : " NHD") + " src " + dtype_name(k.src));
    PagedKV cache = test::cache_geometry(P, Hkv, D, k.hnd ? KVLayout::HND : KVLayout::NHD, DType::I4, 0);
    cache.num_pages = (c.T + P - 1) / P + 2, cache.quant_group = G;
    cache.scale_dtype = k.f16s ? DType::F16 : DType::F32;
    std::vector<int64_t> slots;
    for (int t = 0; t < c.T; ++t) slots.push_back(t == 1 ? -1 : int64_t(t) + P);
    const int64_t row = int64_t(Hkv) * D, qrow = int64_t(Hq) * D;
    const auto q = test::quantize(rng.vec(size_t(c.T * qrow), -2, 2), k.src);
    auto kk = test::quantize(rng.vec(size_t(c.T * row), -2, 2), k.src);
    auto vv = test::quantize(rng.vec(size_t(c.T * row), -2, 2), k.src);
    std::fill(kk.begin(), kk.begin() + D, 0.0);  // token 0, head 0: an all-zero row stays zero rotated
    std::fill(vv.begin(), vv.begin() + G, 0.0);  // an all-zero group: scale 0
    for (int d = G; d < std::min(D, 2 * G); ++d) vv[size_t(d)] = std::fabs(vv[size_t(d)]);  // positive only: zero 0
    auto dq = test::upload(test::pack(q, k.src)), dk = test::upload(test::pack(kk, k.src));
    auto dv = test::upload(test::pack(vv, k.src)), dk32 = test::upload(test::pack(kk, DType::F32));
    auto dqo = test::upload(std::vector<float>(size_t(c.T * qrow), 0.0f));
    auto dko = test::upload(std::vector<float>(size_t(c.T * row), 0.0f));
    const size_t cb = size_t(cache.required_bytes()), sb = size_t(cache.scale_required_bytes());
    auto kc = test::upload(std::vector<uint8_t>(cb, kSentinel)), vc = test::upload(std::vector<uint8_t>(cb, kSentinel));
    auto ksc = test::upload(std::vector<uint8_t>(sb, kSentinel)), vsc = test::upload(std::vector<uint8_t>(sb, kSentinel));
    auto dpos = upload_positions(c);
    auto dslots = test::upload(slots);
    DeviceBuffer dcs;
    if (c.with_cache) dcs = test::upload(c.cs);
    RopeAppendKVArgs a;
    a.append.k = dk.get(), a.append.v = dv.get(), a.append.src_dtype = k.src;
    a.append.slot_mapping = dslots.get(), a.append.slot_dtype = DType::I64;
    a.append.num_tokens = c.T, a.append.k_cache = kc.get(), a.append.v_cache = vc.get(), a.append.cache = cache;
    a.append.k_scale_cache = ksc.get(), a.append.v_scale_cache = vsc.get();
    a.q = dq.get(), a.q_out = dqo.get(), a.num_qo_heads = Hq, a.q_out_dtype = DType::F32;
    a.pos.positions = dpos.get(), a.pos.dtype = DType::I64;
    a.rope = config_of(c, c.with_cache ? &dcs : nullptr);
    rope_append_kv(ctx(), a);
    // The device's rotation of the same k rows, as apply_rope writes it in f32.
    RopeArgs ra;
    ra.k = dk32.get(), ra.k_out = dko.get(), ra.dtype = DType::F32, ra.num_tokens = c.T, ra.num_kv_heads = Hkv;
    ra.head_dim = D, ra.pos = a.pos, ra.rope = a.rope;
    apply_rope(ctx(), ra);
    ctx().finish();
    EXPECT_EQ(ctx().device_faults(true), 0u);
    const auto gq = test::download<float>(dqo, size_t(c.T * qrow));
    EXPECT_TRUE(test::all_close(std::vector<double>(gq.begin(), gq.end()), rotate_rows(c, q, Hq, qrow, D),
                                c.angle_err() * 3.0 + 1e-6, 1e-6, "q_out"));
    const auto krot = test::download<float>(dko, size_t(c.T * row));
    EXPECT_TRUE(test::all_close(std::vector<double>(krot.begin(), krot.end()), rotate_rows(c, kk, Hkv, row, D),
                                c.angle_err() * 3.0 + 1e-6, 1e-6, "k rotated by apply_rope"));
    const auto kb = test::download<uint8_t>(kc, cb), vb = test::download<uint8_t>(vc, cb);
    const auto ksb = test::download<uint8_t>(ksc, sb), vsb = test::download<uint8_t>(vsc, sb);
    const size_t ses = k.f16s ? 2 : 4;
    auto scale_at = [&](const std::vector<uint8_t>& b, int64_t i) {
      return test::unpack(std::vector<uint8_t>(b.begin() + i * ses, b.begin() + (i + 1) * ses), cache.scale_dtype)[0];
    };
    std::vector<bool> byte_written(cb, false), pair_written(sb / ses, false);
    int bad_k = 0, bad_v = 0;
    for (int t = 0; t < c.T; ++t) {
      const int64_t sl = slots[size_t(t)];
      if (sl < 0) continue;
      for (int h = 0; h < Hkv; ++h) {
        const int64_t co = ((sl / P) * cache.page_stride() + (sl % P) * cache.token_stride() + h * cache.head_stride()) / 2;
        const int64_t so = (sl / P) * cache.scale_page_stride() + (sl % P) * cache.scale_token_stride() +
                           h * cache.scale_head_stride();
        for (int g = 0; g < ng; ++g) {
          const int64_t b0 = co + g * G / 2, s0 = so + 2 * g;
          for (int i = 0; i < G / 2; ++i) byte_written[size_t(b0 + i)] = true;
          pair_written[size_t(s0)] = pair_written[size_t(s0 + 1)] = true;
          for (int kind = 0; kind < 2; ++kind) {
            std::vector<float> x(static_cast<size_t>(G));
            for (int d = 0; d < G; ++d) {
              const size_t at = size_t(t * row + h * D + g * G + d);
              x[size_t(d)] = kind ? float(vv[at]) : krot[at];
            }
            std::vector<uint8_t> u(static_cast<size_t>(G)), want(static_cast<size_t>(G / 2));
            float ws = 0.0f, wz = 0.0f;
            ref::int4_quantize_group(x.data(), G, k.f16s, u.data(), &ws, &wz);
            ref::int4_pack(u.data(), G, want.data());
            const auto& cbytes = kind ? vb : kb;
            const auto& sbytes = kind ? vsb : ksb;
            const bool ok = std::memcmp(&cbytes[size_t(b0)], want.data(), size_t(G / 2)) == 0 &&
                            scale_at(sbytes, s0) == double(ws) && scale_at(sbytes, s0 + 1) == double(wz);
            if (!ok) ++(kind ? bad_v : bad_k);
          }
        }
      }
    }
    EXPECT_EQ(bad_k, 0) << "k groups differ from the reference quantiser over the rotated rows";
    EXPECT_EQ(bad_v, 0) << "v groups differ from the reference quantiser";
    for (size_t i = 0; i < cb; ++i)
      if (!byte_written[i]) {
        ASSERT_EQ(kb[i], kSentinel) << "k cache byte " << i << " written";
        ASSERT_EQ(vb[i], kSentinel) << "v cache byte " << i << " written";
      }
    for (size_t i = 0; i < pair_written.size(); ++i)
      if (!pair_written[i]) {
        ASSERT_EQ(ksb[i * ses], kSentinel) << "k scale element " << i << " written";
        ASSERT_EQ(vsb[i * ses], kSentinel) << "v scale element " << i << " written";
      }
    if (::testing::Test::HasFailure()) return;
  }
}

// int8 and int4 caches, and fp8 / float caches with per-KV-head scales: rope_append_kv stores,
// byte for byte (codes, scales, [scale, zero] pairs, and nothing else), what apply_rope (f32)
// then append_kv store for the same rows (the same head scales), and its q_out equals
// apply_rope's: rows longer than a work-group (D = 256), a head dim that leaves work-items idle
// (D = 96), more KV heads than a work-group takes, more tokens than one takes on a CPU, all-zero
// rows and groups, negative slots, NeoX / GPT-J, partial rotary, both angle forms, f32 / f16
// scales, bf16 sources; head scales with per-tensor scales, one small enough to saturate fp8.
TEST(RopeAppendKV, CachesEqualApplyRopeThenAppend) {
  CLATTN_SEED_TRACE();
  test::Rng rng(2807);
  struct C {
    DType kv;
    int D, R, G, Hkv, T, P;
    bool gptj, with_cache, f16s, hnd;
    DType src;
    bool head_scales = false;  // float / fp8 caches: k/v_head_scales [Hkv], k_scale 0.5, v_scale 1.5
  };
  const C cases[] = {
      {DType::I8, 128, 128, 0, 2, 5, 16, false, false, false, false, DType::F32},
      {DType::I8, 256, 256, 0, 9, 3, 4, false, true, true, true, DType::BF16},
      {DType::I8, 96, 64, 0, 1, 21, 16, true, false, false, false, DType::F16},
      {DType::I8, 64, 32, 0, 3, 4, 1, false, false, true, false, DType::F32},
      {DType::I4, 128, 128, 64, 2, 5, 16, false, false, false, false, DType::F32},
      {DType::I4, 256, 192, 128, 9, 3, 4, false, true, true, true, DType::BF16},
      {DType::I4, 96, 96, 32, 1, 21, 16, true, false, false, false, DType::F16},
      {DType::I4, 64, 32, 64, 3, 4, 1, false, false, true, false, DType::F32},
      {DType::I4, 256, 256, 32, 2, 2, 16, true, true, false, true, DType::F32},
      {DType::FP8_E4M3, 128, 128, 0, 3, 5, 16, false, false, false, false, DType::BF16, true},
      {DType::FP8_E4M3, 256, 192, 0, 9, 3, 4, true, true, false, true, DType::F32, true},
      {DType::FP8_E4M3, 96, 64, 0, 2, 21, 16, false, false, false, false, DType::F16, false},
      {DType::F32, 64, 32, 0, 2, 4, 1, true, true, false, true, DType::F16, true},
      {DType::BF16, 128, 128, 0, 4, 6, 16, false, false, false, false, DType::F32, true},
  };
  for (const C& k : cases) {
    const int D = k.D, Hkv = k.Hkv, Hq = Hkv, P = k.P;
    RopeCase c = make_case(rng, k.T, Hq, Hkv, D, k.R, k.gptj, k.with_cache, true);
    SCOPED_TRACE(c.describe() + " " + dtype_name(k.kv) + " G=" + std::to_string(k.G) + (k.f16s ? " f16" : " f32") +
                 " scales P=" + std::to_string(P) + (k.hnd ? " HND" : " NHD") + " src " + dtype_name(k.src) +
                 (k.head_scales ? " head scales" : ""));
    const bool quant = k.kv == DType::I8 || k.kv == DType::I4;
    PagedKV cache = test::cache_geometry(P, Hkv, D, k.hnd ? KVLayout::HND : KVLayout::NHD, k.kv, 0);
    cache.num_pages = (c.T + P - 1) / P + 2;
    if (k.kv == DType::I4) cache.quant_group = k.G;
    cache.scale_dtype = k.f16s ? DType::F16 : DType::F32;
    std::vector<int64_t> slots;
    for (int t = 0; t < c.T; ++t) slots.push_back(t == 1 ? -1 : int64_t(c.T - 1 - t) + P);
    const int64_t row = int64_t(Hkv) * D, qrow = int64_t(Hq) * D;
    const auto q = test::quantize(rng.vec(size_t(c.T * qrow), -2, 2), k.src);
    auto kk = test::quantize(rng.vec(size_t(c.T * row), -3, 3), k.src);
    auto vv = test::quantize(rng.vec(size_t(c.T * row), -3, 3), k.src);
    std::fill(kk.begin(), kk.begin() + D, 0.0);                  // token 0, head 0: an all-zero k row
    std::fill(vv.begin() + D, vv.begin() + D + D / 2, 0.0);      // half a v row zero
    std::fill(kk.end() - D, kk.end() - D / 2, 0.0);              // and half of the last k row
    auto dq = test::upload(test::pack(q, k.src)), dk = test::upload(test::pack(kk, k.src));
    auto dv = test::upload(test::pack(vv, k.src)), dk32 = test::upload(test::pack(kk, DType::F32));
    auto dv32 = test::upload(test::pack(vv, DType::F32));
    auto dqo = test::upload(std::vector<float>(size_t(c.T * qrow), 0.0f));
    auto dko = test::upload(std::vector<float>(size_t(c.T * row), 0.0f));
    const size_t cb = size_t(cache.required_bytes()), sb = quant ? size_t(cache.scale_required_bytes()) : 4;
    std::vector<DeviceBuffer> bufs;  // fused k, v, k scales, v scales; then the two-kernel ones
    for (int i = 0; i < 8; ++i) bufs.push_back(test::upload(std::vector<uint8_t>(i % 4 < 2 ? cb : sb, kSentinel)));
    auto dpos = upload_positions(c);
    auto dslots = test::upload(slots);
    DeviceBuffer dcs;
    if (c.with_cache) dcs = test::upload(c.cs);
    RopeAppendKVArgs a;
    a.append.k = dk.get(), a.append.v = dv.get(), a.append.src_dtype = k.src;
    a.append.slot_mapping = dslots.get(), a.append.slot_dtype = DType::I64;
    a.append.num_tokens = c.T, a.append.k_cache = bufs[0].get(), a.append.v_cache = bufs[1].get(), a.append.cache = cache;
    if (quant) a.append.k_scale_cache = bufs[2].get(), a.append.v_scale_cache = bufs[3].get();
    DeviceBuffer dkh, dvh;
    if (k.head_scales) {
      const size_t nh = size_t(Hkv);
      std::vector<float> kh(nh), vh(nh);
      for (int h = 0; h < Hkv; ++h) kh[size_t(h)] = float(rng.uniform(0.25, 4.0)), vh[size_t(h)] = float(rng.uniform(0.25, 4.0));
      kh[0] = 1.0f / 256;  // k row / (0.5 / 256) passes e4m3's 448: saturated in both forms
      dkh = test::upload(kh), dvh = test::upload(vh);
      a.append.k_head_scales = dkh.get(), a.append.v_head_scales = dvh.get();
      a.append.k_scale = 0.5f, a.append.v_scale = 1.5f;
    }
    a.q = dq.get(), a.q_out = dqo.get(), a.num_qo_heads = Hq, a.q_out_dtype = DType::F32;
    a.pos.positions = dpos.get(), a.pos.dtype = DType::I64;
    a.rope = config_of(c, c.with_cache ? &dcs : nullptr);
    rope_append_kv(ctx(), a);
    RopeArgs ra;
    ra.k = dk32.get(), ra.k_out = dko.get(), ra.dtype = DType::F32, ra.num_tokens = c.T, ra.num_kv_heads = Hkv;
    ra.head_dim = D, ra.pos = a.pos, ra.rope = a.rope;
    auto dq32 = test::upload(test::pack(q, DType::F32)), dqo2 = test::upload(std::vector<float>(size_t(c.T * qrow), 0.0f));
    ra.q = dq32.get(), ra.q_out = dqo2.get(), ra.num_qo_heads = Hq;
    apply_rope(ctx(), ra);
    AppendKVArgs ap = a.append;
    ap.k = dko.get(), ap.v = dv32.get(), ap.src_dtype = DType::F32;
    ap.k_cache = bufs[4].get(), ap.v_cache = bufs[5].get();
    if (quant) ap.k_scale_cache = bufs[6].get(), ap.v_scale_cache = bufs[7].get();
    append_kv(ctx(), ap);
    ctx().finish();
    EXPECT_EQ(ctx().device_faults(true), 0u);
    EXPECT_TRUE(test::download<uint8_t>(dqo, size_t(c.T * qrow) * 4) == test::download<uint8_t>(dqo2, size_t(c.T * qrow) * 4))
        << "q_out differs from apply_rope's";
    const char* names[] = {"k cache", "v cache", "k scales", "v scales"};
    for (int i = 0; i < (quant ? 4 : 2); ++i) {
      const size_t n = i < 2 ? cb : sb;
      const auto fused = test::download<uint8_t>(bufs[size_t(i)], n), two = test::download<uint8_t>(bufs[size_t(i + 4)], n);
      size_t diff = 0;
      while (diff < n && fused[diff] == two[diff]) ++diff;
      EXPECT_EQ(diff, n) << names[i] << ": first differing byte " << diff;
    }
    if (::testing::Test::HasFailure()) return;
  }
}

// int4 through rope_append_kv takes append_kv's int4 checks: a group that does not divide the
// head dim, a missing scale cache, k_scale != 1, per-KV-head scales; nothing is written.
TEST(RopeAppendKV, Int4RejectsBadGroupAndScales) {
  test::Rng rng(2806);
  RopeCase c = make_case(rng, 2, 2, 1, 64, 64, false, false, true);
  PagedKV cache = test::cache_geometry(4, 1, 64, KVLayout::NHD, DType::I4, 0);
  cache.num_pages = 2, cache.quant_group = 32;
  const size_t cb = size_t(cache.required_bytes()), sb = size_t(cache.scale_required_bytes());
  auto src = test::upload(std::vector<float>(2 * 2 * 64, 1.0f)), dqo = test::upload(std::vector<uint8_t>(2 * 2 * 64 * 4, kSentinel));
  auto kc = test::upload(std::vector<uint8_t>(cb, kSentinel)), ksc = test::upload(std::vector<uint8_t>(sb, kSentinel));
  auto dpos = upload_positions(c), dslots = test::upload(std::vector<int64_t>{0, 1});
  auto hs = test::upload(std::vector<float>{0.5f});
  RopeAppendKVArgs good;
  good.append.k = good.append.v = src.get(), good.append.src_dtype = DType::F32, good.append.slot_mapping = dslots.get();
  good.append.num_tokens = 2, good.append.k_cache = good.append.v_cache = kc.get(), good.append.cache = cache;
  good.append.k_scale_cache = good.append.v_scale_cache = ksc.get();
  good.q = src.get(), good.q_out = dqo.get(), good.num_qo_heads = 2, good.q_out_dtype = DType::F32;
  good.pos.positions = dpos.get();
  struct Bad { const char* needle; std::function<void(RopeAppendKVArgs&)> edit; };
  const Bad bads[] = {
      {"cache.quant_group", [](RopeAppendKVArgs& a) { a.append.cache.quant_group = 48; }},
      {"cache.quant_group", [](RopeAppendKVArgs& a) { a.append.cache.quant_group = 128; }},
      {"v_scale_cache", [](RopeAppendKVArgs& a) { a.append.v_scale_cache = nullptr; }},
      {"k_scale/v_scale must be 1", [](RopeAppendKVArgs& a) { a.append.k_scale = 0.5f; }},
      {"k_head_scales/v_head_scales with an int4 cache",
       [&](RopeAppendKVArgs& a) { a.append.k_head_scales = a.append.v_head_scales = hs.get(); }},
  };
  for (const Bad& b : bads) {
    RopeAppendKVArgs a = good;
    b.edit(a);
    EXPECT_TRUE(test::throws_error([&] { rope_append_kv(ctx(), a); }, Status::InvalidArgument, b.needle)) << b.needle;
  }
  ctx().finish();
  for (uint8_t x : test::download<uint8_t>(dqo, 2 * 2 * 64 * 4)) ASSERT_EQ(x, kSentinel);
  for (uint8_t x : test::download<uint8_t>(kc, cb)) ASSERT_EQ(x, kSentinel);
  for (uint8_t x : test::download<uint8_t>(ksc, sb)) ASSERT_EQ(x, kSentinel);
}

// A device position outside [0, cache rows) leaves that token's outputs unwritten and sets
// FaultPosition; the other tokens are rotated.
TEST(RopeAppendKV, DevicePositionOutsideTheCacheIsAFault) {
  for (DType kv : {DType::F32, DType::I8, DType::I4}) {  // the pair kernel, the int8 and int4 kernels
    SCOPED_TRACE(dtype_name(kv));
    test::Rng rng(2803);
    RopeCase c = make_case(rng, 3, 2, 1, 32, 32, false, true, true);
    c.pos[1] = c.cache_rows;  // one past the cache
    PagedKV cache = test::cache_geometry(4, 1, 32, KVLayout::NHD, kv, 0);
    cache.num_pages = 2;
    if (kv == DType::I4) cache.quant_group = 32;
    const size_t cb = size_t(cache.required_bytes()), row = cb / 8;  // 8 slots of one head
    const size_t sb = size_t(std::max<int64_t>(cache.scale_required_bytes(), 4)), srow = sb / 8;
    const auto q = rng.vec(size_t(3 * 2 * 32), -1, 1), kk = rng.vec(size_t(3 * 32), -1, 1);
    auto dq = test::upload(test::pack(q, DType::F32)), dk = test::upload(test::pack(kk, DType::F32)), dv = test::upload(test::pack(kk, DType::F32));
    auto dqo = test::upload(std::vector<uint8_t>(q.size() * 4, kSentinel));
    auto kc = test::upload(std::vector<uint8_t>(cb, kSentinel)), vc = test::upload(std::vector<uint8_t>(cb, kSentinel));
    auto ksc = test::upload(std::vector<uint8_t>(sb, kSentinel)), vsc = test::upload(std::vector<uint8_t>(sb, kSentinel));
    auto dpos = upload_positions(c), dcs = test::upload(c.cs);
    auto dslots = test::upload(std::vector<int64_t>{0, 1, 2});
    RopeAppendKVArgs a;
    a.append.k = dk.get(), a.append.v = dv.get(), a.append.src_dtype = DType::F32, a.append.slot_mapping = dslots.get();
    a.append.num_tokens = 3, a.append.k_cache = kc.get(), a.append.v_cache = vc.get(), a.append.cache = cache;
    if (kv != DType::F32) a.append.k_scale_cache = ksc.get(), a.append.v_scale_cache = vsc.get();
    a.q = dq.get(), a.q_out = dqo.get(), a.num_qo_heads = 2, a.q_out_dtype = DType::F32;
    a.pos.positions = dpos.get(), a.rope = config_of(c, &dcs);
    ctx().device_faults(true);
    rope_append_kv(ctx(), a);
    ctx().finish();
    EXPECT_EQ(ctx().device_faults(true), uint32_t(FaultPosition));
    const auto go = test::download<uint8_t>(dqo, q.size() * 4);
    const auto gk = test::download<uint8_t>(kc, cb), gs = test::download<uint8_t>(ksc, sb);
    for (int i = 0; i < 64 * 4; ++i) ASSERT_EQ(go[size_t(64 * 4 + i)], kSentinel) << "q_out of token 1 written";
    for (size_t i = 0; i < row; ++i) ASSERT_EQ(gk[row + i], kSentinel) << "k cache slot 1 written";
    EXPECT_NE(go[0], kSentinel);
    EXPECT_NE(go[2 * 64 * 4], kSentinel) << "q_out of token 2 not written";
    EXPECT_NE(std::memcmp(&gk[2 * row], std::vector<uint8_t>(row, kSentinel).data(), row), 0) << "k cache slot 2 not written";
    if (kv != DType::F32) {
      for (size_t i = 0; i < srow; ++i) ASSERT_EQ(gs[srow + i], kSentinel) << "k scales of slot 1 written";
      EXPECT_NE(gs[0], kSentinel);
    }
  }
}

TEST(RopeAppendKV, RejectsBadArgumentsWritingNothing) {
  test::Rng rng(2804);
  RopeCase c = make_case(rng, 2, 2, 1, 32, 32, false, false, true);
  PagedKV cache = test::cache_geometry(4, 1, 32, KVLayout::NHD, DType::BF16, 0);
  cache.num_pages = 2;
  auto dq = test::upload(std::vector<uint8_t>(2 * 2 * 32 * 2, 0)), dk = test::upload(std::vector<uint8_t>(2 * 32 * 2, 0));
  auto dqo = test::upload(std::vector<uint8_t>(2 * 2 * 32 * 2, kSentinel));
  auto kc = test::upload(std::vector<uint8_t>(size_t(cache.required_bytes()), kSentinel));
  auto dpos = upload_positions(c), dslots = test::upload(std::vector<int64_t>{0, 1});
  auto hs = test::upload(std::vector<float>{0.5f}), hs_short = test::upload(std::vector<uint8_t>(2, 0));
  RopeAppendKVArgs good;
  good.append.k = dk.get(), good.append.v = dk.get(), good.append.slot_mapping = dslots.get();
  good.append.num_tokens = 2, good.append.k_cache = kc.get(), good.append.v_cache = kc.get(), good.append.cache = cache;
  good.q = dq.get(), good.q_out = dqo.get(), good.num_qo_heads = 2;
  good.pos.positions = dpos.get();
  const std::vector<int64_t> host_bad = {5, -1};
  struct Bad { const char* needle; std::function<void(RopeAppendKVArgs&)> edit; };
  const Bad bads[] = {
      {"rotary_dim", [](RopeAppendKVArgs& a) { a.rope.rotary_dim = 31; }},
      {"rotary_dim", [](RopeAppendKVArgs& a) { a.rope.rotary_dim = 64; }},
      {"rope.theta", [](RopeAppendKVArgs& a) { a.rope.theta = 0.0f; }},
      {"rope.scale", [](RopeAppendKVArgs& a) { a.rope.scale = -1.0f; }},
      {"rope.style", [](RopeAppendKVArgs& a) { a.rope.style = RopeStyle(7); }},
      {"cache_positions", [&](RopeAppendKVArgs& a) { a.rope.cos_sin_cache = dk.get(); }},
      {"rope.cos_sin_cache", [&](RopeAppendKVArgs& a) { a.rope.cos_sin_cache = dk.get(), a.rope.cache_positions = 100; }},
      {"positions[1] = -1", [&](RopeAppendKVArgs& a) { a.pos.positions_host = host_bad.data(); }},
      {"positions dtype", [](RopeAppendKVArgs& a) { a.pos.dtype = DType::F32; }},
      {"positions", [](RopeAppendKVArgs& a) { a.pos.positions = nullptr; }},
      {"q_out", [](RopeAppendKVArgs& a) { a.q_out = nullptr; }},
      {"num_qo_heads", [](RopeAppendKVArgs& a) { a.num_qo_heads = -1; }},
      {"slot_mapping", [](RopeAppendKVArgs& a) { a.append.slot_mapping = nullptr; }},
      {"k_scale", [](RopeAppendKVArgs& a) { a.append.k_scale = 0.0f; }},
      // Per-KV-head scales: append_kv's checks (both or neither, [Hkv] f32, not with int8 / int4).
      {"k_head_scales and v_head_scales go together", [&](RopeAppendKVArgs& a) { a.append.k_head_scales = hs.get(); }},
      {"k_head_scales and v_head_scales go together", [&](RopeAppendKVArgs& a) { a.append.v_head_scales = hs.get(); }},
      {"v_head_scales: buffer holds 2 bytes",
       [&](RopeAppendKVArgs& a) { a.append.k_head_scales = hs.get(), a.append.v_head_scales = hs_short.get(); }},
      {"k_head_scales/v_head_scales with an int8 cache", [&](RopeAppendKVArgs& a) {
         a.append.cache.dtype = DType::I8, a.append.k_head_scales = a.append.v_head_scales = hs.get();
       }},
  };
  for (const Bad& b : bads) {
    RopeAppendKVArgs a = good;
    b.edit(a);
    EXPECT_TRUE(test::throws_error([&] { rope_append_kv(ctx(), a); }, Status::InvalidArgument, b.needle)) << b.needle;
  }
  RopeAppendKVArgs a = good;
  a.q_out_dtype = DType::FP8_E4M3;
  EXPECT_TRUE(test::throws_error([&] { rope_append_kv(ctx(), a); }, Status::Unsupported, "q_out_dtype"));
  ctx().finish();
  for (uint8_t x : test::download<uint8_t>(dqo, 2 * 2 * 32 * 2)) ASSERT_EQ(x, kSentinel);
  for (uint8_t x : test::download<uint8_t>(kc, size_t(cache.required_bytes()))) ASSERT_EQ(x, kSentinel);
  // apply_rope's own checks.
  RopeArgs r;
  r.q = dq.get(), r.q_out = dqo.get(), r.num_tokens = 2, r.num_qo_heads = 2, r.head_dim = 33, r.pos.positions = dpos.get();
  EXPECT_TRUE(test::throws_error([&] { apply_rope(ctx(), r); }, Status::InvalidArgument, "head_dim"));
  r.head_dim = 32, r.num_qo_heads = 0;
  EXPECT_TRUE(test::throws_error([&] { apply_rope(ctx(), r); }, Status::InvalidArgument, "num_kv_heads"));
  r.num_qo_heads = 2, r.q_out = nullptr;
  EXPECT_TRUE(test::throws_error([&] { apply_rope(ctx(), r); }, Status::InvalidArgument, "q_out"));
}

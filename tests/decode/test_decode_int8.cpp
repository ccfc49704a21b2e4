// Quantised KV caches. int8 (symmetric, one scale per (token, KV head) in scale caches):
// append_kv quantises f32/bf16 rows bit for bit as reference/kv_formats_reference says (f32 and f16
// scales, NHD and HND, padded scale strides, negative slots), and paged decode over them
// matches ref::attention over the dequantised rows: GQA 1/4/8, head dims 64/128, page sizes
// 1/16, split-K on and off, q/o dtypes. Rejected calls name the argument. Per-KV-head scales
// ([Hkv] arrays) on fp8 and bf16 caches through append_kv and decode.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "clattn/diagnostics.hpp"
#include "reference/kv_formats_reference.hpp"
#include "reference/reference.hpp"
#include "support/paged_cache.hpp"
#include "support/test_support.hpp"

using namespace clattn;
using test::ctx;

namespace {

struct I8Case {
  int B, Hq, Hkv, D, P;
  KVLayout layout;
  DType scale_dt, io;
  bool split, pad_scales;
  bool extras = false;  // soft cap 2, sinks, lse checked
  std::string describe() const {
    return "B=" + std::to_string(B) + " Hq=" + std::to_string(Hq) + " Hkv=" + std::to_string(Hkv) + " D=" +
           std::to_string(D) + " P=" + std::to_string(P) + (layout == KVLayout::HND ? " HND" : " NHD") + " scales " +
           dtype_name(scale_dt) + " io " + dtype_name(io) + (split ? " split" : "") + (pad_scales ? " padded" : "") +
           (extras ? " cap+sinks+lse" : "");
  }
};

// Whether this device can run the tensor-core kernel (NVIDIA inline PTX, sm_80+): it splits
// q and the weights into f16 pairs (22 bits), within the f32 tolerance below.
bool mma_available() {
  for (const auto& v : variants(ctx().profile()))
    if (v.name == "nv_mma_sync") return v.available;
  return false;
}

double o_tol(DType t) { return t == DType::F32 ? 5e-5 : t == DType::F16 ? 2e-3 : 1e-2; }

void run_case(const I8Case& c, test::Rng& rng) {
  SCOPED_TRACE(c.describe());
  std::vector<int> lens;
  for (int b = 0; b < c.B; ++b) lens.push_back(rng.uniform_int(1, 90));
  if (c.B > 1) lens[1] = c.P;  // a full page
  if (c.split) lens[0] = 1500;  // long enough to split under every vendor's rows
  const test::ShuffledPages sp = test::shuffled_pages(lens, c.P, 2, rng);
  const PagedCsr& csr = sp.csr;
  const std::vector<int64_t>& slots = sp.slots;  // every token of every request
  PagedKV cache;
  cache.num_pages = sp.num_pages, cache.page_size = c.P, cache.num_kv_heads = c.Hkv, cache.head_dim = c.D;
  cache.layout = c.layout, cache.dtype = DType::I8, cache.scale_dtype = c.scale_dt;
  if (c.pad_scales) {  // [pages, Hkv, P + 3] with a page gap
    cache.scale_stride_token = 1, cache.scale_stride_head = c.P + 3, cache.scale_stride_page = int64_t(c.Hkv) * (c.P + 3) + 5;
  }
  const int N = int(slots.size()), row = c.Hkv * c.D;
  // Source rows (f32, some all-zero rows and a wide range per row).
  std::vector<double> k = rng.vec(size_t(N) * row, -3, 3), v = rng.vec(size_t(N) * row, -3, 3);
  for (int d = 0; d < c.D; ++d) k[size_t(d)] = 0.0, v[size_t(row + d)] = 0.0;
  k[size_t(c.D)] = 40.0;
  if (N > 2) {  // a row of exact and near ties: x = fl((n + 1/2) * scale), its max 3
    const float sc = c.scale_dt == DType::F16 ? ref::round_to_f16(3.0f * (1.0f / 127.0f)) : 3.0f * (1.0f / 127.0f);
    const size_t r0 = size_t(2 * row);
    v[r0] = 3.0;
    for (int d = 1; d < c.D; ++d) v[r0 + size_t(d)] = double(float((d % 120 - 60 + 0.5f) * sc));
  }
  k = test::quantize(k, DType::F32), v = test::quantize(v, DType::F32);
  const test::KVBuffers bufs = test::kv_buffers(cache, 0x55, 0x7f);
  test::append_rows(bufs, k, v, slots);

  // Stored bytes and scales against the reference quantiser, and the dequantised rows.
  const test::StoredKV st = test::stored(bufs);
  std::vector<double> kd(size_t(N) * row), vd(size_t(N) * row);
  int mismatched = 0;
  for (int t = 0; t < N; ++t)
    for (int h = 0; h < c.Hkv; ++h) {
      const int64_t s = slots[size_t(t)];
      const size_t co = size_t(test::row_offset(cache, s, h));
      for (int kv = 0; kv < 2; ++kv) {
        const std::vector<double>& src = kv ? v : k;
        std::vector<float> x(size_t(c.D));
        for (int d = 0; d < c.D; ++d) x[size_t(d)] = float(src[size_t(t * row + h * c.D + d)]);
        std::vector<int8_t> q(size_t(c.D));
        float want_scale;
        ref::int8_quantize_row(x.data(), c.D, c.scale_dt == DType::F16, q.data(), &want_scale);
        const auto& cb = kv ? st.v : st.k;
        const auto& sb = kv ? st.v_scales : st.k_scales;
        if (test::scale_at(sb, test::scale_offset(cache, s, h), c.scale_dt) != double(want_scale)) ++mismatched;
        if (std::memcmp(&cb[co], q.data(), size_t(c.D)) != 0) ++mismatched;
        test::dequantized_row(cache, cb, sb, s, h, &(kv ? vd : kd)[size_t(t * row + h * c.D)]);
      }
    }
  EXPECT_EQ(mismatched, 0) << "stored rows or scales differ from the reference quantiser";

  // Decode.
  const auto q = test::quantize(rng.vec(size_t(c.B) * c.Hq * c.D, -1, 1), c.io);
  auto dq = test::upload(test::pack(q, c.io));
  DecodeOptions opt;
  opt.num_qo_heads = c.Hq, opt.q_dtype = c.io, opt.o_dtype = c.io;
  if (c.extras) opt.logits_soft_cap = 2.0f;
  if (c.split) opt.params = {{"MIN_CHUNK", 16}, {"WGS_PER_CU", 4096}};
  else opt.max_splits = 1;
  DecodePlan plan = decode_plan(ctx(), csr, cache, opt);
  if (c.split) EXPECT_GT(plan.num_merges, 0);
  if (ctx().profile().is_cpu && ctx().profile().param_vendor() == "cpu") EXPECT_EQ(plan.variant, "cpu");
  // The tensor-core kernel wherever it can run (NVIDIA sm_80+, group <= 8, D 64 / 128).
  if (mma_available() && c.Hq / c.Hkv <= 8) EXPECT_EQ(plan.variant, "nv_mma_sync");
  auto ids = test::upload(csr.kv_indices);
  const size_t ob = size_t(c.B) * c.Hq * c.D * dtype_size(c.io);
  auto o = test::upload(std::vector<uint8_t>(ob, 0));
  DeviceBuffer ws(ctx(), size_t(std::max<int64_t>(plan.workspace_bytes, 4)));
  DecodeBuffers b;
  b.q = dq.get(), b.k_cache = bufs.k.get(), b.v_cache = bufs.v.get(), b.page_ids = ids.get(), b.o = o.get();
  b.workspace = ws.get(), b.k_scale_cache = bufs.k_scales.get(), b.v_scale_cache = bufs.v_scales.get();
  const std::vector<double> sinks = test::quantize(rng.vec(size_t(c.Hq), -1, 2), DType::F32);
  auto dsinks = test::upload(test::pack(sinks, DType::F32));
  auto dlse = test::upload(std::vector<float>(size_t(c.B) * c.Hq, 0.0f));
  if (c.extras) b.sinks = dsinks.get(), b.lse = dlse.get();
  decode_run(ctx(), plan, b);
  ctx().finish();
  const auto got = test::unpack(test::download<uint8_t>(o, ob), c.io);
  std::vector<double> want(size_t(c.B) * c.Hq * c.D);
  ref::AttnOptions ro;
  ro.sm_scale = 1.0 / std::sqrt(double(c.D));
  if (c.extras) ro.logits_soft_cap = 2.0, ro.sinks = sinks.data();
  std::vector<double> want_lse(size_t(c.B) * c.Hq);
  int t0 = 0;
  for (int r = 0; r < c.B; ++r) {
    const int L = lens[size_t(r)];
    ref::attention(&q[size_t(r) * c.Hq * c.D], &kd[size_t(t0) * row], &vd[size_t(t0) * row], 1, L, c.Hq, c.Hkv, c.D,
                   c.D, ro, &want[size_t(r) * c.Hq * c.D], &want_lse[size_t(r) * c.Hq]);
    t0 += L;
  }
  EXPECT_TRUE(test::all_close(got, want, o_tol(c.io), o_tol(c.io), "int8 decode"));
  if (c.extras) {
    const auto l = test::download<float>(dlse, size_t(c.B) * c.Hq);
    EXPECT_TRUE(test::all_close(std::vector<double>(l.begin(), l.end()), want_lse, 1e-4, 1e-4, "int8 decode lse"));
  }
}

}  // namespace

TEST(Int8KV, AppendAndDecodeMatchTheReference) {
  CLATTN_SEED_TRACE();
  test::Rng rng(2810);
  const I8Case cases[] = {
      {3, 8, 2, 128, 16, KVLayout::NHD, DType::F32, DType::BF16, false, false},
      {2, 4, 4, 64, 1, KVLayout::HND, DType::F16, DType::F32, true, false},
      {4, 8, 1, 64, 16, KVLayout::HND, DType::F32, DType::F32, true, true},
      {2, 16, 2, 128, 16, KVLayout::NHD, DType::F16, DType::BF16, true, false},
      {3, 8, 2, 128, 16, KVLayout::NHD, DType::F32, DType::F32, false, false, true},
      {2, 8, 2, 64, 16, KVLayout::HND, DType::F16, DType::F32, true, false, true},
  };
  int i = 0;
  for (const I8Case& c : cases) {
    if (!test::row_runs_case(i++)) continue;
    run_case(c, rng);
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(Int8KV, RejectsMissingScalesAndScaleFactors) {
  PagedKV cache;
  cache.num_pages = 2, cache.page_size = 4, cache.num_kv_heads = 1, cache.head_dim = 64, cache.dtype = DType::I8;
  auto src = test::upload(std::vector<float>(64, 1.0f));
  auto slots = test::upload(std::vector<int64_t>{0});
  auto kc = test::upload(std::vector<uint8_t>(size_t(cache.required_bytes()), 0x11));
  auto sc = test::upload(std::vector<uint8_t>(size_t(cache.scale_required_bytes()), 0x11));
  AppendKVArgs a;
  a.k = a.v = src.get(), a.src_dtype = DType::F32, a.slot_mapping = slots.get(), a.num_tokens = 1;
  a.k_cache = a.v_cache = kc.get(), a.cache = cache, a.k_scale_cache = sc.get();
  EXPECT_TRUE(test::throws_error([&] { append_kv(ctx(), a); }, Status::InvalidArgument, "v_scale_cache"));
  a.v_scale_cache = sc.get(), a.k_scale = 2.0f;
  EXPECT_TRUE(test::throws_error([&] { append_kv(ctx(), a); }, Status::InvalidArgument, "k_scale/v_scale must be 1"));
  a.k_scale = 1.0f, a.cache.scale_dtype = DType::BF16;
  EXPECT_TRUE(test::throws_error([&] { append_kv(ctx(), a); }, Status::Unsupported, "scale_dtype"));
  ctx().finish();
  for (uint8_t x : test::download<uint8_t>(kc, size_t(cache.required_bytes()))) ASSERT_EQ(x, 0x11);
  // Ops that do not read int8 caches yet say so.
  HsaOptions ho;
  ho.num_qo_heads = 1, ho.topk = 1;
  PagedCsr csr;
  csr.page_size = 4, csr.kv_indptr = {0, 1}, csr.kv_indices = {0}, csr.kv_last_page_len = {1}, csr.qo_indptr = {0, 1};
  EXPECT_TRUE(test::throws_error([&] { hsa_plan(ctx(), csr, cache, ho); }, Status::Unsupported, "int8"));
  // Decode: the scale caches are required.
  DecodeOptions opt;
  opt.num_qo_heads = 1, opt.q_dtype = opt.o_dtype = DType::F32;
  csr.qo_indptr.clear();
  DecodePlan plan = decode_plan(ctx(), csr, cache, opt);
  auto q = test::upload(std::vector<float>(64, 0.5f)), o = test::upload(std::vector<float>(64, 0.0f));
  auto ids = test::upload(csr.kv_indices);
  DecodeBuffers b;
  b.q = q.get(), b.o = o.get(), b.k_cache = b.v_cache = kc.get(), b.page_ids = ids.get(), b.k_scale_cache = sc.get();
  EXPECT_TRUE(test::throws_error([&] { decode_run(ctx(), plan, b); }, Status::InvalidArgument, "v_scale_cache"));
}

// Per-KV-head scales ([Hkv] arrays, on top of the per-tensor ones) on an fp8 and a bf16 cache:
// append_kv divides each head's rows by k_scale * k_head_scales[h], and decode over the stored
// bytes matches the reference over the values they dequantise to; split-K on and off, GQA 4.
TEST(HeadScales, AppendAndDecodeMatchTheReference) {
  CLATTN_SEED_TRACE();
  test::Rng rng(2811);
  for (DType kvd : {DType::FP8_E4M3, DType::BF16}) {
    for (bool split : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(kvd)) + (split ? " split" : ""));
      const int B = 2, Hkv = 2, Hq = 8, D = 64, P = 16;
      const std::vector<int> lens = {split ? 1500 : 37, 21};
      PagedKV cache;
      cache.page_size = P, cache.num_kv_heads = Hkv, cache.head_dim = D, cache.dtype = kvd;
      PagedCsr csr;
      csr.page_size = P, csr.kv_indptr = {0};
      std::vector<int64_t> slots;
      int page = 0;
      for (int L : lens) {
        const int np = (L + P - 1) / P;
        for (int i = 0; i < np; ++i) csr.kv_indices.push_back(page + i);
        for (int t = 0; t < L; ++t) slots.push_back(int64_t(page) * P + t);
        page += np;
        csr.kv_indptr.push_back(int32_t(csr.kv_indices.size()));
        csr.kv_last_page_len.push_back(L - (np - 1) * P);
      }
      cache.num_pages = page;
      const int N = int(slots.size()), row = Hkv * D;
      const std::vector<float> khs = {0.5f, 1.75f}, vhs = {1.25f, 0.625f};
      const float ks = 0.5f, vs = 2.0f;
      const auto k = test::quantize(rng.vec(size_t(N) * row, -3, 3), DType::F32);
      const auto v = test::quantize(rng.vec(size_t(N) * row, -3, 3), DType::F32);
      auto dk = test::upload(test::pack(k, DType::F32)), dv = test::upload(test::pack(v, DType::F32));
      auto dslots = test::upload(slots);
      auto dkhs = test::upload(khs), dvhs = test::upload(vhs);
      const size_t cb = size_t(cache.required_bytes());
      auto kc = test::upload(std::vector<uint8_t>(cb, 0)), vc = test::upload(std::vector<uint8_t>(cb, 0));
      AppendKVArgs a;
      a.k = dk.get(), a.v = dv.get(), a.src_dtype = DType::F32, a.slot_mapping = dslots.get(), a.num_tokens = N;
      a.k_cache = kc.get(), a.v_cache = vc.get(), a.cache = cache, a.k_scale = ks, a.v_scale = vs;
      a.k_head_scales = dkhs.get();
      EXPECT_TRUE(test::throws_error([&] { append_kv(ctx(), a); }, Status::InvalidArgument, "go together"));
      a.v_head_scales = dvhs.get();
      append_kv(ctx(), a);
      ctx().finish();
      // The stored rows dequantise (stored * scale * head scale) to the sources within the dtype.
      const auto kb = test::download<uint8_t>(kc, cb), vb = test::download<uint8_t>(vc, cb);
      const size_t es = dtype_size(kvd);
      std::vector<double> kd(size_t(N) * row), vd(size_t(N) * row), kw, kg;
      for (int t = 0; t < N; ++t)
        for (int h = 0; h < Hkv; ++h) {
          const size_t off = size_t(slots[size_t(t)] * row + h * D) * es;
          const auto kr = test::unpack(std::vector<uint8_t>(kb.begin() + off, kb.begin() + off + D * es), kvd,
                                       double(ks) * khs[size_t(h)]);
          const auto vr = test::unpack(std::vector<uint8_t>(vb.begin() + off, vb.begin() + off + D * es), kvd,
                                       double(vs) * vhs[size_t(h)]);
          for (int d = 0; d < D; ++d) {
            kd[size_t(t * row + h * D + d)] = kr[size_t(d)], vd[size_t(t * row + h * D + d)] = vr[size_t(d)];
            kg.push_back(kr[size_t(d)]), kw.push_back(k[size_t(t * row + h * D + d)]);
          }
        }
      EXPECT_TRUE(test::all_close(kg, kw, 0.05, kvd == DType::BF16 ? 1.0 / 128 : 1.0 / 8, "stored K"));
      // Decode.
      const auto q = test::quantize(rng.vec(size_t(B) * Hq * D, -1, 1), DType::F32);
      auto dq = test::upload(test::pack(q, DType::F32));
      DecodeOptions opt;
      opt.num_qo_heads = Hq, opt.q_dtype = opt.o_dtype = DType::F32;
      if (split) opt.params = {{"MIN_CHUNK", 16}, {"WGS_PER_CU", 4096}};
      else opt.max_splits = 1;
      DecodePlan plan = decode_plan(ctx(), csr, cache, opt);
      if (split) EXPECT_GT(plan.num_merges, 0);
      auto ids = test::upload(csr.kv_indices);
      auto o = test::upload(std::vector<float>(size_t(B) * Hq * D, 0.0f));
      DeviceBuffer ws(ctx(), size_t(std::max<int64_t>(plan.workspace_bytes, 4)));
      DecodeBuffers b;
      b.q = dq.get(), b.k_cache = kc.get(), b.v_cache = vc.get(), b.page_ids = ids.get(), b.o = o.get();
      b.workspace = ws.get(), b.k_scale = ks, b.v_scale = vs, b.k_head_scales = dkhs.get();
      EXPECT_TRUE(test::throws_error([&] { decode_run(ctx(), plan, b); }, Status::InvalidArgument, "go together"));
      b.v_head_scales = dvhs.get();
      decode_run(ctx(), plan, b);
      ctx().finish();
      const auto got = test::download<float>(o, size_t(B) * Hq * D);
      std::vector<double> want(size_t(B) * Hq * D);
      ref::AttnOptions ro;
      ro.sm_scale = 1.0 / std::sqrt(double(D));
      for (int r = 0, t0 = 0; r < B; t0 += lens[size_t(r)], ++r)
        ref::attention(&q[size_t(r) * Hq * D], &kd[size_t(t0) * row], &vd[size_t(t0) * row], 1, lens[size_t(r)], Hq,
                       Hkv, D, D, ro, &want[size_t(r) * Hq * D], nullptr);
      EXPECT_TRUE(test::all_close(std::vector<double>(got.begin(), got.end()), want, 5e-5, 5e-5, "decode"));
      if (::testing::Test::HasFailure()) return;
    }
  }
}

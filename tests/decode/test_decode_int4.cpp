// int4 KV caches (asymmetric, a [scale, zero] pair per group of quant_group head-dim
// elements, nibble pairs low first): append_kv's stored bytes and pairs equal
// ref::int4_quantize_group bit for bit (f32 and f16 scales, NHD and HND, groups 32/64/128,
// head dims 64/128, padded cache and scale strides, all-zero and all-equal groups, exact and
// near ties), and paged decode over them matches ref::attention over the dequantised rows
// (GQA 1/4, pages 1/16, split-K on and off, f32 and bf16 q/o), with the variant the device's
// rows ask for. Rejected calls name the argument and write nothing.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "reference/kv_formats_reference.hpp"
#include "reference/reference.hpp"
#include "support/paged_cache.hpp"
#include "support/test_support.hpp"

using namespace clattn;
using test::ctx;

namespace {

struct I4Case {
  int B, Hq, Hkv, D, P, G;
  KVLayout layout;
  DType scale_dt, io;
  bool split, pad;  // pad: padded cache strides (even, 4-byte rows) and scale strides
  std::string describe() const {
    return "B=" + std::to_string(B) + " Hq=" + std::to_string(Hq) + " Hkv=" + std::to_string(Hkv) + " D=" +
           std::to_string(D) + " P=" + std::to_string(P) + " G=" + std::to_string(G) +
           (layout == KVLayout::HND ? " HND" : " NHD") + " scales " + dtype_name(scale_dt) + " io " + dtype_name(io) +
           (split ? " split" : "") + (pad ? " padded" : "");
  }
};

double o_tol(DType t) { return t == DType::F32 ? 5e-5 : t == DType::F16 ? 2e-3 : 1e-2; }

// Whether this device can run the tensor-core kernel (NVIDIA inline PTX, sm_80+, or its
// emulation: CLATTN_EMULATE=nv_mma_sync).
bool mma_available() {
  for (const auto& v : variants(ctx().profile()))
    if (v.name == "nv_mma_sync") return v.available;
  return false;
}

// The variant the plan must have run: the tensor-core kernel where it is available and the
// rows are 16-byte aligned, the cpu kernel under the cpu rows, a lanes kernel of decode.cl
// otherwise (built for int4), each with the cache's group.
void expect_variant(const DecodePlan& plan, const I4Case& c) {
  const auto& prof = ctx().profile();
  if (mma_available() && !c.pad && c.Hq / c.Hkv <= 8) EXPECT_EQ(plan.variant, "nv_mma_sync");
  else if (prof.is_cpu && prof.param_vendor() == "cpu") EXPECT_EQ(plan.variant, "cpu");
  else EXPECT_NE(plan.variant, "cpu");
  if (plan.variant != "nv_mma_sync")
    EXPECT_NE(plan.kernel_options.find("-DKV_DT=8"), std::string::npos) << plan.kernel_options;
  EXPECT_NE(plan.kernel_options.find("-DQGROUP=" + std::to_string(c.G)), std::string::npos) << plan.kernel_options;
}

void run_case(const I4Case& c, test::Rng& rng) {
  SCOPED_TRACE(c.describe());
  std::vector<int> lens;
  for (int b = 0; b < c.B; ++b) lens.push_back(rng.uniform_int(1, 90));
  if (c.B > 1) lens[1] = c.P;   // a full page
  if (c.split) lens[0] = 1500;  // long enough to split under every vendor's rows
  const test::ShuffledPages sp = test::shuffled_pages(lens, c.P, 2, rng);
  const PagedCsr& csr = sp.csr;
  const std::vector<int64_t>& slots = sp.slots;  // every token of every request
  PagedKV cache;
  cache.num_pages = sp.num_pages, cache.page_size = c.P, cache.num_kv_heads = c.Hkv, cache.head_dim = c.D;
  cache.layout = c.layout, cache.dtype = DType::I4, cache.scale_dtype = c.scale_dt, cache.quant_group = c.G;
  const int NG = c.D / c.G;
  if (c.pad) {
    // Rows 8 elements (4 bytes) apart beyond their length, pages 16 more; scale pairs of a
    // (token, head) 2 NG + 2 apart in [pages, Hkv, P, ...] order, a page gap of 6.
    if (c.layout == KVLayout::NHD) cache.stride_head = c.D, cache.stride_token = int64_t(c.Hkv) * c.D + 8;
    else cache.stride_token = c.D + 8, cache.stride_head = int64_t(c.P) * (c.D + 8);
    cache.stride_page = (c.layout == KVLayout::NHD ? int64_t(c.P) * cache.stride_token : c.Hkv * cache.stride_head) + 16;
    cache.scale_stride_token = 2 * NG + 2, cache.scale_stride_head = int64_t(c.P) * (2 * NG + 2);
    cache.scale_stride_page = int64_t(c.Hkv) * cache.scale_stride_head + 6;
  }
  const int N = int(slots.size()), row = c.Hkv * c.D;
  // Source rows (f32): a wide range, an all-zero group, an all-equal group, a group of
  // positive values only, and a group of exact and near ties.
  std::vector<double> k = rng.vec(size_t(N) * row, -3, 3), v = rng.vec(size_t(N) * row, -3, 3);
  for (int d = 0; d < c.G; ++d) k[size_t(d)] = 0.0, v[size_t(row + d)] = 1.75, k[size_t(row + d)] += 3.0;
  k[size_t(c.D)] = 40.0;
  if (N > 2) {  // range [-3, 4.5]: scale 0.5 in f32 and f16, x = (n + 1/2) / 2 and its neighbours
    const size_t r0 = size_t(2 * row);
    k[r0] = -3.0, k[r0 + 1] = 4.5;
    for (int d = 2; d < c.G; ++d) {
      const float tie = float((d % 14 - 6) + 0.5) * 0.5f;
      k[r0 + size_t(d)] = d % 3 == 0 ? tie : std::nextafter(tie, d % 3 == 1 ? 10.0f : -10.0f);
    }
  }
  k = test::quantize(k, DType::F32), v = test::quantize(v, DType::F32);
  const test::KVBuffers bufs = test::kv_buffers(cache, 0x55, 0x7f);
  test::append_rows(bufs, k, v, slots);

  // Stored bytes and pairs against the reference quantiser, and the dequantised rows.
  const test::StoredKV st = test::stored(bufs);
  std::vector<double> kd(size_t(N) * row), vd(size_t(N) * row);
  int mismatched = 0;
  for (int t = 0; t < N; ++t)
    for (int h = 0; h < c.Hkv; ++h) {
      const int64_t s = slots[size_t(t)];
      const size_t co = size_t(test::row_offset(cache, s, h)) / 2;
      const int64_t so = test::scale_offset(cache, s, h);
      for (int kv = 0; kv < 2; ++kv) {
        const std::vector<double>& src = kv ? v : k;
        const auto& cb = kv ? st.v : st.k;
        const auto& sb = kv ? st.v_scales : st.k_scales;
        for (int g = 0; g < NG; ++g) {
          std::vector<float> x(size_t(c.G));
          for (int d = 0; d < c.G; ++d) x[size_t(d)] = float(src[size_t(t * row + h * c.D + g * c.G + d)]);
          std::vector<uint8_t> u(size_t(c.G)), packed(size_t(c.G / 2));
          float want_scale, want_zero;
          ref::int4_quantize_group(x.data(), c.G, c.scale_dt == DType::F16, u.data(), &want_scale, &want_zero);
          ref::int4_pack(u.data(), c.G, packed.data());
          const double got_scale = test::scale_at(sb, so + 2 * g, c.scale_dt);
          const double got_zero = test::scale_at(sb, so + 2 * g + 1, c.scale_dt);
          if (got_scale != double(want_scale) || got_zero != double(want_zero)) ++mismatched;
          if (std::memcmp(&cb[co + size_t(g * c.G / 2)], packed.data(), packed.size()) != 0) ++mismatched;
        }
        test::dequantized_row(cache, cb, sb, s, h, &(kv ? vd : kd)[size_t(t * row + h * c.D)]);
      }
    }
  EXPECT_EQ(mismatched, 0) << "stored nibbles or [scale, zero] pairs differ from the reference quantiser";

  // Decode.
  const auto q = test::quantize(rng.vec(size_t(c.B) * c.Hq * c.D, -1, 1), c.io);
  auto dq = test::upload(test::pack(q, c.io));
  DecodeOptions opt;
  opt.num_qo_heads = c.Hq, opt.q_dtype = c.io, opt.o_dtype = c.io;
  if (c.split) opt.params = {{"MIN_CHUNK", 16}, {"WGS_PER_CU", 4096}};
  else opt.max_splits = 1;
  DecodePlan plan = decode_plan(ctx(), csr, cache, opt);
  if (c.split) EXPECT_GT(plan.num_merges, 0);
  expect_variant(plan, c);
  auto ids = test::upload(csr.kv_indices);
  const size_t ob = size_t(c.B) * c.Hq * c.D * dtype_size(c.io);
  auto o = test::upload(std::vector<uint8_t>(ob, 0));
  DeviceBuffer ws(ctx(), size_t(std::max<int64_t>(plan.workspace_bytes, 4)));
  DecodeBuffers b;
  b.q = dq.get(), b.k_cache = bufs.k.get(), b.v_cache = bufs.v.get(), b.page_ids = ids.get(), b.o = o.get();
  b.workspace = ws.get(), b.k_scale_cache = bufs.k_scales.get(), b.v_scale_cache = bufs.v_scales.get();
  decode_run(ctx(), plan, b);
  ctx().finish();
  const auto got_bytes = test::download<uint8_t>(o, ob);
  const auto got = test::unpack(got_bytes, c.io);
  std::vector<double> want(size_t(c.B) * c.Hq * c.D);
  ref::AttnOptions ro;
  ro.sm_scale = 1.0 / std::sqrt(double(c.D));
  int t0 = 0;
  for (int r = 0; r < c.B; ++r) {
    const int L = lens[size_t(r)];
    ref::attention(&q[size_t(r) * c.Hq * c.D], &kd[size_t(t0) * row], &vd[size_t(t0) * row], 1, L, c.Hq, c.Hkv, c.D,
                   c.D, ro, &want[size_t(r) * c.Hq * c.D], nullptr);
    t0 += L;
  }
  EXPECT_TRUE(test::all_close(got, want, o_tol(c.io), o_tol(c.io), "int4 decode"));

  // The plan through its vector (the scale geometry and group travel with it): the same bytes.
  DecodePlan p2 = DecodePlan::from_vector(ctx(), plan.to_vector());
  EXPECT_EQ(p2.cache.quant_group, c.G);
  EXPECT_EQ(p2.cache.scale_dtype, c.scale_dt);
  auto o2 = test::upload(std::vector<uint8_t>(ob, 0));
  DeviceBuffer ws2(ctx(), size_t(std::max<int64_t>(p2.workspace_bytes, 4)));
  b.o = o2.get(), b.workspace = ws2.get();
  decode_run(ctx(), p2, b);
  ctx().finish();
  EXPECT_EQ(test::download<uint8_t>(o2, ob), got_bytes) << "plan from its vector";
}

}  // namespace

TEST(Int4KV, AppendAndDecodeMatchTheReference) {
  CLATTN_SEED_TRACE();
  test::Rng rng(2812);
  const I4Case cases[] = {
      {3, 8, 2, 128, 16, 32, KVLayout::NHD, DType::F32, DType::BF16, false, false},
      {2, 4, 4, 64, 1, 64, KVLayout::HND, DType::F16, DType::F32, true, false},
      {2, 8, 2, 128, 16, 128, KVLayout::HND, DType::F32, DType::F32, true, true},
      {3, 2, 2, 64, 16, 32, KVLayout::NHD, DType::F16, DType::BF16, false, true},
      // Each K word arrangement of the tensor-core kernel: D 128 in two groups, in one group.
      {2, 8, 2, 128, 16, 64, KVLayout::NHD, DType::F32, DType::F32, true, false},
      {2, 4, 1, 128, 1, 128, KVLayout::NHD, DType::F16, DType::BF16, false, false},
  };
  int i = 0;
  for (const I4Case& c : cases) {
    if (!test::row_runs_case(i++)) continue;
    run_case(c, rng);
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(Int4KV, RejectsBadGeometryScalesAndOps) {
  PagedKV cache;
  cache.num_pages = 2, cache.page_size = 4, cache.num_kv_heads = 1, cache.head_dim = 64, cache.dtype = DType::I4;
  cache.quant_group = 32;
  auto src = test::upload(std::vector<float>(64, 1.0f));
  auto slots = test::upload(std::vector<int64_t>{0});
  const size_t cb = size_t(cache.required_bytes()), sb = size_t(cache.scale_required_bytes());
  EXPECT_EQ(cb, size_t(2 * 4 * 64 / 2));
  EXPECT_EQ(sb, size_t(2 * 4 * 2 * 2 * 4));  // [pages, P, Hkv, D / 32, 2] f32
  auto kc = test::upload(std::vector<uint8_t>(cb, 0x11)), vc = test::upload(std::vector<uint8_t>(cb, 0x11));
  auto ksc = test::upload(std::vector<uint8_t>(sb, 0x11)), vsc = test::upload(std::vector<uint8_t>(sb, 0x11));
  auto hs = test::upload(std::vector<float>{1.0f});
  AppendKVArgs a;
  a.k = a.v = src.get(), a.src_dtype = DType::F32, a.slot_mapping = slots.get(), a.num_tokens = 1;
  a.k_cache = kc.get(), a.v_cache = vc.get(), a.cache = cache, a.k_scale_cache = ksc.get();
  EXPECT_TRUE(test::throws_error([&] { append_kv(ctx(), a); }, Status::InvalidArgument, "v_scale_cache"));
  a.v_scale_cache = vsc.get();
  for (int g : {0, 16, 48, 128, 256}) {  // not in {32, 64, 128}, or not dividing head_dim 64
    a.cache.quant_group = g;
    EXPECT_TRUE(test::throws_error([&] { append_kv(ctx(), a); }, Status::InvalidArgument, "cache.quant_group")) << g;
  }
  a.cache.quant_group = 32, a.cache.stride_token = 65;
  EXPECT_TRUE(test::throws_error([&] { append_kv(ctx(), a); }, Status::InvalidArgument, "stride_token"));
  a.cache.stride_token = 0, a.cache.stride_page = 257;
  EXPECT_TRUE(test::throws_error([&] { append_kv(ctx(), a); }, Status::InvalidArgument, "stride_page"));
  a.cache.stride_page = 0, a.k_scale = 2.0f;
  EXPECT_TRUE(test::throws_error([&] { append_kv(ctx(), a); }, Status::InvalidArgument, "k_scale/v_scale must be 1"));
  a.k_scale = 1.0f, a.k_head_scales = a.v_head_scales = hs.get();
  EXPECT_TRUE(test::throws_error([&] { append_kv(ctx(), a); }, Status::InvalidArgument, "k_head_scales"));
  a.k_head_scales = a.v_head_scales = nullptr, a.cache.scale_dtype = DType::BF16;
  EXPECT_TRUE(test::throws_error([&] { append_kv(ctx(), a); }, Status::Unsupported, "scale_dtype"));
  a.cache.scale_dtype = DType::F32;
  auto small = test::upload(std::vector<uint8_t>(sb - 4, 0x11));
  a.k_scale_cache = small.get();
  EXPECT_TRUE(test::throws_error([&] { append_kv(ctx(), a); }, Status::InvalidArgument, "k_scale_cache"));
  a.k_scale_cache = ksc.get();
  ctx().finish();
  for (uint8_t x : test::download<uint8_t>(kc, cb)) ASSERT_EQ(x, 0x11);
  for (uint8_t x : test::download<uint8_t>(ksc, sb)) ASSERT_EQ(x, 0x11);
  // Ops that do not read int4 caches yet say so (extend: tests/extend/test_extend_int4.cpp).
  HsaOptions ho;
  ho.num_qo_heads = 1, ho.topk = 1;
  PagedCsr csr;
  csr.page_size = 4, csr.kv_indptr = {0, 1}, csr.kv_indices = {0}, csr.kv_last_page_len = {1}, csr.qo_indptr = {0, 1};
  EXPECT_TRUE(test::throws_error([&] { hsa_plan(ctx(), csr, cache, ho); }, Status::Unsupported, "int4"));
  // Decode: the group and the scale caches are required.
  DecodeOptions opt;
  opt.num_qo_heads = 1, opt.q_dtype = opt.o_dtype = DType::F32;
  csr.qo_indptr.clear();
  PagedKV bad = cache;
  bad.quant_group = 48;
  EXPECT_TRUE(test::throws_error([&] { decode_plan(ctx(), csr, bad, opt); }, Status::InvalidArgument, "quant_group"));
  DecodePlan plan = decode_plan(ctx(), csr, cache, opt);
  auto q = test::upload(std::vector<float>(64, 0.5f)), o = test::upload(std::vector<float>(64, 0.0f));
  auto ids = test::upload(csr.kv_indices);
  DecodeBuffers b;
  b.q = q.get(), b.o = o.get(), b.k_cache = kc.get(), b.v_cache = vc.get(), b.page_ids = ids.get();
  b.k_scale_cache = ksc.get();
  EXPECT_TRUE(test::throws_error([&] { decode_run(ctx(), plan, b); }, Status::InvalidArgument, "v_scale_cache"));
  b.v_scale_cache = vsc.get(), b.v_scale = 0.5f;
  EXPECT_TRUE(test::throws_error([&] { decode_run(ctx(), plan, b); }, Status::InvalidArgument, "k_scale/v_scale must be 1"));
}

// int4 KV in extend and cascade: caches written by append_kv (nibbles low first, a [scale,
// zero] pair per group of quant_group head-dim elements) are read by extend (cached prefix +
// new tokens, causal and not, CSR and page table) and cascade, which match ref::attention over
// the values the stored nibbles and pairs dequantise to (read back from the device and
// dequantised with reference/kv_formats_reference). Groups 32 / 64 / 128, head dims 64 / 128,
// GQA 1 / 4, pages 1 / 16, NHD and HND, f32 and f16 scale caches, padded cache and scale
// strides, f32 and bf16 q / o.
//
// Variants: int4 runs on the portable (generic) and cpu kernels only, built with KV_DT = 8 and
// the cache's QGROUP; a tensor-core variant asked for (or chosen by the rows: the emulated
// amd_wmma / intel_dpas runs of this test) steps aside to them, and every plan asserts which
// one it took. Rejected calls name the argument and leave the output untouched.
#include <algorithm>
#include <cmath>

#include "support/paged_cache.hpp"
#include "support/test_support.hpp"

using namespace clattn;
using test::ctx;

namespace {

struct Shape {
  int Hkv, G, D, P, group;  // G: query heads per KV head; group: quant_group
  KVLayout layout;
  DType scale_dt, qd, od;
  bool causal = true, pad = false;  // pad: padded cache strides (even) and scale strides
  std::string describe() const {
    return "Hkv=" + std::to_string(Hkv) + " G=" + std::to_string(G) + " D=" + std::to_string(D) + " P=" +
           std::to_string(P) + " group=" + std::to_string(group) + (layout == KVLayout::HND ? " HND" : " NHD") +
           " scales=" + dtype_name(scale_dt) + " q=" + dtype_name(qd) + " o=" + dtype_name(od) +
           (causal ? " causal" : " non-causal") + (pad ? " padded" : "");
  }
};

// A batch of requests (cached prefix + new query tokens) over an int4 cache that append_kv
// wrote, and the dequantised rows the reference reads.
struct Batch {
  Shape s;
  std::vector<int> qo, prefix;
  PagedKV cache;
  std::vector<std::vector<int32_t>> pages;  // per request
  test::KVBuffers kv;
  std::vector<std::vector<double>> kd, vd;  // per request [kv_len, Hkv, D]
  std::vector<double> q;
  std::vector<int32_t> qo_indptr;
  int B() const { return int(qo.size()); }
  int Hq() const { return s.Hkv * s.G; }
  int T() const { return qo_indptr.back(); }
  int kv_len(int i) const { return qo[size_t(i)] + prefix[size_t(i)]; }
  PagedCsr csr() const {
    PagedCsr c;
    c.page_size = s.P, c.kv_indptr = {0}, c.qo_indptr = qo_indptr;
    for (int i = 0; i < B(); ++i) {
      c.kv_indices.insert(c.kv_indices.end(), pages[size_t(i)].begin(), pages[size_t(i)].end());
      c.kv_indptr.push_back(int32_t(c.kv_indices.size()));
      c.kv_last_page_len.push_back(kv_len(i) - (int(pages[size_t(i)].size()) - 1) * s.P);
    }
    return c;
  }
};

PagedKV make_cache(const Shape& s, int num_pages) {
  PagedKV c;
  c.num_pages = num_pages, c.page_size = s.P, c.num_kv_heads = s.Hkv, c.head_dim = s.D, c.layout = s.layout;
  c.dtype = DType::I4, c.scale_dtype = s.scale_dt, c.quant_group = s.group;
  if (s.pad) {
    // Rows 8 elements (4 bytes) apart beyond their length, pages 16 more; the pairs of a
    // (token, head) 2 NG + 2 apart in [pages, Hkv, P, ...] order, a page gap of 6.
    const int NG = s.D / s.group;
    if (s.layout == KVLayout::NHD) c.stride_head = s.D, c.stride_token = int64_t(s.Hkv) * s.D + 8;
    else c.stride_token = s.D + 8, c.stride_head = int64_t(s.P) * (s.D + 8);
    c.stride_page = (s.layout == KVLayout::NHD ? int64_t(s.P) * c.stride_token : s.Hkv * c.stride_head) + 16;
    c.scale_stride_token = 2 * NG + 2, c.scale_stride_head = int64_t(s.P) * (2 * NG + 2);
    c.scale_stride_page = int64_t(s.Hkv) * c.scale_stride_head + 6;
  }
  return c;
}

// Writes every request's K/V (f32 in [-3, 3], one group of positive values only) with
// append_kv into shuffled pages and reads the stored nibbles and pairs back, dequantised.
Batch build(const Shape& s, const std::vector<int>& qo, const std::vector<int>& prefix, test::Rng& rng) {
  Batch b;
  b.s = s, b.qo = qo, b.prefix = prefix;
  const int B = b.B(), P = s.P, D = s.D, Hkv = s.Hkv, row = Hkv * D;
  std::vector<int> lens;
  for (int i = 0; i < B; ++i) lens.push_back(b.kv_len(i));
  const test::ShuffledPages sp = test::shuffled_pages(lens, P, 3, rng);
  PagedKV& c = b.cache;
  c = make_cache(s, sp.num_pages);
  b.pages = sp.pages;
  const std::vector<int64_t>& slots = sp.slots;
  const int N = int(slots.size());
  std::vector<double> k = rng.vec(size_t(N) * row, -3, 3), v = rng.vec(size_t(N) * row, -3, 3);
  for (int d = 0; d < s.group; ++d) k[size_t(d)] = std::fabs(k[size_t(d)]) + 0.5;  // zero point 0
  k = test::quantize(k, DType::F32), v = test::quantize(v, DType::F32);
  // Unwritten slots: nibbles 5, pairs of 0x7f bytes (f32 3.4e38, f16 NaN), so a stray read shows.
  b.kv = test::kv_buffers(c, 0x55, 0x7f);
  test::append_rows(b.kv, k, v, slots);

  const test::StoredKV st = test::stored(b.kv);
  size_t t0 = 0;
  for (int i = 0; i < B; ++i) {
    const int L = b.kv_len(i);
    b.kd.emplace_back(size_t(L) * row), b.vd.emplace_back(size_t(L) * row);
    for (int t = 0; t < L; ++t)
      for (int h = 0; h < Hkv; ++h) {
        const int64_t slot = slots[t0 + size_t(t)];
        test::dequantized_row(c, st.k, st.k_scales, slot, h, &b.kd.back()[size_t(t) * row + size_t(h) * D]);
        test::dequantized_row(c, st.v, st.v_scales, slot, h, &b.vd.back()[size_t(t) * row + size_t(h) * D]);
      }
    t0 += size_t(L);
  }
  b.qo_indptr = {0};
  for (int n : qo) b.qo_indptr.push_back(b.qo_indptr.back() + n);
  b.q = test::quantize(rng.vec(size_t(b.T()) * b.Hq() * D, -2, 2), s.qd);
  return b;
}

// ref::attention per request (aligned to the end), o [T, Hq, D] and lse [T, Hq].
std::vector<double> reference(const Batch& b, std::vector<double>* lse = nullptr) {
  const int Hq = b.Hq(), D = b.s.D;
  std::vector<double> o(size_t(b.T()) * Hq * D), l(size_t(b.T()) * Hq);
  ref::AttnOptions ro;
  ro.sm_scale = 1.0 / std::sqrt(double(D));
  ro.causal = b.s.causal;
  for (int i = 0; i < b.B(); ++i) {
    const size_t r0 = size_t(b.qo_indptr[size_t(i)]) * Hq;
    ref::attention(b.q.data() + r0 * D, b.kd[size_t(i)].data(), b.vd[size_t(i)].data(), b.qo[size_t(i)], b.kv_len(i),
                   Hq, b.s.Hkv, D, D, ro, o.data() + r0 * D, l.data() + r0);
  }
  if (lse) *lse = l;
  return o;
}

double tolerance(DType od) { return od == DType::F32 ? 5e-5 : od == DType::F16 ? 2e-3 : 1e-2; }

// The plan must have taken a portable kernel built for int4 with the cache's group: the one
// asked for, the generic kernel where a tensor-core one was asked for, the cpu kernel where
// the profile's cpu rows choose.
void expect_variant(const ExtendPlan& p, const std::string& asked, int group) {
  const std::string& got = p.variant;
  EXPECT_TRUE(got == "generic" || got == "cpu") << "int4 ran on " << got;
  if (asked == "generic" || asked == "cpu") EXPECT_EQ(got, asked);
  else if (!asked.empty()) EXPECT_EQ(got, "generic") << "asked for " << asked;
  else if (ctx().profile().is_cpu && ctx().profile().param_vendor() == "cpu") EXPECT_EQ(got, "cpu");
  EXPECT_NE(p.kernel_options.find("-DKV_DT=8"), std::string::npos) << p.kernel_options;
  EXPECT_NE(p.kernel_options.find("-DQGROUP=" + std::to_string(group)), std::string::npos) << p.kernel_options;
}

ExtendOptions options_of(const Batch& b, const std::string& variant) {
  ExtendOptions opt;
  opt.num_qo_heads = b.Hq(), opt.q_dtype = b.s.qd, opt.o_dtype = b.s.od, opt.variant = variant;
  opt.causal = b.s.causal;
  return opt;
}

struct Out {
  std::vector<double> o, lse;
  ExtendPlan plan;
};

// extend over the batch (CSR, or the page table).
Out run_extend(const Batch& b, const std::string& variant, bool page_table = false) {
  const ExtendOptions opt = options_of(b, variant);
  Out r;
  const PagedCsr csr = b.csr();
  std::vector<int32_t> lens;
  for (int i = 0; i < b.B(); ++i) lens.push_back(b.kv_len(i));
  PageTable table = test::page_table(b.pages, b.s.P, lens);
  table.cu_seqlens_q = b.qo_indptr;
  r.plan = page_table ? extend_plan(ctx(), table, b.cache, opt) : extend_plan(ctx(), csr, b.cache, opt);
  auto q = test::upload(test::pack(b.q, b.s.qd));
  auto ids = test::upload(page_table ? table.page_table : csr.kv_indices);
  const size_t rows = size_t(b.T()) * b.Hq(), ob = rows * b.s.D * dtype_size(b.s.od);
  auto o = test::upload(std::vector<uint8_t>(ob, 0x7b));
  auto lse = test::upload(std::vector<float>(rows, 0.0f));
  ExtendBuffers x;
  x.q = q.get(), x.k = b.kv.k.get(), x.v = b.kv.v.get(), x.page_ids = ids.get(), x.o = o.get(), x.lse = lse.get();
  x.k_scale_cache = b.kv.k_scales.get(), x.v_scale_cache = b.kv.v_scales.get();
  extend_run(ctx(), r.plan, x);
  ctx().finish();
  r.o = test::unpack(test::download<uint8_t>(o, ob), b.s.od);
  for (float f : test::download<float>(lse, rows)) r.lse.push_back(double(f));
  return r;
}

void check_extend(const Batch& b, bool page_table = false) {
  std::vector<double> want_lse;
  const auto want = reference(b, &want_lse);
  for (const std::string& v : {std::string(), std::string("generic"), std::string("cpu")}) {
    SCOPED_TRACE("variant asked: '" + v + "'" + (page_table ? " page table" : ""));
    const Out r = run_extend(b, v, page_table);
    expect_variant(r.plan, v, b.s.group);
    const double t = tolerance(b.s.od);
    EXPECT_TRUE(test::all_close(r.o, want, t, t, "extend o (ran " + r.plan.variant + ")"));
    EXPECT_TRUE(test::all_close(r.lse, want_lse, 2e-4, 2e-4, "extend lse (ran " + r.plan.variant + ")"));
    if (::testing::Test::HasFailure()) return;
  }
  // The tensor-core variants step aside (plans only: they build the generic kernel above).
  for (const char* v : {"nv_mma_sync", "nv_wgmma", "amd_wmma", "amd_mfma", "intel_dpas"}) {
    SCOPED_TRACE(std::string("variant asked: ") + v);
    const ExtendPlan p = extend_plan(ctx(), b.csr(), b.cache, options_of(b, v));
    expect_variant(p, v, b.s.group);
  }
}

// Requests: one new token after a prefix, new tokens spanning pages, no cached prefix.
void requests(test::Rng& rng, std::vector<int>& qo, std::vector<int>& prefix) {
  qo = {1, rng.uniform_int(9, 20), rng.uniform_int(2, 7)};
  prefix = {rng.uniform_int(20, 40), rng.uniform_int(5, 30), 0};
}

}  // namespace

TEST(ExtendInt4, MatchesTheReferenceOverDequantisedRows) {
  CLATTN_SEED_TRACE();
  test::Rng rng(2830);
  const Shape shapes[] = {
      {2, 4, 128, 16, 32, KVLayout::NHD, DType::F32, DType::BF16, DType::BF16},
      {4, 1, 64, 1, 64, KVLayout::HND, DType::F16, DType::F32, DType::F32, false},
      {1, 4, 128, 16, 128, KVLayout::HND, DType::F32, DType::F32, DType::F32, true, true},
      {2, 1, 64, 1, 32, KVLayout::NHD, DType::F16, DType::BF16, DType::F32, false, true},
  };
  bool first = true;
  int i = 0;
  for (const Shape& s : shapes) {
    SCOPED_TRACE(s.describe());
    std::vector<int> qo, prefix;
    requests(rng, qo, prefix);
    if (!test::row_runs_case(i++)) continue;
    const Batch b = build(s, qo, prefix, rng);
    check_extend(b);
    if (first) check_extend(b, true);  // the page-table form reads the same rows
    first = false;
    if (HasFailure()) return;
  }
}

// Cascade over an int4 cache: the prefix pages are shared by every request; the result is the
// reference over prefix + suffix.
TEST(CascadeInt4, MatchesTheReference) {
  CLATTN_SEED_TRACE();
  test::Rng rng(2831);
  const Shape s{2, 4, 64, 16, 32, KVLayout::NHD, DType::F16, DType::F32, DType::F32};
  const int P = s.P, prefix_pages = 2;
  // Request 0 holds the shared prefix and its own suffix; the others' prefix pages are request
  // 0's (same ids, so the same stored nibbles and pairs).
  const std::vector<int> suffix = {11, 5, 20}, qo = {4, 5, 13};
  std::vector<int> prefix;
  for (size_t i = 0; i < qo.size(); ++i) prefix.push_back(prefix_pages * P + suffix[i] - qo[i]);
  Batch b = build(s, qo, prefix, rng);
  for (int i = 1; i < b.B(); ++i) {
    for (int p = 0; p < prefix_pages; ++p) b.pages[size_t(i)][size_t(p)] = b.pages[0][size_t(p)];
    const size_t n = size_t(prefix_pages) * P * s.Hkv * s.D;
    std::copy(b.kd[0].begin(), b.kd[0].begin() + long(n), b.kd[size_t(i)].begin());
    std::copy(b.vd[0].begin(), b.vd[0].begin() + long(n), b.vd[size_t(i)].begin());
  }
  const auto want = reference(b);
  PagedCsr shared, unique;
  shared.page_size = unique.page_size = P;
  shared.kv_indptr = {0, prefix_pages};
  shared.kv_indices.assign(b.pages[0].begin(), b.pages[0].begin() + prefix_pages);
  shared.kv_last_page_len = {P};
  unique.kv_indptr = {0}, unique.qo_indptr = b.qo_indptr;
  for (int i = 0; i < b.B(); ++i) {
    unique.kv_indices.insert(unique.kv_indices.end(), b.pages[size_t(i)].begin() + prefix_pages,
                             b.pages[size_t(i)].end());
    unique.kv_indptr.push_back(int32_t(unique.kv_indices.size()));
    unique.kv_last_page_len.push_back(suffix[size_t(i)] - (suffix[size_t(i)] - 1) / P * P);
  }
  for (const std::string& v : {std::string(), std::string("generic")}) {
    SCOPED_TRACE("variant asked: '" + v + "'");
    const CascadePlan cp = cascade_plan(ctx(), shared, unique, b.cache, options_of(b, v));
    expect_variant(cp.unique, v, s.group);
    expect_variant(cp.shared, v, s.group);
    auto q = test::upload(test::pack(b.q, s.qd));
    auto sids = test::upload(shared.kv_indices), uids = test::upload(unique.kv_indices);
    const size_t ob = size_t(b.T()) * b.Hq() * s.D * 4;
    auto o = test::upload(std::vector<uint8_t>(ob, 0x7b));
    DeviceBuffer tmp_o(ctx(), size_t(cp.tmp_o_bytes)), tmp_ls(ctx(), size_t(cp.tmp_lse_bytes));
    DeviceBuffer tmp_lu(ctx(), size_t(cp.tmp_lse_bytes)), ws(ctx(), size_t(std::max<int64_t>(16, cp.workspace_bytes)));
    CascadeBuffers cb;
    cb.q = q.get(), cb.k_cache = b.kv.k.get(), cb.v_cache = b.kv.v.get();
    cb.shared_page_ids = sids.get(), cb.unique_page_ids = uids.get(), cb.o = o.get();
    cb.tmp_o = tmp_o.get(), cb.tmp_lse_shared = tmp_ls.get(), cb.tmp_lse_unique = tmp_lu.get(), cb.workspace = ws.get();
    cb.k_scale_cache = b.kv.k_scales.get(), cb.v_scale_cache = b.kv.v_scales.get();
    cascade_run(ctx(), cp, cb);
    ctx().finish();
    const double t = tolerance(s.od);
    EXPECT_TRUE(test::all_close(test::unpack(test::download<uint8_t>(o, ob), s.od), want, t, t,
                                "cascade (ran " + cp.unique.variant + ")"));
    if (HasFailure()) return;
  }
}

TEST(ExtendInt4, RejectedCallsNameTheArgument) {
  test::Rng rng(2832);
  const Shape s{1, 2, 64, 4, 32, KVLayout::NHD, DType::F32, DType::F32, DType::F32};
  const Batch b = build(s, {3}, {5}, rng);
  ExtendOptions opt;
  opt.num_qo_heads = b.Hq(), opt.q_dtype = opt.o_dtype = DType::F32;
  const PagedCsr csr = b.csr();
  PagedCsr shared = csr;
  shared.qo_indptr.clear();
  // The cache's geometry: plans are refused before anything is built or enqueued.
  for (int g : {0, 16, 48, 128}) {  // not in {32, 64, 128}, or not dividing head_dim 64
    PagedKV bad = b.cache;
    bad.quant_group = g;
    EXPECT_TRUE(test::throws_error([&] { extend_plan(ctx(), csr, bad, opt); }, Status::InvalidArgument,
                                   "cache.quant_group"))
        << g;
    EXPECT_TRUE(test::throws_error([&] { cascade_plan(ctx(), shared, csr, bad, opt); }, Status::InvalidArgument,
                                   "cache.quant_group"))
        << g;
  }
  PagedKV bad = b.cache;
  bad.stride_token = 65;
  EXPECT_TRUE(test::throws_error([&] { extend_plan(ctx(), csr, bad, opt); }, Status::InvalidArgument, "stride_token"));
  bad = b.cache, bad.scale_dtype = DType::BF16;
  EXPECT_TRUE(test::throws_error([&] { extend_plan(ctx(), csr, bad, opt); }, Status::Unsupported, "scale_dtype"));

  // The run's buffers.
  const ExtendPlan plan = extend_plan(ctx(), csr, b.cache, opt);
  auto q = test::upload(test::pack(b.q, DType::F32)), ids = test::upload(csr.kv_indices);
  const size_t ob = size_t(b.T()) * b.Hq() * s.D * 4;
  auto o = test::upload(std::vector<uint8_t>(ob, 0x7b));
  auto hs = test::upload(std::vector<float>(size_t(s.Hkv), 1.0f));
  ExtendBuffers x;
  x.q = q.get(), x.k = b.kv.k.get(), x.v = b.kv.v.get(), x.page_ids = ids.get(), x.o = o.get();
  auto fails = [&](const ExtendBuffers& y, const std::string& needle) {
    return test::throws_error([&] { extend_run(ctx(), plan, y); }, Status::InvalidArgument, needle);
  };
  EXPECT_TRUE(fails(x, "k_scale_cache"));
  ExtendBuffers y = x;
  y.k_scale_cache = b.kv.k_scales.get();
  EXPECT_TRUE(fails(y, "v_scale_cache"));
  y.v_scale_cache = b.kv.v_scales.get(), y.v_scale = 0.5f;
  EXPECT_TRUE(fails(y, "k_scale/v_scale must be 1"));
  y.v_scale = 1.0f, y.k_head_scales = hs.get(), y.v_head_scales = hs.get();
  EXPECT_TRUE(fails(y, "int4 cache"));
  // A scale cache one pair short of the cache's pages.
  auto small = test::upload(std::vector<uint8_t>(size_t(b.cache.scale_required_bytes()) - 8, 0));
  y = x, y.k_scale_cache = small.get(), y.v_scale_cache = b.kv.v_scales.get();
  EXPECT_TRUE(fails(y, "k_scale_cache"));
  // Cascade: its levels check the same.
  const CascadePlan cp = cascade_plan(ctx(), shared, csr, b.cache, opt);
  DeviceBuffer tmp_o(ctx(), size_t(cp.tmp_o_bytes)), tmp_l(ctx(), size_t(cp.tmp_lse_bytes));
  CascadeBuffers cb;
  cb.q = q.get(), cb.k_cache = b.kv.k.get(), cb.v_cache = b.kv.v.get(), cb.o = o.get();
  cb.shared_page_ids = cb.unique_page_ids = ids.get(), cb.tmp_o = tmp_o.get();
  cb.tmp_lse_shared = cb.tmp_lse_unique = tmp_l.get();
  cb.k_scale_cache = b.kv.k_scales.get();
  EXPECT_TRUE(test::throws_error([&] { cascade_run(ctx(), cp, cb); }, Status::InvalidArgument, "v_scale_cache"));
  ctx().finish();
  for (uint8_t v : test::download<uint8_t>(o, ob)) ASSERT_EQ(v, 0x7b) << "a rejected call wrote o";
  // int4 has no ragged form.
  RaggedKV r;
  r.num_tokens = 8, r.num_kv_heads = 1, r.head_dim = 64, r.dtype = DType::I4;
  EXPECT_TRUE(test::throws_error([&] { prefill_plan(ctx(), {0, 1}, {0, 8}, r, opt); }, Status::Unsupported, "int4"));
}

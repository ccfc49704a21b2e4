// Quantised KV in extend and cascade. int8 caches written by append_kv (row scales in scale
// caches) and fp8 / bf16 caches with per-KV-head scales: extend (prefix + new tokens, causal,
// CSR and page table) and cascade match ref::attention over the values the stored bytes
// dequantise to (the reference rows are read back from the device and dequantised on the
// host: reference/kv_formats_reference). GQA 1 / 4, head dims 64 / 128, pages 1 / 16, f32 and
// bf16 q, NHD and HND, f32 and f16 scales, padded scale strides.
//
// Variants: int8 runs only on the portable (generic) and cpu kernels; a tensor-core variant
// asked for falls back to them, and every run asserts which one ran. Per-head scales run on
// every variant, including the tensor-core kernel this process emulates (CLATTN_EMULATE:
// amd_wmma, amd_mfma, intel_dpas), which must then be the one that ran.
// Rejected calls name the argument and leave the output untouched.
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "support/paged_cache.hpp"
#include "support/test_support.hpp"

using namespace clattn;
using test::ctx;

namespace {

// The tensor-core variant this process emulates ("" when none).
std::string emulated_variant() {
  const char* e = std::getenv("CLATTN_EMULATE");
  const std::string em = e ? e : "";
  if (em.find("amd_mfma") != std::string::npos) return "amd_mfma";
  if (em.find("amd_wmma") != std::string::npos) return "amd_wmma";
  if (em.find("cl_intel_subgroup_matrix_multiply_accumulate") != std::string::npos) return "intel_dpas";
  return "";
}

bool is_matrix_variant(const std::string& v) { return v != "generic" && v != "cpu"; }

// The variants a case runs: the profile's choice, the two portable kernels, every tensor-core
// variant by name (int8: each falls back; with per-head scales the emulated one runs).
std::vector<std::string> variants_to_run() {
  return {"", "generic", "cpu", "nv_mma_sync", "amd_wmma", "amd_mfma", "intel_dpas"};
}

struct Shape {
  int Hkv, G, D, P;
  KVLayout layout;
  DType kv, scale_dt, qd, od;
  bool pad_scales = false;
  std::string describe() const {
    return "Hkv=" + std::to_string(Hkv) + " G=" + std::to_string(G) + " D=" + std::to_string(D) + " P=" +
           std::to_string(P) + (layout == KVLayout::HND ? " HND" : " NHD") + " kv=" + dtype_name(kv) + " scales=" +
           dtype_name(scale_dt) + " q=" + dtype_name(qd) + " o=" + dtype_name(od) + (pad_scales ? " padded" : "");
  }
};

// A batch of requests (cached prefix + new query tokens) over a cache that append_kv wrote,
// and its reference.
struct Batch {
  Shape s;
  std::vector<int> qo, prefix;
  PagedKV cache;
  std::vector<std::vector<int32_t>> pages;  // per request
  test::KVBuffers kv;                        // caches, int8 scale caches
  DeviceBuffer khs, vhs;                     // per-head scales
  float k_scale = 1.0f, v_scale = 1.0f;
  std::vector<float> k_heads, v_heads;       // per-head scales (empty: none)
  std::vector<std::vector<double>> kd, vd;   // per request [kv_len, Hkv, D]: the dequantised rows
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

// Writes every request's K/V (f32 sources in [-3, 3]) with append_kv into shuffled pages, reads
// the stored bytes (and int8 scales) back and dequantises them as a kernel must read them.
Batch build(const Shape& s, const std::vector<int>& qo, const std::vector<int>& prefix, test::Rng& rng,
            bool head_scales) {
  Batch b;
  b.s = s, b.qo = qo, b.prefix = prefix;
  const int B = b.B(), P = s.P, D = s.D, Hkv = s.Hkv, row = Hkv * D;
  PagedKV& c = b.cache;
  c.page_size = P, c.num_kv_heads = Hkv, c.head_dim = D, c.layout = s.layout, c.dtype = s.kv;
  c.scale_dtype = s.scale_dt;
  if (s.pad_scales)  // [pages, Hkv, P + 3] with a gap after each page
    c.scale_stride_token = 1, c.scale_stride_head = P + 3, c.scale_stride_page = int64_t(Hkv) * (P + 3) + 5;
  std::vector<int> lens;
  for (int i = 0; i < B; ++i) lens.push_back(b.kv_len(i));
  const test::ShuffledPages sp = test::shuffled_pages(lens, P, 3, rng);
  c.num_pages = sp.num_pages, b.pages = sp.pages;
  const std::vector<int64_t>& slots = sp.slots;
  const int N = int(slots.size());
  const auto k = test::quantize(rng.vec(size_t(N) * row, -3, 3), DType::F32);
  const auto v = test::quantize(rng.vec(size_t(N) * row, -3, 3), DType::F32);
  const bool i8 = s.kv == DType::I8;
  if (head_scales) {
    for (int h = 0; h < Hkv; ++h) b.k_heads.push_back(0.5f + 0.75f * h), b.v_heads.push_back(1.25f - 0.375f * h);
    b.k_scale = 0.5f, b.v_scale = 2.0f;
    b.khs = test::upload(b.k_heads), b.vhs = test::upload(b.v_heads);
  }
  // Unwritten slots: 0x7f bytes (int8 127, a large fp8 value) and scales, so a stray read shows.
  b.kv = test::kv_buffers(c, 0x7f, 0x7f);
  AppendKVArgs scale_args;
  scale_args.k_scale = b.k_scale, scale_args.v_scale = b.v_scale;
  if (head_scales) scale_args.k_head_scales = b.khs.get(), scale_args.v_head_scales = b.vhs.get();
  test::append_rows(b.kv, k, v, slots, scale_args);

  const test::StoredKV st = test::stored(b.kv);
  const size_t es = dtype_size(s.kv);
  auto row_at = [&](const std::vector<uint8_t>& bytes, const std::vector<uint8_t>& scales, int64_t slot, int h,
                    double tensor_scale, double* out) {
    if (i8) {
      test::dequantized_row(c, bytes, scales, slot, h, out);
      return;
    }
    const size_t co = size_t(test::row_offset(c, slot, h)) * es;
    const auto x = test::unpack(std::vector<uint8_t>(bytes.begin() + long(co), bytes.begin() + long(co + D * es)), s.kv,
                                tensor_scale);
    std::copy(x.begin(), x.end(), out);
  };
  size_t t0 = 0;
  for (int i = 0; i < B; ++i) {
    const int L = b.kv_len(i);
    b.kd.emplace_back(size_t(L) * row), b.vd.emplace_back(size_t(L) * row);
    for (int t = 0; t < L; ++t)
      for (int h = 0; h < Hkv; ++h) {
        const double kh = head_scales ? double(b.k_scale) * b.k_heads[size_t(h)] : 1.0;
        const double vh = head_scales ? double(b.v_scale) * b.v_heads[size_t(h)] : 1.0;
        row_at(st.k, st.k_scales, slots[t0 + size_t(t)], h, kh, &b.kd.back()[size_t(t) * row + size_t(h) * D]);
        row_at(st.v, st.v_scales, slots[t0 + size_t(t)], h, vh, &b.vd.back()[size_t(t) * row + size_t(h) * D]);
      }
    t0 += size_t(L);
  }
  b.qo_indptr = {0};
  for (int n : qo) b.qo_indptr.push_back(b.qo_indptr.back() + n);
  b.q = test::quantize(rng.vec(size_t(b.T()) * b.Hq() * D, -2, 2), s.qd);
  return b;
}

// ref::attention per request (causal, aligned to the end), o [T, Hq, D].
std::vector<double> reference(const Batch& b) {
  const int Hq = b.Hq(), D = b.s.D;
  std::vector<double> o(size_t(b.T()) * Hq * D);
  ref::AttnOptions ro;
  ro.sm_scale = 1.0 / std::sqrt(double(D));
  for (int i = 0; i < b.B(); ++i) {
    const size_t q0 = size_t(b.qo_indptr[size_t(i)]) * Hq * D;
    ref::attention(b.q.data() + q0, b.kd[size_t(i)].data(), b.vd[size_t(i)].data(), b.qo[size_t(i)], b.kv_len(i), Hq,
                   b.s.Hkv, D, D, ro, o.data() + q0, nullptr);
  }
  return o;
}

// o's tolerance: f32 arithmetic and o's rounding; the matrix kernels round q and P to their
// 16-bit type as well (tests/extend/extend_cases.hpp).
double tolerance(const ExtendPlan& p) {
  const DType od = p.o_dtype;
  double t = od == DType::F32 ? 5e-5 : od == DType::F16 ? 2e-3 : 1e-2;
  if (is_matrix_variant(p.variant)) t = std::max(t, p.kv_dtype == DType::BF16 ? 3e-2 : 6e-3);
  return t;
}

// The scale fields of the batch's buffers (int8 row scales, per-head scales).
template <class Buffers>
void set_scales(const Batch& b, Buffers& x) {
  x.k_scale = b.k_scale, x.v_scale = b.v_scale;
  if (b.s.kv == DType::I8) x.k_scale_cache = b.kv.k_scales.get(), x.v_scale_cache = b.kv.v_scales.get();
  if (!b.k_heads.empty()) x.k_head_scales = b.khs.get(), x.v_head_scales = b.vhs.get();
}

// The variant a run must have used: int8 never reaches a tensor-core kernel.
void expect_variant(const Batch& b, const std::string& asked, const std::string& got) {
  if (b.s.kv == DType::I8) {
    EXPECT_FALSE(is_matrix_variant(got)) << "int8 ran on " << got;
    if (asked == "generic" || asked == "cpu") EXPECT_EQ(got, asked);
    else if (!asked.empty()) EXPECT_EQ(got, "generic") << "asked for " << asked;
    else if (ctx().profile().is_cpu && ctx().profile().param_vendor() == "cpu") EXPECT_EQ(got, "cpu");
  } else if (!asked.empty()) {
    // (The AMD and Intel matrix kernels take 16-bit KV only.)
    const bool takes = b.s.kv == DType::BF16 || b.s.kv == DType::F16;
    if (!is_matrix_variant(asked) || (asked == emulated_variant() && takes)) EXPECT_EQ(got, asked);
  }
}

struct Out {
  std::vector<double> o;
  ExtendPlan plan;
};

// extend over the batch (CSR, or the page table), o in the batch's o dtype.
Out run_extend(const Batch& b, const std::string& variant, bool page_table = false) {
  ExtendOptions opt;
  opt.num_qo_heads = b.Hq(), opt.q_dtype = b.s.qd, opt.o_dtype = b.s.od, opt.variant = variant;
  Out r;
  const PagedCsr csr = b.csr();
  std::vector<int32_t> lens;
  for (int i = 0; i < b.B(); ++i) lens.push_back(b.kv_len(i));
  PageTable table = test::page_table(b.pages, b.s.P, lens);
  table.cu_seqlens_q = b.qo_indptr;
  r.plan = page_table ? extend_plan(ctx(), table, b.cache, opt) : extend_plan(ctx(), csr, b.cache, opt);
  auto q = test::upload(test::pack(b.q, b.s.qd));
  auto ids = test::upload(page_table ? table.page_table : csr.kv_indices);
  const size_t ob = size_t(b.T()) * b.Hq() * b.s.D * dtype_size(b.s.od);
  auto o = test::upload(std::vector<uint8_t>(ob, 0x7b));
  DeviceBuffer ws(ctx(), size_t(std::max<int64_t>(r.plan.workspace_bytes, 16)));
  ExtendBuffers x;
  x.q = q.get(), x.k = b.kv.k.get(), x.v = b.kv.v.get(), x.page_ids = ids.get(), x.o = o.get(), x.workspace = ws.get();
  set_scales(b, x);
  extend_run(ctx(), r.plan, x);
  ctx().finish();
  r.o = test::unpack(test::download<uint8_t>(o, ob), b.s.od);
  return r;
}

void check_extend(const Batch& b, bool page_table = false) {
  const auto want = reference(b);
  for (const std::string& v : variants_to_run()) {
    SCOPED_TRACE("variant asked: '" + v + "'" + (page_table ? " page table" : ""));
    const Out r = run_extend(b, v, page_table);
    expect_variant(b, v, r.plan.variant);
    const double t = tolerance(r.plan);
    EXPECT_TRUE(test::all_close(r.o, want, t, t, "extend (ran " + r.plan.variant + ")"));
    if (::testing::Test::HasFailure()) return;
  }
}

// Requests: a prefix-only-ish one (one new token), one whose new tokens span pages, one
// without a cached prefix.
void requests(test::Rng& rng, std::vector<int>& qo, std::vector<int>& prefix) {
  qo = {1, rng.uniform_int(9, 20), rng.uniform_int(2, 7)};
  prefix = {rng.uniform_int(20, 40), rng.uniform_int(5, 30), 0};
}

}  // namespace

TEST(ExtendInt8, MatchesTheReferenceOverDequantisedRows) {
  CLATTN_SEED_TRACE();
  test::Rng rng(2820);
  const Shape shapes[] = {
      {2, 4, 128, 16, KVLayout::NHD, DType::I8, DType::F32, DType::BF16, DType::BF16},
      {4, 1, 64, 1, KVLayout::HND, DType::I8, DType::F16, DType::F32, DType::F32},
      {1, 4, 64, 16, KVLayout::HND, DType::I8, DType::F32, DType::F32, DType::F32, true},
      {2, 1, 128, 1, KVLayout::NHD, DType::I8, DType::F16, DType::BF16, DType::F32},
  };
  bool first = true;
  int i = 0;
  for (const Shape& s : shapes) {
    SCOPED_TRACE(s.describe());
    std::vector<int> qo, prefix;
    requests(rng, qo, prefix);
    if (!test::row_runs_case(i++)) continue;
    const Batch b = build(s, qo, prefix, rng, false);
    check_extend(b);
    if (first) check_extend(b, true);  // the page-table form reads the same rows
    first = false;
    if (HasFailure()) return;
  }
}

// Per-KV-head scales on an fp8 and a bf16 cache (k_scale / v_scale besides), every variant.
TEST(ExtendHeadScales, MatchTheReference) {
  CLATTN_SEED_TRACE();
  test::Rng rng(2821);
  for (DType kv : {DType::FP8_E4M3, DType::BF16}) {
    const Shape s{2, 4, 64, 16, KVLayout::NHD, kv, DType::F32, DType::F32, DType::F32};
    SCOPED_TRACE(s.describe());
    std::vector<int> qo, prefix;
    requests(rng, qo, prefix);
    check_extend(build(s, qo, prefix, rng, true));
    if (HasFailure()) return;
  }
}

// Cascade over an int8 cache and over an fp8 cache with per-head scales: the prefix pages
// are shared by every request; the result is the reference over prefix + suffix.
TEST(CascadeQuantised, MatchesTheReference) {
  CLATTN_SEED_TRACE();
  test::Rng rng(2822);
  for (DType kv : {DType::I8, DType::FP8_E4M3}) {
    const bool hs = kv != DType::I8;
    const Shape s{2, 4, 64, 16, KVLayout::NHD, kv, DType::F16, DType::F32, DType::F32};
    SCOPED_TRACE(s.describe());
    const int P = s.P, prefix_pages = 2;
    // Request 0 holds the shared prefix and its own suffix; the others' prefix pages are
    // request 0's (same ids, so the same stored rows and scales).
    const std::vector<int> suffix = {11, 5, 20}, qo = {4, 5, 13};
    std::vector<int> prefix;
    for (size_t i = 0; i < qo.size(); ++i) prefix.push_back(prefix_pages * P + suffix[i] - qo[i]);
    Batch b = build(s, qo, prefix, rng, hs);
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
      ExtendOptions opt;
      opt.num_qo_heads = b.Hq(), opt.q_dtype = s.qd, opt.o_dtype = s.od, opt.variant = v;
      const CascadePlan cp = cascade_plan(ctx(), shared, unique, b.cache, opt);
      expect_variant(b, v, cp.unique.variant);
      expect_variant(b, v, cp.shared.variant);
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
      set_scales(b, cb);
      cascade_run(ctx(), cp, cb);
      ctx().finish();
      const double t = std::max(tolerance(cp.unique), tolerance(cp.shared));
      EXPECT_TRUE(test::all_close(test::unpack(test::download<uint8_t>(o, ob), s.od), want, t, t,
                                  "cascade (ran " + cp.unique.variant + ")"));
      if (HasFailure()) return;
    }
  }
}

TEST(ExtendInt8, RejectedCallsNameTheArgument) {
  test::Rng rng(2823);
  const Shape s{1, 2, 64, 4, KVLayout::NHD, DType::I8, DType::F32, DType::F32, DType::F32};
  const Batch b = build(s, {3}, {5}, rng, false);
  ExtendOptions opt;
  opt.num_qo_heads = b.Hq(), opt.q_dtype = opt.o_dtype = DType::F32;
  const PagedCsr csr = b.csr();
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
  y.v_scale_cache = b.kv.v_scales.get(), y.k_scale = 2.0f;
  EXPECT_TRUE(fails(y, "k_scale/v_scale must be 1"));
  y.k_scale = 1.0f, y.k_head_scales = hs.get(), y.v_head_scales = hs.get();
  EXPECT_TRUE(fails(y, "int8 cache"));
  y.v_head_scales = nullptr;
  EXPECT_TRUE(fails(y, "go together"));
  // A scale cache too small for the cache's pages.
  auto small = test::upload(std::vector<uint8_t>(8, 0));
  y = x, y.k_scale_cache = b.kv.k_scales.get(), y.v_scale_cache = small.get();
  EXPECT_TRUE(fails(y, "v_scale_cache"));
  // Cascade: its levels check the same.
  CascadeBuffers cb;
  cb.q = q.get(), cb.k_cache = b.kv.k.get(), cb.v_cache = b.kv.v.get(), cb.o = o.get();
  PagedCsr shared = csr;
  shared.qo_indptr.clear();
  const CascadePlan cp = cascade_plan(ctx(), shared, csr, b.cache, opt);
  DeviceBuffer tmp_o(ctx(), size_t(cp.tmp_o_bytes)), tmp_l(ctx(), size_t(cp.tmp_lse_bytes));
  cb.shared_page_ids = cb.unique_page_ids = ids.get(), cb.tmp_o = tmp_o.get();
  cb.tmp_lse_shared = cb.tmp_lse_unique = tmp_l.get();
  EXPECT_TRUE(test::throws_error([&] { cascade_run(ctx(), cp, cb); }, Status::InvalidArgument, "k_scale_cache"));
  ctx().finish();
  for (uint8_t v : test::download<uint8_t>(o, ob)) ASSERT_EQ(v, 0x7b) << "a rejected call wrote o";
  // int8 has no ragged form.
  RaggedKV r;
  r.num_tokens = 8, r.num_kv_heads = 1, r.head_dim = 64, r.dtype = DType::I8;
  EXPECT_TRUE(test::throws_error([&] { prefill_plan(ctx(), {0, 1}, {0, 8}, r, opt); }, Status::Unsupported, "int8"));
}

// Per-head scales on a float cache: one of the pair missing, or too small, is rejected.
TEST(ExtendHeadScales, RejectedCallsNameTheArgument) {
  test::Rng rng(2824);
  const Shape s{2, 2, 64, 16, KVLayout::NHD, DType::FP8_E4M3, DType::F32, DType::F32, DType::F32};
  const Batch b = build(s, {3}, {5}, rng, true);
  ExtendOptions opt;
  opt.num_qo_heads = b.Hq(), opt.q_dtype = opt.o_dtype = DType::F32;
  const PagedCsr csr = b.csr();
  const ExtendPlan plan = extend_plan(ctx(), csr, b.cache, opt);
  auto q = test::upload(test::pack(b.q, DType::F32)), ids = test::upload(csr.kv_indices);
  auto o = test::upload(std::vector<float>(size_t(b.T()) * b.Hq() * s.D, 0.0f));
  auto small = test::upload(std::vector<float>(1, 1.0f));
  ExtendBuffers x;
  x.q = q.get(), x.k = b.kv.k.get(), x.v = b.kv.v.get(), x.page_ids = ids.get(), x.o = o.get();
  x.k_head_scales = b.khs.get();
  EXPECT_TRUE(test::throws_error([&] { extend_run(ctx(), plan, x); }, Status::InvalidArgument, "go together"));
  x.v_head_scales = small.get();
  EXPECT_TRUE(test::throws_error([&] { extend_run(ctx(), plan, x); }, Status::InvalidArgument, "v_head_scales"));
}

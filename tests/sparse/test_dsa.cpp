// DSA (DeepSeek sparse attention): the indexer (dsa_index_plan / dsa_index_run) and sparse MLA
// decode (mla_sparse_decode_plan / mla_sparse_run) against the double-precision reference
// (reference/sparse_reference.hpp: ref::dsa_index, ref::mla_sparse_decode) over random small
// batches, and the whole path (indexer -> indices on the device -> sparse decode).
//
// Indexer: every key dtype (f32, f16, bf16, fp8 e4m3 / e5m2 with a scale), q f32 / f16 / bf16,
// page sizes 1 / 16 / 64, CSR and page table, padded strides, empty requests, topk > L
// (padding), 1..64 heads (several head passes), index dims 16..128. The data are small
// integers, so every score is exact in f32 and ties are common: indices and scores must equal
// the reference's exactly (ties to the lower position). Unused cache slots hold NaN (float
// keys: never selected) or a large key (fp8: always selected), so a read outside a request's
// keys changes the selection. A float-valued case with topk >= L checks the arithmetic on
// non-integer data (the selection is then every position).
// Sparse MLA: index lists with -1, positions past L_b and negative ones, duplicates, and
// lists longer than L_b; every latent dtype over the variants that run here (cpu, tiled and
// generic asked for by name, the vendor rows' choice asserted per CLATTN_FORCE_VENDOR); split-K
// on and off; an identity list reproduces mla_decode bit for bit. Unused latent slots hold NaN
// (float latents), so reading a position that adds nothing shows. Tolerances are test_mla's.
// Rejected calls (bad topk, heads, dims, metadata, parameters, buffers, plan kinds) throw
// before anything is enqueued and leave the outputs untouched.
#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>

#include "clattn/diagnostics.hpp"
#include "clattn/sparse.hpp"
#include "mla/mla_fixture.hpp"
#include "reference/sparse_reference.hpp"

using namespace clattn;
using test::ctx;

namespace {

bool fp8(DType t) { return t == DType::FP8_E4M3 || t == DType::FP8_E5M2; }

// ====================================================================== indexer

// Requests' pages scattered over a pool (with spare pages), as CSR and page table.
struct Layout {
  PagedCsr csr;
  PageTable tab;
  int num_pages = 0;
  std::vector<std::vector<int32_t>> pages;  // per request, logical order
};

Layout make_layout(const std::vector<int>& lens, int P, test::Rng& rng) {
  Layout l;
  int total = 2;
  for (int n : lens) total += (n + P - 1) / P;
  std::vector<int32_t> perm(size_t(total), 0);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng.gen);
  l.num_pages = total;
  l.csr.page_size = P, l.csr.kv_indptr = {0};
  int next = 0;
  std::vector<int32_t> seq;
  for (int n : lens) {
    const int np = (n + P - 1) / P;
    l.pages.emplace_back(perm.begin() + next, perm.begin() + next + np);
    next += np;
    l.csr.kv_indices.insert(l.csr.kv_indices.end(), l.pages.back().begin(), l.pages.back().end());
    l.csr.kv_indptr.push_back(int32_t(l.csr.kv_indices.size()));
    l.csr.kv_last_page_len.push_back(np ? n - (np - 1) * P : 0);
    seq.push_back(n);
  }
  l.tab = test::page_table(l.pages, P, seq);
  return l;
}

struct IndexCase {
  DType kv = DType::BF16, q = DType::BF16;
  int Hi = 8, Di = 64, P = 16, topk = 16;
  bool table = false;
  int pad = 0;  // elements of padding per row and page (strides that are not contiguous)
  std::vector<int> lens;
  bool integers = true;  // small-integer data (exact scores, ties); else uniform floats
  std::map<std::string, int> params;

  std::string describe() const {
    std::string s = "dsa_index B=" + std::to_string(lens.size()) + " L={";
    for (size_t i = 0; i < lens.size(); ++i) s += (i ? " " : "") + std::to_string(lens[i]);
    s += "} Hi=" + std::to_string(Hi) + " Di=" + std::to_string(Di) + " P=" + std::to_string(P) +
         " topk=" + std::to_string(topk) + " keys=" + dtype_name(kv) + " q=" + dtype_name(q) +
         (table ? " page_table" : " csr") + " pad=" + std::to_string(pad) + (integers ? " integers" : " floats");
    for (const auto& [k, v] : params) s += " " + k + "=" + std::to_string(v);
    return s;
  }
};

struct IndexData {
  Layout layout;
  PagedKV cache;
  double k_scale = 1.0;
  std::vector<std::vector<double>> k;  // per request [L, Di], as the device reads them
  std::vector<double> q, w;            // [B, Hi, Di] quantised, [B, Hi]
  std::vector<uint8_t> k_bytes, q_bytes;
  std::vector<float> w_f32;
  std::vector<int32_t> page_ids;
};

double draw(test::Rng& rng, bool integers) { return integers ? double(rng.uniform_int(-2, 2)) : rng.uniform(); }

// The index cache of `layout`'s requests (lengths `lens`).
IndexData make_index_data(const IndexCase& c, const Layout& layout, test::Rng& rng) {
  IndexData d;
  d.layout = layout;
  d.cache = test::cache_geometry(c.P, 1, c.Di, KVLayout::NHD, c.kv, c.pad);
  d.cache.num_pages = layout.num_pages;
  d.k_scale = fp8(c.kv) ? 0.5 : 1.0;
  const size_t n_elems = size_t(d.cache.required_bytes() / int64_t(dtype_size(c.kv)));
  // Unused slots: NaN (never selected) or, for fp8 (no NaN a kernel reads as one), a large key.
  std::vector<double> all(n_elems, fp8(c.kv) ? 64.0 : std::numeric_limits<double>::quiet_NaN());
  const int B = int(c.lens.size());
  d.k.resize(size_t(B));
  for (int b = 0; b < B; ++b) {
    const int L = c.lens[size_t(b)];
    std::vector<double> raw(size_t(L) * c.Di);
    for (double& x : raw) x = draw(rng, c.integers);
    d.k[size_t(b)] = test::quantize(raw, c.kv, d.k_scale);
    for (int t = 0; t < L; ++t) {
      const int64_t row = int64_t(layout.pages[size_t(b)][size_t(t / c.P)]) * d.cache.page_stride() +
                          int64_t(t % c.P) * d.cache.token_stride();
      std::copy_n(&d.k[size_t(b)][size_t(t) * c.Di], c.Di, &all[size_t(row)]);
    }
  }
  d.k_bytes = test::pack(all, c.kv, d.k_scale);
  std::vector<double> q(size_t(B) * c.Hi * c.Di);
  for (double& x : q) x = draw(rng, c.integers);
  d.q = test::quantize(q, c.q);
  d.q_bytes = test::pack(d.q, c.q);
  d.w.resize(size_t(B) * c.Hi);
  for (double& x : d.w) x = draw(rng, c.integers);
  d.w_f32.assign(d.w.begin(), d.w.end());
  d.page_ids = c.table ? layout.tab.page_table : layout.csr.kv_indices;
  if (d.page_ids.empty()) d.page_ids.push_back(0);
  return d;
}

struct IndexDev {
  DeviceBuffer k, q, w, ids, idx, sc, ws;
};

IndexDev upload_index(const IndexData& d, const IndexCase& c) {
  IndexDev v;
  const size_t B = c.lens.size();
  v.k = test::upload(d.k_bytes), v.q = test::upload(d.q_bytes), v.w = test::upload(d.w_f32);
  v.ids = test::upload(d.page_ids);
  v.idx = DeviceBuffer(ctx(), std::max<size_t>(1, B * c.topk) * 4);
  v.sc = DeviceBuffer(ctx(), std::max<size_t>(1, B * c.topk) * 4);
  v.idx.fill_bytes(ctx(), 0x7f), v.sc.fill_bytes(ctx(), 0x7f);
  return v;
}

DsaIndexOptions index_options(const IndexCase& c) {
  DsaIndexOptions o;
  o.num_index_heads = c.Hi, o.topk = c.topk, o.q_dtype = c.q, o.params = c.params;
  return o;
}

DsaIndexPlan index_plan(const IndexCase& c, const IndexData& d, const DsaIndexOptions& o) {
  return c.table ? dsa_index_plan(ctx(), d.layout.tab, d.cache, o) : dsa_index_plan(ctx(), d.layout.csr, d.cache, o);
}

DsaIndexBuffers index_buffers(IndexDev& v, const IndexData& d, bool scores = true) {
  DsaIndexBuffers b;
  b.q = v.q.get(), b.weights = v.w.get(), b.k_cache = v.k.get(), b.page_ids = v.ids.get();
  b.indices = v.idx.get(), b.scores = scores ? v.sc.get() : nullptr, b.workspace = v.ws.get();
  b.k_scale = float(d.k_scale);
  return b;
}

// Reference indices [B, topk] and scores.
void index_reference(const IndexCase& c, const IndexData& d, std::vector<int32_t>& idx, std::vector<double>& sc) {
  const size_t B = c.lens.size(), K = size_t(c.topk);
  idx.assign(B * K, 0), sc.assign(B * K, 0.0);
  for (size_t b = 0; b < B; ++b)
    ref::dsa_index(&d.q[b * c.Hi * c.Di], &d.w[b * c.Hi], d.k[b].data(), c.lens[b], c.Hi, c.Di, c.topk,
                   &idx[b * K], &sc[b * K]);
}

// Runs the indexer on one case; checks indices (exactly) and scores; returns the plan.
DsaIndexPlan run_index_case(const IndexCase& c, uint64_t salt, bool with_scores = true) {
  SCOPED_TRACE(c.describe());
  test::Rng rng(salt);
  const Layout layout = make_layout(c.lens, c.P, rng);
  IndexData d = make_index_data(c, layout, rng);
  IndexDev v = upload_index(d, c);
  const DsaIndexPlan plan = index_plan(c, d, index_options(c));
  if (plan.workspace_bytes > 0) v.ws = DeviceBuffer(ctx(), size_t(plan.workspace_bytes));
  dsa_index_run(ctx(), plan, index_buffers(v, d, with_scores));
  clFinish(ctx().cl_queue());
  const size_t n = c.lens.size() * size_t(c.topk);
  auto got_i = test::download<int32_t>(v.idx, n);
  auto got_s = test::download<float>(v.sc, n);
  std::vector<int32_t> want_i;
  std::vector<double> want_s;
  index_reference(c, d, want_i, want_s);
  for (size_t j = 0; j < n; ++j) {
    const size_t b = j / size_t(c.topk);
    EXPECT_EQ(got_i[j], want_i[j]) << "request " << b << " entry " << j % c.topk;
    if (with_scores) {
      if (std::isinf(want_s[j])) {
        EXPECT_TRUE(std::isinf(got_s[j]) && got_s[j] < 0) << "score " << j << " = " << got_s[j] << ", want -inf";
      } else {
        const double tol = c.integers ? 0.0 : 1e-5 * (1.0 + std::fabs(want_s[j])) * c.Hi;
        EXPECT_NEAR(got_s[j], want_s[j], tol) << "request " << b << " entry " << j % c.topk;
      }
    }
    if (::testing::Test::HasFailure()) break;
  }
  EXPECT_EQ(plan.variant, "generic");
  return plan;
}

TEST(DsaIndex, MatchesTheReference) {
  CLATTN_SEED_TRACE();
  test::Rng rng(2711);
  const DType kvs[] = {DType::BF16, DType::F16, DType::FP8_E4M3, DType::F32, DType::FP8_E5M2};
  const DType qs[] = {DType::BF16, DType::F32, DType::F16};
  const int Ps[] = {16, 1, 64};
  const int His[] = {8, 3, 1, 16, 64};
  const int Dis[] = {64, 16, 128, 32, 128};
  for (int k = 0; k < 5; ++k) {
    IndexCase c;
    c.kv = kvs[k], c.q = qs[k % 3], c.P = Ps[k % 3], c.Hi = His[k], c.Di = Dis[k];
    c.table = k % 2 == 1, c.pad = k % 2 == 0 ? 4 : 0;
    const int B = rng.uniform_int(2, 3);
    for (int i = 0; i < B; ++i) c.lens.push_back(rng.uniform_int(1, 150));
    if (k == 1) c.lens[1] = 0;                         // an empty request: all padding
    c.topk = k == 2 ? 300 : rng.uniform_int(1, 40);    // k == 2: topk > every L
    run_index_case(c, 100 + k);
    if (::testing::Test::HasFailure()) return;
  }
}

// Several head passes (Hi > HP), many tiles per request (small TT), narrow micro-tiles and a
// small top-k group; and a float-valued case whose selection is every position.
TEST(DsaIndex, OtherTilesAndFloatData) {
  CLATTN_SEED_TRACE();
  IndexCase c;
  c.kv = DType::BF16, c.q = DType::F32, c.Hi = 10, c.Di = 48, c.P = 16, c.topk = 33, c.lens = {77, 5, 130};
  c.params = {{"TT", 8}, {"TM", 2}, {"TH", 2}, {"HP", 4}, {"DK", 16}, {"TOPK_WG", 16}};
  run_index_case(c, 201);
  IndexCase f;
  f.kv = DType::F16, f.q = DType::BF16, f.Hi = 6, f.Di = 64, f.P = 16, f.lens = {40, 63}, f.topk = 64;
  f.integers = false, f.table = true;
  run_index_case(f, 202);
}

TEST(DsaIndex, ScoresOutputIsOptional) {
  CLATTN_SEED_TRACE();
  IndexCase c;
  c.kv = DType::FP8_E4M3, c.Hi = 4, c.Di = 32, c.P = 16, c.topk = 12, c.lens = {50, 0, 20};
  run_index_case(c, 301, false);
}

TEST(DsaIndex, RejectsBadArgumentsWritingNothing) {
  CLATTN_SEED_TRACE();
  IndexCase c;
  c.kv = DType::BF16, c.Hi = 4, c.Di = 32, c.P = 16, c.topk = 8, c.lens = {30, 9};
  test::Rng rng(401);
  const Layout layout = make_layout(c.lens, c.P, rng);
  IndexData d = make_index_data(c, layout, rng);
  IndexDev v = upload_index(d, c);
  const DsaIndexOptions opt = index_options(c);
  auto plan_with = [&](const DsaIndexOptions& o) { return dsa_index_plan(ctx(), d.layout.csr, d.cache, o); };

  DsaIndexOptions o = opt;
  o.topk = 0;
  EXPECT_TRUE(test::throws_error([&] { plan_with(o); }, Status::InvalidArgument, "topk"));
  o.topk = kDsaMaxTopk + 1;
  EXPECT_TRUE(test::throws_error([&] { plan_with(o); }, Status::InvalidArgument, "topk"));
  o = opt, o.num_index_heads = 0;
  EXPECT_TRUE(test::throws_error([&] { plan_with(o); }, Status::InvalidArgument, "num_index_heads"));
  o = opt, o.q_dtype = DType::FP8_E4M3;
  EXPECT_TRUE(test::throws_error([&] { plan_with(o); }, Status::Unsupported, "q_dtype"));
  o = opt, o.params = {{"NOPE", 1}};
  EXPECT_TRUE(test::throws_error([&] { plan_with(o); }, Status::InvalidArgument, "NOPE"));
  o = opt, o.params = {{"TM", 3}};
  EXPECT_TRUE(test::throws_error([&] { plan_with(o); }, Status::InvalidArgument, "TM"));
  PagedKV k2 = d.cache;
  k2.head_dim = 40;
  EXPECT_TRUE(test::throws_error([&] { dsa_index_plan(ctx(), d.layout.csr, k2, opt); }, Status::Unsupported,
                                 "head_dim"));
  k2 = d.cache, k2.num_kv_heads = 2;
  EXPECT_TRUE(test::throws_error([&] { dsa_index_plan(ctx(), d.layout.csr, k2, opt); }, Status::InvalidArgument,
                                 "num_kv_heads"));
  k2 = d.cache, k2.page_size = 12;
  PagedCsr csr12 = d.layout.csr;
  csr12.page_size = 12;
  EXPECT_TRUE(test::throws_error([&] { dsa_index_plan(ctx(), csr12, k2, opt); }, Status::Unsupported, "page_size"));
  PagedCsr bad = d.layout.csr;
  bad.kv_indices[0] = d.cache.num_pages + 3;
  EXPECT_TRUE(test::throws_error([&] { dsa_index_plan(ctx(), bad, d.cache, opt); }, Status::InvalidArgument,
                                 "kv_indices"));
  bad = d.layout.csr, bad.kv_start_offset = {1, 0};
  EXPECT_TRUE(test::throws_error([&] { dsa_index_plan(ctx(), bad, d.cache, opt); }, Status::Unsupported,
                                 "kv_start_offset"));

  const DsaIndexPlan plan = plan_with(opt);
  v.ws = DeviceBuffer(ctx(), size_t(plan.workspace_bytes));
  const DsaIndexBuffers good = index_buffers(v, d);
  DeviceBuffer small(ctx(), 16);
  DsaIndexBuffers b2 = good;
  b2.q = small.get();
  EXPECT_TRUE(test::throws_error([&] { dsa_index_run(ctx(), plan, b2); }, Status::InvalidArgument, "q"));
  b2 = good, b2.indices = small.get();
  EXPECT_TRUE(test::throws_error([&] { dsa_index_run(ctx(), plan, b2); }, Status::InvalidArgument, "indices"));
  b2 = good, b2.workspace = small.get();
  EXPECT_TRUE(test::throws_error([&] { dsa_index_run(ctx(), plan, b2); }, Status::InvalidArgument, "workspace"));
  b2 = good, b2.k_scale = 0.0f;
  EXPECT_TRUE(test::throws_error([&] { dsa_index_run(ctx(), plan, b2); }, Status::InvalidArgument, "k_scale"));
  b2 = good, b2.weights = nullptr;
  EXPECT_TRUE(test::throws_error([&] { dsa_index_run(ctx(), plan, b2); }, Status::InvalidArgument, "weights"));
  EXPECT_TRUE(test::throws_error([&] { dsa_index_run(ctx(), DsaIndexPlan{}, good); }, Status::InvalidArgument,
                                 "empty plan"));
  clFinish(ctx().cl_queue());
  const std::vector<int32_t> untouched(c.lens.size() * c.topk, 0x7f7f7f7f);
  EXPECT_EQ(test::download<int32_t>(v.idx, untouched.size()), untouched) << "a rejected call wrote indices";
}

// ====================================================================== sparse MLA decode

using test::mla::Batch;
using test::mla::Data;
using test::mla::Dc;
using test::mla::Dr;

double o_tol(DType t) { return t == DType::F32 ? 1e-4 : t == DType::F16 ? 2e-3 : 1e-2; }

bool mma_available() {
  for (const auto& v : variants(ctx().profile()))
    if (v.name == "nv_mma_sync") return v.available;
  return false;
}

// The variant the vendor rows choose for MLA decode on this device (rows_mla.cpp): the
// tensor-core kernel where the nvidia rows ask for it and the device runs it, the CPU kernel
// under the cpu rows, the register-blocked kernel elsewhere.
std::string vendor_variant() {
  const std::string v = ctx().profile().param_vendor();
  if (v == "nvidia" && mma_available()) return "nv_mma_sync";
  return v == "cpu" ? "cpu" : "tiled";
}

// Index lists [B, topk]: valid positions, -1, positions past L_b, negative ones and repeats.
std::vector<int32_t> make_indices(const std::vector<int>& lens, int topk, test::Rng& rng) {
  std::vector<int32_t> idx;
  for (int L : lens) {
    std::vector<int32_t> row;
    for (int j = 0; j < topk; ++j) {
      const int r = rng.uniform_int(0, 9);
      int32_t p;
      if (r == 0 || L == 0) p = -1;
      else if (r == 1) p = L + rng.uniform_int(0, 3);  // past the request (its page's unused slots)
      else if (r == 2) p = rng.uniform_int(0, 1) ? INT_MAX : -rng.uniform_int(2, 100);
      else if (r == 3 && !row.empty()) p = row[size_t(rng.uniform_int(0, int(row.size()) - 1))];  // a repeat
      else p = rng.uniform_int(0, L - 1);
      row.push_back(p);
    }
    idx.insert(idx.end(), row.begin(), row.end());
  }
  return idx;
}

struct SparseCase {
  Batch b;
  int topk = 32;
  MlaOptions opt;
  std::string variant;  // asserted when not empty
};

// Runs one sparse decode; compares o / lse with the reference; returns o's bytes.
std::vector<uint8_t> run_sparse(const SparseCase& sc, uint64_t salt, const std::vector<int32_t>* given = nullptr,
                                MlaPlan* plan_out = nullptr) {
  const Batch& b = sc.b;
  SCOPED_TRACE(b.describe() + " topk=" + std::to_string(sc.topk));
  test::Rng rng(salt);
  Data d = test::mla::make_data(b, rng);
  test::mla::Dev v = test::mla::upload_data(d, b);
  const std::vector<int32_t> idx = given ? *given : make_indices(b.kv, sc.topk, rng);
  DeviceBuffer ib = test::upload(idx);
  MlaOptions opt = sc.opt;
  opt.num_heads = b.H, opt.q_dtype = b.qd, opt.o_dtype = b.od, opt.sm_scale = float(b.sm_scale);
  const MlaPlan plan = b.table ? mla_sparse_decode_plan(ctx(), d.tab, d.cache, opt, sc.topk)
                               : mla_sparse_decode_plan(ctx(), d.csr, d.cache, opt, sc.topk);
  MlaBuffers mb = test::mla::buffers(v, b);
  if (plan.workspace_bytes > 0) v.ws = DeviceBuffer(ctx(), size_t(plan.workspace_bytes)), mb.workspace = v.ws.get();
  mla_sparse_run(ctx(), plan, mb, ib.get());
  clFinish(ctx().cl_queue());
  const int B = int(b.kv.size()), H = b.H;
  const size_t rows = size_t(B) * H;
  auto ob = test::download<uint8_t>(v.o, rows * Dc * dtype_size(b.od));
  auto got = test::unpack(ob, b.od);
  auto lse = test::download<float>(v.lse, rows);
  std::vector<double> want(rows * Dc), wlse(rows);
  for (int i = 0; i < B; ++i)
    ref::mla_sparse_decode(&d.q_nope[size_t(i) * H * Dc], &d.q_pe[size_t(i) * H * Dr], d.ckv[size_t(i)].data(),
                           d.kpe[size_t(i)].data(), b.kv[size_t(i)], H, Dc, Dr, &idx[size_t(i) * sc.topk], sc.topk,
                           b.sm_scale, &want[size_t(i) * H * Dc], &wlse[size_t(i) * H]);
  const bool mma = plan.variant == "nv_mma_sync";
  const double tol = mma ? std::max(o_tol(b.od), b.kvd == DType::BF16 ? 1e-2 : 3e-3) : o_tol(b.od);
  const double ltol = !mma ? 2e-4 : b.kvd == DType::BF16 ? 1e-2 : 3e-3;
  EXPECT_TRUE(test::all_close(got, want, tol, tol, "o")) << "plan: " << plan.variant << ", " << plan.num_work
                                                         << " entries, " << plan.num_merges << " merges";
  for (size_t r = 0; r < rows; ++r) {
    if (std::isinf(wlse[r])) EXPECT_TRUE(std::isinf(lse[r]) && lse[r] < 0) << "lse row " << r << " = " << lse[r];
    else EXPECT_NEAR(lse[r], wlse[r], ltol * (1 + std::fabs(wlse[r]))) << "lse row " << r;
    if (::testing::Test::HasFailure()) break;
  }
  EXPECT_EQ(plan.topk, sc.topk);
  if (!sc.variant.empty()) EXPECT_EQ(plan.variant, sc.variant) << b.describe();
  if (plan_out) *plan_out = plan;
  return ob;
}

Batch sparse_batch(test::Rng& rng, DType kv, DType io, int H, int P, bool table, bool single, int B, int max_len) {
  Batch b;
  b.kvd = kv, b.qd = io, b.od = io == DType::F16 ? DType::BF16 : io, b.H = H, b.P = P, b.table = table;
  b.single = single;
  b.kv_scale = fp8(kv) ? 0.5 : 1.0;
  for (int i = 0; i < B; ++i) b.kv.push_back(rng.uniform_int(1, max_len));
  b.qo.assign(size_t(B), 1);
  return b;
}

void set_split(MlaOptions& o, bool split) {
  if (split) o.params["MIN_CHUNK"] = 16, o.params["WGS_PER_CU"] = 1024;  // a wide device: the planner splits
  else o.max_splits = 1;
}

// The portable variants asked for by name (CPU_KERNEL / TILED with MMA off), each over latent
// dtypes in turn (every dtype on two of them), page sizes 1 / 16 / 64, CSR / page table /
// 576-wide buffer, split-K on and off, an empty request, topk above and below L_b.
TEST(SparseMla, EveryPortableVariantMatchesTheReference) {
  CLATTN_SEED_TRACE();
  test::Rng rng(2712);
  struct V {
    const char* name;
    std::map<std::string, int> params;
    std::vector<DType> kvs;
  };
  const V vs[] = {
      {"cpu", {{"MMA", 0}, {"CPU_KERNEL", 1}}, {DType::BF16, DType::FP8_E4M3, DType::F32}},
      {"tiled", {{"MMA", 0}, {"CPU_KERNEL", 0}, {"TILED", 1}}, {DType::F16, DType::FP8_E5M2, DType::BF16}},
      {"generic", {{"MMA", 0}, {"CPU_KERNEL", 0}, {"TILED", 0}}, {DType::FP8_E4M3, DType::F16}},
  };
  const int Ps[] = {16, 1, 64};
  const DType ios[] = {DType::F32, DType::BF16, DType::F16};
  int k = 0;
  for (const V& v : vs)
    for (DType kv : v.kvs) {
      SparseCase sc;
      sc.b = sparse_batch(rng, kv, ios[k % 3], k % 2 ? 8 : 16, Ps[k % 3], k % 3 == 1, k % 4 == 2, 3, 120);
      if (k == 0) sc.b.kv[1] = 0;  // an empty request: o = 0, lse = -inf
      sc.topk = k % 2 ? 200 : 48;  // longer than every request (mostly -1 / repeats), or shorter
      sc.opt.params = v.params;
      set_split(sc.opt, k % 2 == 0);
      sc.variant = v.name;
      if (!test::row_runs_case(k)) {
        ++k;
        continue;
      }
      MlaPlan p;
      run_sparse(sc, 800 + k, nullptr, &p);
      if (k % 2 == 0) EXPECT_GT(p.num_merges, 0) << sc.b.describe();
      if (::testing::Test::HasFailure()) return;
      ++k;
    }
}

// Under each vendor's rows (CLATTN_FORCE_VENDOR) the sparse plan takes the variant the rows
// choose for dense decode; split-K on and off.
TEST(SparseMla, VendorRowsChooseTheirVariant) {
  CLATTN_SEED_TRACE();
  test::Rng rng(2713);
  for (int split : {1, 0}) {
    SparseCase sc;
    sc.b = sparse_batch(rng, split ? DType::BF16 : DType::FP8_E4M3, DType::BF16, 16, 16, split == 0, false, 2, 100);
    sc.topk = 64;
    set_split(sc.opt, split != 0);
    sc.variant = vendor_variant();
    run_sparse(sc, 900 + split);
  }
}

// The tensor-core kernel's L2 prefetch and lookup ring (L2_AHEAD, sparse builds only) over
// prefetch distances, latent dtypes, page sizes 1 / 16 / 64, lists with -1 / past-the-end /
// repeated positions longer and shorter than the requests, split-K on and off. Where the
// kernel cannot run (no nv_mma_sync), the plan still names a bad distance (next test).
TEST(SparseMla, TensorCoreL2PrefetchMatchesTheReference) {
  CLATTN_SEED_TRACE();
  if (!mma_available()) GTEST_SKIP() << "nv_mma_sync is not available on this device";
  test::Rng rng(2716);
  const int aheads[] = {2, 3, 8, 0};
  const DType kvs[] = {DType::BF16, DType::FP8_E4M3, DType::F16, DType::FP8_E5M2};
  const int Ps[] = {16, 1, 64, 16};
  for (int k = 0; k < 4; ++k) {
    SparseCase sc;
    sc.b = sparse_batch(rng, kvs[k], k % 2 ? DType::F32 : DType::BF16, 16, Ps[k], k == 1, k == 2, 3, 700);
    sc.topk = k % 2 ? 900 : 160;  // longer than every request (mostly -1 / repeats), or shorter
    sc.opt.params = {{"MMA", 1}, {"L2_AHEAD", aheads[k]}};
    set_split(sc.opt, k % 2 == 0);
    sc.variant = "nv_mma_sync";
    run_sparse(sc, 1100 + k);
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(SparseMla, BadL2AheadIsNamed) {
  test::Rng rng(2717);
  Batch b = sparse_batch(rng, DType::BF16, DType::F32, 8, 16, false, false, 2, 40);
  Data d = test::mla::make_data(b, rng);
  MlaOptions opt;
  opt.num_heads = b.H, opt.q_dtype = b.qd, opt.o_dtype = b.od, opt.sm_scale = 0.1f;
  for (int bad : {1, -1, 9}) {
    opt.params = {{"L2_AHEAD", bad}};
    EXPECT_TRUE(test::throws_error([&] { mla_sparse_decode_plan(ctx(), d.csr, d.cache, opt, 16); },
                                   Status::InvalidArgument, "L2_AHEAD"))
        << bad;
  }
}

// The list 0 .. L-1 of every request (all of length L = topk) is dense decode: the same work
// list, the same keys in the same order, so the same bits.
TEST(SparseMla, IdentityListIsDenseDecodeBitwise) {
  CLATTN_SEED_TRACE();
  test::Rng rng(2714);
  SparseCase sc;
  sc.b = sparse_batch(rng, DType::BF16, DType::F32, 16, 16, false, false, 2, 10);
  sc.topk = 70;
  sc.b.kv = {70, 70};
  set_split(sc.opt, true);
  std::vector<int32_t> idx;
  for (int r = 0; r < 2; ++r)
    for (int t = 0; t < sc.topk; ++t) idx.push_back(t);
  const auto sparse = run_sparse(sc, 1000, &idx);
  // Dense decode of the same data (the same salt draws the same batch).
  test::Rng drng(1000);
  Data d = test::mla::make_data(sc.b, drng);
  test::mla::Dev v = test::mla::upload_data(d, sc.b);
  MlaOptions opt = sc.opt;
  opt.num_heads = sc.b.H, opt.q_dtype = sc.b.qd, opt.o_dtype = sc.b.od, opt.sm_scale = float(sc.b.sm_scale);
  const MlaPlan plan = mla_decode_plan(ctx(), d.csr, d.cache, opt);
  MlaBuffers mb = test::mla::buffers(v, sc.b);
  if (plan.workspace_bytes > 0) v.ws = DeviceBuffer(ctx(), size_t(plan.workspace_bytes)), mb.workspace = v.ws.get();
  mla_run(ctx(), plan, mb);
  clFinish(ctx().cl_queue());
  EXPECT_EQ(test::download<uint8_t>(v.o, sparse.size()), sparse);
}

TEST(SparseMla, RejectsBadArgumentsWritingNothing) {
  CLATTN_SEED_TRACE();
  test::Rng rng(2715);
  Batch b = sparse_batch(rng, DType::BF16, DType::F32, 8, 16, false, false, 2, 40);
  Data d = test::mla::make_data(b, rng);
  test::mla::Dev v = test::mla::upload_data(d, b);
  MlaOptions opt;
  opt.num_heads = b.H, opt.q_dtype = b.qd, opt.o_dtype = b.od, opt.sm_scale = 0.1f;
  const int topk = 16;
  EXPECT_TRUE(test::throws_error([&] { mla_sparse_decode_plan(ctx(), d.csr, d.cache, opt, 0); },
                                 Status::InvalidArgument, "topk"));
  EXPECT_TRUE(test::throws_error([&] { mla_sparse_decode_plan(ctx(), d.csr, d.cache, opt, kDsaMaxTopk + 1); },
                                 Status::InvalidArgument, "topk"));
  MlaOptions o2 = opt;
  o2.sm_scale = 0.0f;
  EXPECT_TRUE(test::throws_error([&] { mla_sparse_decode_plan(ctx(), d.csr, d.cache, o2, topk); },
                                 Status::InvalidArgument, "sm_scale"));
  PagedCsr bad = d.csr;
  bad.kv_indices[0] = -2;
  EXPECT_TRUE(test::throws_error([&] { mla_sparse_decode_plan(ctx(), bad, d.cache, opt, topk); },
                                 Status::InvalidArgument, "kv_indices"));
  bad = d.csr, bad.qo_indptr = {0, 2, 3};
  EXPECT_TRUE(test::throws_error([&] { mla_sparse_decode_plan(ctx(), bad, d.cache, opt, topk); },
                                 Status::InvalidArgument, "exactly one"));

  const MlaPlan sparse = mla_sparse_decode_plan(ctx(), d.csr, d.cache, opt, topk);
  const MlaPlan dense = mla_decode_plan(ctx(), d.csr, d.cache, opt);
  MlaBuffers mb = test::mla::buffers(v, b);
  DeviceBuffer ws(ctx(), size_t(std::max<int64_t>({1, sparse.workspace_bytes, dense.workspace_bytes})));
  mb.workspace = ws.get();
  const std::vector<int32_t> idx(size_t(2) * topk, 0);
  DeviceBuffer ib = test::upload(idx), small(ctx(), 8);
  auto before = test::download<uint8_t>(v.o, v.o.bytes());
  EXPECT_TRUE(test::throws_error([&] { mla_run(ctx(), sparse, mb); }, Status::InvalidArgument, "mla_sparse_run"));
  EXPECT_TRUE(test::throws_error([&] { mla_sparse_run(ctx(), dense, mb, ib.get()); }, Status::InvalidArgument,
                                 "mla_sparse_decode_plan"));
  EXPECT_TRUE(test::throws_error([&] { mla_sparse_run(ctx(), sparse, mb, nullptr); }, Status::InvalidArgument,
                                 "indices"));
  EXPECT_TRUE(test::throws_error([&] { mla_sparse_run(ctx(), sparse, mb, small.get()); }, Status::InvalidArgument,
                                 "indices"));
  MlaBuffers m2 = mb;
  m2.kv_scale = -1.0f;
  EXPECT_TRUE(test::throws_error([&] { mla_sparse_run(ctx(), sparse, m2, ib.get()); }, Status::InvalidArgument,
                                 "kv_scale"));
  clFinish(ctx().cl_queue());
  EXPECT_EQ(test::download<uint8_t>(v.o, v.o.bytes()), before) << "a rejected call wrote the output";
}

// ====================================================================== the whole path

// The indexer's indices, left on the device, drive the sparse decode: one queue, no host round
// trip; the result equals the reference decode over the reference indexer's selection. The
// index cache shares the latent cache's pages (one page table for both, as in DeepSeek-V3.2).
TEST(Dsa, IndexerFeedsSparseDecode) {
  CLATTN_SEED_TRACE();
  test::Rng rng(2716);
  Batch b = sparse_batch(rng, DType::BF16, DType::BF16, 16, 16, true, false, 3, 150);
  b.od = DType::F32;
  Data d = test::mla::make_data(b, rng);
  test::mla::Dev v = test::mla::upload_data(d, b);
  IndexCase c;
  c.kv = DType::FP8_E4M3, c.q = DType::BF16, c.Hi = 8, c.Di = 64, c.P = b.P, c.topk = 40, c.table = true;
  c.lens = b.kv;
  Layout layout;
  layout.csr = d.csr, layout.tab = d.tab, layout.num_pages = d.cache.num_pages;
  for (size_t i = 0; i < b.kv.size(); ++i) {
    const int np = (b.kv[i] + b.P - 1) / b.P;
    layout.pages.emplace_back(d.tab.page_table.begin() + ptrdiff_t(i) * d.tab.max_pages,
                              d.tab.page_table.begin() + ptrdiff_t(i) * d.tab.max_pages + np);
  }
  IndexData id = make_index_data(c, layout, rng);
  IndexDev iv = upload_index(id, c);
  const DsaIndexPlan ip = index_plan(c, id, index_options(c));
  iv.ws = DeviceBuffer(ctx(), size_t(ip.workspace_bytes));
  MlaOptions opt;
  opt.num_heads = b.H, opt.q_dtype = b.qd, opt.o_dtype = b.od, opt.sm_scale = float(b.sm_scale);
  const MlaPlan mp = mla_sparse_decode_plan(ctx(), d.tab, d.cache, opt, c.topk);
  MlaBuffers mb = test::mla::buffers(v, b);
  if (mp.workspace_bytes > 0) v.ws = DeviceBuffer(ctx(), size_t(mp.workspace_bytes)), mb.workspace = v.ws.get();
  dsa_index_run(ctx(), ip, index_buffers(iv, id, false));
  mla_sparse_run(ctx(), mp, mb, iv.idx.get());
  clFinish(ctx().cl_queue());

  std::vector<int32_t> idx;
  std::vector<double> isc;
  index_reference(c, id, idx, isc);
  EXPECT_EQ(test::download<int32_t>(iv.idx, idx.size()), idx);
  const size_t rows = b.kv.size() * size_t(b.H);
  auto got = test::unpack(test::download<uint8_t>(v.o, rows * Dc * 4), DType::F32);
  std::vector<double> want(rows * Dc), wlse(rows);
  for (size_t i = 0; i < b.kv.size(); ++i)
    ref::mla_sparse_decode(&d.q_nope[i * b.H * Dc], &d.q_pe[i * b.H * Dr], d.ckv[i].data(), d.kpe[i].data(), b.kv[i],
                           b.H, Dc, Dr, &idx[i * size_t(c.topk)], c.topk, b.sm_scale, &want[i * b.H * Dc],
                           &wlse[i * b.H]);
  const double tol = mp.variant == "nv_mma_sync" ? 1e-2 : 1e-4;
  EXPECT_TRUE(test::all_close(got, want, tol, tol, "o")) << "variant " << mp.variant;
}

}  // namespace

// HSA (hierarchical sparse attention) decode against the double-precision reference
// (reference/sparse_reference.hpp): landmark selection (group and head strategies, ties,
// fewer candidates than topk, explicit candidates with a mask), sparse decode over the
// selection plus the window (fused) or before it (not fused), page sizes 16 and 64, GQA
// groups 1, 4 and 8, every KV dtype, CSR and page table; caller selections with -1, ids
// outside the pool, repeats, window pages and the partial last page; rejected calls.
//
// Selection is compared exactly: q and K hold small integers, so every landmark score is
// an exact integer times sm_scale in f32 and double alike (ties included). Attention
// tolerances are test_decode's (the kernel sees the quantised values the reference sees).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include <clattn/sparse.hpp>

#include "reference/sparse_reference.hpp"
#include "support/test_support.hpp"

using namespace clattn;
using test::ctx;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Case {
  std::vector<int> lens;
  int Hkv = 2, G = 4, D = 64, P = 16, topk = 4, window = 0;
  HsaStrategy strategy = HsaStrategy::Group;
  bool fuse = true, table = false;
  DType kv = DType::BF16, qd = DType::BF16, od = DType::F32;
  std::string describe() const {
    std::string s = "lens={";
    for (size_t i = 0; i < lens.size(); ++i) s += (i ? "," : "") + std::to_string(lens[i]);
    return s + "} Hkv=" + std::to_string(Hkv) + " G=" + std::to_string(G) + " D=" + std::to_string(D) +
           " P=" + std::to_string(P) + " topk=" + std::to_string(topk) + " W=" + std::to_string(window) +
           (strategy == HsaStrategy::Head ? " head" : " group") + " fuse=" + std::to_string(fuse) +
           " table=" + std::to_string(table) + " kv=" + dtype_name(kv) + " q=" + dtype_name(qd);
  }
};

struct Batch {
  Case c;
  PagedKV cache;
  std::vector<std::vector<int32_t>> pages;
  std::vector<double> kval, vval, q;  // dequantised; cache by physical element
  std::vector<uint8_t> kbytes, vbytes, qbytes;
  PagedCsr csr;
  PageTable table;
  int B() const { return int(c.lens.size()); }
  int Hq() const { return c.Hkv * c.G; }
  int nsel() const { return c.strategy == HsaStrategy::Head ? Hq() : c.Hkv; }
  size_t elem(int page, int t, int h, int d) const {
    return ((size_t(page) * c.P + t) * c.Hkv + h) * c.D + d;
  }
};

Batch build(const Case& c, uint64_t salt) {
  Batch b;
  b.c = c;
  test::Rng rng(salt);
  int total = 0;
  for (int L : c.lens) total += (L + c.P - 1) / c.P;
  const int num_pages = total + 3;
  std::vector<int32_t> perm(static_cast<size_t>(num_pages));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng.gen);
  int next = 0;
  for (int L : c.lens) {
    std::vector<int32_t> p;
    for (int j = 0; j < (L + c.P - 1) / c.P; ++j) p.push_back(perm[size_t(next++)]);
    b.pages.push_back(p);
  }
  b.cache.num_pages = num_pages, b.cache.page_size = c.P, b.cache.num_kv_heads = c.Hkv, b.cache.head_dim = c.D;
  b.cache.dtype = c.kv;
  const size_t n = size_t(num_pages) * c.P * c.Hkv * c.D;
  // Integer K (landmark scores exact) and small-range V; fp8 e4m3 holds these integers exactly.
  std::vector<double> k(n), v(n);
  for (auto& x : k) x = rng.uniform_int(-3, 3);
  for (auto& x : v) x = rng.uniform(-1, 1);
  b.kbytes = test::pack(k, c.kv), b.vbytes = test::pack(v, c.kv);
  b.kval = test::unpack(b.kbytes, c.kv), b.vval = test::unpack(b.vbytes, c.kv);
  std::vector<double> q(size_t(b.B()) * b.Hq() * c.D);
  for (auto& x : q) x = rng.uniform_int(-2, 2);
  b.qbytes = test::pack(q, c.qd), b.q = test::unpack(b.qbytes, c.qd);
  b.csr.page_size = c.P;
  b.csr.kv_indptr = {0};
  std::vector<int32_t> seq;
  for (int i = 0; i < b.B(); ++i) {
    for (int32_t p : b.pages[size_t(i)]) b.csr.kv_indices.push_back(p);
    b.csr.kv_indptr.push_back(int32_t(b.csr.kv_indices.size()));
    const int L = c.lens[size_t(i)];
    b.csr.kv_last_page_len.push_back(L == 0 ? 0 : (L - 1) % c.P + 1);
    seq.push_back(L);
  }
  b.table = test::page_table(b.pages, c.P, seq);
  return b;
}

constexpr double kScale = 0.05;  // soft enough softmax over integer scores

HsaOptions options(const Case& c) {
  HsaOptions o;
  o.num_qo_heads = c.Hkv * c.G, o.topk = c.topk, o.strategy = c.strategy, o.window_size = c.window;
  o.fuse_window = c.fuse, o.q_dtype = c.qd, o.o_dtype = c.od, o.sm_scale = float(kScale);
  return o;
}

HsaPlan plan(const Batch& b, const HsaOptions& o) {
  return b.c.table ? hsa_plan(ctx(), b.table, b.cache, o) : hsa_plan(ctx(), b.csr, b.cache, o);
}

// Reference selection of request i: page ids [nsel, topk] and scores.
void ref_select(const Batch& b, int i, std::vector<int32_t>& ids, std::vector<double>& sc) {
  const Case& c = b.c;
  const int L = c.lens[size_t(i)];
  const int C = ref::hsa_num_candidates(L, c.P, c.window);
  std::vector<double> lmk(size_t(C) * c.Hkv * c.D);
  for (int cc = 0; cc < C; ++cc)
    for (int h = 0; h < c.Hkv; ++h)
      for (int d = 0; d < c.D; ++d)
        lmk[(size_t(cc) * c.Hkv + h) * c.D + d] = b.kval[b.elem(b.pages[size_t(i)][size_t(cc)], c.P - 1, h, d)];
  std::vector<int32_t> sel(size_t(b.nsel()) * c.topk);
  sc.assign(sel.size(), 0.0);
  ref::hsa_select(&b.q[size_t(i) * b.Hq() * c.D], lmk.data(), nullptr, C, b.Hq(), c.Hkv, c.D, c.topk,
                  c.strategy == HsaStrategy::Head, kScale, sel.data(), sc.data());
  ids.resize(sel.size());
  for (size_t j = 0; j < sel.size(); ++j) ids[j] = sel[j] < 0 ? -1 : b.pages[size_t(i)][size_t(sel[j])];
}

// Reference decode of request i over selection `sel` [nsel, topk]: o [Hq, D], lse [Hq].
void ref_decode(const Batch& b, int i, const int32_t* sel, std::vector<double>& o, std::vector<double>& lse) {
  const Case& c = b.c;
  const int L = c.lens[size_t(i)], Hq = b.Hq();
  std::vector<double> k(size_t(L) * c.Hkv * c.D), v(k.size());
  for (int t = 0; t < L; ++t)
    for (int h = 0; h < c.Hkv; ++h)
      for (int d = 0; d < c.D; ++d) {
        const size_t e = b.elem(b.pages[size_t(i)][size_t(t / c.P)], t % c.P, h, d);
        k[(size_t(t) * c.Hkv + h) * c.D + d] = b.kval[e];
        v[(size_t(t) * c.Hkv + h) * c.D + d] = b.vval[e];
      }
  std::vector<uint8_t> masks(size_t(Hq) * std::max(L, 1));
  ref::hsa_decode_masks(L, c.P, c.window, c.fuse, b.pages[size_t(i)].data(), sel, b.nsel(), c.topk, Hq,
                        b.cache.num_pages, masks.data());
  o.assign(size_t(Hq) * c.D, 0.0), lse.assign(size_t(Hq), 0.0);
  ref::sparse_decode(&b.q[size_t(i) * Hq * c.D], k.data(), v.data(), L, Hq, c.Hkv, c.D, masks.data(), kScale, 0.0,
                     nullptr, o.data(), lse.data());
}

double o_tol(DType t) { return t == DType::F32 ? 5e-5 : t == DType::F16 ? 2e-3 : 1e-2; }

// The decode variant a dense decode plan takes on this device, as the sparse decode must.
std::string dense_variant(const Batch& b) {
  DecodeOptions d;
  d.num_qo_heads = b.Hq(), d.q_dtype = b.c.qd, d.o_dtype = b.c.od;
  return decode_plan(ctx(), b.csr, b.cache, d).variant;
}

struct Out {
  std::vector<int32_t> ids;
  std::vector<float> scores, lse;
  std::vector<double> o;
};

// hsa_run on the device (selection + decode), or hsa_decode over `given` when set.
Out run(const Batch& b, const HsaPlan& p, const std::vector<int32_t>* given = nullptr) {
  const size_t nsel = size_t(b.B()) * b.nsel() * b.c.topk, rows = size_t(b.B()) * b.Hq();
  DeviceBuffer q = test::upload(b.qbytes), k = test::upload(b.kbytes), v = test::upload(b.vbytes);
  DeviceBuffer ids = given ? test::upload(*given) : test::upload(std::vector<int32_t>(nsel, 7));
  DeviceBuffer sc = test::upload(std::vector<float>(nsel, 0.0f));
  DeviceBuffer o(ctx(), rows * b.c.D * dtype_size(b.c.od)), lse(ctx(), rows * 4);
  DeviceBuffer ws(ctx(), size_t(std::max<int64_t>(p.workspace_bytes, 4)));
  ws.fill_bytes(ctx(), 0xff);  // stale workspace: nothing may depend on it
  const std::vector<int32_t>& pid = b.c.table ? b.table.page_table : b.csr.kv_indices;
  DeviceBuffer pids = test::upload(pid.empty() ? std::vector<int32_t>{0} : pid);
  HsaBuffers hb;
  hb.q = q.get(), hb.k_cache = k.get(), hb.v_cache = v.get(), hb.page_ids = pids.get();
  hb.selected_page_ids = ids.get(), hb.selected_scores = sc.get(), hb.o = o.get(), hb.lse = lse.get();
  hb.workspace = ws.get();
  if (given) hsa_decode(ctx(), p, hb);
  else hsa_run(ctx(), p, hb);
  ctx().finish();
  Out r;
  r.ids = test::download<int32_t>(ids, nsel);
  r.scores = test::download<float>(sc, nsel);
  r.o = test::unpack(test::download<uint8_t>(o, rows * b.c.D * dtype_size(b.c.od)), b.c.od);
  r.lse = test::download<float>(lse, rows);
  return r;
}

void check_decode(const Batch& b, const Out& r, const std::vector<int32_t>& sel, const std::string& what) {
  const size_t per = size_t(b.nsel()) * b.c.topk;
  for (int i = 0; i < b.B(); ++i) {
    std::vector<double> o, lse;
    ref_decode(b, i, &sel[size_t(i) * per], o, lse);
    const size_t Hq = size_t(b.Hq()), D = size_t(b.c.D);
    std::vector<double> go(r.o.begin() + i * Hq * D, r.o.begin() + (i + 1) * Hq * D);
    EXPECT_TRUE(test::all_close(go, o, o_tol(b.c.od), o_tol(b.c.od), what + " o, request " + std::to_string(i)));
    for (size_t h = 0; h < Hq; ++h) {
      const double want = lse[h], got = r.lse[size_t(i) * Hq + h];
      if (std::isinf(want)) EXPECT_EQ(got, -kInf) << what << " request " << i << " head " << h;
      else EXPECT_NEAR(got, want, 2e-4 * std::max(1.0, std::fabs(want))) << what << " request " << i << " head " << h;
    }
  }
}

void check_case(const Case& c, uint64_t salt) {
  CLATTN_SEED_TRACE();
  SCOPED_TRACE(c.describe());
  Batch b = build(c, salt);
  HsaPlan p = plan(b, options(c));
  EXPECT_EQ(p.select_variant, "generic");
  EXPECT_EQ(p.decode_variant, dense_variant(b));
  EXPECT_EQ(p.num_sel_heads, b.nsel());
  Out r = run(b, p);
  // Selection: exact ids, scores to f32 rounding.
  const size_t per = size_t(b.nsel()) * c.topk;
  std::vector<int32_t> want_ids;
  for (int i = 0; i < b.B(); ++i) {
    std::vector<int32_t> ids;
    std::vector<double> sc;
    ref_select(b, i, ids, sc);
    EXPECT_EQ(p.num_candidates[size_t(i)], ref::hsa_num_candidates(c.lens[size_t(i)], c.P, c.window));
    for (size_t j = 0; j < per; ++j) {
      EXPECT_EQ(r.ids[size_t(i) * per + j], ids[j]) << "request " << i << " entry " << j;
      if (std::isinf(sc[j])) EXPECT_EQ(r.scores[size_t(i) * per + j], -INFINITY) << "request " << i << " entry " << j;
      else EXPECT_NEAR(r.scores[size_t(i) * per + j], sc[j], 1e-5 * std::max(1.0, std::fabs(sc[j])));
    }
    want_ids.insert(want_ids.end(), ids.begin(), ids.end());
  }
  check_decode(b, r, want_ids, "hsa_run");
}

}  // namespace

// Both strategies, page sizes 16 and 64, GQA 1/4/8, windows (fused, not fused), lengths
// below a page, at page boundaries and past them, topk above and below the candidates.
TEST(Hsa, RunMatchesReference) {
  const std::vector<Case> cases = {
      {{100, 5, 64, 200}, 2, 4, 64, 16, 4, 0, HsaStrategy::Group, true, false, DType::BF16, DType::BF16, DType::F32},
      {{100, 5, 64, 200}, 2, 4, 64, 16, 4, 0, HsaStrategy::Head, true, true, DType::BF16, DType::BF16, DType::BF16},
      {{300, 17, 128, 33}, 1, 8, 128, 16, 3, 40, HsaStrategy::Group, true, false, DType::F16, DType::F32, DType::F32},
      {{300, 17, 128, 33}, 2, 1, 64, 16, 5, 40, HsaStrategy::Head, false, false, DType::F32, DType::F16, DType::F16},
      {{700, 64, 63, 129}, 2, 4, 64, 64, 2, 100, HsaStrategy::Group, true, true, DType::FP8_E4M3, DType::BF16, DType::F32},
      {{700, 64, 63, 129}, 1, 8, 128, 64, 4, 64, HsaStrategy::Head, true, false, DType::BF16, DType::BF16, DType::F32},
      {{1000, 1}, 2, 4, 64, 64, 20, 0, HsaStrategy::Group, false, true, DType::BF16, DType::BF16, DType::F32},
  };
  for (size_t i = 0; i < cases.size(); ++i)
    if (test::row_runs_case(int(i))) check_case(cases[i], i + 1);
}

// A caller's selection: -1, an id outside the pool, a repeat, a page inside the window,
// the page that straddles the window start, the partial last page: each key once.
TEST(Hsa, DecodeOverGivenSelection) {
  for (bool fuse : {true, false}) {
    for (HsaStrategy s : {HsaStrategy::Group, HsaStrategy::Head}) {
      Case c{{150, 45, 16}, 2, 2, 64, 16, 6, 24, s, fuse, false, DType::BF16, DType::BF16, DType::F32};
      SCOPED_TRACE(c.describe());
      Batch b = build(c, 77);
      HsaPlan p = plan(b, options(c));
      const int per = b.nsel() * c.topk;
      std::vector<int32_t> sel(size_t(b.B()) * per, -1);
      for (int i = 0; i < b.B(); ++i) {
        const auto& pg = b.pages[size_t(i)];
        for (int h = 0; h < b.nsel(); ++h) {
          int32_t* row = &sel[size_t(i) * per + size_t(h) * c.topk];
          const int np = int(pg.size());
          row[0] = pg[size_t((h + i) % np)];
          row[1] = pg.back();                               // partial last page / window
          row[2] = np > 1 ? pg[size_t(np - 2)] : -1;        // straddles the window start
          row[3] = row[0];                                  // repeat
          row[4] = b.cache.num_pages + 5;                   // outside the pool
          row[5] = -1;
        }
      }
      (void)ctx().device_faults(true);
      Out r = run(b, p, &sel);
      check_decode(b, r, sel, "hsa_decode");
      EXPECT_EQ(ctx().device_faults(true) & 1u, 1u) << "the id outside the pool sets CLATTN_FAULT_PAGE_ID";
    }
  }
}

// Explicit candidates [B, C] with a mask (SGLang's cand_page_ids / cand_mask).
TEST(Hsa, ExplicitCandidates) {
  Case c{{200, 90}, 2, 4, 64, 16, 3, 0, HsaStrategy::Group, true, false, DType::BF16, DType::BF16, DType::F32};
  Batch b = build(c, 5);
  HsaOptions o = options(c);
  const int C = 8;
  o.num_candidates = C;
  HsaPlan p = plan(b, o);
  std::vector<int32_t> cand(size_t(b.B()) * C, -1);
  std::vector<uint8_t> mask(cand.size(), 1);
  for (int i = 0; i < b.B(); ++i) {
    const auto& pg = b.pages[size_t(i)];
    for (int j = 0; j < C && j < int(pg.size()) - 1; ++j) cand[size_t(i) * C + j] = pg[size_t(j)];
    mask[size_t(i) * C + 1] = 0;
  }
  DeviceBuffer q = test::upload(b.qbytes), k = test::upload(b.kbytes);
  DeviceBuffer pids = test::upload(b.csr.kv_indices), cb = test::upload(cand), mb = test::upload(mask);
  const size_t nsel = size_t(b.B()) * b.nsel() * c.topk;
  DeviceBuffer ids(ctx(), nsel * 4), ws(ctx(), size_t(p.workspace_bytes));
  HsaBuffers hb;
  hb.q = q.get(), hb.k_cache = k.get(), hb.page_ids = pids.get(), hb.selected_page_ids = ids.get();
  hb.candidates = cb.get(), hb.candidate_mask = mb.get(), hb.workspace = ws.get();
  hsa_select(ctx(), p, hb);
  std::vector<int32_t> got = test::download<int32_t>(ids, nsel);
  for (int i = 0; i < b.B(); ++i) {
    std::vector<double> lmk(size_t(C) * c.Hkv * c.D, 0.0);
    bool valid[C];
    for (int j = 0; j < C; ++j) {
      const int32_t id = cand[size_t(i) * C + j];
      valid[j] = id >= 0 && mask[size_t(i) * C + j];
      for (int h = 0; h < c.Hkv && id >= 0; ++h)
        for (int d = 0; d < c.D; ++d) lmk[(size_t(j) * c.Hkv + h) * c.D + d] = b.kval[b.elem(id, c.P - 1, h, d)];
    }
    std::vector<int32_t> sel(size_t(b.nsel()) * c.topk);
    ref::hsa_select(&b.q[size_t(i) * b.Hq() * c.D], lmk.data(), valid, C, b.Hq(), c.Hkv, c.D, c.topk, false, kScale,
                    sel.data(), nullptr);
    for (size_t j = 0; j < sel.size(); ++j)
      EXPECT_EQ(got[size_t(i) * sel.size() + j], sel[j] < 0 ? -1 : cand[size_t(i) * C + size_t(sel[j])])
          << "request " << i << " entry " << j;
  }
}

// Bad options and buffers: InvalidArgument naming the argument; nothing written.
TEST(Hsa, RejectsBadArguments) {
  Case c{{100, 30}, 2, 4, 64, 16, 4, 0, HsaStrategy::Group, true, false, DType::BF16, DType::BF16, DType::F32};
  Batch b = build(c, 9);
  auto expect_invalid = [&](HsaOptions o, const std::string& needle) {
    try {
      plan(b, o);
      ADD_FAILURE() << "accepted: " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::InvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  HsaOptions o = options(c);
  o.topk = 0;
  expect_invalid(o, "topk");
  o.topk = -3;
  expect_invalid(o, "topk");
  o.topk = 1 << 20;
  expect_invalid(o, "budget");
  o = options(c);
  o.window_size = -1;
  expect_invalid(o, "window_size");
  o = options(c);
  o.strategy = HsaStrategy(7);
  expect_invalid(o, "strategy");
  o = options(c);
  o.params["NO_SUCH"] = 1;
  expect_invalid(o, "NO_SUCH");
  // A run with a too-small output buffer writes nothing (the selection either).
  HsaPlan p = plan(b, options(c));
  const size_t nsel = size_t(b.B()) * b.nsel() * c.topk;
  DeviceBuffer q = test::upload(b.qbytes), k = test::upload(b.kbytes), v = test::upload(b.vbytes);
  DeviceBuffer pids = test::upload(b.csr.kv_indices);
  DeviceBuffer ids = test::upload(std::vector<int32_t>(nsel, 42));
  DeviceBuffer o_small(ctx(), 16), ws(ctx(), size_t(p.workspace_bytes));
  HsaBuffers hb;
  hb.q = q.get(), hb.k_cache = k.get(), hb.v_cache = v.get(), hb.page_ids = pids.get();
  hb.selected_page_ids = ids.get(), hb.o = o_small.get(), hb.workspace = ws.get();
  try {
    hsa_run(ctx(), p, hb);
    ADD_FAILURE() << "accepted a 16-byte o";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("o:"), std::string::npos) << e.what();
  }
  ctx().finish();
  for (int32_t x : test::download<int32_t>(ids, nsel)) ASSERT_EQ(x, 42);
  hb.o = nullptr;
  hb.workspace = nullptr;
  EXPECT_THROW(hsa_select(ctx(), p, hb), Error);
}

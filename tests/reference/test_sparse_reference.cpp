// Self-test of the sparse reference (HSA, DSA) against closed forms and the dense reference.
#include "reference/reference.hpp"
#include "reference/sparse_reference.hpp"

#include "ref_test_util.hpp"
#include <gtest/gtest.h>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

using namespace clattn::ref;

namespace {
const double kInf = std::numeric_limits<double>::infinity();
using clattn::ref_test::expect_near_vec;
using clattn::ref_test::randv;
// Positions set in a mask, for readable expectations.
std::vector<int> on(const std::vector<uint8_t>& m) {
  std::vector<int> r;
  for (size_t t = 0; t < m.size(); ++t)
    if (m[t]) r.push_back(int(t));
  return r;
}
std::vector<int> range(int a, int b) {  // [a, b)
  std::vector<int> r;
  for (int t = a; t < b; ++t) r.push_back(t);
  return r;
}
std::vector<int> cat(std::vector<int> a, const std::vector<int>& b) { a.insert(a.end(), b.begin(), b.end()); return a; }

// Checks a top-k output against the expected scores of all items: ascending indices, then -1
// padding; min(topk, #valid) entries; each selected item outranks (higher score, or equal score
// and lower index) every valid item left out.
void check_topk(const int32_t* sel, const double* sc, int topk, const std::vector<double>& want,
                const std::vector<bool>& valid) {
  int nvalid = 0;
  for (bool b : valid) nvalid += b;
  const int n = std::min(topk, nvalid);
  std::vector<bool> chosen(want.size(), false);
  for (int i = 0; i < topk; ++i) {
    if (i >= n) { EXPECT_EQ(sel[i], -1); EXPECT_EQ(sc[i], -kInf); continue; }
    ASSERT_TRUE(sel[i] >= 0 && sel[i] < int(want.size()) && valid[sel[i]]) << "slot " << i;
    if (i > 0) { EXPECT_LT(sel[i - 1], sel[i]); }
    EXPECT_NEAR(sc[i], want[sel[i]], 1e-12);
    chosen[sel[i]] = true;
  }
  for (size_t c = 0; c < want.size(); ++c) {
    if (!valid[c] || chosen[c]) continue;
    for (int i = 0; i < n; ++i)
      EXPECT_TRUE(want[sel[i]] > want[c] || (want[sel[i]] == want[c] && sel[i] < int(c)))
          << "left out " << c << " outranks selected " << sel[i];
  }
}
}  // namespace

// ------------------------------------------------------------------ HSA candidates
TEST(HsaCandidates, ClosedForm) {
  EXPECT_EQ(hsa_num_candidates(0, 16, 0), 0);
  EXPECT_EQ(hsa_num_candidates(15, 16, 0), 0);   // seq_len < page_size: the partial page is no candidate
  EXPECT_EQ(hsa_num_candidates(16, 16, 0), 1);
  EXPECT_EQ(hsa_num_candidates(47, 16, 0), 2);
  EXPECT_EQ(hsa_num_candidates(40, 16, 8), 2);   // window [32, 40): page 1 ends at 32, still a candidate
  EXPECT_EQ(hsa_num_candidates(40, 16, 9), 1);   // window [31, 40) touches page 1
  EXPECT_EQ(hsa_num_candidates(40, 16, 40), 0);
  EXPECT_EQ(hsa_num_candidates(40, 16, 100), 0);
}

TEST(HsaCandidates, BruteForce) {
  for (int P : {1, 4, 16})
    for (int L = 0; L <= 70; ++L)
      for (int W = 0; W <= 20; ++W) {
        int n = 0;
        for (int j = 0; j * P < L; ++j) n += (j + 1) * P <= L - W;
        ASSERT_EQ(hsa_num_candidates(L, P, W), n) << "L " << L << " P " << P << " W " << W;
      }
}

// ------------------------------------------------------------------ HSA selection
TEST(HsaSelect, OrderTiesPadding) {
  const std::vector<double> lmk = {1, 5, 2, 5, 0};  // C = 5, Hkv = 1, D = 1
  int32_t sel[4];
  double sc[4];
  const std::vector<double> q12 = {1, 2};  // group sum 3
  hsa_select(q12.data(), lmk.data(), nullptr, 5, 2, 1, 1, 2, false, 0.5, sel, sc);
  EXPECT_EQ(sel[0], 1); EXPECT_EQ(sel[1], 3);  // the tie 7.5 / 7.5 both fit
  EXPECT_EQ(sc[0], 7.5); EXPECT_EQ(sc[1], 7.5);
  hsa_select(q12.data(), lmk.data(), nullptr, 5, 2, 1, 1, 3, false, 0.5, sel, sc);
  EXPECT_EQ(sel[0], 1); EXPECT_EQ(sel[1], 2); EXPECT_EQ(sel[2], 3);  // candidate order, not score order
  EXPECT_EQ(sc[1], 3.0);
  const bool valid[5] = {true, false, true, true, true};
  hsa_select(q12.data(), lmk.data(), valid, 5, 2, 1, 1, 2, false, 0.5, sel, sc);
  EXPECT_EQ(sel[0], 2); EXPECT_EQ(sel[1], 3); EXPECT_EQ(sc[0], 3.0); EXPECT_EQ(sc[1], 7.5);

  const std::vector<double> qpm = {1, -1};  // group sum 0: all tie, the earliest win
  hsa_select(qpm.data(), lmk.data(), nullptr, 5, 2, 1, 1, 2, false, 1.0, sel, sc);
  EXPECT_EQ(sel[0], 0); EXPECT_EQ(sel[1], 1); EXPECT_EQ(sc[0], 0.0);
  hsa_select(qpm.data(), lmk.data(), nullptr, 5, 2, 1, 1, 2, true, 1.0, sel, sc);  // head: [H_sel = 2, 2]
  EXPECT_EQ(sel[0], 1); EXPECT_EQ(sel[1], 3);  // head 0: lmk
  EXPECT_EQ(sel[2], 0); EXPECT_EQ(sel[3], 4);  // head 1: -lmk = {-1, -5, -2, -5, 0}
  EXPECT_EQ(sc[2], -1.0); EXPECT_EQ(sc[3], 0.0);

  hsa_select(q12.data(), lmk.data(), nullptr, 2, 2, 1, 1, 4, false, 0.5, sel, sc);  // C < topk
  EXPECT_EQ(sel[0], 0); EXPECT_EQ(sel[1], 1); EXPECT_EQ(sel[2], -1); EXPECT_EQ(sel[3], -1);
  EXPECT_EQ(sc[0], 1.5); EXPECT_EQ(sc[1], 7.5); EXPECT_EQ(sc[2], -kInf); EXPECT_EQ(sc[3], -kInf);
  const bool none[5] = {};
  hsa_select(q12.data(), lmk.data(), none, 5, 2, 1, 1, 3, false, 0.5, sel, sc);  // all invalid
  for (int i = 0; i < 3; ++i) { EXPECT_EQ(sel[i], -1); EXPECT_EQ(sc[i], -kInf); }
  hsa_select(q12.data(), lmk.data(), nullptr, 0, 2, 1, 1, 3, false, 0.5, sel, nullptr);  // no candidate
  for (int i = 0; i < 3; ++i) EXPECT_EQ(sel[i], -1);
}

TEST(HsaSelect, GroupAndHeadBruteForce) {
  const int Hq = 8, Hkv = 2, D = 8, C = 13, topk = 4, group = Hq / Hkv;
  const double sm = 0.35;
  auto q = randv(Hq * D, 31), lmk = randv(C * Hkv * D, 32);
  std::mt19937 rng(33);
  bool valid[C];
  std::vector<bool> vv(C);
  for (int c = 0; c < C; ++c) vv[c] = valid[c] = rng() % 10 < 7;
  for (bool head : {false, true}) {
    const int H_sel = head ? Hq : Hkv;
    std::vector<int32_t> sel(H_sel * topk);
    std::vector<double> sc(H_sel * topk);
    hsa_select(q.data(), lmk.data(), valid, C, Hq, Hkv, D, topk, head, sm, sel.data(), sc.data());
    for (int h = 0; h < H_sel; ++h) {
      std::vector<double> want(C, 0.0);
      for (int c = 0; c < C; ++c) {
        // group: the sum of the group's per-row scores (= the summed query's score)
        for (int r = head ? h : h * group; r < (head ? h + 1 : (h + 1) * group); ++r) {
          const int kh = head ? h / group : h;
          for (int d = 0; d < D; ++d) want[c] += sm * q[r * D + d] * lmk[(c * Hkv + kh) * D + d];
        }
      }
      SCOPED_TRACE(testing::Message() << (head ? "head" : "group") << " list " << h);
      check_topk(&sel[h * topk], &sc[h * topk], topk, want, vv);
    }
  }
}

// ------------------------------------------------------------------ HSA key masks
namespace {
// P = 4, L = 14: logical pages 0..3 are physical 7, 2, 9, 4 (page 3 partial: keys 12, 13).
const int kP = 4, kL = 14, kNumPages = 10;
const int32_t kPages[4] = {7, 2, 9, 4};
std::vector<int> key_set(int W, bool fuse, std::vector<int32_t> selected, int L = kL, const int32_t* pages = kPages) {
  std::vector<uint8_t> m(L, 7);
  hsa_key_mask(L, kP, W, fuse, pages, selected.data(), int(selected.size()), kNumPages, m.data());
  return on(m);
}
}  // namespace

TEST(HsaKeyMask, SelectedPagesNoWindow) {
  EXPECT_EQ(key_set(0, true, {9, -1}), range(8, 12));
  EXPECT_EQ(key_set(0, false, {9, -1}), range(8, 12));  // W = 0: fuse_window changes nothing
  EXPECT_EQ(key_set(0, true, {4}), range(12, 14));       // partial last page: its written keys
  EXPECT_EQ(key_set(0, true, {2, 7}), range(0, 8));
  EXPECT_EQ(key_set(0, true, {-1, 100, 2, 2, 10, -5}), range(4, 8));  // invalid ids nothing, duplicate once
  EXPECT_EQ(key_set(0, true, {3}), std::vector<int>{});  // a valid id that is not the request's
  EXPECT_EQ(key_set(0, true, {-1, -1}), std::vector<int>{});
  // An id outside [0, num_pages) adds nothing even where the request's list holds it.
  const int32_t bad_pages[4] = {7, 2, 12, -2};
  EXPECT_EQ(key_set(0, true, {12, -2, 7}, kL, bad_pages), range(0, 4));
  const int32_t one_page[1] = {5};  // seq_len < page_size
  EXPECT_EQ(key_set(0, true, {5}, 3, one_page), range(0, 3));
}

TEST(HsaKeyMask, WindowOverlap) {
  // W = 5: window [9, 14); page 2 (id 9, keys 8..11) straddles its start, page 3 (id 4) is inside.
  EXPECT_EQ(key_set(5, true, {-1}), range(9, 14));
  EXPECT_EQ(key_set(5, true, {9}), range(8, 14));
  EXPECT_EQ(key_set(5, false, {9}), std::vector<int>{8});  // only its keys before the window
  EXPECT_EQ(key_set(5, true, {4}), range(9, 14));           // inside the window: counted once
  EXPECT_EQ(key_set(5, false, {4}), std::vector<int>{});
  EXPECT_EQ(key_set(5, true, {7, 9, 4, 9}), cat(range(0, 4), range(8, 14)));
  EXPECT_EQ(key_set(5, false, {7, 9, 4, 9}), cat(range(0, 4), {8}));
  EXPECT_EQ(key_set(4, false, {9}), range(8, 10));          // W = 4: window [10, 14)
  EXPECT_EQ(key_set(8, false, {7, 2}), range(0, 6));        // W = 8: window [6, 14) cuts page 1
  EXPECT_EQ(key_set(20, true, {7, 2, 9, 4}), range(0, 14)); // W >= L: all window
  EXPECT_EQ(key_set(20, false, {7, 2, 9, 4}), std::vector<int>{});
}

TEST(HsaKeyMask, PerHeadLists) {
  const int Hq = 4;
  std::vector<uint8_t> m(Hq * kL);
  const int32_t group_sel[2] = {7, 9};  // H_sel = 2: heads 0, 1 use list 0; heads 2, 3 list 1
  hsa_decode_masks(kL, kP, 0, true, kPages, group_sel, 2, 1, Hq, kNumPages, m.data());
  for (int h = 0; h < Hq; ++h) {
    std::vector<uint8_t> mh(m.begin() + h * kL, m.begin() + (h + 1) * kL);
    EXPECT_EQ(on(mh), h < 2 ? range(0, 4) : range(8, 12)) << "head " << h;
  }
  const int32_t head_sel[4] = {7, 2, 9, 4};  // H_sel = Hq: own list
  hsa_decode_masks(kL, kP, 0, true, kPages, head_sel, 4, 1, Hq, kNumPages, m.data());
  for (int h = 0; h < Hq; ++h) {
    std::vector<uint8_t> mh(m.begin() + h * kL, m.begin() + (h + 1) * kL);
    EXPECT_EQ(on(mh), range(4 * h, std::min(4 * h + 4, kL))) << "head " << h;
  }
}

// ------------------------------------------------------------------ sparse decode
TEST(SparseDecode, MatchesDenseOnGatheredKeys) {
  const int L = 11, Hq = 4, Hkv = 2, D = 5, group = Hq / Hkv;
  auto q = randv(Hq * D, 41), k = randv(L * Hkv * D, 42), v = randv(L * Hkv * D, 43), sinks = randv(Hq, 44);
  std::mt19937 rng(45);
  std::vector<uint8_t> masks(Hq * L);
  for (auto& b : masks) b = rng() % 2;
  for (int t = 0; t < L; ++t) masks[3 * L + t] = 0;  // head 3: no key
  for (bool with_sinks : {false, true}) {
    std::vector<double> o(Hq * D), lse(Hq);
    sparse_decode(q.data(), k.data(), v.data(), L, Hq, Hkv, D, masks.data(), 0.6, 3.0,
                  with_sinks ? sinks.data() : nullptr, o.data(), lse.data());
    for (int h = 0; h < Hq; ++h) {
      const int kh = h / group;
      std::vector<double> k1, v1;
      for (int t = 0; t < L; ++t)
        if (masks[h * L + t]) {
          k1.insert(k1.end(), &k[(t * Hkv + kh) * D], &k[(t * Hkv + kh) * D] + D);
          v1.insert(v1.end(), &v[(t * Hkv + kh) * D], &v[(t * Hkv + kh) * D] + D);
        }
      AttnOptions opt;
      opt.sm_scale = 0.6, opt.logits_soft_cap = 3.0, opt.causal = false;
      opt.sinks = with_sinks ? &sinks[h] : nullptr;
      std::vector<double> o1(D), lse1(1);
      attention(&q[h * D], k1.data(), v1.data(), 1, int(k1.size() / D), 1, 1, D, D, opt, o1.data(), lse1.data());
      SCOPED_TRACE(testing::Message() << "head " << h << " sinks " << with_sinks);
      expect_near_vec(&o[h * D], o1.data(), D);
      if (h == 3 && !with_sinks) { EXPECT_EQ(lse[h], -kInf); } else { EXPECT_NEAR(lse[h], lse1[0], 1e-12); }
    }
    for (int d = 0; d < D; ++d) EXPECT_EQ(o[3 * D + d], 0.0);  // no key: o = 0 (lse = sink with sinks)
    if (with_sinks) { EXPECT_NEAR(lse[3], sinks[3], 1e-12); }
  }
}

TEST(SparseDecode, AllKeysIsDenseDecode) {
  const int L = 9, Hq = 6, Hkv = 3, D = 4;
  auto q = randv(Hq * D, 51), k = randv(L * Hkv * D, 52), v = randv(L * Hkv * D, 53), sinks = randv(Hq, 54);
  std::vector<uint8_t> masks(Hq * L, 1);
  std::vector<double> o(Hq * D), lse(Hq), o1(Hq * D), lse1(Hq);
  sparse_decode(q.data(), k.data(), v.data(), L, Hq, Hkv, D, masks.data(), 0.45, 2.5, sinks.data(), o.data(),
                lse.data());
  AttnOptions opt;  // decode: qo_len 1, causal (the query sits at the last position)
  opt.sm_scale = 0.45, opt.logits_soft_cap = 2.5, opt.sinks = sinks.data();
  attention(q.data(), k.data(), v.data(), 1, L, Hq, Hkv, D, D, opt, o1.data(), lse1.data());
  expect_near_vec(o.data(), o1.data(), o.size());
  expect_near_vec(lse.data(), lse1.data(), lse.size());
}

TEST(SparseDecode, FusedWindowIsMergeOfParts) {
  // fuse_window = true equals merge(selected pages before the window, dense window decode).
  const int P = 4, L = 19, W = 6, Hq = 4, Hkv = 2, D = 3, topk = 3, num_pages = 8;
  const int32_t pages[5] = {3, 0, 2, 5, 1};          // 5 pages, the last partial
  const int32_t sel[2 * topk] = {0, 5, -1, 3, 1, 3};  // list 1: page 1 inside the window, 3 twice
  auto q = randv(Hq * D, 61), k = randv(L * Hkv * D, 62), v = randv(L * Hkv * D, 63);
  std::vector<uint8_t> fused(Hq * L), pre(Hq * L);
  hsa_decode_masks(L, P, W, true, pages, sel, Hkv, topk, Hq, num_pages, fused.data());
  hsa_decode_masks(L, P, W, false, pages, sel, Hkv, topk, Hq, num_pages, pre.data());
  std::vector<double> of(Hq * D), lf(Hq), op(Hq * D), lp(Hq), ow(Hq * D), lw(Hq);
  sparse_decode(q.data(), k.data(), v.data(), L, Hq, Hkv, D, fused.data(), 0.7, 0.0, nullptr, of.data(), lf.data());
  sparse_decode(q.data(), k.data(), v.data(), L, Hq, Hkv, D, pre.data(), 0.7, 0.0, nullptr, op.data(), lp.data());
  AttnOptions opt;
  opt.sm_scale = 0.7;
  attention(q.data(), &k[(L - W) * Hkv * D], &v[(L - W) * Hkv * D], 1, W, Hq, Hkv, D, D, opt, ow.data(), lw.data());
  for (int h = 0; h < Hq; ++h) {
    std::vector<double> om(D);
    double lm;
    merge_state(&op[h * D], lp[h], &ow[h * D], lw[h], D, om.data(), &lm);
    expect_near_vec(&of[h * D], om.data(), D);
    EXPECT_NEAR(lf[h], lm, 1e-12) << "head " << h;
  }
}

// ------------------------------------------------------------------ DSA indexer
TEST(DsaIndex, ClosedFormTiesPadding) {
  // Hi = 2, Di = 1: score(t) = relu(k) + 2 relu(-k) = {1, 1, 0, 2, 2, 1}
  const std::vector<double> q = {1, -1}, w = {1, 2}, k = {1, -0.5, 0, 2, -1, 1};
  int32_t idx[10];
  double sc[10];
  dsa_index(q.data(), w.data(), k.data(), 6, 2, 1, 3, idx, sc);
  EXPECT_EQ(idx[0], 0); EXPECT_EQ(idx[1], 3); EXPECT_EQ(idx[2], 4);  // 1-ties: position 0 wins
  EXPECT_EQ(sc[0], 1.0); EXPECT_EQ(sc[1], 2.0); EXPECT_EQ(sc[2], 2.0);
  dsa_index(q.data(), w.data(), k.data(), 6, 2, 1, 1, idx, sc);
  EXPECT_EQ(idx[0], 3); EXPECT_EQ(sc[0], 2.0);
  dsa_index(q.data(), w.data(), k.data(), 6, 2, 1, 10, idx, sc);  // L < topk
  const double want[6] = {1, 1, 0, 2, 2, 1};
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(idx[i], i < 6 ? i : -1);
    EXPECT_EQ(sc[i], i < 6 ? want[i] : -kInf);
  }
  dsa_index(q.data(), w.data(), k.data(), 0, 2, 1, 2, idx, nullptr);  // empty request
  EXPECT_EQ(idx[0], -1); EXPECT_EQ(idx[1], -1);
}

TEST(DsaIndex, BruteForce) {
  const int L = 37, Hi = 4, Di = 6, topk = 8;
  auto q = randv(Hi * Di, 71), w = randv(Hi, 72), k = randv(L * Di, 73);
  std::vector<int32_t> idx(topk);
  std::vector<double> sc(topk), want(L, 0.0);
  dsa_index(q.data(), w.data(), k.data(), L, Hi, Di, topk, idx.data(), sc.data());
  for (int t = 0; t < L; ++t)
    for (int h = 0; h < Hi; ++h) {
      double d = 0;
      for (int e = 0; e < Di; ++e) d += q[h * Di + e] * k[t * Di + e];
      want[t] += w[h] * (d > 0 ? d : 0.0);
    }
  check_topk(idx.data(), sc.data(), topk, want, std::vector<bool>(L, true));
}

// ------------------------------------------------------------------ sparse MLA decode
namespace {
struct Mla { std::vector<double> o, lse; };
Mla mla_sparse(const std::vector<double>& qn, const std::vector<double>& qp, const std::vector<double>& ckv,
               const std::vector<double>& kpe, int L, int H, int Dc, int Dr, const std::vector<int32_t>& idx,
               double sm) {
  Mla r{std::vector<double>(size_t(H) * Dc, NAN), std::vector<double>(H, NAN)};
  mla_sparse_decode(qn.data(), qp.data(), ckv.data(), kpe.data(), L, H, Dc, Dr, idx.data(), int(idx.size()), sm,
                    r.o.data(), r.lse.data());
  return r;
}
// ref::mla_attention (one query token, no mask) over the rows `rows` of ckv / kpe, in that order.
Mla mla_dense_rows(const std::vector<double>& qn, const std::vector<double>& qp, const std::vector<double>& ckv,
                   const std::vector<double>& kpe, int H, int Dc, int Dr, const std::vector<int>& rows, double sm) {
  std::vector<double> c, p;
  for (int t : rows) {
    c.insert(c.end(), &ckv[size_t(t) * Dc], &ckv[size_t(t) * Dc] + Dc);
    p.insert(p.end(), &kpe[size_t(t) * Dr], &kpe[size_t(t) * Dr] + Dr);
  }
  Mla r{std::vector<double>(size_t(H) * Dc), std::vector<double>(H)};
  mla_attention(qn.data(), qp.data(), c.data(), p.data(), 1, int(rows.size()), H, Dc, Dr, sm, false, r.o.data(),
                r.lse.data());
  return r;
}
}  // namespace

TEST(MlaSparseDecode, DuplicatesCountTwice) {
  const int Dc = 512, Dr = 64, H = 2, L = 6;
  const double sm = 1.0 / std::sqrt(double(Dc + Dr));
  auto qn = randv(H * Dc, 81), qp = randv(H * Dr, 82), ckv = randv(L * Dc, 83), kpe = randv(L * Dr, 84);
  // -1, 9 (>= L) and -3 add nothing; 4 is listed twice.
  Mla s = mla_sparse(qn, qp, ckv, kpe, L, H, Dc, Dr, {4, 1, -1, 4, 9, 2, -3}, sm);
  Mla d = mla_dense_rows(qn, qp, ckv, kpe, H, Dc, Dr, {4, 1, 4, 2}, sm);
  expect_near_vec(s.o.data(), d.o.data(), s.o.size());
  expect_near_vec(s.lse.data(), d.lse.data(), H);
  Mla once = mla_dense_rows(qn, qp, ckv, kpe, H, Dc, Dr, {4, 1, 2}, sm);
  for (int h = 0; h < H; ++h) EXPECT_GT(std::fabs(s.lse[h] - once.lse[h]), 1e-3);  // the duplicate matters
  Mla perm = mla_sparse(qn, qp, ckv, kpe, L, H, Dc, Dr, {2, 4, -1, 1, 4}, sm);  // order does not matter
  expect_near_vec(s.o.data(), perm.o.data(), s.o.size());
  expect_near_vec(s.lse.data(), perm.lse.data(), H);
}

TEST(MlaSparseDecode, ClosedFormAndEmpty) {
  const int Dc = 2, Dr = 1, H = 1, L = 3;
  const std::vector<double> qn = {1, 2}, qp = {3}, ckv = {1, 0, 0, 1, 2, 2}, kpe = {1, -1, 0.5};
  Mla r = mla_sparse(qn, qp, ckv, kpe, L, H, Dc, Dr, {1, 1}, 0.5);  // one key twice: o = ckv[1]
  EXPECT_NEAR(r.o[0], 0.0, 1e-12); EXPECT_NEAR(r.o[1], 1.0, 1e-12);
  EXPECT_NEAR(r.lse[0], 0.5 * (2 - 3) + std::log(2.0), 1e-12);
  r = mla_sparse(qn, qp, ckv, kpe, L, H, Dc, Dr, {0, 2}, 0.5);  // scores 2, 3.75
  const double e0 = std::exp(2.0), e2 = std::exp(3.75);
  EXPECT_NEAR(r.o[0], (e0 * 1 + e2 * 2) / (e0 + e2), 1e-12); EXPECT_NEAR(r.o[1], 2 * e2 / (e0 + e2), 1e-12);
  EXPECT_NEAR(r.lse[0], std::log(e0 + e2), 1e-12);
  r = mla_sparse(qn, qp, ckv, kpe, L, H, Dc, Dr, {-1, 3, -1}, 0.5);  // no key
  EXPECT_EQ(r.o[0], 0.0); EXPECT_EQ(r.o[1], 0.0); EXPECT_EQ(r.lse[0], -kInf);
  r = mla_sparse(qn, qp, ckv, kpe, 0, H, Dc, Dr, {0, 1}, 0.5);  // empty request
  EXPECT_EQ(r.o[0], 0.0); EXPECT_EQ(r.lse[0], -kInf);
}

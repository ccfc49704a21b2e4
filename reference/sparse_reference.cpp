// clattn double-precision CPU reference for sparse attention. See sparse_reference.hpp.
#include "reference/sparse_reference.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

namespace clattn::ref {
namespace {

using sz = std::size_t;
constexpr double kInf = std::numeric_limits<double>::infinity();

double dot(const double* a, const double* b, int n) {
  double acc = 0.0;
  for (int d = 0; d < n; ++d) acc += a[d] * b[d];
  return acc;
}

// Keeps the topk highest of the scored items (score, index) (ties: the lower index), writes
// their indices in ascending order to out_idx and their scores to out_score (nullable), then
// -1 / -inf padding.
void topk_ascending(std::vector<std::pair<double, int>> items, int topk, int32_t* out_idx, double* out_score) {
  std::sort(items.begin(), items.end(), [](const std::pair<double, int>& a, const std::pair<double, int>& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  if (items.size() > sz(topk)) items.resize(sz(topk));
  std::sort(items.begin(), items.end(),
            [](const std::pair<double, int>& a, const std::pair<double, int>& b) { return a.second < b.second; });
  for (int i = 0; i < topk; ++i) {
    const bool have = sz(i) < items.size();
    out_idx[i] = have ? items[sz(i)].second : -1;
    if (out_score) out_score[i] = have ? items[sz(i)].first : -kInf;
  }
}

// Softmax over the terms exp(s_i) v_i (plus exp(sink) in the denominator when given):
// o [Dv] = sum_i p_i v_i, lse = log(denominator); no term and no sink: o = 0, lse = -inf.
void softmax_terms(const std::vector<double>& s, const std::vector<const double*>& vals, const double* sink,
                   int Dv, double* o, double* lse) {
  double m = sink ? *sink : -kInf;
  for (double x : s) m = std::max(m, x);
  for (int d = 0; d < Dv; ++d) o[d] = 0.0;
  if (m == -kInf) {
    if (lse) *lse = -kInf;
    return;
  }
  double denom = sink ? std::exp(*sink - m) : 0.0;
  for (sz i = 0; i < s.size(); ++i) {
    const double w = std::exp(s[i] - m);
    denom += w;
    for (int d = 0; d < Dv; ++d) o[d] += w * vals[i][d];
  }
  for (int d = 0; d < Dv; ++d) o[d] /= denom;
  if (lse) *lse = m + std::log(denom);
}

}  // namespace

// ---------------------------------------------------------------- HSA
int hsa_num_candidates(int kv_len, int page_size, int window_size) {
  return std::max(0, kv_len - window_size) / page_size;
}

void hsa_select(const double* q, const double* lmk, const bool* cand_valid, int C, int Hq, int Hkv, int D,
                int topk, bool head_strategy, double sm_scale, int32_t* sel, double* scores) {
  const int group = Hq / Hkv;
  const int H_sel = head_strategy ? Hq : Hkv;
  std::vector<double> qs(static_cast<sz>(D));
  for (int h = 0; h < H_sel; ++h) {
    const int kh = head_strategy ? h / group : h;
    if (head_strategy) {
      std::copy(q + sz(h) * D, q + sz(h + 1) * D, qs.begin());
    } else {  // the group's query rows summed
      std::fill(qs.begin(), qs.end(), 0.0);
      for (int g = 0; g < group; ++g)
        for (int d = 0; d < D; ++d) qs[d] += q[sz(h * group + g) * D + d];
    }
    std::vector<std::pair<double, int>> items;
    for (int c = 0; c < C; ++c) {
      if (cand_valid && !cand_valid[c]) continue;
      const double s = sm_scale * dot(qs.data(), lmk + (sz(c) * Hkv + kh) * D, D);
      if (!std::isnan(s)) items.emplace_back(s, c);
    }
    topk_ascending(std::move(items), topk, sel + sz(h) * topk, scores ? scores + sz(h) * topk : nullptr);
  }
}

void hsa_key_mask(int kv_len, int page_size, int window_size, bool fuse_window, const int32_t* pages,
                  const int32_t* selected, int topk, int num_pages, uint8_t* mask) {
  const int win_start = window_size > 0 ? std::max(0, kv_len - window_size) : kv_len;
  for (int t = 0; t < kv_len; ++t) {
    bool on = fuse_window && t >= win_start;
    if (t < win_start) {
      const int32_t page = pages[t / page_size];
      for (int i = 0; i < topk && !on; ++i)
        on = selected[i] >= 0 && selected[i] < num_pages && selected[i] == page;
    }
    mask[t] = on ? 1 : 0;
  }
}

void hsa_decode_masks(int kv_len, int page_size, int window_size, bool fuse_window, const int32_t* pages,
                      const int32_t* selected, int H_sel, int topk, int Hq, int num_pages, uint8_t* masks) {
  const int per_list = Hq / H_sel;  // query heads sharing one selection list
  for (int h = 0; h < Hq; ++h)
    hsa_key_mask(kv_len, page_size, window_size, fuse_window, pages, selected + sz(h / per_list) * topk, topk,
                 num_pages, masks + sz(h) * kv_len);
}

void sparse_decode(const double* q, const double* k, const double* v, int L, int Hq, int Hkv, int D,
                   const uint8_t* masks, double sm_scale, double logits_soft_cap, const double* sinks,
                   double* o, double* lse) {
  const int group = Hq / Hkv;
  std::vector<double> s;
  std::vector<const double*> vals;
  for (int h = 0; h < Hq; ++h) {
    const int kh = h / group;
    s.clear(), vals.clear();
    for (int t = 0; t < L; ++t) {
      if (!masks[sz(h) * L + t]) continue;
      double sc = sm_scale * dot(q + sz(h) * D, k + (sz(t) * Hkv + kh) * D, D);
      if (logits_soft_cap > 0.0) sc = logits_soft_cap * std::tanh(sc / logits_soft_cap);
      s.push_back(sc);
      vals.push_back(v + (sz(t) * Hkv + kh) * D);
    }
    softmax_terms(s, vals, sinks ? sinks + h : nullptr, D, o + sz(h) * D, lse ? lse + h : nullptr);
  }
}

// ---------------------------------------------------------------- DSA
void dsa_index(const double* q, const double* w, const double* k, int L, int Hi, int Di, int topk,
               int32_t* idx, double* scores) {
  std::vector<std::pair<double, int>> items;
  for (int t = 0; t < L; ++t) {
    double s = 0.0;
    for (int h = 0; h < Hi; ++h) s += w[h] * std::max(0.0, dot(q + sz(h) * Di, k + sz(t) * Di, Di));
    if (!std::isnan(s)) items.emplace_back(s, t);
  }
  topk_ascending(std::move(items), topk, idx, scores);
}

void mla_sparse_decode(const double* q_nope, const double* q_pe, const double* ckv, const double* kpe,
                       int L, int H, int Dc, int Dr, const int32_t* idx, int topk, double sm_scale,
                       double* o, double* lse) {
  std::vector<double> s;
  std::vector<const double*> vals;
  for (int h = 0; h < H; ++h) {
    s.clear(), vals.clear();
    for (int i = 0; i < topk; ++i) {  // every listed entry is a term: duplicates count twice
      const int32_t t = idx[i];
      if (t < 0 || t >= L) continue;
      s.push_back(sm_scale * (dot(q_nope + sz(h) * Dc, ckv + sz(t) * Dc, Dc) +
                              dot(q_pe + sz(h) * Dr, kpe + sz(t) * Dr, Dr)));
      vals.push_back(ckv + sz(t) * Dc);
    }
    softmax_terms(s, vals, nullptr, Dc, o + sz(h) * Dc, lse ? lse + h : nullptr);
  }
}

}  // namespace clattn::ref

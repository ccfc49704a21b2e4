// clattn double-precision CPU reference for sparse attention (HSA and DSA), one request at a
// time. Written from the contracts in include/clattn/sparse.hpp, independently of any kernel:
// plain loops over the logical sequence, double everywhere.
#pragma once
#include <cstdint>

namespace clattn::ref {

// --- HSA (Hierarchical Sparse Attention) ---
// Page size P = chunk size; a page's landmark K row sits at its last slot. A request of L keys
// with window W (0 = none) has window [max(0, L - W), L) and candidates = its completed pages j
// with (j + 1) * P <= L - W, in logical order.

// Number of candidate pages: max(0, L - W) / P.
int hsa_num_candidates(int kv_len, int page_size, int window_size);

// Top-k selection over C candidates. q [Hq, D]; lmk [C, Hkv, D] the candidates' landmark K rows
// in candidate order; cand_valid [C] (nullptr: all valid). H_sel = Hkv (group) or Hq (head):
//   group: s(h, c) = sm_scale * (sum of the query rows of KV head h's group) . lmk[c, h]
//   head:  s(h, c) = sm_scale * q[h] . lmk[c, h / (Hq / Hkv)]
// Per list h: the topk highest valid candidates (ties: the lower index; NaN scores never
// selected), written in ascending candidate index, then -1 / -inf padding.
// sel [H_sel, topk] candidate indices (0..C-1, the caller maps them to page ids); scores
// [H_sel, topk] (nullable).
void hsa_select(const double* q, const double* lmk, const bool* cand_valid, int C, int Hq, int Hkv, int D,
                int topk, bool head_strategy, double sm_scale, int32_t* sel, double* scores);

// Attended key set of ONE selection list: mask [kv_len], 1 = attended.
//   fuse_window (and W > 0): the window positions [max(0, L - W), L);
//   plus every position t < L - W (t < L when W == 0) whose page pages[t / P] equals a selected id.
// pages: the request's physical page ids in logical order (ceil(L / P) of them); selected [topk]
// physical page ids; ids of -1 or outside [0, num_pages) add nothing; an id listed twice, or a
// selected page inside the window, adds each key once (a mask is a set).
void hsa_key_mask(int kv_len, int page_size, int window_size, bool fuse_window, const int32_t* pages,
                  const int32_t* selected, int topk, int num_pages, uint8_t* mask);

// hsa_key_mask for every query head: selected [H_sel, topk] (H_sel = Hkv group or Hq head);
// query head h uses list h / (Hq / H_sel). masks [Hq, kv_len].
void hsa_decode_masks(int kv_len, int page_size, int window_size, bool fuse_window, const int32_t* pages,
                      const int32_t* selected, int H_sel, int topk, int Hq, int num_pages, uint8_t* masks);

// Decode (one query token) over masked keys: query head h attends, softmax like ref::attention,
// to the keys t with masks[h * L + t] != 0 of KV head h / (Hq / Hkv). q [Hq, D], k, v [L, Hkv, D];
// soft cap after sm_scale (cap > 0); sinks [Hq] (nullable) join the denominator only.
// o [Hq, D]; lse [Hq] natural log (nullable); no key and no sink: o = 0, lse = -inf.
void sparse_decode(const double* q, const double* k, const double* v, int L, int Hq, int Hkv, int D,
                   const uint8_t* masks, double sm_scale, double logits_soft_cap, const double* sinks,
                   double* o, double* lse);

// --- DSA (DeepSeek sparse attention) ---
// Indexer: score(t) = sum_h w[h] * max(0, q[h] . k[t]) for t < L; q [Hi, Di], w [Hi], k [L, Di].
// The topk highest positions (ties: the lower position; NaN never selected), in ascending
// position order, then -1 / -inf padding. idx [topk]; scores [topk] (nullable).
void dsa_index(const double* q, const double* w, const double* k, int L, int Hi, int Di, int topk,
               int32_t* idx, double* scores);

// Sparse MLA decode (absorbed form, one query token): attention over the positions idx[0..topk);
// -1 and positions outside [0, L) add nothing; a position listed twice counts twice.
// q_nope [H, Dc], q_pe [H, Dr], ckv [L, Dc], kpe [L, Dr]; scores (q_nope.ckv + q_pe.kpe) * sm_scale;
// values ckv; o [H, Dc]; lse [H] (nullable). No key: o = 0, lse = -inf. DeepSeek: Dc 512, Dr 64.
void mla_sparse_decode(const double* q_nope, const double* q_pe, const double* ckv, const double* kpe,
                       int L, int H, int Dc, int Dr, const int32_t* idx, int topk, double sm_scale,
                       double* o, double* lse);

}  // namespace clattn::ref

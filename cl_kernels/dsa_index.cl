// DSA indexer (DeepSeek-V3.2 lightning indexer) over a paged key cache of one head, in two
// kernels of one program (backends/ops/dsa_index.cpp):
//
//   dsa_index_scores  score(b, t) = sum_h w[b, h] * relu(q[b, h] . k[t]) for the positions
//                     t < L_b of request b, into the workspace row scores[b * ld + t]
//   dsa_index_topk    one work-group per request: the topk highest of its L_b scores
//                     (topk.clh: ties to the lower position, ascending position order, -1 /
//                     -inf padding), so an index is a position
//
// Scores are a small GEMM per request, S[t, h] = K[t, :] . Q[h, :], reduced over the heads
// with relu and the weights, so the scoring kernel is shaped like CLBlast's xgemm:
//   work-group = one work entry (request, TT tokens from t0); WG = TT / TM x HP / TH
//                work-items
//   work-item  = (tw, hw): the TM x TH micro-tile of tokens tw + NTW m and heads hw + NHW j
//                (NTW = TT / TM, NHW = HP / TH) in registers, over the index dims in DK-dim
//                chunks: each chunk of K (TT tokens) and of Q (HP heads, pre-scaled by
//                k_scale) is converted to f32 once into local memory, d-major, so a SIMD
//                group (consecutive tw, one hw) reads consecutive keys and one broadcast q
//                per dim; every local read feeds TH (keys) or TM (q) FMAs
//   heads      HP per pass (Hi > HP: several passes, each re-reading the tile); a pass ends
//              with relu and the weights on the micro-tile, summed into TM per-token partials
//   reduction  the NHW partials of a token meet in local memory; scores of positions past
//              L_b are not written (the top-k reads L_b of them)
//
// Work entries (4 int32 at work_off + 4 * group): {request, t0, page_base, L}; the top-k
// kernel reads L_b at len_off + b. Key (page, slot): kc + page * stride_page + slot *
// stride_token (32-bit words), page = page_ids[page_base + (t >> log2_page)], clamped into the
// pool with the fault flag as the attention kernels do.
//
// Build options (-D): DI (index dim), KV_DT, TT, TM, TH, HP, DK, TOPK_WG; all but the last
// are the scoring kernel's (backends/params/rows_dsa_index.cpp).
#include "common.clh"
#include "topk.clh"

#ifndef DI
#define DI 128
#endif
#ifndef KV_DT
#define KV_DT DT_BF16
#endif
#ifndef TT  // tokens per work-group
#define TT 64
#endif
#ifndef TM  // tokens per work-item
#define TM 4
#endif
#ifndef TH  // heads per work-item
#define TH 8
#endif
#ifndef HP  // heads per pass
#define HP 64
#endif
#ifndef DK  // index dims per staged chunk
#define DK 32
#endif
#ifndef TOPK_WG  // work-items of the top-k kernel (a power of two)
#define TOPK_WG 256
#endif

#if KV_DT == DT_F32
#define EPW 1
#define ELEM(w, e) WORD_ELEM_F32(w, e)
#elif KV_DT == DT_F16
#define EPW 2
#define ELEM(w, e) WORD_ELEM_F16(w, e)
#elif KV_DT == DT_BF16
#define EPW 2
#define ELEM(w, e) WORD_ELEM_BF16(w, e)
#elif KV_DT == DT_E4M3
#define EPW 4
#define ELEM(w, e) WORD_ELEM_E4M3(w, e)
#else
#define EPW 4
#define ELEM(w, e) WORD_ELEM_E5M2(w, e)
#endif

#define NTW (TT / TM)
#define NHW (HP / TH)
#define WG (NTW * NHW)
#define DKW (DK / EPW)  // 32-bit words per token and chunk

#if (TT % TM) || (HP % TH) || (DI % DK) || (DK % EPW)
#error "dsa_index.cl: TM must divide TT, TH divide HP, DK divide DI, and DK hold whole 32-bit words"
#endif

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) SIMD_ATTR
void dsa_index_scores(__global const void* q, int q_dt, __global const float* w, __global const uint* kc,
                      __global const int* page_ids, __global const int* tab, int work_off, __global float* scores,
                      int ld, int num_heads, long stride_page, long stride_token /* 32-bit words */, int log2_page,
                      float k_scale, int num_pages, __global volatile int* faults) {
  __local float ks[DK * TT];    // the chunk's keys, ks[d * TT + token]
  __local float qs[DK * HP];    // the chunk's q rows, qs[d * HP + head]
  __local float red[NHW * TT];  // per-token partials of each head group

  const int wi = get_local_id(0);
  const int tw = wi % NTW, hw = wi / NTW;
  __global const int* me = tab + work_off + 4 * (int)get_group_id(0);
  const int req = me[0], t0 = me[1], pbase = me[2], len = me[3];
  const int nt = min(TT, len - t0);
  const int pmask = (1 << log2_page) - 1;
  bool bad = false;  // a page id outside [0, num_pages) was met (clamped into the pool)

  float part[TM];
  for (int m = 0; m < TM; ++m) part[m] = 0.0f;
  for (int h0 = 0; h0 < num_heads; h0 += HP) {
    float acc[TM][TH];
    for (int m = 0; m < TM; ++m)
      for (int j = 0; j < TH; ++j) acc[m][j] = 0.0f;
    for (int d0 = 0; d0 < DI; d0 += DK) {
      barrier(CLK_LOCAL_MEM_FENCE);  // the previous chunk's readers are done
      for (int i = wi; i < TT * DKW; i += WG) {
        const int n = i / DKW, c = i % DKW;
        uint x = 0u;
        if (n < nt) {
          const int t = t0 + n;
          const int id = page_ids[pbase + (t >> log2_page)];
          bad |= (uint)id >= (uint)num_pages;
          x = kc[(long)POOL_PAGE(id) * stride_page + (long)(t & pmask) * stride_token + d0 / EPW + c];
        }
        for (int e = 0; e < EPW; ++e) ks[(c * EPW + e) * TT + n] = ELEM(x, e);
      }
      for (int i = wi; i < HP * DK; i += WG) {
        const int hh = i / DK, d = i % DK, h = h0 + hh;
        qs[d * HP + hh] = h < num_heads ? load_elem(q, ((size_t)req * num_heads + h) * DI + d0 + d, q_dt) * k_scale
                                        : 0.0f;
      }
      barrier(CLK_LOCAL_MEM_FENCE);
      for (int d = 0; d < DK; ++d) {
        float kv[TM], qv[TH];
        for (int m = 0; m < TM; ++m) kv[m] = ks[d * TT + tw + NTW * m];
        for (int j = 0; j < TH; ++j) qv[j] = qs[d * HP + hw + NHW * j];
        for (int m = 0; m < TM; ++m)
          for (int j = 0; j < TH; ++j) acc[m][j] = fma(kv[m], qv[j], acc[m][j]);
      }
    }
    for (int j = 0; j < TH; ++j) {
      const int h = h0 + hw + NHW * j;
      const float wt = h < num_heads ? w[(size_t)req * num_heads + h] : 0.0f;
      for (int m = 0; m < TM; ++m) part[m] = fma(wt, fmax(acc[m][j], 0.0f), part[m]);
    }
  }
  for (int m = 0; m < TM; ++m) red[hw * TT + tw + NTW * m] = part[m];
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int n = wi; n < nt; n += WG) {
    float s = 0.0f;
    for (int g = 0; g < NHW; ++g) s += red[g * TT + n];
    scores[(size_t)req * ld + t0 + n] = s;
  }
  if (bad) atomic_or(faults, CLATTN_FAULT_PAGE_ID);
}

// Request b = group: the topk highest of scores[b * ld .. + L_b) -> indices / out_scores
// [out_off + b * topk .. + topk) (out_off: the workspace's scratch rows when the caller takes
// no scores).
__kernel __attribute__((reqd_work_group_size(TOPK_WG, 1, 1)))
void dsa_index_topk(__global const float* scores, int ld, __global const int* tab, int len_off, int topk,
                    __global int* indices, __global float* out_scores, ulong out_off) {
  __local uint hist[256];
  __local int scan[2 * TOPK_WG];
  __local int st[4];
  const size_t b = get_group_id(0);
  topk_select(scores + b * (size_t)ld, tab[len_off + (int)b], topk, indices + b * (size_t)topk,
              out_scores + out_off + b * (size_t)topk, hist, scan, st);
}

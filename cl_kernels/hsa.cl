// HSA (hierarchical sparse attention) decode, the steps around the sparse decode kernel
// (decode.cl SPARSE): landmark scoring + top-k page selection, and the per-head page lists
// the sparse decode reads. Semantics: include/clattn/sparse.hpp; design: docs/sparse.md.
//
// Per-request rows (8 int32 at tab + rq_off + 8 b, the sparse decode plan's table;
// ops/hsa.cpp): {page_base (the request's first entry in page_ids), candidates, pages,
// cutoff (keys before the window), lists (the request's page lists, from the lists' start in
// the decode workspace), window pages in each list, first window page, keys}.
//
// Build options (-D): HEAD_DIM, SELECT_WG (work-items per selection group, a power of two).
#include "common.clh"
#include "topk.clh"

#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif
#ifndef SELECT_WG
#define SELECT_WG 128
#endif

// One work-group per (request b, selection list h): scores every candidate page by its
// landmark row (the page's last slot) against the list's query (group: the sum of the KV
// head's query rows; head: the query head's row), scaled by q_scale = sm_scale * k_scale,
// into sc + sc_off (row stride cstride), then keeps the topk best (topk.clh) and turns candidate
// indices into page ids. Candidates: the request's first `candidates` pages (has_cand 0) or
// row b of cand [B, ncand] (has_cand 1; entries masked off, -1 or outside the pool skip).
__kernel __attribute__((reqd_work_group_size(SELECT_WG, 1, 1)))
void hsa_select(__global const void* q, int q_dt, __global const uchar* k_cache, int kv_dt,
                __global const int* page_ids, __global const int* tab, int rq_off, __global const int* cand,
                __global const uchar* cand_mask, int has_cand, int has_mask, int ncand, __global float* sc,
                ulong sc_off, int cstride, __global int* sel_ids, __global float* sel_scores, ulong ss_off, int topk, int num_qo_heads,
                int group, int head_mode, long stride_page, long stride_token, long stride_head, int page_size,
                int num_pages, float q_scale, __global volatile int* faults) {
  __local float qv[HEAD_DIM];
  __local uint hist[256];
  __local int scan[2 * SELECT_WG];
  __local int st[4];
  const int lid = (int)get_local_id(0);
  const int nsel = head_mode ? num_qo_heads : num_qo_heads / group;
  const int b = (int)get_group_id(1) / nsel, h = (int)get_group_id(1) % nsel;
  const int kvh = head_mode ? h / group : h;
  __global const int* r = tab + rq_off + 8 * b;
  for (int d = lid; d < HEAD_DIM; d += SELECT_WG) {
    float x = 0.0f;
    if (head_mode) {
      x = load_elem(q, ((size_t)b * num_qo_heads + h) * HEAD_DIM + d, q_dt);
    } else {
      for (int g = 0; g < group; ++g) x += load_elem(q, ((size_t)b * num_qo_heads + h * group + g) * HEAD_DIM + d, q_dt);
    }
    qv[d] = x;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  const int n = has_cand ? ncand : r[1];
  __global float* row = sc + sc_off + (size_t)get_group_id(1) * cstride;
  const long lmk = (long)(page_size - 1) * stride_token + (long)kvh * stride_head;
  bool bad = false;
  for (int c = lid; c < n; c += SELECT_WG) {
    const int id = has_cand ? cand[(size_t)b * ncand + c] : page_ids[r[0] + c];
    const bool in_pool = IN_POOL(id, num_pages);
    bad |= !in_pool && (!has_cand || id != -1);
    float s = CLATTN_NEG_INF;
    if (in_pool && (!has_mask || cand_mask[(size_t)b * ncand + c])) {
      const size_t base = (size_t)((long)id * stride_page + lmk);
      float acc = 0.0f;
      for (int d = 0; d < HEAD_DIM; d += 4) {
        const float4 k4 = bits4_to_float4(load4_bits(k_cache, base + d, kv_dt), kv_dt);
        acc = fma(qv[d], k4.x, acc);
        acc = fma(qv[d + 1], k4.y, acc);
        acc = fma(qv[d + 2], k4.z, acc);
        acc = fma(qv[d + 3], k4.w, acc);
      }
      s = acc * q_scale;
    }
    row[c] = s;
  }
  if (bad) atomic_or(faults, CLATTN_FAULT_PAGE_ID);
  __global int* out_i = sel_ids + (size_t)get_group_id(1) * topk;
  __global float* out_s = sel_scores + ss_off + (size_t)get_group_id(1) * topk;
  const int nsel_out = topk_select(row, n, topk, out_i, out_s, hist, scan, st);
  barrier(CLK_GLOBAL_MEM_FENCE);
  for (int j = lid; j < nsel_out; j += SELECT_WG) {
    const int c = out_i[j];
    out_i[j] = has_cand ? cand[(size_t)b * ncand + c] : page_ids[r[0] + c];
  }
}

// The sparse decode's page lists of request b = get_global_id(1) (decode.cl SPARSE): nsel
// lists of nw + topk pages, each entry a page id and the range [lo, hi) of its slots that
// count, packed lo << 16 | hi. First the window's nw pages (fused mode), copied from
// page_ids: the first from the cutoff's offset, the last up to the request's end. Then the
// list's selection: whole pages, cut at the cutoff for a page holding keys at or past it
// (the window's start or the request's end: the request's tail pages are searched); an
// empty range for -1, an id outside the pool (CLATTN_FAULT_PAGE_ID unless -1) or an id
// already earlier in the selection. Empty entries point at page 0 (never read).
__kernel void hsa_lists(__global const int* page_ids, __global const int* tab, int rq_off, __global const int* sel, int topk,
                        int nsel, __global int* lists, int lists_off, int page_size, int num_pages,
                        __global volatile int* faults) {
  const int i = (int)get_global_id(0), b = (int)get_global_id(1);
  __global const int* r = tab + rq_off + 8 * b;
  const int pbase = r[0], npages = r[2], cutoff = r[3], lbase = lists_off + r[4], nw = r[5], wfirst = r[6];
  const int len = r[7], stride = nw + topk;
  if (i >= nsel * stride) return;
  const int h = i / stride, j = i % stride;
  int id, lo = 0, hi = page_size;
  if (j < nw) {
    id = page_ids[pbase + wfirst + j];
    if (j == 0) lo = cutoff - wfirst * page_size;
    hi = min(page_size, len - (wfirst + j) * page_size);
  } else {
    __global const int* row = sel + ((size_t)b * nsel + h) * topk;
    const int k = j - nw;
    id = row[k];
    if (!IN_POOL(id, num_pages)) {
      if (id != -1) atomic_or(faults, CLATTN_FAULT_PAGE_ID);
      id = 0, hi = 0;
    } else {
      for (int kk = 0; kk < k && hi; ++kk)
        if (row[kk] == id) hi = 0;
      for (int tp = cutoff / page_size; tp < npages && hi; ++tp)
        if (page_ids[pbase + tp] == id) hi = clamp(cutoff - tp * page_size, 0, page_size);
    }
  }
  lists[lbase + i] = id;
  lists[lbase + nsel * stride + i] = (lo << 16) | hi;
}

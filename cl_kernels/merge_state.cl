// Merging attention states (o, lse) computed over disjoint key sets:
//   lse = log(sum_p exp(lse_p)),  o = sum_p exp(lse_p - lse) * o_p.
// An lse of -inf is an empty state whose o is never read into the sum (it may hold
// anything); when every part is empty the result is o = 0, lse = -inf. Parts are summed
// in index order, so results are deterministic. One work-group per (token, head) row, its
// work-items striding over head_dim. o dtypes are runtime arguments (one program for all).
#include "common.clh"

#ifndef MERGE_WG
#define MERGE_WG 64
#endif

// Two states -> one. vo may alias va and so may alias sa: every work-item reads its row's
// lse values before the barrier and only work-item 0 writes so after it; elements are
// read and written by the same work-item.
__kernel __attribute__((reqd_work_group_size(MERGE_WG, 1, 1)))
void merge_state(__global const void* va, __global const float* sa, __global const void* vb,
                 __global const float* sb, __global void* vo, __global float* so, int has_so, int D, int dt) {
  const size_t row = get_group_id(0);
  const int lid = get_local_id(0);
  const float la = sa[row], lb = sb[row];
  barrier(CLK_GLOBAL_MEM_FENCE);
  const float m = fmax(la, lb);
  const float wa = la == CLATTN_NEG_INF ? 0.0f : exp(la - m);
  const float wb = lb == CLATTN_NEG_INF ? 0.0f : exp(lb - m);
  const float den = wa + wb;
  for (int d = lid; d < D; d += MERGE_WG) {
    const size_t i = row * (size_t)D + d;
    float acc = 0.0f;
    if (wa > 0.0f) acc += wa * load_elem(va, i, dt);
    if (wb > 0.0f) acc += wb * load_elem(vb, i, dt);
    store_elem(vo, i, dt, den > 0.0f ? acc / den : 0.0f);
  }
  if (has_so && lid == 0) so[row] = den > 0.0f ? m + log(den) : CLATTN_NEG_INF;
}

// k states of a row, laid out v [T, S, H, D], s [T, S, H] -> vo [T, H, D], so [T, H].
__kernel __attribute__((reqd_work_group_size(MERGE_WG, 1, 1)))
void merge_states(__global const void* v, __global const float* s, __global void* vo, __global float* so,
                  int has_so, int S, int H, int D, int dt) {
  const size_t row = get_group_id(0);  // t * H + h
  const size_t t = row / H, h = row % H;
  const int lid = get_local_id(0);
  float m = CLATTN_NEG_INF;
  for (int p = 0; p < S; ++p) m = fmax(m, s[(t * S + p) * H + h]);
  float den = 0.0f;
  for (int p = 0; p < S; ++p) {
    const float l = s[(t * S + p) * H + h];
    if (l != CLATTN_NEG_INF) den += exp(l - m);
  }
  for (int d = lid; d < D; d += MERGE_WG) {
    float acc = 0.0f;
    for (int p = 0; p < S; ++p) {
      const float l = s[(t * S + p) * H + h];
      if (l != CLATTN_NEG_INF) acc += exp(l - m) * load_elem(v, ((t * S + p) * H + h) * (size_t)D + d, dt);
    }
    store_elem(vo, row * (size_t)D + d, dt, den > 0.0f ? acc / den : 0.0f);
  }
  if (has_so && lid == 0) so[row] = den > 0.0f ? m + log(den) : CLATTN_NEG_INF;
}

// Split-K pass of paged decode: request `req` has num_parts partial states at workspace
// rows first..first+num_parts-1 (ws_o [P, Hq, D] f32 normalised, ws_lse [P, Hq] f32, no
// sink). Adds the head's sink (an extra state with o = 0, lse = sink) and writes the final
// o [B, Hq, D] (o_dt) and lse [B, Hq]. tab entries (4 int32 at merge_off + 4*e):
// {req, first, num_parts, 0}, num_parts <= MERGE_MAXP. One work-group per (entry, query
// head). The parts' lse are loaded in parallel and turned into weights once (local
// memory); then the work-items split the row into float4 columns AND the parts into
// groups, so each one sums only a few parts with independent 16-byte loads, and the
// groups' sums are added in group order (deterministic).
#define MERGE_MAXP 256
#define MERGE_COLS 128  // float4 columns per pass: D up to 512 (MLA's latent rows) in one pass
#define MERGE_SUMS (MERGE_WG > MERGE_COLS ? MERGE_WG : MERGE_COLS)
__kernel __attribute__((reqd_work_group_size(MERGE_WG, 1, 1)))
void merge_partials(__global const int* tab, int merge_off, __global const float* ws, ulong lse_off,
                    __global void* o, int o_dt, __global float* lse, int has_lse, __global const float* sinks,
                    int has_sinks, int Hq, int D) {
  __local float w[MERGE_MAXP];
  __local float red[MERGE_WG];
  __local float4 part_sum[MERGE_SUMS];
  const int e = get_group_id(0), h = get_group_id(1), lid = get_local_id(0);
  __global const int* me = tab + merge_off + 4 * e;
  const int req = me[0], first = me[1], n = min(me[2], MERGE_MAXP);
  __global const float* ws_lse = ws + lse_off;
  const float sink = has_sinks ? sinks[h] : CLATTN_NEG_INF;
  float m = sink;
  for (int p = lid; p < n; p += MERGE_WG) {
    const float l = ws_lse[(size_t)(first + p) * Hq + h];
    w[p] = l;
    m = fmax(m, l);
  }
  red[lid] = m;
  barrier(CLK_LOCAL_MEM_FENCE);
  float M = CLATTN_NEG_INF;
  for (int i = 0; i < MERGE_WG; ++i) M = fmax(M, red[i]);
  for (int p = lid; p < n; p += MERGE_WG) w[p] = w[p] == CLATTN_NEG_INF ? 0.0f : exp(w[p] - M);
  barrier(CLK_LOCAL_MEM_FENCE);
  float den = 0.0f;
  if (M != CLATTN_NEG_INF) {
    den = has_sinks ? exp(sink - M) : 0.0f;
    for (int p = 0; p < n; ++p) den += w[p];  // same order in every work-item
  }
  const float inv = den > 0.0f ? 1.0f / den : 0.0f;

  const int ncol = D / 4;  // D is a multiple of 4
  __global const float4* src = (__global const float4*)(ws + ((size_t)first * Hq + h) * D);
  const size_t step = (size_t)Hq * ncol;  // float4s between consecutive parts
  for (int c0 = 0; c0 < ncol; c0 += MERGE_COLS) {
    const int nc = min(MERGE_COLS, ncol - c0);
    const int groups = max(1, MERGE_WG / nc);  // part groups; nc * groups <= MERGE_SUMS
    for (int idx = lid; idx < nc * groups; idx += MERGE_WG) {
      const int col = c0 + idx % nc, g = idx / nc;
      float4 acc = (float4)(0.0f);
#pragma unroll 4
      for (int p = g; p < n; p += groups) {
        const float wp = w[p];
        const float4 x = src[p * step + col];
        acc += wp > 0.0f ? wp * x : (float4)(0.0f);  // empty parts (weight 0) never enter the sum
      }
      part_sum[idx] = acc;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int cc = lid; cc < nc; cc += MERGE_WG) {
      float4 acc = part_sum[cc];
      for (int g = 1; g < groups; ++g) acc += part_sum[g * nc + cc];
      acc *= inv;
      const size_t out = ((size_t)req * Hq + h) * D + 4 * (size_t)(c0 + cc);
      store_elem(o, out + 0, o_dt, acc.x);
      store_elem(o, out + 1, o_dt, acc.y);
      store_elem(o, out + 2, o_dt, acc.z);
      store_elem(o, out + 3, o_dt, acc.w);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (has_lse && lid == 0) lse[(size_t)req * Hq + h] = den > 0.0f ? M + log(den) : CLATTN_NEG_INF;
}

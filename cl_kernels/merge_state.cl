// Merging attention states (o, lse) computed over disjoint key sets:
//   lse = log(sum_p exp(lse_p)),  o = sum_p exp(lse_p - lse) * o_p.
// An lse of -inf is an empty state whose o is never read into the sum (it may hold
// anything); when every part is empty the result is o = 0, lse = -inf. Parts are summed
// in index order, so results are deterministic. One work-group per (token, head) row, its
// work-items striding over head_dim. o dtypes are runtime arguments (one program for all).
#include "common.clh"
#include "merge_parts.clh"

#ifndef MERGE_WG
#define MERGE_WG 64
#endif

// Two states -> one. vo may alias va and so may alias sa: every work-item reads its row's
// lse values before the barrier and only work-item 0 writes so after it; elements are
// read and written by the same work-item.
__kernel __attribute__((reqd_work_group_size(MERGE_WG, 1, 1))) SIMD_ATTR
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
__kernel __attribute__((reqd_work_group_size(MERGE_WG, 1, 1))) SIMD_ATTR
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

// Split-K pass (paged decode without a fused merge, MLA decode, extend's key split): output row
// `req` has num_parts partial states at workspace rows first + i x stride; col_blocks
// work-groups per (tab entry, query head) merge them, each a block of the row's float4
// columns (merge_parts.clh; more groups than rows keep many parts' loads in flight). tab
// entries (4 int32 at merge_off + 4*e): {req, first, num_parts, stride (0: 1)}, num_parts <= MERGE_MAXP.
#define MERGE_SUMS (MERGE_WG > MERGE_COLS ? MERGE_WG : MERGE_COLS)
__kernel __attribute__((reqd_work_group_size(MERGE_WG, 1, 1))) SIMD_ATTR
void merge_partials(__global const int* tab, int merge_off, __global const float* ws, ulong lse_off,
                    __global void* o, int o_dt, __global float* lse, int has_lse, __global const float* sinks,
                    int has_sinks, int Hq, int D, int col_blocks) {
  __local float w[MERGE_MAXP];
  __local float red[MERGE_WG];
  __local float4 part_sum[MERGE_SUMS];
  const int e = (int)get_group_id(0) / col_blocks, cb = (int)get_group_id(0) % col_blocks;
  const int ncol = D / 4, per = (ncol + col_blocks - 1) / col_blocks;
  const int c0 = min(ncol, cb * per), c1 = min(ncol, c0 + per);
  __global const int* me = tab + merge_off + 4 * e;
  if (me[2] < 2) return;  // a fixed-capacity plan's request that did not split this step
  merge_parts_head(me[0], me[1], me[2], me[3] > 0 ? me[3] : 1, ws, lse_off, o, o_dt, lse, has_lse, sinks, has_sinks, Hq, D,
                   get_group_id(1), c0, c1, cb == 0, get_local_id(0), MERGE_WG, w, red, part_sum, MERGE_SUMS);
}

// Extend / prefill for CPU devices (variant "cpu"): one work-item per work-group, the math
// on vectors across packed query rows.
//
// A CPU OpenCL driver (PoCL's pthread device) runs a work-group as one loop on one core;
// the portable kernel's work-item grid, barriers and local-memory row reductions only add
// work there. Here one work-item owns one planner work item (request, ROWS = RV x VW packed
// query rows, packed row r = query token r / G, head kvh * G + r % G, as extend.cl) x one KV
// head, with extend_generic's arguments, table and results, so the planner is shared.
//
// Everything is laid out with the rows innermost, so a vector holds VW rows:
//   Q^T [D][ROWS]   q rows, pre-scaled, transposed once per work item
//   O^T [D][ROWS]   the output accumulators
//   K, V [BK][D]    one key block converted to f32 once (the block is then read from L1/L2
//                   by every row)
//   S^T [BK][ROWS]  scores, then probabilities
// S^T = K Q^T is a GEMM micro-kernel: SK keys x RV row vectors of accumulators in registers,
// per head-dim element one broadcast K value and RV vector loads of Q^T. The online softmax
// then runs on the row vectors (the max over a block is an element-wise max over its keys,
// the exponentials are vector exp2), and O^T += V^T P^T is the same micro-kernel with PD
// head-dim elements x RV row vectors, the block's rescale folded into the accumulator load.
// Q^T costs one transpose per work item; the output is transposed back once at the end.
//
// Scores in log2 space (q pre-scaled by sm_scale * log2(e) * k_scale and the KV head's
// k_head_scales entry; with a soft cap the tanh is taken on the natural-log score first).
// int8 / int4 KV: a key's row scales (int4: a scale and zero point per group) dequantise its
// rows as the block is converted to f32 (extend_kv.clh says why there). Masks (causal, window, keys past the end or
// behind a page id outside the pool, custom bits) are applied only to blocks that need them.
// Rows past the request's end compute on zero q and are never stored.
//
// Build options (-D): HEAD_DIM, KV_DT, VW (4, 8 or 16), RV, BK, SK, PD; QGROUP for int4.
#include "common.clh"
#include "kernel_args.clh"

#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif
#ifndef KV_DT
#define KV_DT DT_BF16
#endif
#include "extend_kv.clh"  // (after HEAD_DIM and KV_DT)
#include "extend_split.clh"

#ifndef VW  // floats per vector (the device's preferred float width)
#define VW 16
#endif
#ifndef RV  // row vectors per work item: ROWS = RV x VW packed query rows
#define RV 2
#endif
#ifndef BK  // keys per block (one online-softmax step)
#define BK 32
#endif
#ifndef SK  // keys per S micro-tile: SK x RV vector accumulators
#define SK 8
#endif
#ifndef PD  // head-dim elements per P.V micro-tile: PD x RV vector accumulators
#define PD 8
#endif
#include "cpu_vec.clh"

#define NV (HEAD_DIM / VW)
#define ROWS (RV * VW)

#if (BK % SK) || (HEAD_DIM % PD) || (HEAD_DIM % VW) || BK > 64
#error "extend_cpu.cl: SK must divide BK (at most 64), PD and VW must divide HEAD_DIM"
#endif
#define ALL_ROWS (BK == 64 ? ~(ulong)0 : ((ulong)1 << BK) - 1)

// VW stored KV values at element offset `off` (int4: a VW chunk lies inside one group, since
// QGROUP is a multiple of 16) as f32: the per-tensor scales are applied elsewhere; a quantised
// row's own (scale, bias) of its group (sz: KV_SZ, extend_kv.clh) here, the one dequantising
// load.
inline floatV load_kv_dq(__global const uchar* base, long off, float2 sz) {
#if KV_DT == DT_I8
  return load_kv(base, off) * sz.x;
#elif KV_DT == DT_I4
  return (load_kv4_biased(base, off) - sz.y) * sz.x;
#else
  return load_kv(base, off);
#endif
}

// The block's K and V rows (from key k0, up to kv_end) as f32 -> kb, vb. Returns a bit per
// key that has a row; a key past kv_end or behind a page id outside the pool (*bad set) has
// none (its rows are zeroed and its scores masked). Quantised KV: each row dequantised with
// its KV_META values from the scale caches (sc_head_off = kvh * sc_head).
inline ulong load_block(__global const uchar* k, __global const uchar* v, int k0, int kv_end, int paged,
                        __global const int* page_ids, int base, int tok_off, int page_size, int num_pages,
                        long stride_page, long stride_token, long head_off, __global const uchar* k_scales,
                        __global const uchar* v_scales, long sc_page, long sc_token, long sc_head_off, int sc_f16,
                        __local float* kb, __local float* vb, bool* bad) {
  ulong rows = 0;
  for (int kk = 0; kk < BK; ++kk) {
    const long r = extend_key_row(k0 + kk, kv_end, paged, page_ids, base, tok_off, page_size, num_pages, stride_page,
                                  stride_token, head_off, bad);
    __local float* kd = kb + kk * HEAD_DIM;
    __local float* vd = vb + kk * HEAD_DIM;
    if (r >= 0) {
      rows |= (ulong)1 << kk;
#if KV_META
      float km[KV_META], vm[KV_META];
      const long at = extend_scale_at(k0 + kk, kv_end, page_ids, base, tok_off, page_size, num_pages, sc_page,
                                      sc_token, sc_head_off);
      for (int j = 0; j < KV_META; ++j)
        km[j] = extend_meta(k_scales, at, j, sc_f16), vm[j] = extend_meta(v_scales, at, j, sc_f16);
#endif
      for (int c = 0; c < NV; ++c) {
        vstoreV(load_kv_dq(k, r + c * VW, KV_SZ(km, c * VW)), c, kd);
        vstoreV(load_kv_dq(v, r + c * VW, KV_SZ(vm, c * VW)), c, vd);
      }
    } else {
      for (int c = 0; c < NV; ++c) vstoreV((floatV)(0.0f), c, kd), vstoreV((floatV)(0.0f), c, vd);
    }
  }
  return rows;
}

__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void extend_cpu(EXTEND_KERNEL_ARGS) {
  __local float qt[HEAD_DIM * ROWS];  // Q^T
  __local float ot[HEAD_DIM * ROWS];  // O^T
  __local float kb[BK * HEAD_DIM];    // the key block's K rows, f32
  __local float vb[BK * HEAD_DIM];    // and V rows
  __local float pt[BK * ROWS];        // S^T, then P^T

  const int kvh = get_group_id(1);
  EXTEND_HEAD_SCALES(kvh);
  __global const int* w = table + 8 * get_group_id(0);
  const int qo_start = w[0], qo_len = w[1], kv_len = w[2], row0 = w[3], base = w[4], tok_off = w[5];
  const int mask_off = w[6];
  const int nrows = qo_len * G;

  // Q^T (zero rows past the request), O^T = 0.
  {
    float row[HEAD_DIM];
    for (int r = 0; r < ROWS; ++r) {
      const int pr = row0 + r;
      if (pr < nrows) {
        load_vrow(q, ((size_t)(qo_start + pr / G) * Hq + kvh * G + pr % G) * HEAD_DIM, NV, q_dt, qs_h, row);
        for (int d = 0; d < HEAD_DIM; ++d) qt[d * ROWS + r] = row[d];
      } else {
        for (int d = 0; d < HEAD_DIM; ++d) qt[d * ROWS + r] = 0.0f;
      }
    }
    for (int i = 0; i < HEAD_DIM * RV; ++i) vstoreV((floatV)(0.0f), i, ot);
  }

  floatV m[RV], l[RV];
  intV qp[RV];  // each row's query position in the request's key coordinates
#pragma unroll
  for (int i = 0; i < RV; ++i) {
    m[i] = (floatV)(CLATTN_NEG_INF), l[i] = (floatV)(0.0f);
    qp[i] = (intV)(kv_len - qo_len) + ((intV)(row0 + i * VW) + LANE_IDS) / (intV)(G);
  }
  const int last_tok = (min(row0 + ROWS, nrows) - 1) / G;
  const int first_qpos = kv_len - qo_len + row0 / G;
  int kv_end = causal ? min(kv_len, kv_len - qo_len + last_tok + 1) : kv_len;
  int kv_begin = window_left >= 0 ? max(0, first_qpos - window_left) : 0;
  const int part_base = split_range(table, split_off, &kv_begin, &kv_end);
  bool bad = false;
  const long head_off = (long)kvh * stride_head;

  for (int k0 = kv_begin; k0 < kv_end; k0 += BK) {
    const ulong rows = load_block((__global const uchar*)k, (__global const uchar*)v, k0, kv_end, paged, page_ids,
                                 base, tok_off, page_size, num_pages, stride_page, stride_token, head_off, k_scales,
                                 v_scales, sc_page, sc_token, (long)kvh * sc_head, sc_f16, kb, vb, &bad);

    // S^T = K Q^T.
    for (int s0 = 0; s0 < BK; s0 += SK) {
      floatV acc[SK][RV];
#pragma unroll
      for (int s = 0; s < SK; ++s)
#pragma unroll
        for (int i = 0; i < RV; ++i) acc[s][i] = (floatV)(0.0f);
      SCORE_TILE(acc, kb + s0 * HEAD_DIM, HEAD_DIM, qt, 0, HEAD_DIM);
#pragma unroll
      for (int s = 0; s < SK; ++s)
#pragma unroll
        for (int i = 0; i < RV; ++i) vstoreV(acc[s][i], (s0 + s) * RV + i, pt);
    }

    // Soft cap and masks where the block needs them.
    const bool masked = rows != ALL_ROWS || (causal && k0 + BK - 1 > first_qpos) || window_left >= 0;
    if (cap_log2 > 0.0f || masked) {
      for (int kk = 0; kk < BK; ++kk) {
        const int key = k0 + kk;
#pragma unroll
        for (int i = 0; i < RV; ++i) {
          floatV x = vloadV(kk * RV + i, pt);
          if (cap_log2 > 0.0f) x = cap_log2 * tanh(x * inv_cap);
          if (masked) {
            intV vis = (intV)((rows >> kk) & 1 ? -1 : 0);
            if (causal) vis &= (intV)(key) <= qp[i];
            if (window_left >= 0) vis &= (intV)(key) >= qp[i] - (intV)(window_left);
            x = select((floatV)(CLATTN_NEG_INF), x, vis);
          }
          vstoreV(x, kk * RV + i, pt);
        }
      }
    }
    if (has_mask) {  // custom mask bits: row (query token) x key of the request
      for (int r = 0; r < ROWS; ++r) {
        const int pr = row0 + r;
        if (pr >= nrows) continue;
        const long rowbit = (long)(pr / G) * kv_len;
        for (int kk = 0; kk < BK && k0 + kk < kv_end; ++kk) {
          const long bit = rowbit + k0 + kk;
          if (!((mask[mask_off + bit / 8] >> (bit % 8)) & 1)) pt[kk * ROWS + r] = CLATTN_NEG_INF;
        }
      }
    }

    // Online softmax on the row vectors: block max, P = exp2(S - max), rescale factors.
    floatV alpha[RV];
#pragma unroll
    for (int i = 0; i < RV; ++i) {
      floatV mx = m[i];
      for (int kk = 0; kk < BK; ++kk) mx = fmax(mx, vloadV(kk * RV + i, pt));
      alpha[i] = select(exp2(m[i] - mx), (floatV)(1.0f), m[i] == mx);
      floatV sum = (floatV)(0.0f);
      for (int kk = 0; kk < BK; ++kk) {
        const floatV x = vloadV(kk * RV + i, pt);
        const floatV p = select(exp2(x - mx), (floatV)(0.0f), x == (floatV)(CLATTN_NEG_INF));
        sum += p;
        vstoreV(p, kk * RV + i, pt);
      }
      m[i] = mx;
      l[i] = l[i] * alpha[i] + sum;
    }

    // O^T = alpha O^T + V^T P^T.
    for (int d0 = 0; d0 < HEAD_DIM; d0 += PD) {
      floatV acc[PD][RV];
#pragma unroll
      for (int e = 0; e < PD; ++e)
#pragma unroll
        for (int i = 0; i < RV; ++i) acc[e][i] = vloadV((d0 + e) * RV + i, ot) * alpha[i];
      __local const float* vr = vb + d0;
      for (int kk = 0; kk < BK; ++kk) {
        floatV pv[RV];
#pragma unroll
        for (int i = 0; i < RV; ++i) pv[i] = vloadV(kk * RV + i, pt);
#pragma unroll
        for (int e = 0; e < PD; ++e) {
          const floatV vd = (floatV)(vr[kk * HEAD_DIM + e]);
#pragma unroll
          for (int i = 0; i < RV; ++i) acc[e][i] = fma(vd, pv[i], acc[e][i]);
        }
      }
#pragma unroll
      for (int e = 0; e < PD; ++e)
#pragma unroll
        for (int i = 0; i < RV; ++i) vstoreV(acc[e][i], (d0 + e) * RV + i, ot);
    }
  }

  if (bad) atomic_or(faults, CLATTN_FAULT_PAGE_ID);
  float mr[ROWS], lr[ROWS], row[HEAD_DIM];
#pragma unroll
  for (int i = 0; i < RV; ++i) vstoreV(m[i], i, mr), vstoreV(l[i], i, lr);
  for (int r = 0; r < ROWS; ++r) {
    const int pr = row0 + r;
    if (pr >= nrows) break;
    const int h = kvh * G + pr % G;
    const float2 fin = final_scale_lse(mr[r], lr[r], part_base, has_sinks, sinks, h, vs_h);  // (scale, lse)
    const size_t orow = (size_t)(qo_start + pr / G) * Hq + h;
    for (int d = 0; d < HEAD_DIM; ++d) row[d] = ot[d * ROWS + r];
    if (part_base >= 0) {  // KEY_SPLIT: the partial state
      const size_t wrow = split_row(part_base, pr, G, Hq, h);
      store_vrow(part_ws, wrow * HEAD_DIM, NV, DT_F32, fin.x, row);
      part_ws[lse_off + wrow] = fin.y;
      continue;
    }
    store_vrow(o, orow * HEAD_DIM, NV, o_dt, fin.x, row);
    if (has_lse) lse[orow] = fin.y;
  }
}

// Extend / prefill attention, portable kernel: FlashAttention-2 in OpenCL C 1.2 with
// GEMM-style register blocking (CLBlast's xgemm is the model for the tiling).
//
// One work-group = one work item of the plan (request, tile of ROWS packed query rows)
// x one KV head (dimension 1). Packed row r of a request = query token r / G, head
// kvh * G + r % G: a GQA group shares every K/V tile it loads. The WG work-items form a
// TY x TX grid (TY = ROWS / TM): work-item (ty, tx) owns the TM rows ty + TY*i, and
//   S = Q K^T   its TM x KPT micro-tile of each KEYS-key tile (keys tx + TX*j);
//   O += P V    its TM x (4*CPT) accumulators (float4 columns tx + TX*j of the head dim),
// all in registers. Per key tile: the tile's row offsets -> local; S accumulated over
// DC-wide chunks of the head dim (Q and K chunks staged as f32 in local memory, rows padded
// by 4 floats so the float4 reads of a sub-group hit distinct banks); masks; the row max
// across the TX work-items of a row through local memory; P (base 2) -> local, transposed;
// then O += P V over VC-key chunks of V staged in local memory. Each work-item keeps a
// partial row sum over its own keys (all of a row's work-items rescale by the same max);
// the partial sums are added once at the end.
//
// Scores are in log2 space (q pre-scaled by sm_scale * log2(e) * k_scale and the KV head's
// k_head_scales entry; with a soft cap the tanh is taken on the natural-log score first).
// int8 / int4 KV: each key's row scales (int4: per group a scale and zero point) are read
// with its row offset and dequantise the row as it is staged (extend_kv.clh says why there).
// Work table entry (8 int32):
// qo_start, qo_len, kv_len, row0, base, tok_off, mask_off, 0.
//   paged:  key k (list coordinates) -> physical token k + tok_off of the request's list,
//           page page_ids[base + (k + tok_off) / page_size]
//   ragged: key k -> K/V row base + k
// A page id outside [0, num_pages) is never followed: its key is masked and
// CLATTN_FAULT_PAGE_ID is set in *faults. `tmaps` is extend_mma's TMA map argument (unused
// here: one argument list for every extend kernel).
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

#ifndef WG
#define WG 128
#endif
#ifndef ROWS
#define ROWS 32
#endif
#ifndef KEYS
#define KEYS 32
#endif
#ifndef TM  // rows per work-item
#define TM 4
#endif
#ifndef DC  // head-dim chunk of the S = Q K^T staging
#define DC 32
#endif
#ifndef VC  // keys per V chunk
#define VC 16
#endif
#ifndef SUB_TX  // work-items along tx inside one sub-group of 32 (the rest of it along ty)
#define SUB_TX 8
#endif
#ifndef QRES  // 1: the group's Q rows stay in local memory for the whole key loop (staged once)
#define QRES 0
#endif
#ifndef SUNROLL  // unroll of the S loop over a chunk's float4 columns (its loads get hoisted)
#define SUNROLL (DC / 4)
#endif
#ifndef PUNROLL  // unroll of the P V loop over a chunk's keys
#define PUNROLL VC
#endif

#define TY (ROWS / TM)
#define TX (WG / TY)
#define KPT (KEYS / TX)                // keys per work-item in S
#define D4 (HEAD_DIM / 4)              // float4 columns of a row
#define CPT ((D4 + TX - 1) / TX)       // float4 output columns per work-item
#define COL_OK(j) (D4 % TX == 0 || tx + TX * (j) < D4)
#define SST (DC + 4)                   // row stride of the Q / K chunks
#define VST (HEAD_DIM + 4)             // row stride of the V chunk
#define PST (ROWS + 4)                 // key stride of P^T
#define RST (TX + 4)                   // row stride of the partials (float4 reads, 4 rows apart)
#if QRES
#define QST VST                        // Q rows [ROWS][HEAD_DIM + 4], apart from the stage
#define SROWS KEYS                     // the stage's S step: a K chunk
#else
#define SROWS (ROWS + KEYS)            // the stage's S step: a Q and a K chunk
#endif
#define STAGE_FLOATS (SROWS * SST > VC * VST ? SROWS * SST : VC * VST)

#if (ROWS % TM) || (WG % TY) || (KEYS % TX) || (HEAD_DIM % DC) || (DC % 4) || (KEYS % VC) || (TM % 4)
#error "extend.cl: ROWS % TM, WG % (ROWS/TM), KEYS % TX, HEAD_DIM % DC, DC % 4, KEYS % VC, TM % 4 must be 0"
#endif

// Four consecutive stored KV values (element offset i; a multiple of 4 for int4, so inside
// one group) as f32: the per-tensor scales are applied elsewhere; a quantised row's own
// (scale, bias) of its group (sz: KV_SZ, extend_kv.clh) here, the one dequantising load.
inline float4 load_kv4_dq(__global const void* p, long i, float2 sz) {
#if KV_DT == DT_I8
  return convert_float4(vload4(0, (__global const char*)p + i)) * sz.x;
#elif KV_DT == DT_I4
  const uint u = as_ushort(vload2(0, (__global const uchar*)p + i / 2));  // nibbles low first
  return (as_float4((((uint4)(u) >> (uint4)(0, 4, 8, 12)) & 15u) | 0x4B000000u) - sz.y) * sz.x;
#elif KV_DT == DT_F32
  return vload4(0, (__global const float*)p + i);
#elif KV_DT == DT_F16
  return vload_half4(0, (__global const half*)p + i);
#elif KV_DT == DT_BF16
  const uint2 u = as_uint2(vload4(0, (__global const ushort*)p + i));
  return (float4)(WORD_ELEM_BF16(u.x, 0), WORD_ELEM_BF16(u.x, 1), WORD_ELEM_BF16(u.y, 0), WORD_ELEM_BF16(u.y, 1));
#elif KV_DT == DT_E4M3
  const uint u = as_uint(vload4(0, (__global const uchar*)p + i));
  return (float4)(WORD_ELEM_E4M3(u, 0), WORD_ELEM_E4M3(u, 1), WORD_ELEM_E4M3(u, 2), WORD_ELEM_E4M3(u, 3));
#else
  const uint u = as_uint(vload4(0, (__global const uchar*)p + i));
  return (float4)(WORD_ELEM_E5M2(u, 0), WORD_ELEM_E5M2(u, 1), WORD_ELEM_E5M2(u, 2), WORD_ELEM_E5M2(u, 3));
#endif
}

// Columns [c0, c0 + width) of `n` K or V rows (offsets ro[], -1 = zero row; each row's
// KV_META values at rs[r * KV_META] where KV_META) -> dst[n][stride].
inline void stage_kv(__global const void* src, __local const long* ro, __local const float* rs, int n, int c0,
                     int width, __local float* dst, int stride, int lid) {
  const int w4 = width / 4;
  for (int e = lid; e < n * w4; e += WG) {
    const int r = e / w4, c = (e % w4) * 4;
    const float2 sz = KV_SZ(rs + r * KV_META, c0 + c);
    vstore4(ro[r] >= 0 ? load_kv4_dq(src, ro[r] + c0 + c, sz) : (float4)(0.0f), 0, dst + r * stride + c);
  }
}

// Columns [c0, c0 + width) of the group's ROWS packed query rows, times q_scale (rows past
// nrows: zeros) -> dst[ROWS][stride].
inline void stage_q(__global const void* q, int q_dt, float q_scale, int qo_start, int row0, int nrows, int G, int Hq,
                    int kvh, int c0, int width, __local float* dst, int stride, int lid) {
  const int w4 = width / 4;
  for (int e = lid; e < ROWS * w4; e += WG) {
    const int rr = e / w4, c = (e % w4) * 4, pr = row0 + rr;
    float4 x = (float4)(0.0f);
    if (pr < nrows) {
      const size_t qi = ((size_t)(qo_start + pr / G) * Hq + kvh * G + pr % G) * HEAD_DIM + c0 + c;
      x = bits4_to_float4(load4_bits(q, qi, q_dt), q_dt) * q_scale;
    }
    vstore4(x, 0, dst + rr * stride + c);
  }
}

// The row offsets of the tile at k0 -> ro[]; -1: no row (past kv_end, or a page id outside
// the pool: masked, and *bad set). Quantised KV: the keys' K meta -> rs[0 .. KEYS x KV_META),
// V meta -> rs[KEYS x KV_META ..) (extend_kv.clh), spread over the work-group by value.
inline void tile_rows(__local long* ro, __local float* rs, int k0, int kv_end, int paged, __global const int* page_ids,
                      int base, int tok_off, int page_size, int num_pages, long stride_page, long stride_token,
                      long head_off, __global const uchar* k_scales, __global const uchar* v_scales, long sc_page,
                      long sc_token, long sc_head_off, int sc_f16, bool* bad, int lid) {
  for (int kr = lid; kr < KEYS; kr += WG)
    ro[kr] = extend_key_row(k0 + kr, kv_end, paged, page_ids, base, tok_off, page_size, num_pages, stride_page,
                            stride_token, head_off, bad);
#if KV_META
  for (int e = lid; e < KEYS * KV_META; e += WG) {
    const long at = extend_scale_at(k0 + e / KV_META, kv_end, page_ids, base, tok_off, page_size, num_pages, sc_page,
                                    sc_token, sc_head_off);
    rs[e] = extend_meta(k_scales, at, e % KV_META, sc_f16);
    rs[KEYS * KV_META + e] = extend_meta(v_scales, at, e % KV_META, sc_f16);
  }
#endif
}

// The max / sum of a row's TX partials.
inline float row_max(__local const float* r) {
  float x = CLATTN_NEG_INF;
#if TX % 4 == 0
  for (int t = 0; t < TX; t += 4) {
    const float4 v = vload4(0, r + t);
    x = fmax(x, fmax(fmax(v.x, v.y), fmax(v.z, v.w)));
  }
#else
  for (int t = 0; t < TX; ++t) x = fmax(x, r[t]);
#endif
  return x;
}
inline float row_sum(__local const float* r) {
  float x = 0.0f;
  for (int t = 0; t < TX; ++t) x += r[t];
  return x;
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) SIMD_ATTR void extend_generic(EXTEND_KERNEL_ARGS) {
  __local float stage[STAGE_FLOATS];  // (Q and) K chunks [SROWS][SST], or a V chunk [VC][VST]
#if QRES
  __local float qs[ROWS * QST];
#endif
  __local float ps[KEYS * PST];       // P^T: ps[key][ty * TM + i] = P of row ty + TY * i
  __local float red[ROWS * RST];      // per-row partials across tx (max, then sum): red[i * TY + ty]
  __local long rowoff[KEYS];
  __local float rowsc[KV_META ? 2 * KEYS * KV_META : 1];  // quantised KV: the tile's K, then V meta

  const int lid = get_local_id(0);
  // A sub-group of 32 covers SUB_TX x (32 / SUB_TX) of the grid: few distinct Q rows and K
  // keys per float4 read (broadcasts) instead of one long strip.
#if WG % 32 == 0 && TX % SUB_TX == 0 && TY % (32 / SUB_TX) == 0
  const int tx = lid % SUB_TX + SUB_TX * ((lid / 32) % (TX / SUB_TX));
  const int ty = (lid / SUB_TX) % (32 / SUB_TX) + (32 / SUB_TX) * (lid / 32 / (TX / SUB_TX));
#else
  const int tx = lid % TX, ty = lid / TX;
#endif
  const int kvh = get_group_id(1);
  EXTEND_HEAD_SCALES(kvh);
  __global const int* w = table + 8 * get_group_id(0);
  const int qo_start = w[0], qo_len = w[1], kv_len = w[2], row0 = w[3], base = w[4], tok_off = w[5];
  const int mask_off = w[6];
  const int nrows = qo_len * G;

  int qpos[TM];
  bool row_ok[TM];
  float m[TM], l[TM];
  float4 acc[TM][CPT];
UNROLL_LOOP
  for (int i = 0; i < TM; ++i) {
    const int pr = row0 + ty + TY * i;
    row_ok[i] = pr < nrows;
    qpos[i] = kv_len - qo_len + pr / G;
    m[i] = CLATTN_NEG_INF, l[i] = 0.0f;
UNROLL_LOOP
    for (int j = 0; j < CPT; ++j) acc[i][j] = (float4)(0.0f);
  }
  const int last_tok = (min(row0 + ROWS, nrows) - 1) / G;
  int kv_end = causal ? min(kv_len, kv_len - qo_len + last_tok + 1) : kv_len;
  int kv_begin = window_left >= 0 ? max(0, kv_len - qo_len + row0 / G - window_left) : 0;
  const int part_base = split_range(table, split_off, &kv_begin, &kv_end);
  bool bad = false;  // a page id outside [0, num_pages) was met

  const long head_off = (long)kvh * stride_head;
#if QRES
  stage_q(q, q_dt, qs_h, qo_start, row0, nrows, G, Hq, kvh, 0, HEAD_DIM, qs, QST, lid);  // (barriers below)
#endif
  for (int k0 = kv_begin; k0 < kv_end; k0 += KEYS) {
    barrier(CLK_LOCAL_MEM_FENCE);  // the previous tile's readers of rowoff are done
    tile_rows(rowoff, rowsc, k0, kv_end, paged, page_ids, base, tok_off, page_size, num_pages, stride_page,
              stride_token, head_off, k_scales, v_scales, sc_page, sc_token, (long)kvh * sc_head, sc_f16, &bad, lid);

    // S = Q K^T over DC-wide chunks of the head dim.
    float s[TM][KPT];
UNROLL_LOOP
    for (int i = 0; i < TM; ++i)
UNROLL_LOOP
      for (int j = 0; j < KPT; ++j) s[i][j] = 0.0f;
    for (int d0 = 0; d0 < HEAD_DIM; d0 += DC) {
      barrier(CLK_LOCAL_MEM_FENCE);  // rowoff written; the previous chunk's readers are done
#if !QRES
      stage_q(q, q_dt, qs_h, qo_start, row0, nrows, G, Hq, kvh, d0, DC, stage, SST, lid);
      stage_kv(k, rowoff, rowsc, KEYS, d0, DC, stage + ROWS * SST, SST, lid);
#else
      stage_kv(k, rowoff, rowsc, KEYS, d0, DC, stage, SST, lid);
#endif
      barrier(CLK_LOCAL_MEM_FENCE);
UNROLL_BY(SUNROLL)
      for (int c = 0; c < DC; c += 4) {
        float4 kf[KPT];
UNROLL_LOOP
        for (int j = 0; j < KPT; ++j) kf[j] = vload4(0, stage + (SROWS - KEYS + tx + TX * j) * SST + c);
UNROLL_LOOP
        for (int i = 0; i < TM; ++i) {
#if QRES
          const float4 qf = vload4(0, qs + (ty + TY * i) * QST + d0 + c);
#else
          const float4 qf = vload4(0, stage + (ty + TY * i) * SST + c);
#endif
UNROLL_LOOP
          for (int j = 0; j < KPT; ++j)
            s[i][j] = fma(qf.x, kf[j].x, fma(qf.y, kf[j].y, fma(qf.z, kf[j].z, fma(qf.w, kf[j].w, s[i][j]))));
        }
      }
    }

    // Masks, this work-item's part of each row max.
UNROLL_LOOP
    for (int i = 0; i < TM; ++i) {
      float mx = CLATTN_NEG_INF;
UNROLL_LOOP
      for (int j = 0; j < KPT; ++j) {
        const int key = k0 + tx + TX * j;
        float x = s[i][j];
        if (cap_log2 > 0.0f) x = cap_log2 * tanh(x * inv_cap);
        bool vis = row_ok[i] && rowoff[tx + TX * j] >= 0;
        if (causal) vis = vis && key <= qpos[i];
        if (window_left >= 0) vis = vis && key >= qpos[i] - window_left;
        if (has_mask && vis) {
          const long bit = (long)(qpos[i] - kv_len + qo_len) * kv_len + key;
          vis = (mask[mask_off + bit / 8] >> (bit % 8)) & 1;
        }
        s[i][j] = vis ? x : CLATTN_NEG_INF;
        mx = fmax(mx, s[i][j]);
      }
      red[(i * TY + ty) * RST + tx] = mx;
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    // Online softmax: the row max over the tile, P -> ps, rescale.
UNROLL_LOOP
    for (int i = 0; i < TM; ++i) {
      const float mt = fmax(m[i], row_max(red + (i * TY + ty) * RST));
      const float alpha = m[i] == mt ? 1.0f : exp2(m[i] - mt);
      m[i] = mt;
      float sum = 0.0f;
UNROLL_LOOP
      for (int j = 0; j < KPT; ++j) {
        const float p = s[i][j] == CLATTN_NEG_INF ? 0.0f : exp2(s[i][j] - mt);
        sum += p;
        ps[(tx + TX * j) * PST + ty * TM + i] = p;
      }
      l[i] = l[i] * alpha + sum;
UNROLL_LOOP
      for (int j = 0; j < CPT; ++j) acc[i][j] *= alpha;
    }

    // O += P V over VC-key chunks.
    for (int v0 = 0; v0 < KEYS; v0 += VC) {
      barrier(CLK_LOCAL_MEM_FENCE);  // ps written; the stage's previous readers are done
      stage_kv(v, rowoff + v0, rowsc + (KEYS + v0) * KV_META, VC, 0, HEAD_DIM, stage, VST, lid);
      barrier(CLK_LOCAL_MEM_FENCE);
UNROLL_BY(PUNROLL)
      for (int kk = 0; kk < VC; ++kk) {
        float4 vf[CPT];
UNROLL_LOOP
        for (int j = 0; j < CPT; ++j) vf[j] = COL_OK(j) ? vload4(0, stage + kk * VST + 4 * (tx + TX * j)) : (float4)(0.0f);
UNROLL_LOOP
        for (int i4 = 0; i4 < TM; i4 += 4) {
          const float4 p = vload4(0, ps + (v0 + kk) * PST + ty * TM + i4);
UNROLL_LOOP
          for (int j = 0; j < CPT; ++j) {
            acc[i4][j] = fma((float4)(p.x), vf[j], acc[i4][j]);
            acc[i4 + 1][j] = fma((float4)(p.y), vf[j], acc[i4 + 1][j]);
            acc[i4 + 2][j] = fma((float4)(p.z), vf[j], acc[i4 + 2][j]);
            acc[i4 + 3][j] = fma((float4)(p.w), vf[j], acc[i4 + 3][j]);
          }
        }
      }
    }
  }

  // Row sums: the partials of a row's TX work-items.
  barrier(CLK_LOCAL_MEM_FENCE);
UNROLL_LOOP
  for (int i = 0; i < TM; ++i) red[(i * TY + ty) * RST + tx] = l[i];
  barrier(CLK_LOCAL_MEM_FENCE);
  if (bad) atomic_or(faults, CLATTN_FAULT_PAGE_ID);
UNROLL_LOOP
  for (int i = 0; i < TM; ++i) {
    if (!row_ok[i]) continue;
    float lt = row_sum(red + (i * TY + ty) * RST);
    const int pr = row0 + ty + TY * i, h = kvh * G + pr % G;
    const float2 fin = final_scale_lse(m[i], lt, part_base, has_sinks, sinks, h, vs_h);  // (scale, lse)
    const float inv = fin.x;
    const size_t orow = (size_t)(qo_start + pr / G) * Hq + h;
    if (part_base >= 0) {  // KEY_SPLIT: the partial state
      const size_t wrow = split_row(part_base, pr, G, Hq, h);
UNROLL_LOOP
      for (int j = 0; j < CPT; ++j)
        if (COL_OK(j)) vstore4(acc[i][j] * inv, 0, part_ws + wrow * HEAD_DIM + 4 * (tx + TX * j));
      if (tx == 0) part_ws[lse_off + wrow] = fin.y;
      continue;
    }
UNROLL_LOOP
    for (int j = 0; j < CPT; ++j) {
      if (!COL_OK(j)) continue;
      const float4 x = acc[i][j] * inv;
      const size_t oi = orow * HEAD_DIM + 4 * (tx + TX * j);
      store_elem(o, oi, o_dt, x.x), store_elem(o, oi + 1, o_dt, x.y);
      store_elem(o, oi + 2, o_dt, x.z), store_elem(o, oi + 3, o_dt, x.w);
    }
    if (has_lse && tx == 0) lse[orow] = fin.y;
  }
}

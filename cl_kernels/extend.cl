// Extend / prefill attention, portable tiled kernel (flash attention in local memory).
//
// One work-group = one work item of the plan (request, tile of ROWS packed query rows)
// x one KV head (dimension 1). Packed row r of a request = query token r / G, head
// kvh * G + r % G: a GQA group shares every K/V tile it loads. LPR = WG / ROWS work-items
// per row: lane l owns scores of keys l, l + LPR, ... of a tile and output columns
// l, l + LPR, ... . Per KEYS-key step: K tile -> local (f32), scores -> local, row max,
// V tile -> local (same buffer), probabilities, O += P V, all accumulation in f32, online
// softmax in base 2 (q pre-scaled by sm_scale * log2(e) * k_scale; with a soft cap the
// tanh is taken on the natural-log score first).
//
// Work table entry (8 int32): qo_start, qo_len, kv_len, row0, base, tok_off, mask_off, 0.
//   paged:  key k (list coordinates) -> physical token k + tok_off of the request's list,
//           page page_ids[base + (k + tok_off) / page_size]
//   ragged: key k -> K/V row base + k
// A page id outside [0, num_pages) is never followed: its key is masked and
// CLATTN_FAULT_PAGE_ID is set in *faults. `tmaps` is extend_mma's TMA map argument (unused
// here: one argument list for every extend kernel).
#include "common.clh"

#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif
#ifndef KV_DT
#define KV_DT DT_BF16
#endif
#ifndef WG
#define WG 128
#endif
#ifndef ROWS
#define ROWS 16
#endif
#ifndef KEYS
#define KEYS 32
#endif

#define LPR (WG / ROWS)
#define DPL (HEAD_DIM / LPR)
#define KPL (KEYS / LPR)
#define KSTR (HEAD_DIM + 1)
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f

#if (WG % ROWS) || (HEAD_DIM % LPR) || (KEYS % LPR) || (HEAD_DIM % 4)
#error "extend.cl: WG must be a multiple of ROWS, and HEAD_DIM and KEYS multiples of WG / ROWS"
#endif

// Four consecutive stored KV values (unscaled) as f32.
inline float4 load_kv4(__global const void* p, long i) {
#if KV_DT == DT_F32
  return vload4(0, (__global const float*)p + i);
#elif KV_DT == DT_F16
  return vload_half4(0, (__global const half*)p + i);
#elif KV_DT == DT_BF16
  ushort4 u = vload4(0, (__global const ushort*)p + i);
  return (float4)(bf16_bits_to_float(u.x), bf16_bits_to_float(u.y), bf16_bits_to_float(u.z),
                  bf16_bits_to_float(u.w));
#elif KV_DT == DT_E4M3
  uchar4 u = vload4(0, (__global const uchar*)p + i);
  return (float4)(e4m3_bits_to_float(u.x), e4m3_bits_to_float(u.y), e4m3_bits_to_float(u.z),
                  e4m3_bits_to_float(u.w));
#else
  uchar4 u = vload4(0, (__global const uchar*)p + i);
  return (float4)(e5m2_bits_to_float(u.x), e5m2_bits_to_float(u.y), e5m2_bits_to_float(u.z),
                  e5m2_bits_to_float(u.w));
#endif
}

// Loads a KEYS x HEAD_DIM tile (rows at rowoff[], -1 = zero row) into dst [KEYS][KSTR].
inline void load_tile(__global const void* src, __local const long* rowoff, __local float* dst, int lid) {
  for (int i = lid; i < KEYS * (HEAD_DIM / 4); i += WG) {
    const int c = i / (HEAD_DIM / 4), d = (i % (HEAD_DIM / 4)) * 4;
    const long ro = rowoff[c];
    float4 x = ro >= 0 ? load_kv4(src, ro + d) : (float4)(0.0f);
    __local float* o = dst + c * KSTR + d;
    o[0] = x.x, o[1] = x.y, o[2] = x.z, o[3] = x.w;
  }
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void extend_generic(
    __global const void* q, int q_dt, __global const void* k, __global const void* v,
    __global const int* page_ids, __global const int* table, __global void* o, int o_dt,
    __global float* lse, int has_lse, __global const float* sinks, int has_sinks,
    __global const uchar* mask, int has_mask, int Hq, int G, int paged, int page_size,
    long stride_page, long stride_token, long stride_head, float q_scale, float cap_log2,
    float inv_cap, float v_scale, int causal, int window_left, int num_pages, __global volatile int* faults,
    __global const uint* tmaps) {
  __local float q_s[ROWS * HEAD_DIM];
  __local float kv_s[KEYS * KSTR];
  __local float p_s[ROWS * KEYS];
  __local long rowoff[KEYS];

  const int lid = get_local_id(0);
  const int r = lid / LPR, lane = lid % LPR;
  const int kvh = get_group_id(1);
  __global const int* w = table + 8 * get_group_id(0);
  const int qo_start = w[0], qo_len = w[1], kv_len = w[2], row0 = w[3], base = w[4], tok_off = w[5];
  const int mask_off = w[6];
  const int nrows = qo_len * G;

  for (int i = lid; i < ROWS * HEAD_DIM; i += WG) {
    const int rr = i / HEAD_DIM, d = i % HEAD_DIM, pr = row0 + rr;
    float x = 0.0f;
    if (pr < nrows) {
      const int t = pr / G, h = kvh * G + pr % G;
      x = load_elem(q, ((size_t)(qo_start + t) * Hq + h) * HEAD_DIM + d, q_dt) * q_scale;
    }
    q_s[i] = x;
  }

  const int prow = row0 + r;
  const bool row_ok = prow < nrows;
  const int tok = prow / G;
  const int qpos = kv_len - qo_len + tok;
  const int last_tok = (min(row0 + ROWS, nrows) - 1) / G;
  const int kv_end = causal ? min(kv_len, kv_len - qo_len + last_tok + 1) : kv_len;
  const int kv_begin = window_left >= 0 ? max(0, kv_len - qo_len + row0 / G - window_left) : 0;

  float m = CLATTN_NEG_INF, l = 0.0f;
  bool bad = false;  // a page id outside [0, num_pages) was met
  float acc[DPL];
  for (int j = 0; j < DPL; ++j) acc[j] = 0.0f;

  for (int k0 = kv_begin; k0 < kv_end; k0 += KEYS) {
    barrier(CLK_LOCAL_MEM_FENCE);  // the previous step is done with kv_s, p_s, rowoff
    for (int kr = lid; kr < KEYS; kr += WG) {
      const int key = k0 + kr;
      long ro = -1;  // -1: no row (past kv_end, or a page id outside the pool: masked)
      if (key < kv_end) {
        if (paged) {
          const int t = key + tok_off;
          const int id = page_ids[base + t / page_size];
          if (IN_POOL(id, num_pages))
            ro = (long)id * stride_page + (long)(t % page_size) * stride_token + (long)kvh * stride_head;
          else
            bad = true;
        } else {
          ro = (long)(base + key) * stride_token + (long)kvh * stride_head;
        }
      }
      rowoff[kr] = ro;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    load_tile(k, rowoff, kv_s, lid);
    barrier(CLK_LOCAL_MEM_FENCE);

    float s[KPL];
    for (int j = 0; j < KPL; ++j) {
      const int c = lane + LPR * j, key = k0 + c;
      float dot = 0.0f;
      for (int d = 0; d < HEAD_DIM; ++d) dot = fma(q_s[r * HEAD_DIM + d], kv_s[c * KSTR + d], dot);
      if (cap_log2 > 0.0f) dot = cap_log2 * tanh(dot * inv_cap);
      bool vis = row_ok && key < kv_end && rowoff[c] >= 0;
      if (causal) vis = vis && key <= qpos;
      if (window_left >= 0) vis = vis && key >= qpos - window_left;
      if (has_mask && vis) {
        const long bit = (long)tok * kv_len + key;
        vis = (mask[mask_off + bit / 8] >> (bit % 8)) & 1;
      }
      s[j] = vis ? dot : CLATTN_NEG_INF;
      p_s[r * KEYS + c] = s[j];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    float mt = m;
    for (int c = 0; c < KEYS; ++c) mt = fmax(mt, p_s[r * KEYS + c]);
    load_tile(v, rowoff, kv_s, lid);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int j = 0; j < KPL; ++j) p_s[r * KEYS + lane + LPR * j] = s[j] == CLATTN_NEG_INF ? 0.0f : exp2(s[j] - mt);
    const float alpha = m == mt ? 1.0f : exp2(m - mt);
    m = mt;
    barrier(CLK_LOCAL_MEM_FENCE);
    float sum = 0.0f;
    for (int j = 0; j < DPL; ++j) acc[j] *= alpha;
    for (int c = 0; c < KEYS; ++c) {
      const float p = p_s[r * KEYS + c];
      sum += p;
      for (int j = 0; j < DPL; ++j) acc[j] = fma(p, kv_s[c * KSTR + lane + LPR * j], acc[j]);
    }
    l = l * alpha + sum;
  }

  if (bad) atomic_or(faults, CLATTN_FAULT_PAGE_ID);
  if (!row_ok) return;
  const int h = kvh * G + prow % G;
  if (has_sinks) {
    const float sk = sinks[h] * LOG2E;
    const float mt = fmax(m, sk);
    const float alpha = m == mt ? 1.0f : exp2(m - mt);
    for (int j = 0; j < DPL; ++j) acc[j] *= alpha;
    l = l * alpha + exp2(sk - mt);
    m = mt;
  }
  const float inv = l > 0.0f ? v_scale / l : 0.0f;
  const size_t orow = ((size_t)(qo_start + tok) * Hq + h);
  for (int j = 0; j < DPL; ++j) store_elem(o, orow * HEAD_DIM + lane + LPR * j, o_dt, acc[j] * inv);
  if (has_lse && lane == 0) lse[orow] = l > 0.0f ? (m + log2(l)) * LN2 : CLATTN_NEG_INF;
}

// Extend / prefill attention on NVIDIA tensor cores: inline PTX mma.sync m16n8k16
// (f16 or bf16 inputs, f32 accumulation) inside OpenCL C. FlashAttention-2 layout: a
// work-group of WARPS warps covers 16 * WARPS packed query rows (tokens x GQA group, as in
// extend.cl), each warp 16 rows; per KEYS-key step the group stages K and V tiles in local
// memory as 16-bit values ([key][HEAD_DIM + 8], padded so fragment reads hit 32 distinct
// banks), every warp computes S = Q K^T with its Q fragments held in registers, applies
// the masks, runs the online softmax in registers (row max / sum across the 4 lanes of a
// row with shfl.sync), rounds P to the MMA type and accumulates O += P V in f32 registers.
//
// Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16 with floating point
// type"): lane = 4 * g + t (g = groupID 0..7, t = threadID_in_group 0..3).
//   A 16x16 row-major, 4 x .b32 (two 16-bit values each, low half = lower column):
//     a0 = A[g][2t..2t+1], a1 = A[g+8][2t..2t+1], a2 = A[g][2t+8..], a3 = A[g+8][2t+8..]
//   B 16x8 "col" (k x n), 2 x .b32: b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g]
//   C/D 16x8 f32: c0,c1 = C[g][2t..2t+1], c2,c3 = C[g+8][2t..2t+1]
// S = Q K^T: B[k = d][n = key] = K[key][d], so b0 is one 32-bit word of K's row (or
// ldmatrix, non-transposed). O += P V: B[k = key][n = d] = V[key][d]: two 16-bit values
// of different keys (or ldmatrix .trans). P's A fragment is the C fragment of two
// adjacent 8-key n-tiles, so P never leaves registers.
//
// KV dtypes f16/bf16 are staged as stored; fp8 (e4m3/e5m2) is decoded to f16 exactly;
// k_scale/v_scale are folded into the score scale and the output. f32 KV uses extend.cl.
#include "common.clh"

#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif
#ifndef KV_DT
#define KV_DT DT_F16
#endif
#ifndef WARPS
#define WARPS 4
#endif
#ifndef KEYS
#define KEYS 64
#endif
#ifndef MMA_BF16
#define MMA_BF16 0
#endif
#ifndef USE_LDMATRIX
#define USE_LDMATRIX 0
#endif

#define WGSZ (32 * WARPS)
#define KSTR (HEAD_DIM + 8)  // halves per staged row
#define KSTRW (KSTR / 2)     // 32-bit words per staged row
#define DK (HEAD_DIM / 16)   // k-steps of S = Q K^T
#define NT (KEYS / 8)        // 8-key n-tiles of S
#define DN (HEAD_DIM / 8)    // 8-column n-tiles of O
#define CPR (HEAD_DIM / 8)   // 8-element chunks per K/V row
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f

#if (HEAD_DIM % 16) || (KEYS % 16)
#error "extend_mma_nv.cl: HEAD_DIM and KEYS must be multiples of 16"
#endif

#if MMA_BF16
#define MMA_OP "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
#define CVT_OP "cvt.rn.bf16x2.f32"
#else
#define MMA_OP "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
#define CVT_OP "cvt.rn.f16x2.f32"
#endif

#define MMA(c, a0, a1, a2, a3, b0, b1)                                                          \
  asm volatile(MMA_OP " {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"                \
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                               \
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1))

// Two f32 -> one .b32 of two 16-bit MMA values (lo in the low half), round to nearest even.
inline uint pack2(float lo, float hi) {
  uint r;
  asm(CVT_OP " %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
// Two f32 -> f16x2 (fp8 staging is always f16).
inline uint pack2_f16(float lo, float hi) {
  uint r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

inline float shfl_xor(float v, int m) {
  float o;
  asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(o) : "f"(v), "r"(m));
  return o;
}

#ifndef SMEM_CVTA
#define SMEM_CVTA 0
#endif
// Shared-window address of a __local pointer (what .shared instructions take). SMEM_CVTA=1
// for compilers whose pointer-to-integer conversion yields a generic address.
inline uint smem_addr(__local const void* p) {
#if SMEM_CVTA
  ulong r;
  asm("cvta.to.shared.u64 %0, %1;" : "=l"(r) : "l"((ulong)(size_t)p));
  return (uint)r;
#else
  return (uint)(size_t)p;
#endif
}

// 8 stored KV values at element i as 8 x 16-bit MMA values (uint4).
inline uint4 load_kv8(__global const void* p, long i) {
#if KV_DT == DT_F16 || KV_DT == DT_BF16
  return vload4(0, (__global const uint*)((__global const ushort*)p + i));
#else
  uint2 w = vload2(0, (__global const uint*)((__global const uchar*)p + i));
#if KV_DT == DT_E4M3
#define FP8F(x, s) e4m3_bits_to_float(((x) >> (s)) & 0xffu)
#else
#define FP8F(x, s) e5m2_bits_to_float(((x) >> (s)) & 0xffu)
#endif
  return (uint4)(pack2_f16(FP8F(w.x, 0), FP8F(w.x, 8)), pack2_f16(FP8F(w.x, 16), FP8F(w.x, 24)),
                 pack2_f16(FP8F(w.y, 0), FP8F(w.y, 8)), pack2_f16(FP8F(w.y, 16), FP8F(w.y, 24)));
#undef FP8F
#endif
}

__kernel __attribute__((reqd_work_group_size(WGSZ, 1, 1))) void extend_mma(
    __global const void* q, int q_dt, __global const void* k, __global const void* v,
    __global const int* page_ids, __global const int* table, __global void* o, int o_dt,
    __global float* lse, int has_lse, __global const float* sinks, int has_sinks,
    __global const uchar* mask, int has_mask, int Hq, int G, int paged, int page_size,
    long stride_page, long stride_token, long stride_head, float q_scale, float cap_log2,
    float inv_cap, float v_scale, int causal, int window_left) {
  __local uint ks[KEYS * KSTRW];
  __local uint vs[KEYS * KSTRW];

  const int tid = get_local_id(0);
  const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int kvh = get_group_id(1);
  __global const int* w = table + 8 * get_group_id(0);
  const int qo_start = w[0], qo_len = w[1], kv_len = w[2], row0 = w[3], base = w[4], tok_off = w[5];
  const int mask_off = w[6];
  const int nrows = qo_len * G;
  const int shift = kv_len - qo_len;  // query token j sits at key position shift + j

  // This lane's two rows (g and g + 8 of the warp's 16).
  const int wrow0 = row0 + 16 * warp;
  const int pr_lo = wrow0 + g, pr_hi = wrow0 + g + 8;
  const bool ok_lo = pr_lo < nrows, ok_hi = pr_hi < nrows;
  const int tok_lo = pr_lo / G, tok_hi = pr_hi / G;
  const int qpos_lo = shift + tok_lo, qpos_hi = shift + tok_hi;

  // Q fragments, converted to the MMA type (exact for q already in that type).
  uint qa[DK][4];
  {
    const size_t qlo = ((size_t)(qo_start + tok_lo) * Hq + kvh * G + pr_lo % G) * HEAD_DIM;
    const size_t qhi = ((size_t)(qo_start + tok_hi) * Hq + kvh * G + pr_hi % G) * HEAD_DIM;
#pragma unroll
    for (int kk = 0; kk < DK; ++kk) {
      const int d0 = 16 * kk + 2 * t;
      float x0 = 0.f, x1 = 0.f, x2 = 0.f, x3 = 0.f, y0 = 0.f, y1 = 0.f, y2 = 0.f, y3 = 0.f;
      if (ok_lo) {
        x0 = load_elem(q, qlo + d0, q_dt), x1 = load_elem(q, qlo + d0 + 1, q_dt);
        x2 = load_elem(q, qlo + d0 + 8, q_dt), x3 = load_elem(q, qlo + d0 + 9, q_dt);
      }
      if (ok_hi) {
        y0 = load_elem(q, qhi + d0, q_dt), y1 = load_elem(q, qhi + d0 + 1, q_dt);
        y2 = load_elem(q, qhi + d0 + 8, q_dt), y3 = load_elem(q, qhi + d0 + 9, q_dt);
      }
      qa[kk][0] = pack2(x0, x1);
      qa[kk][1] = pack2(y0, y1);
      qa[kk][2] = pack2(x2, x3);
      qa[kk][3] = pack2(y2, y3);
    }
  }

  // Key range of the whole group (uniform: every warp joins every barrier) and of this warp.
  const int last_row = min(row0 + 16 * WARPS, nrows) - 1;
  const int kv_end = causal ? min(kv_len, shift + last_row / G + 1) : kv_len;
  const int kv_begin = window_left >= 0 ? max(0, shift + row0 / G - window_left) : 0;
  const int w_last = min(wrow0 + 15, nrows - 1);
  const int w_first_pos = shift + wrow0 / G, w_last_pos = shift + max(w_last, wrow0) / G;
  const int w_end = wrow0 >= nrows ? kv_begin : (causal ? min(kv_len, w_last_pos + 1) : kv_len);
  const int w_begin = window_left >= 0 ? max(0, w_first_pos - window_left) : 0;

  float oacc[DN][4];
#pragma unroll
  for (int n = 0; n < DN; ++n) oacc[n][0] = oacc[n][1] = oacc[n][2] = oacc[n][3] = 0.f;
  float m_lo = CLATTN_NEG_INF, m_hi = CLATTN_NEG_INF, l_lo = 0.f, l_hi = 0.f;

  for (int k0 = kv_begin; k0 < kv_end; k0 += KEYS) {
    barrier(CLK_LOCAL_MEM_FENCE);  // every warp is done with the previous tiles
    // Stage K and V: 16-byte chunks, consecutive lanes along a row (coalesced reads,
    // conflict-free 16-byte local stores); keys past kv_end are zero (never NaN).
    for (int c = tid; c < KEYS * CPR; c += WGSZ) {
      const int kr = c / CPR, d = (c % CPR) * 8, key = k0 + kr;
      uint4 kx = (uint4)(0u), vx = (uint4)(0u);
      if (key < kv_end) {
        long ro;
        if (paged) {
          const int tt = key + tok_off;
          ro = (long)page_ids[base + tt / page_size] * stride_page + (long)(tt % page_size) * stride_token;
        } else {
          ro = (long)(base + key) * stride_token;
        }
        ro += (long)kvh * stride_head + d;
        kx = load_kv8(k, ro);
        vx = load_kv8(v, ro);
      }
      vstore4(kx, 0, ks + kr * KSTRW + d / 2);
      vstore4(vx, 0, vs + kr * KSTRW + d / 2);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (k0 >= w_end || k0 + KEYS <= w_begin) continue;  // nothing visible to this warp

    // S = Q K^T (16 x KEYS per warp), f32.
    float s[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#if USE_LDMATRIX
    {
      // x4: matrices (keys 8j.., d 16kk), (8j.., 16kk+8), (8j+8.., 16kk), (8j+8.., 16kk+8).
      const int mi = lane >> 3, rr = lane & 7;
      const uint a_base = smem_addr(ks + ((mi >> 1) * 8 + rr) * KSTRW + (mi & 1) * 4);
#pragma unroll
      for (int j = 0; j < NT; j += 2) {
#pragma unroll
        for (int kk = 0; kk < DK; ++kk) {
          uint b0, b1, b2, b3;
          asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                       : "=r"(b0), "=r"(b1), "=r"(b2), "=r"(b3)
                       : "r"(a_base + (uint)((j * 8 * KSTRW + kk * 8) * 4)));
          MMA(s[j], qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3], b0, b1);
          MMA(s[j + 1], qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3], b2, b3);
        }
      }
    }
#else
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      __local const uint* kr = ks + (8 * j + g) * KSTRW + t;
#pragma unroll
      for (int kk = 0; kk < DK; ++kk) MMA(s[j], qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3], kr[8 * kk], kr[8 * kk + 4]);
    }
#endif

    // Scale (log2 domain), soft cap, masks.
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[j][e] * q_scale;
        if (cap_log2 > 0.f) x = cap_log2 * tanh(x * inv_cap);
        s[j][e] = x;
      }
    const bool need_mask = has_mask || k0 + KEYS > kv_len || (causal && k0 + KEYS - 1 > w_first_pos) ||
                           (window_left >= 0 && k0 < w_last_pos - window_left);
    if (need_mask) {
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = k0 + 8 * j + 2 * t + (e & 1);
          const bool hi = e >= 2;
          const int qp = hi ? qpos_hi : qpos_lo;
          const bool ok = hi ? ok_hi : ok_lo;
          bool vis = key < kv_len;
          if (causal) vis = vis && key <= qp;
          if (window_left >= 0) vis = vis && key >= qp - window_left;
          if (has_mask && vis && ok) {
            const long bit = (long)(hi ? tok_hi : tok_lo) * kv_len + key;
            vis = (mask[mask_off + bit / 8] >> (bit % 8)) & 1;
          }
          if (!vis) s[j][e] = CLATTN_NEG_INF;
        }
    }

    // Online softmax: row max over the tile (4 lanes share a row).
    float mx_lo = m_lo, mx_hi = m_hi;
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      mx_lo = fmax(mx_lo, fmax(s[j][0], s[j][1]));
      mx_hi = fmax(mx_hi, fmax(s[j][2], s[j][3]));
    }
    mx_lo = fmax(mx_lo, shfl_xor(mx_lo, 1));
    mx_lo = fmax(mx_lo, shfl_xor(mx_lo, 2));
    mx_hi = fmax(mx_hi, shfl_xor(mx_hi, 1));
    mx_hi = fmax(mx_hi, shfl_xor(mx_hi, 2));
    const float alpha_lo = m_lo == mx_lo ? 1.f : native_exp2(m_lo - mx_lo);
    const float alpha_hi = m_hi == mx_hi ? 1.f : native_exp2(m_hi - mx_hi);
    m_lo = mx_lo, m_hi = mx_hi;
    const float sub_lo = mx_lo == CLATTN_NEG_INF ? 0.f : mx_lo;
    const float sub_hi = mx_hi == CLATTN_NEG_INF ? 0.f : mx_hi;
    float sum_lo = 0.f, sum_hi = 0.f;
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      s[j][0] = native_exp2(s[j][0] - sub_lo), s[j][1] = native_exp2(s[j][1] - sub_lo);
      s[j][2] = native_exp2(s[j][2] - sub_hi), s[j][3] = native_exp2(s[j][3] - sub_hi);
      sum_lo += s[j][0] + s[j][1];
      sum_hi += s[j][2] + s[j][3];
    }
    l_lo = l_lo * alpha_lo + sum_lo;
    l_hi = l_hi * alpha_hi + sum_hi;
#pragma unroll
    for (int n = 0; n < DN; ++n) {
      oacc[n][0] *= alpha_lo, oacc[n][1] *= alpha_lo;
      oacc[n][2] *= alpha_hi, oacc[n][3] *= alpha_hi;
    }

    // O += P V: P (rounded to the MMA type) straight from the S fragments.
#pragma unroll
    for (int kc = 0; kc < KEYS / 16; ++kc) {
      const uint pa0 = pack2(s[2 * kc][0], s[2 * kc][1]);
      const uint pa1 = pack2(s[2 * kc][2], s[2 * kc][3]);
      const uint pa2 = pack2(s[2 * kc + 1][0], s[2 * kc + 1][1]);
      const uint pa3 = pack2(s[2 * kc + 1][2], s[2 * kc + 1][3]);
#if USE_LDMATRIX
      // x4 .trans: matrices (keys 16kc.., d 8n), (16kc+8.., 8n), (16kc.., 8n+8), (16kc+8.., 8n+8).
      const int mi = lane >> 3, rr = lane & 7;
      const uint v_base = smem_addr(vs + (16 * kc + (mi & 1) * 8 + rr) * KSTRW + (mi >> 1) * 4);
#pragma unroll
      for (int n = 0; n < DN; n += 2) {
        uint b0, b1, b2, b3;
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(b0), "=r"(b1), "=r"(b2), "=r"(b3)
                     : "r"(v_base + (uint)(n * 4 * 4)));
        MMA(oacc[n], pa0, pa1, pa2, pa3, b0, b1);
        MMA(oacc[n + 1], pa0, pa1, pa2, pa3, b2, b3);
      }
#else
      __local const ushort* vh = (__local const ushort*)vs;
#pragma unroll
      for (int n = 0; n < DN; ++n) {
        const int d = 8 * n + g, kr = 16 * kc + 2 * t;
        const uint b0 = (uint)vh[kr * KSTR + d] | ((uint)vh[(kr + 1) * KSTR + d] << 16);
        const uint b1 = (uint)vh[(kr + 8) * KSTR + d] | ((uint)vh[(kr + 9) * KSTR + d] << 16);
        MMA(oacc[n], pa0, pa1, pa2, pa3, b0, b1);
      }
#endif
    }
  }

  // Row sums across the 4 lanes of a row, sinks, normalisation, stores.
  l_lo += shfl_xor(l_lo, 1);
  l_lo += shfl_xor(l_lo, 2);
  l_hi += shfl_xor(l_hi, 1);
  l_hi += shfl_xor(l_hi, 2);
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const bool ok = hh ? ok_hi : ok_lo;
    if (!ok) continue;
    const int pr = hh ? pr_hi : pr_lo, tok = hh ? tok_hi : tok_lo;
    float m = hh ? m_hi : m_lo, l = hh ? l_hi : l_lo, alpha = 1.f;
    const int h = kvh * G + pr % G;
    if (has_sinks) {
      const float sk = sinks[h] * LOG2E;
      const float mt = fmax(m, sk);
      alpha = m == mt ? 1.f : exp2(m - mt);
      l = l * alpha + exp2(sk - mt);
      m = mt;
    }
    const float inv = l > 0.f ? alpha * v_scale / l : 0.f;
    const size_t orow = (size_t)(qo_start + tok) * Hq + h;
#pragma unroll
    for (int n = 0; n < DN; ++n) {
      const size_t col = orow * HEAD_DIM + 8 * n + 2 * t;
      store_elem(o, col, o_dt, oacc[n][2 * hh] * inv);
      store_elem(o, col + 1, o_dt, oacc[n][2 * hh + 1] * inv);
    }
    if (has_lse && t == 0) lse[orow] = l > 0.f ? (m + log2(l)) * LN2 : CLATTN_NEG_INF;
  }
}

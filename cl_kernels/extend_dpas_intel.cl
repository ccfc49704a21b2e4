// Extend / prefill attention on Intel matrix engines (variant "intel_dpas"): S = Q K^T and
// O += P V by cl_intel_subgroup_matrix_multiply_accumulate (DPAS: 8 rows x 16 k x SG
// columns, f16 or bf16 sources as the KV dtype, f32 accumulators), f32 online softmax.
// Xe-HPG (dg2) runs sub-groups of 8, Xe-HPC (pvc) and Xe2 of 16 (the extension: the
// sub-group size must be the device's minimum one); Xe-LP has no DPAS.
//
// One work-group = one work item of the plan (request, tile of ROWS packed query rows) x
// one KV head (dimension 1), as extend.cl: packed row r = query token r / G, head
// kvh * G + r % G. Its RG x CG sub-groups (sub-group i: row group i / CG, column group
// i % CG) each own 8 * RB rows:
//   S = Q K^T  sub-group (rg, cg) scores its rows against keys [cg KS, cg KS + KS) of each
//              KEYS-key tile (KS = KEYS / CG), 8 x SG blocks in registers. A = Q: the group's
//              rows x q_scale, rounded to the MMA type once into local memory (row-major, so
//              a work-item's A word is one local read per row). B = K^T: work-item n holds
//              one key's column, i.e. 16 consecutive head-dim values of that key's K row:
//              one 32-byte global read. With SG 8 the two blocks of a 16-key group hold keys
//              2n and 2n + 1 in work-item n, so that S's accumulator layout is P's A layout.
//   softmax    masks applied to S in registers, S -> local memory; then TPR = WG / ROWS
//              work-items per row: the soft cap, the tile's row max (partials through local
//              memory), P = exp2(S - max) rounded to the MMA type -> local memory; the row
//              sum adds the rounded P, so O and its normaliser see the same weights.
//   O += P V   sub-group (rg, cg) owns its rows x head-dim columns [cg DS, cg DS + DS)
//              (DS = D / CG), 8 x SG blocks in registers, rescaled by the tile's factor.
//              A = P from local memory; B = V: work-item n holds head-dim column n of 16
//              keys (keys 2j, 2j + 1 packed in b.s(j)), read from global memory: each key's
//              read by the sub-group is SG consecutive values.
// Scores are in log2 space (q pre-scaled by sm_scale * log2(e) * k_scale; with a soft cap
// the tanh is taken on the natural-log score first). Work table entry (8 int32) and key rows
// as in extend.cl; a page id outside [0, num_pages) masks its key and sets
// CLATTN_FAULT_PAGE_ID. Every DPAS call is reached by the whole work-group (the emulation,
// intel_dpas_emul.clh, exchanges operands with barriers).
#include "common.clh"
#include "kernel_args.clh"

#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif
#ifndef KV_DT
#define KV_DT DT_F16
#endif
#ifndef SG  // sub-group size: 8 (Xe-HPG) or 16 (Xe-HPC, Xe2)
#define SG 16
#endif
#ifndef RB  // blocks of 8 rows per sub-group
#define RB 1
#endif
#ifndef RG  // sub-groups along the rows
#define RG 4
#endif
#ifndef CG  // sub-groups along the keys (S) and the head dim (P V)
#define CG 2
#endif
#ifndef KEYS  // keys per tile (one online-softmax step)
#define KEYS 64
#endif

#define DPAS_BF16 (KV_DT == DT_BF16)
#define WG (RG * CG * SG)
#define SROWS (8 * RB)      // rows per sub-group
#define ROWS (RG * SROWS)   // rows per work-group
#define KS (KEYS / CG)      // keys per sub-group in S
#define DS (HEAD_DIM / CG)  // head-dim columns per sub-group in P V
#define NSB (KS / SG)       // S blocks per row block
#define NOB (DS / SG)       // O blocks per row block
#define TPR (WG / ROWS)     // work-items per row in the softmax
#define SST (KEYS + 1)      // row stride of the scores

#if (SG != 8 && SG != 16) || (KV_DT != DT_F16 && KV_DT != DT_BF16)
#error "extend_dpas_intel.cl: SG must be 8 or 16 and KV_DT f16 or bf16"
#endif
#if (KEYS % (16 * CG)) || (HEAD_DIM % 16) || (HEAD_DIM % (CG * SG)) || (WG % ROWS)
#error "extend_dpas_intel.cl: KEYS % (16 CG), HEAD_DIM % 16, HEAD_DIM % (CG SG), (CG SG) % (8 RB) must be 0"
#endif

// The A operand: 8 rows of 16 k values; per work-item 2 values per row (SG 8) or 1 (SG 16).
#if SG == 8
typedef int8 dpas_a;
#else
typedef short8 dpas_a;
#endif

#ifdef EMULATE_INTEL_DPAS
#include "intel_dpas_emul.clh"
#define MAD(a, b, c) dpas_emul(a, b, c, dpas_x)
#define SG_ATTR
#else
// Not declared by the compiler's headers: the prototypes of the extension for this sub-group
// size (a wrong one compiles to a call that is not DPAS).
#define SG_LANE() ((int)get_sub_group_local_id())
#define SG_INDEX() ((int)get_sub_group_id())
#define SG_ATTR __attribute__((intel_reqd_sub_group_size(SG)))
#if DPAS_BF16
float8 __attribute__((overloadable)) intel_sub_group_bf16_bf16_matrix_mad_k16(dpas_a a, int8 b, float8 acc);
#define MAD(a, b, c) intel_sub_group_bf16_bf16_matrix_mad_k16(a, b, c)
#else
float8 __attribute__((overloadable)) intel_sub_group_f16_f16_matrix_mad_k16(dpas_a a, int8 b, float8 acc);
#define MAD(a, b, c) intel_sub_group_f16_f16_matrix_mad_k16(a, b, c)
#endif
#endif

// Column (key within the tile) of S block j held by work-item `lane` of column group cg.
#if SG == 16
#define KEY_OF(j) (cg * KS + 16 * (j) + lane)
#else
#define KEY_OF(j) (cg * KS + 16 * ((j) / 2) + 2 * lane + ((j) & 1))
#endif

// f32 -> MMA-type bits (round to nearest even) and back.
inline ushort mma_bits(float x) {
#if DPAS_BF16
  return float_to_bf16_bits(x);
#else
  ushort h;
  vstore_half_rte(x, 0, (half*)&h);
  return h;
#endif
}
inline float mma_value(ushort b) {
#if DPAS_BF16
  return as_float((uint)b << 16);
#else
  return half_bits_to_float(b);
#endif
}

// The A operand of rows r0 .. r0 + 7, columns c0 .. c0 + 15 of a row-major local matrix of
// MMA bits (row stride `st` values, even).
inline dpas_a load_a(__local const ushort* mat, int r0, int st, int c0, int lane) {
#if SG == 8
  __local const uint* w = (__local const uint*)(mat + r0 * st + c0) + lane;
  const int s = st / 2;
  return as_int8((uint8)(w[0], w[s], w[2 * s], w[3 * s], w[4 * s], w[5 * s], w[6 * s], w[7 * s]));
#else
  __local const ushort* p = mat + r0 * st + c0 + lane;
  return as_short8((ushort8)(p[0], p[st], p[2 * st], p[3 * st], p[4 * st], p[5 * st], p[6 * st], p[7 * st]));
#endif
}

// O x 1 / sum -> o, one element per row of each 8 x SG block.
#define STORE_F32(i, x) ((__global float*)o)[i] = (x)
#define STORE_F16(i, x) vstore_half_rte((x), (i), (__global half*)o)
#define STORE_BF16(i, x) ((__global ushort*)o)[i] = float_to_bf16_bits(x)
#define STORE_O(STORE)                                                                          \
  UNROLL_LOOP for (int rb = 0; rb < RB; ++rb) {                                                 \
    float ov[NOB][8];                                                                           \
    UNROLL_LOOP for (int j = 0; j < NOB; ++j) vstore8(acc[rb][j], 0, ov[j]);                    \
    UNROLL_LOOP for (int m = 0; m < 8; ++m) {                                                   \
      const int rr = rg * SROWS + rb * 8 + m, pr = row0 + rr;                                   \
      if (pr >= nrows) continue;                                                                \
      const int tok = qpos_row[rr] - (kv_len - qo_len); /* pr / G */                              \
      const size_t oi = ((size_t)(qo_start + tok) * Hq + kvh * G + pr - tok * G) * HEAD_DIM + cg * DS + lane; \
      const float inv = rowf[rr];                                                               \
      UNROLL_LOOP for (int j = 0; j < NOB; ++j) STORE(oi + j * SG, ov[j][m] * inv);             \
    }                                                                                           \
  }

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) SG_ATTR void extend_dpas_intel(EXTEND_KERNEL_ARGS) {
  __local ushort qs[ROWS * HEAD_DIM];  // Q x q_scale as MMA bits
  __local float ss[ROWS * SST];        // the tile's masked scores
  __local ushort ps[ROWS * KEYS];      // P as MMA bits
  __local float red[ROWS * TPR];       // a row's partials across its TPR work-items
  __local float rowf[ROWS];            // per row: the tile's rescale factor, at the end 1 / sum
  __local long rowoff[KEYS];
  __local int qpos_row[ROWS];          // query position of each row
#ifdef EMULATE_INTEL_DPAS
  __local dpas_a dpas_x[WG];
#endif

  const int lid = get_local_id(0);
  const int lane = SG_LANE(), sgi = SG_INDEX();
  const int rg = sgi / CG, cg = sgi % CG;
  const int kvh = get_group_id(1);
  EXTEND_HEAD_SCALES(kvh);
  __global const int* w = table + 8 * get_group_id(0);
  const int qo_start = w[0], qo_len = w[1], kv_len = w[2], row0 = w[3], base = w[4], tok_off = w[5];
  const int mask_off = w[6];
  const int nrows = qo_len * G;
  const long head_off = (long)kvh * stride_head;
  __global const ushort* kp = (__global const ushort*)k;
  __global const ushort* vp = (__global const ushort*)v;

  // Q rows x q_scale (qs_h: with the head's k scale) -> qs (rows past nrows: zeros).
  for (int e = lid; e < ROWS * (HEAD_DIM / 4); e += WG) {
    const int rr = e / (HEAD_DIM / 4), c = (e % (HEAD_DIM / 4)) * 4, pr = row0 + rr;
    float4 x = (float4)(0.0f);
    if (pr < nrows) {
      const size_t qi = ((size_t)(qo_start + pr / G) * Hq + kvh * G + pr % G) * HEAD_DIM + c;
      x = bits4_to_float4(load4_bits(q, qi, q_dt), q_dt) * qs_h;
    }
    vstore4((ushort4)(mma_bits(x.x), mma_bits(x.y), mma_bits(x.z), mma_bits(x.w)), 0, qs + rr * HEAD_DIM + c);
  }

  // The softmax role: row sr, part st of it; its max (same in the row's work-items) and
  // partial sum over its own keys.
  const int sr = lid / TPR, st = lid % TPR;
  float m_row = CLATTN_NEG_INF, l_part = 0.0f;
  float8 acc[RB][NOB];
UNROLL_LOOP
  for (int rb = 0; rb < RB; ++rb)
UNROLL_LOOP
    for (int j = 0; j < NOB; ++j) acc[rb][j] = (float8)(0.0f);

  // Query positions of the rows (the masks' and the output's row index; local memory rather
  // than 8 x RB registers in each work-item).
  for (int rr = lid; rr < ROWS; rr += WG) qpos_row[rr] = kv_len - qo_len + (row0 + rr) / G;

  const int last_tok = (min(row0 + ROWS, nrows) - 1) / G;
  const int kv_end = causal ? min(kv_len, kv_len - qo_len + last_tok + 1) : kv_len;
  const int kv_begin = window_left >= 0 ? max(0, kv_len - qo_len + row0 / G - window_left) : 0;
  bool bad = false;

  for (int k0 = kv_begin; k0 < kv_end; k0 += KEYS) {
    barrier(CLK_LOCAL_MEM_FENCE);  // qs staged; the previous tile's readers of rowoff and ps are done
    for (int kr = lid; kr < KEYS; kr += WG)
      rowoff[kr] = extend_key_row(k0 + kr, kv_end, paged, page_ids, base, tok_off, page_size, num_pages,
                                  stride_page, stride_token, head_off, &bad);
    barrier(CLK_LOCAL_MEM_FENCE);

    // S = Q K^T over 16-wide head-dim steps.
    float8 s[RB][NSB];
UNROLL_LOOP
    for (int rb = 0; rb < RB; ++rb)
UNROLL_LOOP
      for (int j = 0; j < NSB; ++j) s[rb][j] = (float8)(0.0f);
    for (int d0 = 0; d0 < HEAD_DIM; d0 += 16) {
      dpas_a a[RB];
UNROLL_LOOP
      for (int rb = 0; rb < RB; ++rb) a[rb] = load_a(qs, rg * SROWS + rb * 8, HEAD_DIM, d0, lane);
UNROLL_LOOP
      for (int j = 0; j < NSB; ++j) {
        const long ro = rowoff[KEY_OF(j)];
        const int8 b = ro >= 0 ? as_int8(vload16(0, kp + ro + d0)) : (int8)(0);
UNROLL_LOOP
        for (int rb = 0; rb < RB; ++rb) s[rb][j] = MAD(a[rb], b, s[rb][j]);
      }
    }

    // Masks; S -> ss.
UNROLL_LOOP
    for (int rb = 0; rb < RB; ++rb)
UNROLL_LOOP
      for (int j = 0; j < NSB; ++j) {
        const int kt = KEY_OF(j), key = k0 + kt;
        const bool key_ok = rowoff[kt] >= 0;
        float sv[8];
        vstore8(s[rb][j], 0, sv);
UNROLL_LOOP
        for (int m = 0; m < 8; ++m) {
          const int rr = rg * SROWS + rb * 8 + m, pr = row0 + rr, qpos = qpos_row[rr];
          const float x = sv[m];
          bool vis = key_ok && pr < nrows;
          if (causal) vis = vis && key <= qpos;
          if (window_left >= 0) vis = vis && key >= qpos - window_left;
          if (has_mask && vis) {
            const long bit = (long)(qpos - kv_len + qo_len) * kv_len + key;
            vis = (mask[mask_off + bit / 8] >> (bit % 8)) & 1;
          }
          ss[rr * SST + kt] = vis ? x : CLATTN_NEG_INF;
        }
      }
    barrier(CLK_LOCAL_MEM_FENCE);

    // Online softmax: the soft cap on visible scores (here, once per score, rather than in
    // the unrolled S blocks), the row max over the tile, P -> ps, the rescale factor -> rowf.
    {
      float mx = CLATTN_NEG_INF;
      if (cap_log2 > 0.0f) {
        for (int kt = st; kt < KEYS; kt += TPR) {
          float x = ss[sr * SST + kt];
          if (x != CLATTN_NEG_INF) x = cap_log2 * tanh(x * inv_cap), ss[sr * SST + kt] = x;
          mx = fmax(mx, x);
        }
      } else {
        for (int kt = st; kt < KEYS; kt += TPR) mx = fmax(mx, ss[sr * SST + kt]);
      }
      red[sr * TPR + st] = mx;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    {
      float mt = m_row;
      for (int t = 0; t < TPR; ++t) mt = fmax(mt, red[sr * TPR + t]);
      const float alpha = m_row == mt ? 1.0f : exp2(m_row - mt);
      m_row = mt;
      float sum = 0.0f;
      for (int kt = st; kt < KEYS; kt += TPR) {
        const float x = ss[sr * SST + kt];
        const ushort pb = mma_bits(x == CLATTN_NEG_INF ? 0.0f : exp2(x - mt));
        ps[sr * KEYS + kt] = pb;
        sum += mma_value(pb);
      }
      l_part = l_part * alpha + sum;
      if (st == 0) rowf[sr] = alpha;
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    // O = O * alpha + P V over 16-key steps.
UNROLL_LOOP
    for (int rb = 0; rb < RB; ++rb) {
      const float8 al = vload8(0, rowf + rg * SROWS + rb * 8);
UNROLL_LOOP
      for (int j = 0; j < NOB; ++j) acc[rb][j] *= al;
    }
    for (int kk = 0; kk < KEYS; kk += 16) {
      dpas_a a[RB];
UNROLL_LOOP
      for (int rb = 0; rb < RB; ++rb) a[rb] = load_a(ps, rg * SROWS + rb * 8, KEYS, kk, lane);
UNROLL_LOOP
      for (int j = 0; j < NOB; ++j) {
        const int d = cg * DS + j * SG + lane;
        uint bw[8];
UNROLL_LOOP
        for (int i = 0; i < 8; ++i) {
          const long r0 = rowoff[kk + 2 * i], r1 = rowoff[kk + 2 * i + 1];
          const uint lo = r0 >= 0 ? vp[r0 + d] : 0u;
          const uint hi = r1 >= 0 ? vp[r1 + d] : 0u;
          bw[i] = lo | (hi << 16);
        }
        const int8 b = as_int8(vload8(0, bw));
UNROLL_LOOP
        for (int rb = 0; rb < RB; ++rb) acc[rb][j] = MAD(a[rb], b, acc[rb][j]);
      }
    }
  }

  // Row sums from the partials; per row 1 / sum (with the sink) -> rowf, lse.
  barrier(CLK_LOCAL_MEM_FENCE);
  red[sr * TPR + st] = l_part;
  barrier(CLK_LOCAL_MEM_FENCE);
  if (st == 0 && row0 + sr < nrows) {
    float lt = 0.0f;
    for (int t = 0; t < TPR; ++t) lt += red[sr * TPR + t];
    const int pr = row0 + sr, h = kvh * G + pr % G;
    const float2 fin = final_scale_lse(m_row, lt, -1, has_sinks, sinks, h, vs_h);  // (scale, lse)
    rowf[sr] = fin.x;
    if (has_lse) lse[(size_t)(qo_start + pr / G) * Hq + h] = fin.y;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  if (bad) atomic_or(faults, CLATTN_FAULT_PAGE_ID);
  // The dtype switch outside the unrolled loops (o is f32, f16 or bf16).
  if (o_dt == DT_F32) {
    STORE_O(STORE_F32)
  } else if (o_dt == DT_F16) {
    STORE_O(STORE_F16)
  } else {
    STORE_O(STORE_BF16)
  }
}

// Paged decode for CPU devices (variant "cpu"): one work-item per work-group, explicit
// vector types.
//
// A CPU OpenCL driver (PoCL's pthread device) runs each work-group as one loop on one
// core and vectorises across work-items; the GPU kernel's many lanes per token, butterflies
// and barriers only add work there. Here a work-group is a single work-item that owns one
// planner work item (request, key range [begin, end)) x one KV head x one block of up to
// GMAX query heads, with the arguments and results of paged_decode (decode.cl), so the
// planner, split-K and the merge pass are shared.
//
// Tokens go in blocks of VW (the vector width in floats: the device's preferred float
// width, 16 on AVX-512, 8 on AVX2). Per block: the K rows are converted to f32 once into a
// private (L1-resident) block; the dot products run as register micro-tiles (heads x 4
// tokens), each head's VW partial-sum vectors folded into one vector of VW scores by a
// transposing tree of .even/.odd adds (VW-1 adds instead of VW horizontal sums); the online
// softmax updates once per block and head (lazy rescaling as in decode.cl) with the
// exponentials on the score vector; then P.V runs as micro-tiles of heads x output chunks
// with V converted on the fly. Micro-tiles keep loads to half the FMAs, so the load ports do
// not hold the FMAs back. Scores live in log2 space (q pre-scaled
// by sm_scale * k_scale * log2(e)).
//
// Build options (-D): HEAD_DIM, KV_DT, GMAX, VW (4, 8 or 16; divides HEAD_DIM), FP8_FAST,
// TOUCH_AHEAD, SPARSE (per-head page lists, decode.cl). KV_DT = DT_I8 (int8 caches): the
// block's K row scales multiply its score vector and its V row scales the weights (decode.cl).
// KV_DT = DT_I4 (int4 caches, QGROUP = quant_group; a VW chunk lies inside one group): K rows
// are dequantised into the f32 block ((2^23 + u) - (2^23 + zero), times the scale: exact up to
// the one multiplication), V chunks the same way on the fly.
#include "kernel_args.clh"
#include "cpu_vec.clh"  // floatV, KV dtype decoding, q/o row loads/stores, fold_scores, hmax, hsum

#ifndef HEAD_DIM
#define HEAD_DIM 128
#endif
#ifndef GMAX
#define GMAX 4
#endif
#ifndef SPARSE
#define SPARSE 0
#endif

#define NV (HEAD_DIM / VW)
#if KV_DT == DT_I4
#ifndef QGROUP
#define QGROUP 64
#endif
#if QGROUP % VW
#error "int4: QGROUP must be a multiple of VW"
#endif
#define KV_BOFF(n) ((n) / 2)  // bytes of n elements (n even)
#else
#define KV_BOFF(n) ((n) * KV_BYTES)
#endif
// TOUCH_AHEAD, SPARSE (per-head page lists, decode.cl). the K and V rows of the block this many blocks ahead are prefetched (one
// CPU_PREFETCH per 64-byte line, cpu_vec.clh) while the current block is computed, so their
// cache misses overlap the math. 0: off.
#ifndef TOUCH_AHEAD
#define TOUCH_AHEAD 2
#endif
#define PREFETCH_ROW(p, sink) \
  for (int l_ = 0; l_ < KV_BOFF(HEAD_DIM); l_ += 64) CPU_PREFETCH((p) + l_, sink)
// Micro-tiles (accumulator vectors in registers: 16 of 32 on AVX-512, 8 of 16 below):
//   q.k  HB heads x 4 tokens;  P.V  HP heads x PC chunks of VW dims (PC divides NV).
#define REGS_ACC (VW >= 16 ? 16 : 8)
#define HB (GMAX < REGS_ACC / 4 ? GMAX : REGS_ACC / 4)
#define HP (GMAX < 4 ? GMAX : 4)
#define PC_MAX (REGS_ACC / HP < 4 ? REGS_ACC / HP : 4)
#if NV % PC_MAX == 0
#define PC PC_MAX
#elif NV % 2 == 0 && PC_MAX >= 2
#define PC 2
#else
#define PC 1
#endif

// tab layout and argument meaning: decode.cl (counters / merge_off / counter_off unused:
// the CPU variant leaves split-K merging to the merge pass).
__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void paged_decode_cpu(DECODE_KERNEL_ARGS) {
  // Grid: (KV head x head block, work item), heads first (decode.cpp).
  __global const int* wk = tab + work_off + 8 * (int)get_group_id(1);
  const int req = wk[0], begin = wk[1], end = wk[2], part = wk[3], tok_off = wk[5];
  if (req < 0) return;  // an unused slot of a fixed-capacity plan
  const int kvh = (int)get_group_id(0) / n_hblk, hblk = (int)get_group_id(0) % n_hblk;
#if SPARSE
  // Per-head page lists and page lengths (decode.cl SPARSE; heads are dimension 0 here).
  const int lstride = wk[7];
  const int list = SPARSE == 2 ? (int)get_group_id(0) : kvh;
  const int nlists = SPARSE == 2 ? (int)get_num_groups(0) : (int)get_num_groups(0) / n_hblk;
  const int page_base = wk[4] + list * lstride;
  const int lens_at = page_base + nlists * lstride;
#else
  const int page_base = wk[4];
#endif
  const int h0 = kvh * group + hblk * GMAX;
  const int ng = min(GMAX, group - hblk * GMAX);
  const int pmask = (1 << log2_page) - 1;
  const long head_off = (long)kvh * stride_head;
  // Per-KV-head scales (has_hs) on top of the per-tensor ones.
  const float qs_h = q_scale * (has_hs ? k_hs[kvh] : 1.0f), vs_h = v_scale * (has_hs ? v_hs[kvh] : 1.0f);

  float qf[GMAX][HEAD_DIM];   // pre-scaled q rows (padding heads zero)
  float acc[GMAX][HEAD_DIM];  // unnormalised output rows
  float kf[VW][HEAD_DIM];     // the block's K rows in f32
  float pw[GMAX][VW];         // the block's softmax weights
  float mrun[GMAX], lrun[GMAX];
  for (int g = 0; g < GMAX; ++g) {
    if (g < ng) load_vrow(q, ((size_t)req * num_qo_heads + h0 + g) * HEAD_DIM, NV, q_dt, qs_h * RAW_HALF, qf[g]);
    for (int c = 0; c < NV; ++c) {
      if (g >= ng) vstoreV((floatV)(0.0f), c, qf[g]);
      vstoreV((floatV)(0.0f), c, acc[g]);
    }
    mrun[g] = CLATTN_NEG_INF;
    lrun[g] = 0.0f;
  }

  bool bad = false;
  uint touch = 0;
  long roff[VW];
#if KV_DT == DT_I8
  float ksc[VW], vsc[VW];  // the block's row scales (lanes past the end: the first token's)
#endif
#if KV_DT == DT_I4
  long soff[VW];  // the block's scale-pair offsets (group 0)
#endif
  for (int t0 = begin; t0 < end; t0 += VW) {
    const int nt = min(VW, end - t0);
    // Row offsets (elements) of the block's tokens; lanes past the end re-read the first
    // token's row and are masked. Page ids outside the pool are clamped (and reported).
#if SPARSE
    int keep[VW];  // -1: a key of the list (in its entry's slot range, decode.cl SPARSE)
#endif
    for (int t = 0; t < VW; ++t) {
      const int ls = tok_off + (t < nt ? t0 + t : begin);
      const int pid = page_ids[page_base + (ls >> log2_page)];
      bad |= (uint)pid >= (uint)num_pages;
      roff[t] = (long)POOL_PAGE(pid) * stride_page + (long)(ls & pmask) * stride_token + head_off;
#if KV_DT == DT_I8
      {
        const size_t so = (size_t)((long)POOL_PAGE(pid) * sc_page + (long)(ls & pmask) * sc_token + (long)kvh * sc_head);
        ksc[t] = kv_row_scale(k_scales, so, sc_f16);
        vsc[t] = kv_row_scale(v_scales, so, sc_f16);
      }
#endif
#if KV_DT == DT_I4
      soff[t] = (long)POOL_PAGE(pid) * sc_page + (long)(ls & pmask) * sc_token + (long)kvh * sc_head;
#endif
#if SPARSE
      const int w = lstride ? page_ids[lens_at + (ls >> log2_page)] : 0xffff;
      keep[t] = t < nt && (ls & pmask) >= (w >> 16) && (ls & pmask) < (w & 0xffff) ? -1 : 0;
#endif
    }
#if TOUCH_AHEAD
    // The rows TOUCH_AHEAD blocks ahead (byte offsets; -1: none): their K lines are prefetched
    // through the q.k loop and their V lines through the P.V loop, a few per step, so misses
    // stay in flight during the math instead of in one burst.
    long pro[VW];
    for (int t = 0; t < VW; ++t) {
      const int tn = t0 + TOUCH_AHEAD * VW + t;
      const int ls = tok_off + tn;
      pro[t] = tn < end ? KV_BOFF((long)POOL_PAGE(page_ids[page_base + (ls >> log2_page)]) * stride_page +
                                  (long)(ls & pmask) * stride_token + head_off)
                        : -1;
    }
#endif
#if KV_DT == DT_I4
    for (int t = 0; t < VW; ++t)
      for (int c = 0; c < NV; ++c) {
        const size_t at = (size_t)(soff[t] + 2 * (c * VW / QGROUP));
        const float s = kv_row_scale(k_scales, at, sc_f16), zb = 0x1p23f + kv_row_scale(k_scales, at + 1, sc_f16);
        vstoreV((load_kv4_biased(k_cache, roff[t] + c * VW) - zb) * s, c, kf[t]);
      }
#else
    for (int t = 0; t < VW; ++t)
      for (int c = 0; c < NV; ++c) vstoreV(load_kv(k_cache, roff[t] + c * VW), c, kf[t]);
#endif

#if SPARSE
    const intV valid = CAT(vload, VW)(0, keep);
#else
    const intV valid = LANE_IDS < (intV)(nt);
#endif
    // q.k as micro-tiles of HB heads x 4 tokens (HB x 4 accumulators in registers): per
    // VW-wide chunk of the head dim, HB q and 4 K loads feed 4 HB FMAs. Each tile's four
    // partial-sum vectors take the first two levels of the fold at once (fold4).
    floatV sq[GMAX][VW / 4];
    for (int t = 0; t < VW; t += 4) {
#if TOUCH_AHEAD
      for (int u = 0; u < 4; ++u)
        if (pro[t + u] >= 0) PREFETCH_ROW(k_cache + pro[t + u], touch);
#endif
      for (int g0 = 0; g0 < GMAX; g0 += HB) {
        floatV a[HB][4];
#pragma unroll
        for (int h = 0; h < HB; ++h)
#pragma unroll
          for (int u = 0; u < 4; ++u) a[h][u] = (floatV)(0.0f);
        for (int c = 0; c < NV; ++c) {
          floatV kc[4];
#pragma unroll
          for (int u = 0; u < 4; ++u) kc[u] = vloadV(c, kf[t + u]);
#pragma unroll
          for (int h = 0; h < HB; ++h) {
            const floatV qc = vloadV(c, qf[g0 + h]);
#pragma unroll
            for (int u = 0; u < 4; ++u) a[h][u] = fma(qc, kc[u], a[h][u]);
          }
        }
#pragma unroll
        for (int h = 0; h < HB; ++h) sq[g0 + h][t / 4] = fold4(a[h][0], a[h][1], a[h][2], a[h][3]);
      }
    }
    for (int g = 0; g < GMAX; ++g) {
#if KV_DT == DT_I8
      floatV x = fold_rest(sq[g]) * vloadV(0, ksc);
#else
      floatV x = fold_rest(sq[g]) * RAW_HALF;
#endif
      if (cap_log2 > 0.0f) x = cap_log2 * tanh(x * inv_cap);
      x = select((floatV)(CLATTN_NEG_INF), x, valid);
      const float mt = hmax(x);
      // Lazy rescaling (decode.cl): the reference max moves only when the block's max
      // exceeds it by more than RESCALE_SLACK; a block with no valid key changes nothing.
      if (mt > mrun[g] + RESCALE_SLACK) {
        const float alpha = mrun[g] == CLATTN_NEG_INF ? 0.0f : exp2(mrun[g] - mt);
        lrun[g] *= alpha;
        for (int c = 0; c < NV; ++c) vstoreV(vloadV(c, acc[g]) * alpha, c, acc[g]);
        mrun[g] = mt;
      }
      floatV p = mrun[g] == CLATTN_NEG_INF ? (floatV)(0.0f) : exp2(x - mrun[g]);
      p = select((floatV)(0.0f), p, valid);
      lrun[g] += hsum(p);
#if KV_DT == DT_I8
      vstoreV(p * vloadV(0, vsc), 0, pw[g]);
#else
      vstoreV(p * RAW_FULL, 0, pw[g]);
#endif
    }

    // P.V as micro-tiles of HP heads x PC chunks of VW output dims (in registers over the
    // block's tokens): per token PC V loads (converted on the fly) and HP broadcast weights
    // feed HP x PC FMAs.
    for (int g0 = 0; g0 < GMAX; g0 += HP)
      for (int c0 = 0; c0 < NV; c0 += PC) {
        floatV a[HP][PC];
#pragma unroll
        for (int h = 0; h < HP; ++h)
#pragma unroll
          for (int j = 0; j < PC; ++j) a[h][j] = vloadV(c0 + j, acc[g0 + h]);
        for (int t = 0; t < nt; ++t) {
#if TOUCH_AHEAD
          if (g0 == 0 && c0 == 0 && pro[t] >= 0) PREFETCH_ROW(v_cache + pro[t], touch);
#endif
          floatV v[PC];
#if KV_DT == DT_I4
#pragma unroll
          for (int j = 0; j < PC; ++j) {
            const size_t at = (size_t)(soff[t] + 2 * ((c0 + j) * VW / QGROUP));
            const float s = kv_row_scale(v_scales, at, sc_f16), zb = 0x1p23f + kv_row_scale(v_scales, at + 1, sc_f16);
            v[j] = (load_kv4_biased(v_cache, roff[t] + (c0 + j) * VW) - zb) * s;
          }
#else
#pragma unroll
          for (int j = 0; j < PC; ++j) v[j] = load_kv(v_cache, roff[t] + (c0 + j) * VW);
#endif
#pragma unroll
          for (int h = 0; h < HP; ++h) {
            const floatV p = (floatV)(pw[g0 + h][t]);
#pragma unroll
            for (int j = 0; j < PC; ++j) a[h][j] = fma(p, v[j], a[h][j]);
          }
        }
#pragma unroll
        for (int h = 0; h < HP; ++h)
#pragma unroll
          for (int j = 0; j < PC; ++j) vstoreV(a[h][j], c0 + j, acc[g0 + h]);
      }
  }
  if (bad) atomic_or(faults, CLATTN_FAULT_PAGE_ID);
  if (part < -1 && touch == 1u) atomic_or(faults, 0);  // never true (part >= -1): keeps the touches

  for (int g = 0; g < ng; ++g) {
    const int h = h0 + g;
    const float2 fin = final_scale_lse(mrun[g], lrun[g], part, has_sinks, sinks, h, vs_h);
    const float oscale = fin.x, lse_out = fin.y;
    if (part < 0) {
      store_vrow(o, ((size_t)req * num_qo_heads + h) * HEAD_DIM, NV, o_dt, oscale, acc[g]);
      if (has_lse) lse[(size_t)req * num_qo_heads + h] = lse_out;
    } else {
      __global float* wo = ws + ((size_t)part * num_qo_heads + h) * HEAD_DIM;
      for (int c = 0; c < NV; ++c) vstoreV(vloadV(c, acc[g]) * oscale, c, wo);
      ws[lse_off + (size_t)part * num_qo_heads + h] = lse_out;
    }
  }
}

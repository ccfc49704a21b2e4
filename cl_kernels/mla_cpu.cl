// MLA (absorbed DeepSeek latent attention) for CPU devices (variant "cpu"): decode and
// extend in one kernel, one work-item per work-group, the math on vectors across query
// vectors.
//
// A CPU OpenCL driver (PoCL's pthread device) runs each work-group as one loop on one core
// and vectorises across work-items; the GPU kernels' lanes, local-memory exchanges and
// barriers only add work there. Here a work-group is a single work-item that owns one work
// entry of the MLA planner (request, block of QB query vectors, KV range), with the
// arguments, work entries, split-K partial layout and results of mla.cl, so the planner,
// mla_run and the merge pass are shared. Every query vector of the entry (a (row, head) pair:
// decode = the request's heads) reads the same latent rows, so the work is two small GEMMs
// per key block; the scores are laid out as extend_cpu.cl's with the query vectors innermost
// (a vector holds VW of them, RV = QB / VW vectors):
//
//   Q^T [576][QB]  q_nope | q_pe, pre-scaled, transposed once per work-item
//   O   [QB][512]  the output accumulators (rows, so they are stored without a transpose)
//   K   [BK][576]  the block's latent rows converted to f32 once (V = their first 512)
//   S^T [BK][QB]   scores, then weights
//
//   S^T = K Q^T    SK keys x RV vectors of accumulators; per latent dim one broadcast K value
//                  and RV vector loads of Q^T. The dims go in passes of SD so a pass's slices
//                  of Q^T and K stay in L1 (the whole Q^T and block do not).
//   softmax        online, on the vectors: block max, exp2, rescale factor folded into the
//                  P.V accumulator load; masks (block end, causal limit per query vector)
//                  only on blocks that need them.
//   O += P V       OH query vectors x OD output vectors of VW latent dims of accumulators;
//                  per key OD vector loads of V and OH broadcast weights from S^T.
//
// The rows of the block TOUCH_AHEAD blocks ahead are prefetched a few lines per step of the
// P.V loop (CPU_PREFETCH, cpu_vec.clh), so their misses overlap the math.
//
// Scores are in the log2 domain (q_scale carries sm_scale * log2(e) * kv_scale); lse is
// written in natural log. Work entries (8 int32 at work_off + 8 * group): {kv_begin, kv_end,
// part, page_base, q_row0, nrows, vbeg, causal_base}: query vector v in [vbeg, vbeg + QB) of
// the entry is (row v / H, head v % H) for v < nrows * H; row r sees keys <= causal_base + r.
// part >= 0: row r's normalised partial state goes to workspace row part + r (o [P, H, 512]
// f32, lse [P, H] at lse_off floats) for the merge pass (mla.cl).
//
// Build options (-D): KV_DT, VW (4, 8 or 16), QB (a multiple of VW), BK, SK, SD, OH, OD,
// TOUCH_AHEAD, LOCAL_BUFS, FP8_FAST, PREFETCH_BUILTIN, SPARSE_IDX (sparse decode: key t of a
// work entry is the position MLA_POS(t, kend) of the request's index list, mla_sparse.clh).
// int8 latents (KV_DT = DT_I8, the scale cache in MLA_I8_ARGS): a row's ckv and kpe parts are
// converted times their token's scales as the block is staged (K = V = the dequantised row),
// one multiplication per element shared by the QB query vectors.
#include "mla_args.clh"
#include "cpu_vec.clh"  // floatV, latent dtype decoding, q/o rows

#ifndef QB
#define QB 16  // query vectors per work-item (RV = QB / VW vectors)
#endif
#ifndef BK
#define BK 16  // keys per block (one online-softmax step)
#endif
#ifndef SK
#define SK 8  // keys per S micro-tile: SK x RV vector accumulators
#endif
#ifndef SD
#define SD 64  // latent dims per S pass (divides 576)
#endif
#ifndef OH
#define OH 8  // P.V micro-tile: query vectors ...
#endif
#ifndef OD
#define OD 2  // ... x output vectors of VW dims
#endif
// TOUCH_AHEAD: the latent rows of the block this many blocks ahead are prefetched through the
// current block's P.V loop. 0: off.
#ifndef TOUCH_AHEAD
#define TOUCH_AHEAD 1
#endif

// LOCAL_BUFS: the work-item's buffers in local memory (1, where they fit: one static
// allocation per group, aligned) or private memory (0: devices with less local memory,
// where the variant still runs, slowly, as in the tests that force it onto GPUs).
#ifndef LOCAL_BUFS
#define LOCAL_BUFS 1
#endif
#if LOCAL_BUFS
#define BUF __local
#else
#define BUF
#endif

#define ROW (CKV_DIM + KPE_DIM)  // latent row width (576)
#define RV (QB / VW)
#define EPW (4 / KV_BYTES)                // latent elements per 32-bit word (strides are in words)
#define CKV_LINES (CKV_DIM * KV_BYTES / 64)  // 64-byte lines per ckv row
#define KPE_LINES (KPE_DIM * KV_BYTES / 64 > 0 ? KPE_DIM * KV_BYTES / 64 : 1)
#define ROW_LINES (CKV_LINES + KPE_LINES)
#define NC (CKV_DIM / VW)  // vectors per output row
#define PV_STEPS (NC / OD)
#define LINES_PER_STEP ((BK * ROW_LINES + PV_STEPS - 1) / PV_STEPS)

#if (QB % VW) || (BK % SK) || (ROW % SD) || (QB % OH) || (NC % OD) || (SD % VW) || BK > 64
#error "mla_cpu.cl: VW must divide QB and SD, SK BK (at most 64), SD 576, OH QB, OD 512 / VW"
#endif

__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void mla_cpu(MLA_KERNEL_ARGS) {
  BUF float qt[ROW * QB] __attribute__((aligned(64)));      // Q^T
  BUF float oa[QB * CKV_DIM] __attribute__((aligned(64)));  // O
  BUF float kb[BK * ROW] __attribute__((aligned(64)));      // the block's latent rows, f32
  BUF float pt[BK * QB] __attribute__((aligned(64)));       // S^T, then P^T

  __global const int* me = tab + work_off + 8 * (int)get_group_id(0);
  const int kbeg = me[0], kend = me[1], wpart = me[2], pbase = me[3];
  const int row0 = me[4], nrows = me[5], vbeg = me[6], cbase = me[7];
  const int nvec = min(QB, nrows * H - vbeg);  // active query vectors (>= 1), the first nvec

  __global const uchar* cbytes = (__global const uchar*)ckv;
  __global const uchar* kbytes = (__global const uchar*)kpe;
  const long c_sp = ckv_sp * EPW, c_st = ckv_st * EPW;  // element strides
  const long k_sp = kpe_sp * EPW, k_st = kpe_st * EPW, k_base = kpe_base * EPW;

  // Q^T (zero for inactive query vectors; q_scale * RAW_HALF: fp8 raw rows carry 2^-RAW_EXP),
  // O^T = 0.
  {
    float row[ROW];
    for (int g = 0; g < QB; ++g) {
      if (g < nvec) {
        const int v = vbeg + g;
        const size_t qrow = (size_t)(row0 + v / H) * H + v % H;
        load_vrow(q_nope, qrow * CKV_DIM, CKV_DIM / VW, q_dt, q_scale * RAW_HALF, row);
        load_vrow(q_pe, qrow * KPE_DIM, KPE_DIM / VW, q_dt, q_scale * RAW_HALF, row + CKV_DIM);
        for (int d = 0; d < ROW; ++d) qt[d * QB + g] = row[d];
      } else {
        for (int d = 0; d < ROW; ++d) qt[d * QB + g] = 0.0f;
      }
    }
    for (int i = 0; i < CKV_DIM * RV; ++i) vstoreV((floatV)(0.0f), i, oa);
  }

  floatV m[RV], l[RV];
#pragma unroll
  for (int i = 0; i < RV; ++i) m[i] = (floatV)(CLATTN_NEG_INF), l[i] = (floatV)(0.0f);
#if !SPARSE_IDX  // (sparse decode: the keys' own visibility, kvis below)
  intV lim[RV];  // last visible key per query vector
#pragma unroll
  for (int i = 0; i < RV; ++i) lim[i] = (intV)(cbase) + ((intV)(vbeg + i * VW) + LANE_IDS) / (intV)(H);
  const int min_lim = cbase + vbeg / H;  // the first query vector's row sees the fewest keys
#endif

  const int pmask = (1 << log2_page) - 1;
  bool bad = false;  // a page id outside [0, num_pages) was met (clamped into the pool)
  uint touch = 0;
  for (int k0 = kbeg; k0 < kend; k0 += BK) {
    const int nt = min(BK, kend - k0);
#if TOUCH_AHEAD
    // Byte offsets of the rows TOUCH_AHEAD blocks ahead (-1: none), prefetched below.
    long pco[BK], pko[BK];
    for (int t = 0; t < BK; ++t) {
      const int tn = k0 + TOUCH_AHEAD * BK + t;
      const int pn = MLA_POS(tn, kend);
      pco[t] = pko[t] = -1;
      if (MLA_POS_OK(pn, tn, kend)) {
        const long pg = (long)POOL_PAGE(page_ids[pbase + (pn >> log2_page)]);
        pco[t] = (pg * c_sp + (long)(pn & pmask) * c_st) * KV_BYTES;
        pko[t] = (k_base + pg * k_sp + (long)(pn & pmask) * k_st) * KV_BYTES;
      }
    }
#endif
    // The block's rows in f32; rows past the end are zero (their scores are masked), as are
    // the keys of a sparse list that add nothing (kvis: -1 visible, 0 not).
#if SPARSE_IDX
    int kvis[BK];
#endif
    for (int t = 0; t < BK; ++t) {
      BUF float* kd = kb + t * ROW;
      const int tok = k0 + t;
      const int pos = MLA_POS(tok, kend);
#if SPARSE_IDX
      kvis[t] = MLA_POS_OK(pos, tok, kend) ? -1 : 0;
#endif
      if (MLA_POS_OK(pos, tok, kend)) {
        const int id = page_ids[pbase + (pos >> log2_page)];
        bad |= (uint)id >= (uint)num_pages;
        const long pg = (long)POOL_PAGE(id), off = (long)(pos & pmask);
        const long co = pg * c_sp + off * c_st, ko = k_base + pg * k_sp + off * k_st;
#if KV_I8
        const floatV sc = (floatV)(MLA_SCALE(pg, off, 0)), sk = (floatV)(MLA_SCALE(pg, off, 1));
        for (int c = 0; c < CKV_DIM / VW; ++c) vstoreV(load_kv(cbytes, co + c * VW) * sc, c, kd);
        for (int c = 0; c < KPE_DIM / VW; ++c) vstoreV(load_kv(kbytes, ko + c * VW) * sk, CKV_DIM / VW + c, kd);
#else
        for (int c = 0; c < CKV_DIM / VW; ++c) vstoreV(load_kv(cbytes, co + c * VW), c, kd);
        for (int c = 0; c < KPE_DIM / VW; ++c) vstoreV(load_kv(kbytes, ko + c * VW), CKV_DIM / VW + c, kd);
#endif
      } else {
        for (int c = 0; c < ROW / VW; ++c) vstoreV((floatV)(0.0f), c, kd);
      }
    }
    const int ntile = (nt + SK - 1) / SK * SK;  // key tiles past the end are not computed

    // S^T = K Q^T in passes of SD dims, partial sums kept in S^T between passes.
    for (int d0 = 0; d0 < ROW; d0 += SD)
      for (int s0 = 0; s0 < ntile; s0 += SK) {
        floatV acc[SK][RV];
#pragma unroll
        for (int s = 0; s < SK; ++s)
#pragma unroll
          for (int i = 0; i < RV; ++i) acc[s][i] = d0 ? vloadV((s0 + s) * RV + i, pt) : (floatV)(0.0f);
        SCORE_TILE(acc, kb + s0 * ROW + d0, ROW, qt, d0, SD);
#pragma unroll
        for (int s = 0; s < SK; ++s)
#pragma unroll
          for (int i = 0; i < RV; ++i) vstoreV(acc[s][i], (s0 + s) * RV + i, pt);
      }

    // Online softmax on the query vectors: masks where the block needs them (keys past the
    // end, keys past a query vector's causal limit, sparse keys that add nothing), block max,
    // P = exp2(S - max).
#if !SPARSE_IDX
    const bool masked = nt < BK || k0 + nt - 1 > min_lim;
#endif
    floatV alpha[RV];
#pragma unroll
    for (int i = 0; i < RV; ++i) {
      floatV mx = m[i];
      for (int kk = 0; kk < nt; ++kk) {
        floatV x = vloadV(kk * RV + i, pt) * RAW_HALF;
#if SPARSE_IDX
        x = select((floatV)(CLATTN_NEG_INF), x, (intV)(kvis[kk]));  // decode: one row, lim = cbase
#else
        if (masked) x = select((floatV)(CLATTN_NEG_INF), x, (intV)(k0 + kk) <= lim[i]);
#endif
        vstoreV(x, kk * RV + i, pt);
        mx = fmax(mx, x);
      }
      alpha[i] = select(exp2(m[i] - mx), (floatV)(1.0f), m[i] == mx);
      floatV sum = (floatV)(0.0f);
      for (int kk = 0; kk < nt; ++kk) {
        const floatV x = vloadV(kk * RV + i, pt);
        const floatV p = select(exp2(x - mx), (floatV)(0.0f), x == (floatV)(CLATTN_NEG_INF));
        sum += p;
        vstoreV(p * RAW_FULL, kk * RV + i, pt);
      }
      m[i] = mx;
      l[i] = l[i] * alpha[i] + sum;
    }

    // O = alpha O + P V over the block's keys: OH query vectors x OD output vectors of VW
    // dims in registers; per key OD vector loads of V and OH broadcast weights.
    float al[QB];
#pragma unroll
    for (int i = 0; i < RV; ++i) vstoreV(alpha[i], i, al);
    for (int c0 = 0; c0 < NC; c0 += OD) {
#if TOUCH_AHEAD
      // This step's share of the ahead block's lines.
      for (int li = (c0 / OD) * LINES_PER_STEP; li < min((c0 / OD + 1) * LINES_PER_STEP, BK * ROW_LINES); ++li) {
        const int t = li / ROW_LINES, ln = li - t * ROW_LINES;
        if (pco[t] < 0) continue;
        if (ln < CKV_LINES) CPU_PREFETCH(cbytes + pco[t] + ln * 64, touch);
        else CPU_PREFETCH(kbytes + pko[t] + (ln - CKV_LINES) * 64, touch);
      }
#endif
      for (int g0 = 0; g0 < QB; g0 += OH) {
        floatV acc[OH][OD];
#pragma unroll
        for (int i = 0; i < OH; ++i)
#pragma unroll
          for (int j = 0; j < OD; ++j) acc[i][j] = vloadV((g0 + i) * NC + c0 + j, oa) * al[g0 + i];
        for (int kk = 0; kk < nt; ++kk) {
          floatV vv[OD];
#pragma unroll
          for (int j = 0; j < OD; ++j) vv[j] = vloadV(kk * (ROW / VW) + c0 + j, kb);
#pragma unroll
          for (int i = 0; i < OH; ++i) {
            const floatV p = (floatV)(pt[kk * QB + g0 + i]);
#pragma unroll
            for (int j = 0; j < OD; ++j) acc[i][j] = fma(p, vv[j], acc[i][j]);
          }
        }
#pragma unroll
        for (int i = 0; i < OH; ++i)
#pragma unroll
          for (int j = 0; j < OD; ++j) vstoreV(acc[i][j], (g0 + i) * NC + c0 + j, oa);
      }
    }
  }
  if (bad) atomic_or(faults, CLATTN_FAULT_PAGE_ID);
  if (wpart < -1 && touch == 1u) atomic_or(faults, 0);  // never true (part >= -1): keeps the touches

  float mr[QB], lr[QB];
#pragma unroll
  for (int i = 0; i < RV; ++i) vstoreV(m[i], i, mr), vstoreV(l[i], i, lr);
  for (int g = 0; g < nvec; ++g) {
    const int v = vbeg + g;
    const int head = v % H;
    const float lg = lr[g];
    const float inv = lg > 0.0f ? v_scale / lg : 0.0f;
    const float lse_v = lg > 0.0f ? (mr[g] + log2(lg)) * LOG2E_INV : CLATTN_NEG_INF;
    const size_t qrow = (size_t)(row0 + v / H) * H + head;
    BUF const float* row = oa + g * CKV_DIM;
    if (wpart < 0) {
      for (int c = 0; c < NC; ++c) store_vec(o, qrow * CKV_DIM + (size_t)c * VW, o_dt, vloadV(c, row) * inv);
      if (has_lse) lse[qrow] = lse_v;
    } else {
      const size_t wrow = (size_t)(wpart + v / H) * H + head;  // (extend splits: a part row per token)
      __global float* wo = ws + wrow * CKV_DIM;
      for (int c = 0; c < CKV_DIM / VW; ++c) vstoreV(vloadV(c, row) * inv, c, wo);
      ws[lse_off + wrow] = lse_v;
    }
  }
}

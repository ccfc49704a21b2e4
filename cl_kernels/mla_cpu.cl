// MLA (absorbed DeepSeek latent attention) for CPU devices (variant "cpu"): decode and
// extend in one kernel, one work-item per work-group, explicit vector types.
//
// A CPU OpenCL driver (PoCL's pthread device) runs each work-group as one loop on one core
// and vectorises across work-items; the GPU kernels' lanes, local-memory exchanges and
// barriers only add work there. Here a work-group is a single work-item that owns one work
// entry of the MLA planner (request, block of QB query vectors, KV range), with the
// arguments, work entries, split-K partial layout and results of mla.cl, so the planner,
// mla_run and the merge pass are shared. Every query vector of the entry (a (row, head) pair:
// decode = the request's heads) reads the same latent rows, so each row is read and converted
// once per work-item for all of them:
//
//   block  = VW tokens (the vector width in floats: the device's preferred float width, 16
//            on AVX-512): their 576-wide latent rows converted to f32 once into a private
//            (L1/L2-resident) block kf[VW][576] (page lookup per token, page ids clamped
//            into the pool with the fault flag); the rows of the block TOUCH_AHEAD blocks
//            ahead are prefetched a few lines per step of the P.V loop (PoCL's prefetch()
//            is a no-op: CPU_PREFETCH, cpu_vec.clh), so their misses overlap the math.
//   S      = Q K^T over 576 dims, register-blocked as a small GEMM: a micro-tile of SH query
//            vectors x ST tokens keeps SH x ST vectors of partial sums (lanes = dims) in
//            registers, each q and latent vector loaded once per micro-tile feeds ST or SH
//            FMAs; the VW partial-sum vectors of a query vector fold into one vector of its
//            VW scores by a transposing tree of .even/.odd adds (cpu_vec.clh fold_scores).
//   softmax per query vector on its score vector: bounds and causal limit as a lane mask,
//            one lazily rescaled online-softmax step per block (the reference max moves only
//            when the block max exceeds it by RESCALE_SLACK), vector exp2, log2 domain.
//   O     += P V over the block's 512 ckv dims, register-blocked the other way: a micro-tile
//            of OH query vectors x OD output vectors stays in registers over the block's
//            tokens (OD latent vectors and OH broadcast weights per token feed OH x OD FMAs).
//
// Scores are in the log2 domain (q_scale carries sm_scale * log2(e) * kv_scale); lse is
// written in natural log. Work entries (8 int32 at work_off + 8 * group): {kv_begin, kv_end,
// part, page_base, q_row0, nrows, vbeg, causal_base}: query vector v in [vbeg, vbeg + QB) of
// the entry is (row v / H, head v % H) for v < nrows * H; row r sees keys <= causal_base + r.
// part >= 0: the normalised partial state goes to workspace row part (o [P, H, 512] f32, lse
// [P, H] at lse_off floats) for the merge pass (mla.cl).
//
// Build options (-D): KV_DT, QB, VW (4, 8 or 16), FP8_FAST, SH, ST, OH, OD, TOUCH_AHEAD.
#include "mla_args.clh"
#include "cpu_vec.clh"  // floatV, latent dtype decoding, q/o rows, fold_scores, hmax, hsum

#ifndef QB
#define QB 32  // query vectors per work-item
#endif
#ifndef SH
#define SH 2  // S micro-tile: query vectors ...
#endif
#ifndef ST
#define ST 8  // ... x tokens
#endif
#ifndef OH
#define OH 4  // P V micro-tile: query vectors ...
#endif
#ifndef OD
#define OD 4  // ... x output vectors (VW dims each)
#endif
// TOUCH_AHEAD: the latent rows of the block this many blocks ahead are prefetched (one
// CPU_PREFETCH per 64-byte line) through the current block's P.V loop. 0: off.
#ifndef TOUCH_AHEAD
#define TOUCH_AHEAD 1
#endif

#define ROW (CKV_DIM + KPE_DIM)  // latent row width (576)
#define NC (CKV_DIM / VW)        // vectors per ckv row (= per output row)
#define NK (KPE_DIM / VW)        // vectors per kpe row
#define NR (NC + NK)             // vectors per latent row
#define EPW (4 / KV_BYTES)       // latent elements per 32-bit word (strides are in words)

#if (QB % SH) || (QB % OH) || (VW % ST) || (NC % OD)
#error "SH and OH must divide QB, ST must divide VW, OD must divide 512 / VW"
#endif

__kernel __attribute__((reqd_work_group_size(1, 1, 1)))
void mla_cpu(MLA_KERNEL_ARGS) {
  __global const int* me = tab + work_off + 8 * (int)get_group_id(0);
  const int kb = me[0], ke = me[1], wpart = me[2], pbase = me[3];
  const int row0 = me[4], nrows = me[5], vbeg = me[6], cbase = me[7];
  const int nvec = min(QB, nrows * H - vbeg);  // active query vectors (>= 1), the first nvec

  __global const uchar* cbytes = (__global const uchar*)ckv;
  __global const uchar* kbytes = (__global const uchar*)kpe;
  const long c_sp = ckv_sp * EPW, c_st = ckv_st * EPW;  // element strides
  const long k_sp = kpe_sp * EPW, k_st = kpe_st * EPW, k_base = kpe_base * EPW;

  float qf[QB][ROW];       // pre-scaled q rows: q_nope then q_pe (inactive vectors zero)
  float acc[QB][CKV_DIM];  // unnormalised output rows
  float kf[VW][ROW];       // the block's latent rows in f32
  floatV sc[QB];           // the block's scores (log2 domain), a vector per query vector
  float pw[QB][VW];        // the block's softmax weights
  float mrun[QB], lrun[QB];
  int lim[QB];             // last visible key per query vector (-1: inactive)
  for (int g = 0; g < QB; ++g) {
    const int v = vbeg + g;
    const int row = v / H, head = v % H;
    lim[g] = g < nvec ? cbase + row : -1;
    if (g < nvec) {
      const size_t qrow = (size_t)(row0 + row) * H + head;
      load_vrow(q_nope, qrow * CKV_DIM, NC, q_dt, q_scale * RAW_HALF, qf[g]);
      load_vrow(q_pe, qrow * KPE_DIM, NK, q_dt, q_scale * RAW_HALF, qf[g] + CKV_DIM);
    } else {
      for (int c = 0; c < NR; ++c) vstoreV((floatV)(0.0f), c, qf[g]);
    }
    for (int c = 0; c < NC; ++c) vstoreV((floatV)(0.0f), c, acc[g]);
    vstoreV((floatV)(0.0f), 0, pw[g]);
    mrun[g] = CLATTN_NEG_INF;
    lrun[g] = 0.0f;
  }

  const int pmask = (1 << log2_page) - 1;
  bool bad = false;  // a page id outside [0, num_pages) was met (clamped into the pool)
  uint touch = 0;
  for (int t0 = kb; t0 < ke; t0 += VW) {
    const int nt = min(VW, ke - t0);
#if TOUCH_AHEAD
    // The rows TOUCH_AHEAD blocks ahead (bytes; -1: none): prefetched through the P.V loop,
    // the latent lines of output chunks c0..c0+OD at each chunk's pass and the rope part at
    // the first, so misses stay in flight during the math rather than in one burst.
    long pco[VW], pko[VW];
    for (int t = 0; t < VW; ++t) {
      const int tn = t0 + TOUCH_AHEAD * VW + t;
      pco[t] = pko[t] = -1;
      if (tn < ke) {
        const long pg = (long)POOL_PAGE(page_ids[pbase + (tn >> log2_page)]);
        pco[t] = (pg * c_sp + (long)(tn & pmask) * c_st) * KV_BYTES;
        pko[t] = (k_base + pg * k_sp + (long)(tn & pmask) * k_st) * KV_BYTES;
      }
    }
#endif
    // The block's rows in f32; rows past the end are zero (their scores are masked, and
    // P V stops at nt).
    for (int t = 0; t < VW; ++t) {
      if (t < nt) {
        const int tok = t0 + t;
        const int id = page_ids[pbase + (tok >> log2_page)];
        bad |= (uint)id >= (uint)num_pages;
        const long pg = (long)POOL_PAGE(id), off = (long)(tok & pmask);
        const long co = pg * c_sp + off * c_st, ko = k_base + pg * k_sp + off * k_st;
        for (int c = 0; c < NC; ++c) vstoreV(load_kv(cbytes, co + c * VW), c, kf[t]);
        for (int c = 0; c < NK; ++c) vstoreV(load_kv(kbytes, ko + c * VW), NC + c, kf[t]);
      } else {
        for (int c = 0; c < NR; ++c) vstoreV((floatV)(0.0f), c, kf[t]);
      }
    }

    // S: SH x ST micro-tiles, partial sums over the row's vectors (lanes = dims), folded
    // into score vectors per group of SH query vectors (token groups past nt are not
    // computed: their lanes hold stale values and are masked below).
    for (int g0 = 0; g0 < nvec; g0 += SH) {
      floatV part[SH][VW];
      for (int u0 = 0; u0 < nt; u0 += ST) {
        floatV a[SH][ST];
#pragma unroll
        for (int i = 0; i < SH; ++i)
#pragma unroll
          for (int j = 0; j < ST; ++j) a[i][j] = (floatV)(0.0f);
        for (int c = 0; c < NR; ++c) {
          floatV qv[SH], kv[ST];
#pragma unroll
          for (int i = 0; i < SH; ++i) qv[i] = vloadV(c, qf[g0 + i]);
#pragma unroll
          for (int j = 0; j < ST; ++j) kv[j] = vloadV(c, kf[u0 + j]);
#pragma unroll
          for (int i = 0; i < SH; ++i)
#pragma unroll
            for (int j = 0; j < ST; ++j) a[i][j] = fma(qv[i], kv[j], a[i][j]);
        }
#pragma unroll
        for (int i = 0; i < SH; ++i)
#pragma unroll
          for (int j = 0; j < ST; ++j) part[i][u0 + j] = a[i][j];
      }
      for (int i = 0; i < SH; ++i) sc[g0 + i] = fold_scores(part[i]) * RAW_HALF;
    }

    // Online softmax per query vector on its vector of VW scores.
    const intV tok = (intV)(t0) + LANE_IDS;
    for (int g = 0; g < nvec; ++g) {
      floatV x = sc[g];
      const intV valid = (tok < (intV)(ke)) & (tok <= (intV)(lim[g]));
      x = select((floatV)(CLATTN_NEG_INF), x, valid);
      const float mt = hmax(x);
      // Lazy rescaling (decode_cpu.cl): a block with no visible key changes nothing.
      if (mt > mrun[g] + RESCALE_SLACK) {
        const float alpha = mrun[g] == CLATTN_NEG_INF ? 0.0f : exp2(mrun[g] - mt);
        lrun[g] *= alpha;
        for (int c = 0; c < NC; ++c) vstoreV(vloadV(c, acc[g]) * alpha, c, acc[g]);
        mrun[g] = mt;
      }
      floatV p = mrun[g] == CLATTN_NEG_INF ? (floatV)(0.0f) : exp2(x - mrun[g]);
      p = select((floatV)(0.0f), p, valid);
      lrun[g] += hsum(p);
      vstoreV(p * RAW_FULL, 0, pw[g]);
    }

    // O += P V: OH x OD micro-tiles of the output in registers over the block's tokens.
    for (int c0 = 0; c0 < NC; c0 += OD)
      for (int g0 = 0; g0 < nvec; g0 += OH) {
        floatV oa[OH][OD];
#pragma unroll
        for (int i = 0; i < OH; ++i)
#pragma unroll
          for (int j = 0; j < OD; ++j) oa[i][j] = vloadV(c0 + j, acc[g0 + i]);
        for (int t = 0; t < nt; ++t) {
#if TOUCH_AHEAD
          if (g0 == 0 && pco[t] >= 0) {
            for (int l = c0 * VW * KV_BYTES; l < (c0 + OD) * VW * KV_BYTES; l += 64)
              CPU_PREFETCH(cbytes + pco[t] + l, touch);
            if (c0 == 0)
              for (int l = 0; l < KPE_DIM * KV_BYTES; l += 64) CPU_PREFETCH(kbytes + pko[t] + l, touch);
          }
#endif
          floatV vv[OD];
#pragma unroll
          for (int j = 0; j < OD; ++j) vv[j] = vloadV(c0 + j, kf[t]);
#pragma unroll
          for (int i = 0; i < OH; ++i) {
            const floatV p = (floatV)(pw[g0 + i][t]);
#pragma unroll
            for (int j = 0; j < OD; ++j) oa[i][j] = fma(p, vv[j], oa[i][j]);
          }
        }
#pragma unroll
        for (int i = 0; i < OH; ++i)
#pragma unroll
          for (int j = 0; j < OD; ++j) vstoreV(oa[i][j], c0 + j, acc[g0 + i]);
      }
  }
  if (bad) atomic_or(faults, CLATTN_FAULT_PAGE_ID);
  if (wpart < -1 && touch == 1u) atomic_or(faults, 0);  // never true (part >= -1): keeps the touches

  for (int g = 0; g < nvec; ++g) {
    const int v = vbeg + g;
    const int row = v / H, head = v % H;
    const float l = lrun[g];
    const float inv = l > 0.0f ? v_scale / l : 0.0f;
    const float lse_v = l > 0.0f ? (mrun[g] + log2(l)) * LOG2E_INV : CLATTN_NEG_INF;
    const size_t qrow = (size_t)(row0 + row) * H + head;
    if (wpart < 0) {
      store_vrow(o, qrow * CKV_DIM, NC, o_dt, inv, acc[g]);
      if (has_lse) lse[qrow] = lse_v;
    } else {
      const size_t wrow = (size_t)wpart * H + head;
      __global float* wo = ws + wrow * CKV_DIM;
      for (int c = 0; c < NC; ++c) vstoreV(vloadV(c, acc[g]) * inv, c, wo);
      ws[lse_off + wrow] = lse_v;
    }
  }
}

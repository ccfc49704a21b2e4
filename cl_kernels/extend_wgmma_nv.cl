// Extend / prefill attention on Hopper tensor cores (compute capability 9.0), variant
// nv_wgmma: S = Q K^T and O += P V by warpgroup MMA (wgmma.mma_async m64nNk16: A = q / P
// fragments in registers, B = K / V read from local-memory stages through matrix
// descriptors), so a warpgroup's 4 warps (64 rows) issue one instruction where mma.sync
// needs 4 x N/8. The wgmma forms need PTX target sm_90a, which NVIDIA's OpenCL compiler never
// writes: mma_ptx_nv.clh hides them behind PTX comments and the runtime rebuilds the program's
// PTX for sm_90a (runtime/ptx_retarget.cpp; build option CLATTN_PTX_SM90A). Shared pieces:
// extend_defs_nv.clh (which lists the files); K/V feeds: extend_wgmma_feed_cpasync_nv.clh
// (cp.async by every work-item) and extend_wgmma_feed_tma_nv.clh (TMA tensor copies by two
// producers; TMA 1). Needs 16-bit KV, whole warpgroups (WARPS 4, 8 or 12; 12 with registers
// capped by PTX .maxnreg), HEAD_DIM a multiple of 64 and KEYS 32 or 64.
//
// Pipelined warpgroup loop (FlashAttention-3's intra-warpgroup overlap, Shah et al. 2024).
// Iteration j, tile j's P already computed (pa):
//   K(j+1), V(j) landed (FEED_WAIT) | refills (FEED_ISSUE) | issue S(j+1) = Q K(j+1)^T | issue
//   O += P(j) V(j) | refills (FEED_REFILL) | wait S(j+1) | masks, max, P(j+1) -> pn (the
//   tensor cores run P(j) V(j) meanwhile) | wait P V | rescale O, row sums, pa = pn |
//   addresses of later tiles (FEED_AHEAD).
// A stage's last wgmma reader has completed before the stage is refilled (the cp.async feed's
// barrier, the TMA feed's empty mbarriers). Every wgmma runs unconditionally, with its
// descriptors computed before the fence: ptxas serialises all wgmma of a kernel (a wait after
// each) when one sits in a branch it cannot prove warpgroup-uniform or when its operands are
// defined inside the fence .. commit window. So no per-warpgroup tile skipping (the masks zero
// what a warpgroup must not see), and the last iteration computes a discarded S of a stale
// stage. q keeps the natural dim order (wgmma reads K as stored).
#define WGMMA 1
#ifndef KEYS
#define KEYS 32  // (the default build's three cp.async stages of K and V fill the 48 KB at D = 128)
#endif
#include "extend_defs_nv.clh"

#if (WARPS % 4) || (HEAD_DIM % 64) || (KEYS != 32 && KEYS != 64)
#error "extend_wgmma_nv.cl: needs whole warpgroups, HEAD_DIM % 64 == 0 and KEYS 32 or 64"
#endif
#if KV_DT != DT_F16 && KV_DT != DT_BF16
#error "extend_wgmma_nv.cl: needs 16-bit KV"
#endif

#include "extend_q_nv.clh"
#include "extend_scores_nv.clh"
#if TMA
#include "extend_wgmma_feed_tma_nv.clh"
#else
#include "extend_wgmma_feed_cpasync_nv.clh"
#endif

// S of tile T (the next one) into sn: D / 16 wgmma k-steps, the descriptors first.
#define ISSUE_S(T)                                                                              \
  {                                                                                             \
    ulong dsc_[DK];                                                                             \
    _Pragma("unroll") for (int kk = 0; kk < DK; ++kk) dsc_[kk] = K_DESC(T, kk);                 \
    WG_FENCE();                                                                                 \
    _Pragma("unroll") for (int kk = 0; kk < DK; ++kk) WG_MMA_S(sn, qa[kk], dsc_[kk], kk);       \
  }

__kernel __attribute__((reqd_work_group_size(WGSZ, 1, 1))) void extend_mma(EXTEND_KERNEL_ARGS) {
  FEED_LOCALS
  PTX_SCRATCH

#include "extend_setup_nv.clh"

  ACC_INIT();

  const int pg_log2 = PAGE_LOG2();
  FEED_INIT();

  float sn[NT][4];          // S of the next tile (wgmma accumulator)
  uint pa[KEYS / 16][4];    // P of the current tile (A operand of its P V)
  uint pn[KEYS / 16][4];    // P of the next tile, written while P V(pa) is in flight
  if (ntiles > 0) {
    FEED_START();
#if TMA
    LOAD_Q();
#endif
    FEED_PROLOGUE();
    ISSUE_S(0);
    WG_COMMIT();
    WG_WAIT0();
    RELEASE_K(0);
#pragma unroll
    for (int j = 0; j < NT; ++j) WG_KEEP4(sn[j]);
    float alo, ahi;  // O and the row sums are still 0: nothing to rescale
    SCORES_TO_P(sn, kv_begin, pa, alo, ahi);
    ROWSUM_P(pa);
  }
  TURN_START();
  for (int it = 0; it < ntiles; ++it) {
    const bool has_next = it + 1 < ntiles;
    FEED_WAIT(it);
    FEED_ISSUE(it);
    TURN_WAIT();
    ISSUE_S(it + 1);
    WG_COMMIT();
    {
      ulong dsc_[KEYS / 16][HEAD_DIM / 64];
#pragma unroll
      for (int kc = 0; kc < KEYS / 16; ++kc)
#pragma unroll
        for (int p = 0; p < HEAD_DIM / 64; ++p) dsc_[kc][p] = V_DESC(it, kc, p);
      WG_FENCE();
#pragma unroll
      for (int kc = 0; kc < KEYS / 16; ++kc)
#pragma unroll
        for (int p = 0; p < HEAD_DIM / 64; ++p) WG_MMA_PV64(oacc + 8 * p, pa[kc], dsc_[kc][p]);
    }
    WG_COMMIT();
    TURN_PASS();
    FEED_REFILL(it);
    WG_WAIT1();  // S(it+1) complete; P(it) V(it) may still run
    if (has_next) RELEASE_K(it + 1);
    float alo, ahi;
    if (has_next) {
#pragma unroll
      for (int j = 0; j < NT; ++j) WG_KEEP4(sn[j]);
      SCORES_TO_P(sn, kv_begin + (it + 1) * KEYS, pn, alo, ahi);
    }
    WG_WAIT0();
    RELEASE_V(it);
#pragma unroll
    for (int n = 0; n < DN; ++n) WG_KEEP4(oacc[n]);
    if (has_next) {
      SOFTMAX_RESCALE(alo, ahi, oacc, lsum);
      ROWSUM_P(pn);
#pragma unroll
      for (int kc = 0; kc < KEYS / 16; ++kc)
        pa[kc][0] = pn[kc][0], pa[kc][1] = pn[kc][1], pa[kc][2] = pn[kc][2], pa[kc][3] = pn[kc][3];
    }
    FEED_AHEAD(it);
  }
  TURN_END();

#include "extend_store_nv.clh"
}

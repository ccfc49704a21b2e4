// Extend / prefill attention on NVIDIA tensor cores, variant nv_mma_sync: inline PTX
// mma.sync m16n8k16 (f16 or bf16 inputs, f32 accumulation) inside OpenCL C,
// FlashAttention-2 structure (Dao 2023). Shared pieces: extend_defs_nv.clh (which lists the
// files); K/V feeds: extend_mma_feed_regs_nv.clh (register staging, any KV dtype) and
// extend_mma_feed_cpasync_nv.clh (cp.async stages, 16-bit KV; ASYNC 1).
//
// A work-group of WARPS warps covers 16 * WARPS packed query rows, 16 per warp, whose Q
// fragments stay in registers (pre-multiplied by the score scale) for the whole KV loop. Per
// KEYS-key tile every warp computes S = Q K^T with mma.sync, masks (boundary tiles only),
// runs the online softmax in registers (row max over the 4 lanes of a row with shfl.sync,
// row sums by one extra mma against a ones column, O rescaled only when some row max of the
// warp moved), rounds P to the MMA type and accumulates O += P V in f32 registers. Warps
// whose rows see none of a tile skip it (causal, window). roff[2][KEYS] holds the key row
// offsets of two tiles (one page-id lookup per key, loaded one tile ahead).
//
// K in local memory (both feeds): Ks [KEYS][KRS words], K rows as stored. S's logical k index
// is permuted (the same way for Q and K, which leaves Q K^T unchanged): within each 32-dim
// group c, lane t's k indices {2t, 2t+1, 2t+8, 2t+9} of k-steps 2c and 2c+1 are dims 32c + 8t +
// 0..7, so one 16-byte read of row (8j + g) at dims 32c + 8t gives b0, b1 of both k-steps
// (conflict-free, no ldmatrix). Rows are swizzled (chunk index ^ 4 on odd rows) when a row is
// a multiple of 8 chunks, else padded to KRS = 16 mod 32 words (D = 80, 96; D = 80's last 16
// dims are one k-step).
//
// Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16 with floating point
// type"): lane = 4 * g + t (g = groupID 0..7, t = threadID_in_group 0..3).
//   A 16x16 row-major, 4 x .b32 (two 16-bit values each, low half = lower column):
//     a0 = A[g][2t..2t+1], a1 = A[g+8][2t..2t+1], a2 = A[g][2t+8..], a3 = A[g+8][2t+8..]
//   B 16x8 "col" (k x n), 2 x .b32: b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g]
//   C/D 16x8 f32: c0,c1 = C[g][2t..2t+1], c2,c3 = C[g+8][2t..2t+1]
// P's A fragment is the C fragment of two adjacent 8-key n-tiles, so P never leaves
// registers.
#define WGMMA 0
#include "extend_defs_nv.clh"

// ASYNC 1 (16-bit KV): the cp.async feed; fp8 KV is decoded on the way, so it keeps the
// register staging.
#ifndef ASYNC
#define ASYNC 0
#endif
#if KV_DT != DT_F16 && KV_DT != DT_BF16
#undef ASYNC
#define ASYNC 0
#endif

#define NG ((DK + 1) / 2)                   // 32-dim groups of a K row (last: 16 dims if DK is odd)
#define KSWZ (CPR % 8 == 0)                 // Ks rows swizzled, else padded
#define KRS (HEAD_DIM / 2 + (KSWZ ? 0 : (48 - (HEAD_DIM / 2) % 32) % 32))  // words per Ks row
#define KRQ (KRS / 4)                       // 16-byte chunks per Ks row

#if WGSZ < KEYS
#error "extend_mma_nv.cl: KEYS must not exceed the work-group size (one row offset per work-item)"
#endif
#if (DK % 2) && KSWZ
#error "extend_mma_nv.cl: odd k-step count needs the padded K layout"
#endif

#include "extend_q_nv.clh"
#include "extend_scores_nv.clh"
#if ASYNC
#include "extend_mma_feed_cpasync_nv.clh"
#else
#include "extend_mma_feed_regs_nv.clh"
#endif

// Key row offsets: work-item tid < KEYS owns key tid of every tile. Its page id is loaded
// one tile before the offset is needed (PF_LOAD), so no page-table latency sits in front of
// a barrier; PF_STORE writes the offset (-1 past kv_end or for a page id outside the pool)
// into roff buffer (T & 1).
#define PF_LOAD(T)                                                                              \
  if (tid < KEYS) {                                                                             \
    const int key_ = kv_begin + (T) * KEYS + tid;                                               \
    if (paged && key_ < kv_end) {                                                               \
      const int tt_ = key_ + tok_off;                                                           \
      pf_slot = SLOT_OF(tt_);                                                                   \
      pf_page = page_ids[base + PAGE_OF(tt_)];                                                  \
    }                                                                                           \
  }
#define PF_STORE(T)                                                                             \
  if (tid < KEYS) {                                                                             \
    const int key_ = kv_begin + (T) * KEYS + tid;                                               \
    long ro_ = -1;                                                                              \
    const bool in_ = !paged || IN_POOL(pf_page, num_pages);                                     \
    bad |= key_ < kv_end && !in_;                                                               \
    if (key_ < kv_end && in_)                                                                   \
      ro_ = (paged ? (long)pf_page * stride_page + (long)pf_slot * stride_token                 \
                   : (long)(base + key_) * stride_token) + (long)kvh * stride_head;             \
    roff[((T) & 1) * KEYS + tid] = ro_;                                                         \
  }

__kernel __attribute__((reqd_work_group_size(WGSZ, 1, 1))) void extend_mma(EXTEND_KERNEL_ARGS) {
  FEED_LOCALS
  __local long roff[2 * KEYS];  // key row offsets of two tiles (buffer = tile index & 1)
  PTX_SCRATCH

#include "extend_setup_nv.clh"

  // Ks fragment reads (16-byte units): row g, dims 32c + 8t, with the odd-row swizzle folded
  // into one base for even and one for odd groups c (pointers, so that every fragment read is
  // a base register plus an immediate).
  const int kx = KSWZ ? (g & 1) << 2 : 0;
  __local const uint4* const kp_even = ks + (g * KRQ + t + kx);
  __local const uint4* const kp_odd = ks + (g * KRQ + t - kx);
  __local const uint2* const kp_tail = (__local const uint2*)ks + (g * (KRS / 2) + t);
  FEED_INIT();

  ACC_INIT();

  int pf_page = 0, pf_slot = 0;  // PF_LOAD -> PF_STORE
  const int pg_log2 = PAGE_LOG2();

  if (ntiles > 0) {
    PF_LOAD(0);
    PF_STORE(0);
    if (ntiles > 1) {
      PF_LOAD(1);
      PF_STORE(1);
    }
    if (ntiles > 2) PF_LOAD(2);
    barrier(CLK_LOCAL_MEM_FENCE);
    FEED_PROLOGUE();
  }

  for (int it = 0; it < ntiles; ++it) {
    const int k0 = kv_begin + it * KEYS;
    const bool has_next = it + 1 < ntiles;
    FEED_TOP(it, has_next);
    const int kso = KSTAGE(it);
    const bool vis = WARP_VISIBLE(!(k0 >= w_end || k0 + KEYS <= w_begin));  // warp-uniform

    // S = Q K^T (16 x KEYS per warp, log2 domain: Q carries the scale), masks, softmax.
    uint pa[KEYS / 16][4];
    if (vis) {
      float s[NT][4];
#pragma unroll
      for (int j = 0; j < NT; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
      for (int j = 0; j < NT; ++j) {
#pragma unroll
        for (int c = 0; c < NG; ++c) {
          if (2 * c + 1 < DK) {
            const uint4 b = ((c & 1) ? kp_odd : kp_even)[kso + 8 * j * KRQ + 4 * c];
            MMA(s[j], qa[2 * c][0], qa[2 * c][1], qa[2 * c][2], qa[2 * c][3], b.x, b.y);
            MMA(s[j], qa[2 * c + 1][0], qa[2 * c + 1][1], qa[2 * c + 1][2], qa[2 * c + 1][3], b.z, b.w);
          } else {  // last 16 dims when DK is odd (padded layout): words 16c + 2t of row g
            const uint2 b = kp_tail[2 * kso + 8 * j * (KRS / 2) + 8 * c];
            MMA(s[j], qa[2 * c][0], qa[2 * c][1], qa[2 * c][2], qa[2 * c][3], b.x, b.y);
          }
        }
      }

      float alo, ahi;
      SCORES_TO_P(s, k0, pa, alo, ahi);
      SOFTMAX_RESCALE(alo, ahi, oacc, lsum);
    }

    FEED_MID(it, has_next);

    // O += P V (P rounded to the MMA type), row sums of P by an mma against ones.
    if (vis) {
      ROWSUM_P(pa);
      PV_TILE(it, pa);
    }
    FEED_END();
  }

#include "extend_store_nv.clh"
}

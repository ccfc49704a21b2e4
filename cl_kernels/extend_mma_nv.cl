// Extend / prefill attention on NVIDIA tensor cores: inline PTX mma.sync m16n8k16 (f16 or
// bf16 inputs, f32 accumulation) inside OpenCL C, FlashAttention-2 structure (Dao 2023).
//
// A work-group of WARPS warps covers 16 * MT * WARPS packed query rows (tokens x GQA group, as
// in extend.cl), each warp MT m-tiles of 16 rows whose Q fragments stay in registers
// (pre-multiplied by the score scale) for the whole KV loop. Per KEYS-key tile every warp computes S = Q K^T with
// mma.sync, masks (boundary tiles only), runs the online softmax in registers (row max over
// the 4 lanes of a row with shfl.sync, row sums by one extra mma against a ones column, O
// rescaled only when some row max of the warp moved), rounds P to the MMA type and
// accumulates O += P V in f32 registers. Warps whose rows see none of a tile skip it (causal).
//
// Pipeline (one K and one V tile in local memory, 2 barriers per tile): global loads go into
// registers a whole tile before they are stored to local memory, so their latency hides
// behind that tile's math (with 8 warps per group the next K tile and the next V tile are
// 16 registers each):
//   S(j), softmax | Vregs -> Vt | roff(j+2) | barrier | Kregs -> Ks, load V(j+1), load K(j+2)
//   | O += P V(j) | barrier
// roff[2][KEYS] holds key row offsets (one page-id lookup per key, loaded one tile ahead).
//
// Local layouts (conflict-free 128-bit fragment reads, no ldmatrix):
// - Ks [KEYS][KRS words], K rows as stored. S's logical k index is permuted (the same way
//   for Q and K, which leaves Q K^T unchanged): within each 32-dim group c, lane t's k
//   indices {2t, 2t+1, 2t+8, 2t+9} of k-steps 2c and 2c+1 are dims 32c + 8t + 0..7, so one
//   16-byte read of row (8j + g) at dims 32c + 8t gives b0, b1 of both k-steps. Rows are
//   swizzled (chunk index ^ 4 on odd rows) when a row is a multiple of 8 chunks, else
//   padded to KRS = 16 mod 32 words (D = 80, 96; D = 80's last 16 dims are one k-step).
// - Vt [HEAD_DIM][KEYS / 2 words]: V transposed, word = (V[2p][d], V[2p+1][d]) for key pair
//   p, with key pair p = 16c + t + 4m stored at word 16c + 4t + m, so one 16-byte read of
//   row (8n + g) gives b0, b1 of the P V k-steps 2c and 2c + 1. Segments (16 bytes) are
//   XOR-swizzled by row (VSW) so that both the reads and the transposing staging stores are
//   conflict-free; the transpose is done in registers (prmt) by lanes that each load 8 keys
//   x VD dims (VD = 8 or 4; 8 lanes read 16 * VD contiguous bytes of a row).
//
// Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16 with floating point
// type"): lane = 4 * g + t (g = groupID 0..7, t = threadID_in_group 0..3).
//   A 16x16 row-major, 4 x .b32 (two 16-bit values each, low half = lower column):
//     a0 = A[g][2t..2t+1], a1 = A[g+8][2t..2t+1], a2 = A[g][2t+8..], a3 = A[g+8][2t+8..]
//   B 16x8 "col" (k x n), 2 x .b32: b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g]
//   C/D 16x8 f32: c0,c1 = C[g][2t..2t+1], c2,c3 = C[g+8][2t..2t+1]
// P's A fragment is the C fragment of two adjacent 8-key n-tiles, so P never leaves
// registers.
//
// KV dtypes f16/bf16 are staged as stored; fp8 (e4m3/e5m2) is decoded to f16 exactly;
// k_scale is folded into q_scale (host), v_scale into the output. f32 KV uses extend.cl.
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
// MT: 16-row m-tiles per warp (1 or 2). With 2, every K and V fragment read from local memory
// feeds two m-tiles (half the fragment traffic per mma, twice the independent mma per warp);
// q fragments (8 registers per k-step and m-tile) and O accumulators double.
#ifndef MT
#define MT 1
#endif
// ASYNC (16-bit KV): K and V tiles go global -> local by cp.async into two stage buffers
// (the next tile's copies fly during this one's math; no staging registers, one barrier
// per tile), V stays row-major and P V's B fragments come from ldmatrix.trans. fp8 KV is
// decoded on the way, so it keeps the register staging below.
#ifndef ASYNC
#define ASYNC 0
#endif
#if KV_DT != DT_F16 && KV_DT != DT_BF16
#undef ASYNC
#define ASYNC 0
#endif
// WGMMA 1 (Hopper, compute capability 9.0): S = Q K^T and O += P V by warpgroup MMA
// (wgmma.mma_async m64nNk16: A = q / P fragments in registers, B = K / V read from the cp.async
// stages through shared-memory matrix descriptors), so a warpgroup's 4 warps (64 rows) issue
// one instruction where mma.sync needed 4 x N/8. The wgmma forms need PTX target sm_90a, which
// NVIDIA's OpenCL compiler never writes: mma_ptx_nv.clh hides them behind PTX comments and the
// runtime rebuilds the program's PTX for sm_90a (runtime/ptx_retarget.cpp). K and V stages are
// stored as 8 x 16-byte core matrices (key r, 8-dim chunk c at (r / 8) * 8 CPR + 8 c + r % 8).
#ifndef WGMMA
#define WGMMA 0
#endif
// STAGGER (WGMMA): each work-group walks its key tiles starting at its own offset (wrapping),
// so the groups running together read different parts of a head's KV. The online softmax
// does not depend on the order of the tiles.
#ifndef STAGGER
#define STAGGER 0
#endif
#if WGMMA && (!ASYNC || MT != 1 || (WARPS % 4) || (HEAD_DIM % 64) || (KEYS != 32 && KEYS != 64))
#error "extend_mma_nv.cl: WGMMA needs ASYNC, MT 1, whole warpgroups, HEAD_DIM % 64 == 0 and KEYS 32 or 64"
#endif
// TMA 1 (WGMMA): K and V tiles arrive by Hopper tensor copies (cp.async.bulk.tensor) instead of
// per-work-item cp.async: a producer issues KEYS / 16 boxes of 16 keys x 64 dims per tile
// and 64-dim slice (a box never crosses a page: the host asks for pages and start offsets that
// are multiples of 16), completion is counted on a "full" mbarrier per stage, and the copies
// land in the 128-byte-swizzled layout wgmma reads (wg_desc_sw128). TK_ST K and TV_ST V
// stages (the mbarriers need room beside them in 48 KB); no work-group barrier per tile (see
// the pipeline below). The tensor maps come from tma_maps_nv.cl (run before): 256 bytes of the
// caller's workspace (`tmaps`; per-run state, so the plan's table stays read-only). A box whose
// page id lies outside the pool is out of the map's bounds: TMA reads it as zeros. Rows past kv_len (unwritten slots of the last page)
// are zeroed in the V stage before P V reads them: P is 0 there, but 0 x NaN is not 0.
#ifndef TMA
#define TMA 0
#endif
#if TMA && !WGMMA
#error "extend_mma_nv.cl: TMA needs WGMMA"
#endif
// PINGPONG 1 (TMA, more than one warpgroup): the warpgroups take turns to issue their wgmma.
#ifndef PINGPONG
#define PINGPONG 0
#endif
#ifndef TMA_HEAD_FIRST
#define TMA_HEAD_FIRST 0  // map dims (d, head, slot, page) instead of (d, slot, head, page): smaller stride first
#endif
// cp.async stages: WGMMA keeps three K and three V tiles (each copy has two tiles of math to
// land; 48 KB at D = 128, so each work-item computes its own rows' offsets instead of a
// shared table), the other forms two of each.
#define KSTAGES (WGMMA ? 3 : 2)

#define WGSZ (32 * WARPS)
#define WROWS (16 * MT)                     // packed query rows per warp
#define DK (HEAD_DIM / 16)                  // k-steps of S = Q K^T
#define NG ((DK + 1) / 2)                   // 32-dim groups of a K row (last: 16 dims if DK is odd)
#define NT (KEYS / 8)                       // 8-key n-tiles of S
#define DN (HEAD_DIM / 8)                   // 8-dim n-tiles of O
#define CPR (HEAD_DIM / 8)                  // 16-byte chunks (8 values) per K/V row
#define KSWZ (CPR % 8 == 0)                 // Ks rows swizzled, else padded
#define KRS (HEAD_DIM / 2 + (KSWZ ? 0 : (48 - (HEAD_DIM / 2) % 32) % 32))  // words per Ks row
#define KRQ (KRS / 4)                       // 16-byte chunks per Ks row
#define VRQ (KEYS / 8)                      // 16-byte segments per Vt row
#define VXM (KEYS >= 64 ? 7 : 3)            // Vt segment swizzle mask
#define KIT ((KEYS * CPR + WGSZ - 1) / WGSZ)  // K chunks staged per work-item
// ASYNC V rows: CPR chunks, chunk c of key r at c ^ (r & 7) when CPR is a multiple of 8, else
// rows padded to an odd chunk count; either way 8 consecutive keys of one chunk (an ldmatrix
// matrix) sit in 8 distinct bank groups.
#define VSWZ (CPR % 8 == 0)
#define VRS (VSWZ ? CPR : (CPR | 1))
// V staging: a lane transposes 8 keys x VD dims (VD = 8, or 4 when that spreads the tile
// over more warps and halves the registers in flight).
#ifndef VD
#define VD ((KEYS / 32) * ((CPR + 7) / 8) >= WARPS ? 8 : 4)
#endif
#define VH ((HEAD_DIM / VD + 7) / 8)          // (8 * VD)-dim slices of a V row
#define NVI ((KEYS / 32) * VH)                // V staging items (one warp each: 32 keys x 8 VD dims)
// Vt segment swizzle of row d: reads (rows 8n+g, 8n+g+1 in one phase) and staging stores
// (rows VD*q + i for 8 consecutive q in one phase) both hit 8 distinct 16-byte bank groups.
#define VSW(d) ((KEYS >= 64 ? ((d) & 1) << 2 : 0) ^ (((d) / VD) & VXM))
#define VIT ((NVI + WARPS - 1) / WARPS)       // V staging items per warp
#define KDIV (WGSZ % CPR == 0 && (KEYS * CPR) % WGSZ == 0)  // K staging: fixed chunk per work-item
#define RSTEP (WGSZ / CPR)                    // keys between a work-item's K chunks (KDIV)
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f

#if (HEAD_DIM % 16) || (KEYS % 32)
#error "extend_mma_nv.cl: HEAD_DIM must be a multiple of 16 and KEYS of 32"
#endif
#if WGSZ < KEYS
#error "extend_mma_nv.cl: KEYS must not exceed the work-group size (one row offset per work-item)"
#endif
#if (DK % 2) && KSWZ
#error "extend_mma_nv.cl: odd k-step count needs the padded K layout"
#endif

#include "mma_ptx_nv.clh"
#include "mma_softmax_nv.clh"

// 8 stored KV values at element i as 8 x 16-bit MMA values (uint4).
inline uint4 load_kv8(__global const void* p, long i) {
#if KV_DT == DT_F16 || KV_DT == DT_BF16
  return *(__global const uint4*)((__global const ushort*)p + i);  // 16-byte aligned (host checks strides)
#else
  const uint2 w = *(__global const uint2*)((__global const uchar*)p + i);
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

// 64 custom-mask bits starting at bit `bit` (little bit order), bytes at or past `end` read
// as 0 (they only hold keys past kv_len, which the causal/length test already hides).
inline ulong mask_bits(__global const uchar* mask, long end, long bit) {
  const long b0 = bit >> 3;
  const int sh = (int)(bit & 7);
  ulong lo = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i)
    if (b0 + i < end) lo |= (ulong)mask[b0 + i] << (8 * i);
  const ulong b8 = b0 + 8 < end ? (ulong)mask[b0 + 8] : 0;
  return sh ? (lo >> sh) | (b8 << (64 - sh)) : lo;
}

// q elements i, i + 1, i + 8, i + 9 (i even) in load4_bits' layout (bits4_to_float4 decodes
// them): the natural-order A fragment pairs of one row and k-step (WGMMA).
inline uint4 q_pairs_bits(__global const void* q, size_t i, int dt) {
  if (dt == DT_F32) {
    const float2 a = *(__global const float2*)((__global const float*)q + i);
    const float2 b = *(__global const float2*)((__global const float*)q + i + 8);
    return (uint4)(as_uint(a.x), as_uint(a.y), as_uint(b.x), as_uint(b.y));
  }
  __global const uint* p = (__global const uint*)((__global const ushort*)q + i);
  return (uint4)(p[0], p[4], 0u, 0u);
}

// 4 stored KV values at element i as 4 x 16-bit MMA values (uint2).
inline uint2 load_kv4(__global const void* p, long i) {
#if KV_DT == DT_F16 || KV_DT == DT_BF16
  return *(__global const uint2*)((__global const ushort*)p + i);
#else
  const uint w = *(__global const uint*)((__global const uchar*)p + i);
#if KV_DT == DT_E4M3
#define FP8F(x, s) e4m3_bits_to_float(((x) >> (s)) & 0xffu)
#else
#define FP8F(x, s) e5m2_bits_to_float(((x) >> (s)) & 0xffu)
#endif
  return (uint2)(pack2_f16(FP8F(w, 0), FP8F(w, 8)), pack2_f16(FP8F(w, 16), FP8F(w, 24)));
#undef FP8F
#endif
}
#if VD == 8
#define VDVEC uint4
#define LOAD_VD load_kv8
#define VW_SET(A_, X_) (A_)[0] = (X_).x, (A_)[1] = (X_).y, (A_)[2] = (X_).z, (A_)[3] = (X_).w
#else
#define VDVEC uint2
#define LOAD_VD load_kv4
#define VW_SET(A_, X_) (A_)[0] = (X_).x, (A_)[1] = (X_).y
#endif

__kernel __attribute__((reqd_work_group_size(WGSZ, 1, 1))) void extend_mma(
    __global const void* q, int q_dt, __global const void* k, __global const void* v,
    __global const int* page_ids, __global const int* table, __global void* o, int o_dt,
    __global float* lse, int has_lse, __global const float* sinks, int has_sinks,
    __global const uchar* mask, int has_mask, int Hq, int G, int paged, int page_size,
    long stride_page, long stride_token, long stride_head, float q_scale, float cap_log2,
    float inv_cap, float v_scale, int causal, int window_left, int num_pages, __global volatile int* faults,
    __global const uint* tmaps) {
#if TMA
#define TSTAGE (KEYS * HEAD_DIM * 2)  // bytes of a K or V stage: HEAD_DIM / 64 swizzled [KEYS][128 B] slices
// K and V stages (TK_ST + TV_ST <= 5 at KEYS = 32, D = 128): a K tile is issued TK_ST - 1
// iterations before its S, a V tile TV_ST - 1 before its P V.
#ifndef TK_ST
#define TK_ST 2
#endif
#ifndef TV_ST
#define TV_ST 3
#endif
  __local uint4 tsm[((TK_ST + TV_ST) * TSTAGE + 1024 + 16 * (TK_ST + TV_ST)) / 16];  // + 1024-byte alignment, mbarriers
// Page ids of the group's key range, copied to local memory once (4 KB: 1024 pages, e.g. 16K
// keys in pages of 16); longer ranges read page_ids at each copy.
#ifndef TMA_PAGES
#define TMA_PAGES 1024
#endif
  __local int ptab[TMA_PAGES];
  __local int prun[WARPS];  // per warp: its ptab entries continue ptab[0] by one id a page
  __local uint4* const ks = tsm;  // (fragment pointers of the other forms; unused)
  __local uint4* const vs = tsm;
#elif ASYNC
  __local uint4 ks[KSTAGES * KEYS * KRQ];
  __local uint4 vs[KSTAGES * KEYS * VRS];
#else
  __local uint4 ks[KEYS * KRQ];
  __local uint4 vt[HEAD_DIM * VRQ];
#endif
#if !WGMMA
  __local long roff[2 * KEYS];  // key row offsets of two tiles (buffer = tile index & 1)
#endif
  PTX_SCRATCH

  const int tid = get_local_id(0);
  const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  bool bad = false;  // a page id outside [0, num_pages) was met: that key reads as zeros
  // Work-groups start in launch order (dimension 0 fastest); taking the KV head from the
  // fastest-varying part of that order puts every head's rows in each wave, instead of one
  // head's whole KV streamed by a full wave at once (H100: +12% at 1 x 4096, 32 heads).
  const int lin = get_group_id(1) * get_num_groups(0) + get_group_id(0);
  const int kvh = lin % get_num_groups(1), item = lin / get_num_groups(1);
  __global const int* w = table + 8 * item;
  const int qo_start = w[0], qo_len = w[1], kv_len = w[2], row0 = w[3], base = w[4], tok_off = w[5];
  const int mask_off = w[6];
  const int nrows = qo_len * G;
  const int shift = kv_len - qo_len;  // query token j sits at key position shift + j

  // This lane's rows: g and g + 8 of each of the warp's MT m-tiles ("lo" / "hi").
  const int wrow0 = row0 + WROWS * warp;
  int pr_lo[MT], pr_hi[MT], tok_lo[MT], tok_hi[MT], qpos_lo[MT], qpos_hi[MT];
  bool ok_lo[MT], ok_hi[MT];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    pr_lo[mt] = wrow0 + 16 * mt + g, pr_hi[mt] = wrow0 + 16 * mt + g + 8;
    ok_lo[mt] = pr_lo[mt] < nrows, ok_hi[mt] = pr_hi[mt] < nrows;
    tok_lo[mt] = pr_lo[mt] / G, tok_hi[mt] = pr_hi[mt] / G;
    qpos_lo[mt] = shift + tok_lo[mt], qpos_hi[mt] = shift + tok_hi[mt];
  }

  // Q fragments times the score scale, in the MMA type, in S's permuted k order: dims
  // d0 .. d0 + 3 of each k-step (load4_bits; all loads of an m-tile issued before any
  // conversion). WGMMA reads K as stored, so there q keeps the natural order (q_pairs_bits).
  // (TMA: loaded after the first copies are issued, so that their latencies overlap.)
  uint qa[MT][DK][4];
#if WGMMA
#define Q_BITS(Q0, kk) q_pairs_bits(q, (Q0) + 16 * (kk) + 2 * t, q_dt)
#else
#define QD0(kk) (32 * ((kk) >> 1) + (2 * ((kk) >> 1) + 1 < DK ? 8 * t + 4 * ((kk) & 1) : 4 * t))
#define Q_BITS(Q0, kk) load4_bits(q, (Q0) + QD0(kk), q_dt)
#endif
// Element offset of the q row of packed row PR (token TOK, head kvh * G + PR % G).
#define Q_OFF(TOK, PR) (((size_t)(qo_start + (TOK)) * Hq + kvh * G + (PR) % G) * HEAD_DIM)
#if WGMMA
  // 16-bit q: lane t of a row's quad loads 16-byte chunks t, t + 4, ... of its two rows and
  // quad transposes give it word t of every chunk (its fragment pairs), instead of 4-byte
  // loads of each pair (H100: the 4-byte loads kept a group's q prologue at ~5 us).
#define LOAD_Q16()                                                                              \
  {                                                                                             \
    __global const uint4* const ql_ = (__global const uint4*)((__global const ushort*)q + Q_OFF(tok_lo[0], pr_lo[0])) + t; \
    __global const uint4* const qh_ = (__global const uint4*)((__global const ushort*)q + Q_OFF(tok_hi[0], pr_hi[0])) + t; \
    uint4 cl_[CPR / 4], ch_[CPR / 4];                                                           \
    _Pragma("unroll") for (int j = 0; j < CPR / 4; ++j) {                                       \
      cl_[j] = ok_lo[0] ? ql_[4 * j] : (uint4)(0u);                                             \
      ch_[j] = ok_hi[0] ? qh_[4 * j] : (uint4)(0u);                                             \
    }                                                                                           \
    _Pragma("unroll") for (int j = 0; j < CPR / 4; ++j) {                                       \
      cl_[j] = quad_transpose(cl_[j], lane);                                                    \
      ch_[j] = quad_transpose(ch_[j], lane);                                                    \
    }                                                                                           \
    /* word u of cl_[j]: this lane's pair of chunk 4j + u; k-step kk = chunks 2kk, 2kk + 1 */    \
    _Pragma("unroll") for (int kk = 0; kk < DK; ++kk) {                                         \
      const int c_ = 2 * kk;                                                                    \
      const float4 x = bits4_to_float4((uint4)(u4_at(cl_[c_ >> 2], c_ & 3), u4_at(cl_[c_ >> 2], (c_ & 3) + 1), 0u, 0u), q_dt) * q_scale; \
      const float4 y = bits4_to_float4((uint4)(u4_at(ch_[c_ >> 2], c_ & 3), u4_at(ch_[c_ >> 2], (c_ & 3) + 1), 0u, 0u), q_dt) * q_scale; \
      qa[0][kk][0] = pack2(x.x, x.y), qa[0][kk][1] = pack2(y.x, y.y);                           \
      qa[0][kk][2] = pack2(x.z, x.w), qa[0][kk][3] = pack2(y.z, y.w);                           \
    }                                                                                           \
  }
#endif
#define LOAD_Q_WORDS()                                                                          \
  _Pragma("unroll") for (int mt = 0; mt < MT; ++mt) {                                           \
    const size_t qlo = Q_OFF(tok_lo[mt], pr_lo[mt]), qhi = Q_OFF(tok_hi[mt], pr_hi[mt]);          \
    uint4 xl[DK], xh[DK];                                                                       \
    _Pragma("unroll") for (int kk = 0; kk < DK; ++kk) {                                         \
      xl[kk] = ok_lo[mt] ? Q_BITS(qlo, kk) : (uint4)(0u);                                       \
      xh[kk] = ok_hi[mt] ? Q_BITS(qhi, kk) : (uint4)(0u);                                       \
    }                                                                                           \
    _Pragma("unroll") for (int kk = 0; kk < DK; ++kk) {                                         \
      const float4 x = bits4_to_float4(xl[kk], q_dt) * q_scale, y = bits4_to_float4(xh[kk], q_dt) * q_scale; \
      qa[mt][kk][0] = pack2(x.x, x.y), qa[mt][kk][1] = pack2(y.x, y.y);                         \
      qa[mt][kk][2] = pack2(x.z, x.w), qa[mt][kk][3] = pack2(y.z, y.w);                         \
    }                                                                                           \
  }
#if WGMMA
#define LOAD_Q()        \
  if (q_dt != DT_F32) { \
    LOAD_Q16()          \
  } else {              \
    LOAD_Q_WORDS()      \
  }
#else
#define LOAD_Q() LOAD_Q_WORDS()
#endif
#if !TMA
  LOAD_Q();
#endif

  // Key range of the whole group (uniform: every warp joins every barrier) and of this warp.
  const int last_row = min(row0 + WROWS * WARPS, nrows) - 1;
  const int kv_end = causal ? min(kv_len, shift + last_row / G + 1) : kv_len;
  // (TMA: tiles start at a multiple of 16 keys, so that each box stays within a page.)
  const int kv_begin = (window_left >= 0 ? max(0, shift + row0 / G - window_left) : 0) & (TMA ? ~15 : ~0);
  // (WGMMA: of this warp's warpgroup, which issues each wgmma as one.)
#if WGMMA
  const int srow0 = row0 + 64 * (warp >> 2), SROWS = 64;
#else
  const int srow0 = wrow0, SROWS = WROWS;
#endif
  const int w_last = min(srow0 + SROWS - 1, nrows - 1);
  const int w_first_pos = shift + srow0 / G, w_last_pos = shift + max(w_last, srow0) / G;
  const int w_end = srow0 >= nrows ? kv_begin : (causal ? min(kv_len, w_last_pos + 1) : kv_len);
  const int w_begin = window_left >= 0 ? max(0, w_first_pos - window_left) : 0;
  const int ntiles = kv_end > kv_begin ? (kv_end - kv_begin + KEYS - 1) / KEYS : 0;
  // Visible keys of this lane's rows: [kmin, kmax] (then the custom mask, if any).
  int kmax_lo[MT], kmax_hi[MT], kmin_lo[MT], kmin_hi[MT];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    kmax_lo[mt] = causal ? min(kv_len - 1, qpos_lo[mt]) : kv_len - 1;
    kmax_hi[mt] = causal ? min(kv_len - 1, qpos_hi[mt]) : kv_len - 1;
    kmin_lo[mt] = window_left >= 0 ? qpos_lo[mt] - window_left : 0;
    kmin_hi[mt] = window_left >= 0 ? qpos_hi[mt] - window_left : 0;
  }
  const long mask_end = mask_off + ((long)qo_len * kv_len + 7) / 8;  // end of this request's bytes

  // Per-lane fragment read positions (16-byte units). Ks: row g, dims 32c + 8t, with the
  // odd-row swizzle folded into one base for even and one for odd groups c.
  // (Pointers, so that every fragment read is a base register plus an immediate.)
  const int kx = KSWZ ? (g & 1) << 2 : 0;
  __local const uint4* const kp_even = ks + (g * KRQ + t + kx);
  __local const uint4* const kp_odd = ks + (g * KRQ + t - kx);
  __local const uint2* const kp_tail = (__local const uint2*)ks + (g * (KRS / 2) + t);
#if ASYNC
  // P V's B fragments by ldmatrix.x4.trans: lane l gives key (l & 15) of a 16-key step, chunk
  // n + (l >> 4) (n even) at (n & ~7) + lo2[(n & 7) / 2] of its row (swizzled or padded).
  __local const uint4* const lbv = vs + (lane & 15) * VRS;
  int lo2[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) lo2[i] = VSWZ ? ((2 * i) ^ (lane >> 4) ^ (lane & 7)) : 2 * i + (lane >> 4);
  // Copies: chunk it = tid + WGSZ m of a tile -> key it / CPR, chunk it % CPR (coalesced).
#if WGMMA
#define KSLOT(r_, c_) (((r_) >> 3) * (CPR * 8) + (c_) * 8 + ((r_) & 7))
#define VSLOT(r_, c_) KSLOT(r_, c_)
#else
#define KSLOT(r_, c_) ((r_) * KRQ + (KSWZ ? (c_) ^ (((r_) & 1) << 2) : (c_)))
#define VSLOT(r_, c_) ((r_) * VRS + (VSWZ ? (c_) ^ ((r_) & 7) : (c_)))
#endif
#define KVIT ((KEYS * CPR + WGSZ - 1) / WGSZ)
// Copies of tile T's rows of SRC (k or v) into the stage at DST; SLOT(r, c) places chunk c of row r.
#define ISSUE_ROWS(T, DST, SRC, SLOT)                                                           \
  _Pragma("unroll") for (int m_ = 0; m_ < KVIT; ++m_) {                                         \
    const int it_ = tid + WGSZ * m_;                                                            \
    if (KEYS * CPR % WGSZ == 0 || it_ < KEYS * CPR) {                                           \
      const int r_ = it_ / CPR, c_ = it_ % CPR;                                                 \
      const long ro_ = roff[((T) & 1) * KEYS + r_];                                             \
      const long so_ = (ro_ >= 0 ? ro_ : 0) + 8 * c_;                                           \
      CP_ASYNC16((DST) + SLOT(r_, c_), (__global const ushort*)(SRC) + so_, ro_ >= 0 ? 16 : 0); \
    }                                                                                           \
  }
#define ISSUE_KV(T)                                                     \
  {                                                                     \
    ISSUE_ROWS(T, ks + ((T) & 1) * (KEYS * KRQ), k, KSLOT);             \
    ISSUE_ROWS(T, vs + ((T) & 1) * (KEYS * VRS), v, VSLOT);             \
  }
#else
  // Vt: row g, segment (4c + t) ^ VSW(8n + g) = vp[((4c) ^ (8n / VD)) & VXM] + ((4c) & ~VXM).
  __local const uint4* vp[VXM + 1];
  {
    const int X = (KEYS >= 64 ? t ^ ((g & 1) << 2) : t) ^ (g / VD);
#pragma unroll
    for (int i = 0; i <= VXM; ++i) vp[i] = vt + (g * VRQ + (X ^ i));
  }

  // Staging roles. K: chunk it = tid + WGSZ * m -> key it / CPR, chunk it % CPR (coalesced).
  // V: warp item vi = warp + WARPS * m -> 32-key group c, (8 VD)-dim slice h; lane -> 8 keys
  // 32c + 2 * vt4 + {0,1,8,9,16,17,24,25}, dims VD*q .. VD*q+VD-1 (q = 8h + (lane & 7)).
  // All addresses are per-thread bases plus compile-time offsets (no per-tile index math,
  // nothing for the compiler to hoist into extra registers).
  const int vt4 = lane >> 3;
  uint4 kreg[KIT];
  uint vw[VIT][8][VD / 2];
#if KDIV
  // RSTEP keys apart per m; the swizzle bit of key r0 + m * RSTEP alternates with m when
  // RSTEP is odd.
  const int kr0 = tid / CPR, kc0 = tid % CPR;
  __local uint4* const kst_e = ks + kr0 * KRQ + (KSWZ ? kc0 ^ ((kr0 & 1) << 2) : kc0);
  __local uint4* const kst_o = ks + kr0 * KRQ + (KSWZ ? kc0 ^ (((kr0 + 1) & 1) << 2) : kc0);
  const int kgo = 8 * kc0;
#endif
  int vro[VIT];
  __local uint4* vst_e[VIT];
  __local uint4* vst_o[VIT];
  int vgo[VIT];
  bool vok[VIT];
#pragma unroll
  for (int m = 0; m < VIT; ++m) {
    const int vi = warp + WARPS * m;
    const int c = vi / VH, qc = 8 * (vi % VH) + (lane & 7);
    vok[m] = (NVI % WARPS == 0 || vi < NVI) && qc < HEAD_DIM / VD;
    const int y = (4 * c + vt4) ^ (qc & VXM);  // segment of rows VD*qc + even i
    vro[m] = vok[m] ? 32 * c + 2 * vt4 : 0;
    vst_e[m] = vt + VD * qc * VRQ + y;
    vst_o[m] = vt + VD * qc * VRQ + (KEYS >= 64 ? y ^ 4 : y);
    vgo[m] = VD * qc;
  }

#endif
  float oacc[MT][DN][4];
  float lsum[MT][4];  // row sums of P (lsum[mt][0] = row g, lsum[mt][2] = row g + 8)
  float m_lo[MT], m_hi[MT];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int n = 0; n < DN; ++n) oacc[mt][n][0] = oacc[mt][n][1] = oacc[mt][n][2] = oacc[mt][n][3] = 0.f;
    lsum[mt][0] = lsum[mt][1] = lsum[mt][2] = lsum[mt][3] = 0.f;
    m_lo[mt] = m_hi[mt] = CLATTN_NEG_INF;
  }

  // Key row offsets: work-item tid < KEYS owns key tid of every tile. Its page id is loaded
  // one tile before the offset is needed (PF_LOAD), so no page-table latency sits in front
  // of a barrier; PF_STORE writes the offset (-1 past kv_end) into roff buffer (T & 1).
  int pf_page = 0, pf_slot = 0;
  // Power-of-two pages (the usual case) split a token index by shift and mask: warp 0 does
  // this for every tile while the other warps wait at the next barrier. PAGE_OF / SLOT_OF:
  // the page (index into the request's page ids) and the slot in it of token TT.
  const int pg_log2 = (page_size & (page_size - 1)) == 0 ? 31 - clz(page_size) : -1;
#define PAGE_POW2(TT) ((TT) >> pg_log2)
#define SLOT_POW2(TT) ((TT) & (page_size - 1))
#define PAGE_OF(TT) (pg_log2 >= 0 ? PAGE_POW2(TT) : (TT) / page_size)
#define SLOT_OF(TT) (pg_log2 >= 0 ? SLOT_POW2(TT) : (TT) % page_size)
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

#if KDIV
#define LOAD_K(B)                                                                               \
  {                                                                                             \
    __local const long* kro_ = roff + (B) * KEYS + kr0;                                         \
    _Pragma("unroll") for (int m_ = 0; m_ < KIT; ++m_) {                                        \
      const long ro_ = kro_[m_ * RSTEP];                                                        \
      kreg[m_] = ro_ >= 0 ? load_kv8(k, ro_ + kgo) : (uint4)(0u);                               \
    }                                                                                           \
  }
#define STORE_K()                                                                               \
  _Pragma("unroll") for (int m_ = 0; m_ < KIT; ++m_)                                            \
    (((m_ * RSTEP) & 1) ? kst_o : kst_e)[m_ * RSTEP * KRQ] = kreg[m_];
#else
#define LOAD_K(B)                                                                               \
  _Pragma("unroll") for (int m_ = 0; m_ < KIT; ++m_) {                                          \
    const int it_ = tid + WGSZ * m_;                                                            \
    kreg[m_] = (uint4)(0u);                                                                     \
    if (it_ < KEYS * CPR) {                                                                     \
      const long ro_ = roff[(B) * KEYS + it_ / CPR];                                            \
      if (ro_ >= 0) kreg[m_] = load_kv8(k, ro_ + 8 * (it_ % CPR));                              \
    }                                                                                           \
  }
#define STORE_K()                                                                               \
  _Pragma("unroll") for (int m_ = 0; m_ < KIT; ++m_) {                                          \
    const int it_ = tid + WGSZ * m_;                                                            \
    if (it_ < KEYS * CPR) {                                                                     \
      const int r_ = it_ / CPR, c_ = it_ % CPR;                                                 \
      ks[r_ * KRQ + (KSWZ ? c_ ^ ((r_ & 1) << 2) : c_)] = kreg[m_];                             \
    }                                                                                           \
  }
#endif

#define LOAD_V(B)                                                                               \
  _Pragma("unroll") for (int m_ = 0; m_ < VIT; ++m_) {                                          \
    __local const long* vro_ = roff + (B) * KEYS + vro[m_];                                     \
    _Pragma("unroll") for (int j_ = 0; j_ < 8; ++j_) {                                          \
      VDVEC x_ = (VDVEC)(0u);                                                                   \
      if (vok[m_]) {                                                                            \
        const long ro_ = vro_[8 * (j_ >> 1) + (j_ & 1)];                                        \
        if (ro_ >= 0) x_ = LOAD_VD(v, ro_ + vgo[m_]);                                           \
      }                                                                                         \
      VW_SET(vw[m_][j_], x_);                                                                   \
    }                                                                                           \
  }

// Row VD*q + i of Vt gets key pairs (32c + 2 vt4 + 8 mm, +1) of dim VD*q + i, mm = 0..3.
#define STORE_V()                                                                               \
  _Pragma("unroll") for (int m_ = 0; m_ < VIT; ++m_) {                                          \
    if (vok[m_]) {                                                                              \
      _Pragma("unroll") for (int i_ = 0; i_ < VD; ++i_) {                                       \
        const uint sel_ = (i_ & 1) ? 0x7632u : 0x5410u;                                         \
        ((i_ & 1) ? vst_o[m_] : vst_e[m_])[i_ * VRQ] =                                          \
            (uint4)(prmt(vw[m_][0][i_ >> 1], vw[m_][1][i_ >> 1], sel_),                         \
                    prmt(vw[m_][2][i_ >> 1], vw[m_][3][i_ >> 1], sel_),                         \
                    prmt(vw[m_][4][i_ >> 1], vw[m_][5][i_ >> 1], sel_),                         \
                    prmt(vw[m_][6][i_ >> 1], vw[m_][7][i_ >> 1], sel_));                        \
      }                                                                                         \
    }                                                                                           \
  }

// Row sums of P (rounded as P V sees it) into lsum: one mma against a ones column per 16 keys.
#define ROWSUM_P(PA_)                                                                           \
  _Pragma("unroll") for (int mt = 0; mt < MT; ++mt)                                             \
    _Pragma("unroll") for (int kc = 0; kc < KEYS / 16; ++kc)                                    \
      MMA(lsum[mt], PA_[mt][kc][0], PA_[mt][kc][1], PA_[mt][kc][2], PA_[mt][kc][3], ONE2, ONE2)

// Soft cap, masks (boundary tiles only) and the online softmax's P of one tile's scores
// S_[MT][NT][4] whose first key is K0_: P into PA_, row maxima moved, the O / row-sum rescale
// factors left in ALO_[MT] / AHI_[MT] (SOFTMAX_RESCALE applies them).
#define SCORES_TO_P(S_, K0_, PA_, ALO_, AHI_)                                                                 \
  do {                                                                                                        \
    if (cap_log2 > 0.f) {                                                                                     \
      _Pragma("unroll") for (int mt = 0; mt < MT; ++mt)                                                       \
        _Pragma("unroll") for (int j = 0; j < NT; ++j)                                                        \
          _Pragma("unroll") for (int e = 0; e < 4; ++e) S_[mt][j][e] = cap_log2 * tanh(S_[mt][j][e] * inv_cap); \
    }                                                                                                         \
    const bool need_mask = has_mask || (K0_) + KEYS > kv_len || (causal && (K0_) + KEYS - 1 > w_first_pos) || \
                           (window_left >= 0 && (K0_) < w_last_pos - window_left);                            \
    if (need_mask) {                                                                                          \
      /* Column 8j + 2t + (e & 1) of the tile is visible to a row iff it lies in the row's */                 \
      /* [kmin, kmax] (relative to this lane's first column) and its custom-mask bit is set. */               \
      const int kb = (K0_) + 2 * t;                                                                           \
      _Pragma("unroll") for (int mt = 0; mt < MT; ++mt) {                                                     \
        const int rmin_lo = kmin_lo[mt] - kb, rmax_lo = kmax_lo[mt] - kb;                                     \
        const int rmin_hi = kmin_hi[mt] - kb, rmax_hi = kmax_hi[mt] - kb;                                     \
        _Pragma("unroll") for (int j = 0; j < NT; ++j)                                                        \
          _Pragma("unroll") for (int e = 0; e < 4; ++e) {                                                     \
            const int c = 8 * j + (e & 1);                                                                    \
            const bool in = e < 2 ? (c >= rmin_lo && c <= rmax_lo) : (c >= rmin_hi && c <= rmax_hi);          \
            if (!in) S_[mt][j][e] = CLATTN_NEG_INF;                                                           \
          }                                                                                                   \
        if (has_mask) {                                                                                       \
          ulong mb_lo[(KEYS + 63) / 64], mb_hi[(KEYS + 63) / 64];                                             \
          _Pragma("unroll") for (int h = 0; h < (KEYS + 63) / 64; ++h) {                                      \
            mb_lo[h] = ok_lo[mt] ? mask_bits(mask, mask_end, (long)mask_off * 8 + (long)tok_lo[mt] * kv_len + kb + 64 * h) : 0; \
            mb_hi[h] = ok_hi[mt] ? mask_bits(mask, mask_end, (long)mask_off * 8 + (long)tok_hi[mt] * kv_len + kb + 64 * h) : 0; \
          }                                                                                                   \
          _Pragma("unroll") for (int j = 0; j < NT; ++j)                                                      \
            _Pragma("unroll") for (int e = 0; e < 4; ++e) {                                                   \
              const int c = 8 * j + (e & 1);                                                                  \
              const ulong mb = e < 2 ? mb_lo[c / 64] : mb_hi[c / 64];                                         \
              if (!((mb >> (c % 64)) & 1)) S_[mt][j][e] = CLATTN_NEG_INF;                                     \
            }                                                                                                 \
        }                                                                                                     \
      }                                                                                                       \
    }                                                                                                         \
    /* Online softmax per m-tile: row max over the tile (4 lanes share a row). */                             \
    _Pragma("unroll") for (int mt = 0; mt < MT; ++mt) {                                                       \
      float tl[NT], th[NT];  /* tree reductions: short dependency chains */                                   \
      _Pragma("unroll") for (int j = 0; j < NT; ++j) tl[j] = fmax(S_[mt][j][0], S_[mt][j][1]), th[j] = fmax(S_[mt][j][2], S_[mt][j][3]); \
      _Pragma("unroll") for (int lv = 1; lv < NT; lv *= 2)                                                    \
        _Pragma("unroll") for (int j = 0; j < NT; j += 2 * lv) tl[j] = fmax(tl[j], tl[j + lv]), th[j] = fmax(th[j], th[j + lv]); \
      SOFTMAX_P(fmax(m_lo[mt], tl[0]), fmax(m_hi[mt], th[0]), m_lo[mt], m_hi[mt], S_[mt], PA_[mt], ALO_[mt], AHI_[mt]); \
    }                                                                                                         \
  } while (0)

#if WGMMA
  // Pipelined warpgroup loop (FlashAttention-3's intra-warpgroup overlap, Shah et al. 2024).
  // Iteration j, tile j's P already computed (pa):
  //   wait K(j+1), V(j) | barrier | copy K(j+3) and V(j+2) (TMA: V(j+1)) | issue S(j+1) =
  //   Q K(j+1)^T | issue O += P(j) V(j) | wait S(j+1) | masks, max, P(j+1) -> pn (the tensor
  //   cores run P(j) V(j) meanwhile) | wait P V | rescale O, row sums, pa = pn | addresses of
  //   later tiles (FEED_AHEAD).
  // Every stage's last wgmma reader has completed before the barrier that precedes its refill.
  // Every wgmma runs unconditionally, with its descriptors computed before the fence: ptxas
  // serialises all wgmma of a kernel (a wait after each) when one sits in a branch it cannot
  // prove warpgroup-uniform or when its operands are defined inside the fence .. commit
  // window. So no per-warpgroup tile skipping (the masks zero what a warpgroup must not see),
  // and the last iteration computes a discarded S of a stale stage.
  // The feed (FEED_PROLOGUE, FEED_WAIT, FEED_ISSUE, FEED_REFILL, FEED_AHEAD and the stage
  // descriptors K_DESC / V_DESC) is cp.async by every work-item or TMA by two producers.
  const int t0 = STAGGER && ntiles > 1 ? (item * 37) % ntiles : 0;
#define TIX(T) ((T) + t0 < ntiles ? (T) + t0 : (T) + t0 - ntiles)  // tile walked T-th (T < ntiles)
#if TMA
  // No work-group barrier per tile: each stage has a "full" mbarrier (the copies' bytes, one
  // arrival by each issuing work-item) and an "empty" one (one arrival per warpgroup once its
  // wgmma reads of the stage have completed); a producer waits for "empty" before it
  // refills a stage. So the warpgroups run out of step, one's softmax beside another's MMA,
  // and with PINGPONG they take turns to issue their wgmma (FlashAttention-3's warp
  // scheduling). Two producers, each right after its own warpgroup's turn (beside the next
  // warpgroup's MMA; each the lane 0s of its warpgroup's first NPROD warps, below): warpgroup
  // 0 refills K, so K(it+2) is issued two turns before warpgroup 0 needs it instead of one,
  // and the last warpgroup refills V (the last to release a V stage, it never waits). H100,
  // 1 x 4096: both refills by the last warpgroup before its turn left warpgroup 0 waiting ~45%
  // of each iteration for K (261 TFLOP/s); K by warpgroup 0: 279; V by warpgroup 1: 261; V
  // after the last one's turn: +1-2%.
  // Stages: K, then V, then the full and the empty mbarriers (parity of the n-th use: n & 1).
  const uint sbase = ((uint)(size_t)tsm + 1023u) & ~1023u;
  const int wg = warp >> 2, wtid = tid & 127;
#define KST(T) (sbase + ((T) % TK_ST) * TSTAGE)
#define VST(T) (sbase + (TK_ST + (T) % TV_ST) * TSTAGE)
#define KBAR(T) (sbase + (TK_ST + TV_ST) * TSTAGE + 8 * ((T) % TK_ST))
#define VBAR(T) (sbase + (TK_ST + TV_ST) * TSTAGE + 8 * (TK_ST + (T) % TV_ST))
#define KEMPTY(T) (KBAR(T) + 8 * (TK_ST + TV_ST))
#define VEMPTY(T) (VBAR(T) + 8 * (TK_ST + TV_ST))
#define NWG (WARPS / 4)
  // Named barriers (0 is the work-group's): 1 .. NWG the warpgroups' turns, 8 + wg a warpgroup.
#define WG_SYNC() asm volatile("bar.sync %0, 128;" ::"r"(8 + wg) : "memory")
#define K_DESC(T, kk) wg_desc_sw128(KST(T) + ((kk) >> 2) * (KEYS * 128) + 32 * ((kk) & 3))
#define V_DESC(T, kc, p) wg_desc_sw128(VST(T) + (p) * (KEYS * 128) + 2048 * (kc))
  const ulong kmap = (ulong)(size_t)tmaps, vmap = kmap + 128;
  // Boxes past kv_len load the last box that holds keys (in bounds; V rows zeroed, K masked).
  const int klast = ((kv_len - 1 + tok_off) & ~15) - tok_off;
#define BOX_KEY(T, b) min(kv_begin + TIX(T) * KEYS + 16 * (b), klast)
  // Producers: kprod (K copies) and vprod (V copies; the same work-items with one warpgroup):
  // lane 0 of the warpgroup's first TMA_PRODUCERS warps, each issuing its share of a tile's
  // KEYS / 16 boxes x HEAD_DIM / 64 slices (COPY_OWNER; its own page lookups and its own
  // expected bytes: a full mbarrier takes NPROD arrivals). The issue work delays the
  // producer's warp, and so its warpgroup, so it is spread (H100, 1 x 4096, same job: 303/314
  // -> 308/317 TFLOP/s with two, shuffled page ids 267 -> 288/290; four: 304/311).
#ifndef TMA_PRODUCERS
#define TMA_PRODUCERS 2
#endif
#define TMA_COPIES ((KEYS / 16) * (HEAD_DIM / 64))
#define NPROD (TMA_PRODUCERS < TMA_COPIES ? TMA_PRODUCERS : TMA_COPIES)
// Part issuing box b's slice h (boxes split first, then slices); 1 when this work-item's
// part issues some slice of box b (so it looks b's page up).
#define COPY_OWNER(b, h) \
  (NPROD <= KEYS / 16 ? (b) % NPROD : (b) % (KEYS / 16) + (KEYS / 16) * ((h) % (NPROD / (KEYS / 16))))
#define PPART ((tid >> 5) & 3)
#define BOX_OWNED(b) (NPROD <= KEYS / 16 ? (b) % NPROD == PPART : (b) == PPART % (KEYS / 16))
  const bool kprod = (tid & 31) == 0 && tid < 32 * NPROD;
  const bool vprod = (tid & 31) == 0 && (uint)(tid - 128 * (NWG - 1)) < 32u * NPROD;
#if TK_ST < 2 || TK_ST > 4 || TV_ST < 2 || TV_ST > 4
#error "extend_mma_nv.cl: TK_ST and TV_ST must be 2 .. 4 (the prologue's copies)"
#endif
  // Page ids of the boxes: from ptab (pages pt0 .. of the group's keys, loaded by every
  // work-item before FEED_START's barrier), so no page-table load sits in a producer's path
  // (H100: page ids loaded a few tiles ahead into registers still stalled the producers when
  // they shifted them); from page_ids when the range does not fit.
  const int pt0 = PAGE_OF(kv_begin + tok_off);
  const int pt_n = ntiles > 0 ? PAGE_OF(min(kv_begin + ntiles * KEYS, kv_len) - 1 + tok_off) - pt0 + 1 : 0;
  const bool use_pt = paged && ntiles > 0 && pt_n <= TMA_PAGES;
  // When the group's page ids form one run (consecutive, as a fresh cache hands them out) and
  // pages hold a power of two keys, a producer computes slot and page id with a shift, a mask
  // and an add (one branch per tile, none per box). A ptab lookup puts a shared-address
  // computation, a load and a move to uniform registers in front of each copy: H100, 1 x 4096,
  // 268/273 -> 305/311 TFLOP/s with runs; shuffled ids (the lookup) 272 -> 265.
  int pt_run = 0, pt_add = 0;  // set by FEED_START: page id = page + pt_add
#define RUN_SLOT(TT) SLOT_POW2(TT)
#define RUN_PAGE(TT) (PAGE_POW2(TT) + pt_add)
#define ANY_SLOT(TT) (paged ? SLOT_OF(TT) : base + (TT))
#define ANY_PAGE(TT) (!paged ? 0 : use_pt ? ptab[PAGE_OF(TT) - pt0] : page_ids[base + PAGE_OF(TT)])
  // Tile T of MAP into stage DST, counted on BAR (a producer).
#define TMA_TILE(T, MAP, DST, BAR)                      \
  {                                                     \
    if (pt_run)                                         \
      TMA_TILE_AT(T, MAP, DST, BAR, RUN_SLOT, RUN_PAGE) \
    else                                                \
      TMA_TILE_AT(T, MAP, DST, BAR, ANY_SLOT, ANY_PAGE) \
  }
#define TMA_TILE_AT(T, MAP, DST, BAR, SLOT, PAGE)                                               \
  {                                                                                             \
    MBAR_EXPECT(BAR, TSTAGE / NPROD);                                                           \
    _Pragma("unroll") for (int b_ = 0; b_ < KEYS / 16; ++b_) {                                  \
      if (BOX_OWNED(b_)) {                                                                      \
        const int tt_ = BOX_KEY(T, b_) + tok_off;                                               \
        const int sl_ = SLOT(tt_);                                                              \
        const int pgc_ = PAGE(tt_);                                                             \
        _Pragma("unroll") for (int h_ = 0; h_ < HEAD_DIM / 64; ++h_)                            \
          if (COPY_OWNER(b_, h_) == PPART)                                                      \
            TMA_LOAD4((DST) + h_ * (KEYS * 128) + 2048 * b_, MAP, 64 * h_, TMA_HEAD_FIRST ? kvh : sl_, \
                      TMA_HEAD_FIRST ? sl_ : kvh, pgc_, BAR);                                   \
      }                                                                                         \
    }                                                                                           \
  }
  // V rows of tile T at or past kv_len -> 0, by each warpgroup before its own P V (the same
  // zeros; generic-proxy stores, fenced for wgmma's reads: the only such writes, as the
  // copies are async-proxy writes already).
#define ZERO_TAIL(T)                                                                            \
  {                                                                                             \
    const int r0_ = kv_len - (kv_begin + TIX(T) * KEYS);                                        \
    if (r0_ < KEYS) {                                                                           \
      for (int i_ = wtid; i_ < KEYS * HEAD_DIM / 8; i_ += 128) {                                \
        const int r_ = (i_ >> 3) % KEYS;                                                        \
        if (r_ >= r0_) ST_SHARED_ZERO16(VST(T) + (i_ >> 3) / KEYS * (KEYS * 128) + 128 * r_ + 16 * (i_ & 7)); \
      }                                                                                         \
      FENCE_PROXY_ASYNC();                                                                      \
      WG_SYNC();                                                                                \
    }                                                                                           \
  }
// Barriers initialised, the first copies issued (before the q loads, LOAD_Q), then K(0) awaited.
#define FEED_START()                                                                            \
  if (tid == 0) {                                                                               \
    _Pragma("unroll") for (int i_ = 0; i_ < TK_ST + TV_ST; ++i_) {                              \
      MBAR_INIT(KBAR(0) + 8 * i_, (uint)NPROD);                                                 \
      MBAR_INIT(KEMPTY(0) + 8 * i_, (uint)NWG);                                                 \
    }                                                                                           \
    MBAR_INIT_FENCE();                                                                          \
  }                                                                                             \
  if (paged && ntiles > 0) { /* every id checked once (TMA reads an outside one as zeros) */    \
    const int id0_ = page_ids[base + pt0];                                                      \
    int run_ = 1;                                                                               \
    for (int i_ = tid; i_ < pt_n; i_ += WGSZ) {                                                 \
      const int id_ = page_ids[base + pt0 + i_];                                                \
      if (use_pt) ptab[i_] = id_;                                                               \
      run_ &= id_ == id0_ + i_;                                                                 \
      bad |= !IN_POOL(id_, num_pages);                                                          \
    }                                                                                           \
    if (use_pt) {                                                                               \
      run_ = warp_all(run_);                                                                    \
      if (lane == 0) prun[warp] = run_;                                                         \
    }                                                                                           \
  }                                                                                             \
  barrier(CLK_LOCAL_MEM_FENCE);                                                                 \
  if (use_pt && pg_log2 >= 0) {                                                                 \
    pt_run = 1;                                                                                 \
    _Pragma("unroll") for (int w_ = 0; w_ < WARPS; ++w_) pt_run &= prun[w_];                    \
    pt_add = ptab[0] - pt0;                                                                     \
  }                                                                                             \
  if (kprod) {                                                                                  \
    TMAP_ACQUIRE(kmap);                                                                         \
    TMA_TILE(0, kmap, KST(0), KBAR(0));                                                         \
    if (ntiles > 1) TMA_TILE(1, kmap, KST(1), KBAR(1));                                         \
    if (TK_ST > 2 && ntiles > 2) TMA_TILE(2, kmap, KST(2), KBAR(2));                            \
    if (TK_ST > 3 && ntiles > 3) TMA_TILE(3, kmap, KST(3), KBAR(3));                            \
  }                                                                                             \
  if (vprod) {                                                                                  \
    TMAP_ACQUIRE(vmap);                                                                         \
    TMA_TILE(0, vmap, VST(0), VBAR(0));                                                         \
    if (TV_ST > 2 && ntiles > 1) TMA_TILE(1, vmap, VST(1), VBAR(1));                            \
    if (TV_ST > 3 && ntiles > 2) TMA_TILE(2, vmap, VST(2), VBAR(2));                            \
  }
#define FEED_PROLOGUE() MBAR_WAIT(KBAR(0), 0u);
  // K(it+1) and V(it) landed.
#define FEED_WAIT(it)                                                                           \
  if ((it) + 1 < ntiles) MBAR_WAIT(KBAR((it) + 1), (uint)(((it) + 1) / TK_ST) & 1u);            \
  MBAR_WAIT(VBAR(it), (uint)((it) / TV_ST) & 1u);                                               \
  ZERO_TAIL(it);
#define FEED_ISSUE(it)  // (the refills follow the producers' turns)
  // After a producer's wgmma of iteration it: K(it+TK_ST) into K(it)'s stage (every warpgroup
  // computed S(it) in the previous round of turns), V(it+TV_ST-1) into V(it-1)'s.
#define FEED_REFILL(it)                                                                         \
  if (kprod && (it) + TK_ST < ntiles) {                                                         \
    MBAR_WAIT(KEMPTY(it), (uint)((it) / TK_ST) & 1u);                                           \
    TMA_TILE((it) + TK_ST, kmap, KST((it) + TK_ST), KBAR((it) + TK_ST));                        \
  }                                                                                             \
  if (vprod && (it) + TV_ST - 1 < ntiles) {                                                     \
    if ((it) >= 1) MBAR_WAIT(VEMPTY((it) - 1), (uint)(((it) - 1) / TV_ST) & 1u);                \
    TMA_TILE((it) + TV_ST - 1, vmap, VST((it) + TV_ST - 1), VBAR((it) + TV_ST - 1));             \
  }
#define FEED_AHEAD(it)
  // A warpgroup's wgmma reads of K(T) / V(T) have completed (one arrival per warpgroup).
#define RELEASE_K(T) if (wtid == 0) MBAR_ARRIVE(KEMPTY(T))
#define RELEASE_V(T) if (wtid == 0) MBAR_ARRIVE(VEMPTY(T))
#if PINGPONG && NWG > 1
  // Turns: warpgroup w waits for barrier 1 + w (its predecessor's arrival) before it issues
  // the wgmma of an iteration and then lets its successor go.
#define TURN_WAIT() asm volatile("bar.sync %0, %1;" ::"r"(1 + wg), "r"(256) : "memory")
#define TURN_PASS() asm volatile("bar.arrive %0, %1;" ::"r"(1 + (wg + 1) % NWG), "r"(256) : "memory")
#define TURN_START() if (wg == NWG - 1) asm volatile("bar.arrive 1, 256;" ::: "memory")
#define TURN_END() if (wg == 0) asm volatile("bar.sync 1, 256;" ::: "memory")  // the last pass
#endif
#else
  // Copies: work-item tid moves chunk kc0 of keys kr0 + RSTEP * m (m < KPT) of every tile; it
  // computes those keys' row offsets itself, the page ids one tile ahead (pf). Three K and
  // three V stages: every copy has two iterations to land (K(j), V(j-1): stage j % 3, (j+2) % 3).
#define KPT ((KEYS + RSTEP - 1) / RSTEP)
#if WGSZ % CPR
#error "extend_mma_nv.cl: WGMMA copies need the work-group size to be a multiple of HEAD_DIM / 8"
#endif
  const int kr0 = tid / CPR, kc0 = tid % CPR;
  int pf[KPT];   // page ids of the keys of tile T (loaded by PAGES(T))
  long ko[KPT];  // row offsets of the next K tile to copy, vo: of the next V tile (-1: none)
  long vo[KPT];
#define KEY_TT(T, m_) ((T) < ntiles ? kv_begin + TIX(T) * KEYS + kr0 + RSTEP * (m_) : kv_end)
#define PAGES(T)                                                                                \
  _Pragma("unroll") for (int m_ = 0; m_ < KPT; ++m_) {                                          \
    const int key_ = KEY_TT(T, m_), tt_ = key_ + tok_off;                                       \
    if (paged && key_ < kv_end && kr0 + RSTEP * m_ < KEYS)                                      \
      pf[m_] = page_ids[base + PAGE_OF(tt_)];                                                   \
  }
#define OFFSETS(T, DST)                                                                         \
  _Pragma("unroll") for (int m_ = 0; m_ < KPT; ++m_) {                                          \
    const int key_ = KEY_TT(T, m_), tt_ = key_ + tok_off;                                       \
    DST[m_] = -1;                                                                               \
    const bool in_ = !paged || IN_POOL(pf[m_], num_pages);                                      \
    bad |= key_ < kv_end && !in_;                                                               \
    if (key_ < kv_end && in_)                                                                   \
      DST[m_] = (paged ? (long)pf[m_] * stride_page + (long)SLOT_OF(tt_) * stride_token          \
                       : (long)(base + key_) * stride_token) + (long)kvh * stride_head + 8 * kc0; \
  }
#define COPY_ROWS(DST, SRC, SLOT, OFF)                                                          \
  _Pragma("unroll") for (int m_ = 0; m_ < KPT; ++m_) {                                          \
    const int r_ = kr0 + RSTEP * m_;                                                            \
    if (KEYS % RSTEP == 0 || r_ < KEYS)                                                         \
      CP_ASYNC16((DST) + SLOT(r_, kc0), (__global const ushort*)(SRC) + (OFF[m_] >= 0 ? OFF[m_] : 0), \
                 OFF[m_] >= 0 ? 16 : 0);                                                        \
  }
#define COPY_K(T, OFF) COPY_ROWS(ks + ((T) % KSTAGES) * (KEYS * KRQ), k, KSLOT, OFF)
#define COPY_V(T, OFF) COPY_ROWS(vs + ((T) % KSTAGES) * (KEYS * VRS), v, VSLOT, OFF)
#define K_DESC(T, kk) wg_desc((uint)(size_t)(ks + ((T) % KSTAGES) * (KEYS * KRQ)) + 256 * (kk), 128, 128 * CPR)
  // k-step kc: keys 16kc .. 16kc + 15 = 8-key blocks 2kc, 2kc + 1; 64 dims per wgmma.
#define V_DESC(T, kc, p) \
  wg_desc((uint)(size_t)(vs + ((T) % KSTAGES) * (KEYS * VRS)) + 2 * 128 * CPR * (kc) + 1024 * (p), 128 * CPR, 128)
  // Groups {K0, V0, K1} and {K2, V1}; then ko = offsets of tile 3, vo = of tile 2, pf = page
  // ids of tile 4 (tiles past the end give offsets -1 and are never copied).
#define FEED_START()
#define FEED_PROLOGUE()                                                                         \
  PAGES(0);                                                                                     \
  OFFSETS(0, ko);                                                                               \
  PAGES(1);                                                                                     \
  OFFSETS(1, vo);                                                                               \
  COPY_K(0, ko);                                                                                \
  COPY_V(0, ko);                                                                                \
  if (ntiles > 1) COPY_K(1, vo);                                                                \
  CP_COMMIT();                                                                                  \
  PAGES(2);                                                                                     \
  OFFSETS(2, ko);                                                                               \
  if (ntiles > 2) COPY_K(2, ko);                                                                \
  if (ntiles > 1) COPY_V(1, vo);                                                                \
  CP_COMMIT();                                                                                  \
  _Pragma("unroll") for (int m_ = 0; m_ < KPT; ++m_) vo[m_] = ko[m_];                           \
  PAGES(3);                                                                                     \
  OFFSETS(3, ko);                                                                               \
  PAGES(4);                                                                                     \
  CP_WAIT1();                                                                                   \
  FENCE_PROXY_ASYNC(); /* this work-item's copies -> visible to wgmma's (async proxy) reads */  \
  barrier(CLK_LOCAL_MEM_FENCE);
  // K(it+1) and V(it) landed (the group of iteration it-2); every warpgroup is done with K(it)
  // and V(it-1).
#define FEED_WAIT(it)                                                                           \
  CP_WAIT1();                                                                                   \
  FENCE_PROXY_ASYNC();                                                                          \
  barrier(CLK_LOCAL_MEM_FENCE);
#define FEED_REFILL(it)
#define FEED_ISSUE(it)                                                                          \
  if ((it) + 3 < ntiles) COPY_K((it) + 3, ko);                                                  \
  if ((it) + 2 < ntiles) COPY_V((it) + 2, vo);                                                  \
  CP_COMMIT();                                                                                  \
  _Pragma("unroll") for (int m_ = 0; m_ < KPT; ++m_) vo[m_] = ko[m_];
  // Offsets of tile it+4 (its page ids were loaded an iteration ago) and the page ids of it+5,
  // last: a page-id load that has not arrived stalls the warp here, where it waits for the
  // next barrier anyway, not in front of the next wgmma.
#define FEED_AHEAD(it)                                                                          \
  OFFSETS((it) + 4, ko);                                                                        \
  PAGES((it) + 5);
#define RELEASE_K(T)
#define RELEASE_V(T)
#endif
#ifndef TURN_WAIT
#define TURN_WAIT()
#define TURN_PASS()
#define TURN_START()
#define TURN_END()
#endif
#define ISSUE_S(T)                                                                              \
  {                                                                                             \
    ulong dsc_[DK];                                                                             \
    _Pragma("unroll") for (int kk = 0; kk < DK; ++kk) dsc_[kk] = K_DESC(T, kk);                 \
    WG_FENCE();                                                                                 \
    _Pragma("unroll") for (int kk = 0; kk < DK; ++kk) WG_MMA_S(sn[0], qa[0][kk], dsc_[kk], kk); \
  }
  float sn[1][NT][4];          // S of the next tile (wgmma accumulator)
  uint pa[1][KEYS / 16][4];    // P of the current tile (A operand of its P V)
  uint pn[1][KEYS / 16][4];    // P of the next tile, written while P V(pa) is in flight
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
    for (int j = 0; j < NT; ++j) WG_KEEP4(sn[0][j]);
    float alo[1], ahi[1];  // O and the row sums are still 0: nothing to rescale
    SCORES_TO_P(sn, kv_begin + TIX(0) * KEYS, pa, alo, ahi);
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
        for (int p = 0; p < HEAD_DIM / 64; ++p) WG_MMA_PV64(oacc[0] + 8 * p, pa[0][kc], dsc_[kc][p]);
    }
    WG_COMMIT();
    TURN_PASS();
    FEED_REFILL(it);
    WG_WAIT1();  // S(it+1) complete; P(it) V(it) may still run
    if (has_next) RELEASE_K(it + 1);
    float alo[1], ahi[1];
    if (has_next) {
#pragma unroll
      for (int j = 0; j < NT; ++j) WG_KEEP4(sn[0][j]);
      SCORES_TO_P(sn, kv_begin + TIX(it + 1) * KEYS, pn, alo, ahi);
    }
    WG_WAIT0();
    RELEASE_V(it);
#pragma unroll
    for (int n = 0; n < DN; ++n) WG_KEEP4(oacc[0][n]);
    if (has_next) {
      SOFTMAX_RESCALE(alo[0], ahi[0], oacc[0], lsum[0]);
      ROWSUM_P(pn);
#pragma unroll
      for (int kc = 0; kc < KEYS / 16; ++kc)
        pa[0][kc][0] = pn[0][kc][0], pa[0][kc][1] = pn[0][kc][1], pa[0][kc][2] = pn[0][kc][2], pa[0][kc][3] = pn[0][kc][3];
    }
    FEED_AHEAD(it);
  }
  TURN_END();
#else
  // Pipeline. Entering iteration j: Ks = K(j) (visible), kreg = K(j+1) and vw = V(j) in
  // flight, roff buffer (j+1)&1 = tile j+1, pf = page ids of tile j+2.
  //   S(j), softmax | vw -> Vt | roff(j+2), pf <- tile j+3 | barrier
  //   | kreg -> Ks, load V(j+1), load K(j+2) | O += P V(j) | barrier
  // Every load has a whole tile of math to arrive; two barriers per tile.
  // ASYNC: wait for tile j's copies | barrier (tile j visible; every warp done with tile
  // j-1's stage and roff buffer) | copies of tile j+1 | roff(j+2), pf <- tile j+3 | S(j),
  // softmax, O += P V(j): one barrier per tile.
  if (ntiles > 0) {
    PF_LOAD(0);
    PF_STORE(0);
    if (ntiles > 1) {
      PF_LOAD(1);
      PF_STORE(1);
    }
    if (ntiles > 2) PF_LOAD(2);
    barrier(CLK_LOCAL_MEM_FENCE);
#if ASYNC
    ISSUE_KV(0);
    CP_COMMIT();
  }
#else
    LOAD_K(0);
    STORE_K();
    LOAD_V(0);
    if (ntiles > 1) LOAD_K(1);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
#endif

  for (int it = 0; it < ntiles; ++it) {
    const int k0 = kv_begin + it * KEYS;
    const bool has_next = it + 1 < ntiles;
#if ASYNC
    CP_WAIT0();
    barrier(CLK_LOCAL_MEM_FENCE);
    if (has_next) ISSUE_KV(it + 1);
    CP_COMMIT();
    if (it + 2 < ntiles) {
      PF_STORE(it + 2);  // buffer it & 1: its last reader (the copies of tile it) ran before the barrier
      if (it + 3 < ntiles) PF_LOAD(it + 3);
    }
    const int kso = (it & 1) * (KEYS * KRQ);  // stage of tile it
#else
    const int kso = 0;
#endif
    const bool vis = WARP_VISIBLE(!(k0 >= w_end || k0 + KEYS <= w_begin));  // warp-uniform

    // S = Q K^T (WROWS x KEYS per warp, log2 domain: Q carries the scale), masks, softmax.
    uint pa[MT][KEYS / 16][4];
    if (vis) {
      float s[MT][NT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int j = 0; j < NT; ++j) s[mt][j][0] = s[mt][j][1] = s[mt][j][2] = s[mt][j][3] = 0.f;
#pragma unroll
      for (int j = 0; j < NT; ++j) {
#pragma unroll
        for (int c = 0; c < NG; ++c) {
          if (2 * c + 1 < DK) {
            const uint4 b = ((c & 1) ? kp_odd : kp_even)[kso + 8 * j * KRQ + 4 * c];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
              MMA(s[mt][j], qa[mt][2 * c][0], qa[mt][2 * c][1], qa[mt][2 * c][2], qa[mt][2 * c][3], b.x, b.y);
              MMA(s[mt][j], qa[mt][2 * c + 1][0], qa[mt][2 * c + 1][1], qa[mt][2 * c + 1][2], qa[mt][2 * c + 1][3], b.z,
                  b.w);
            }
          } else {  // last 16 dims when DK is odd (padded layout): words 16c + 2t of row g
            const uint2 b = kp_tail[2 * kso + 8 * j * (KRS / 2) + 8 * c];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
              MMA(s[mt][j], qa[mt][2 * c][0], qa[mt][2 * c][1], qa[mt][2 * c][2], qa[mt][2 * c][3], b.x, b.y);
          }
        }
      }

      float alo[MT], ahi[MT];
      SCORES_TO_P(s, k0, pa, alo, ahi);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) SOFTMAX_RESCALE(alo[mt], ahi[mt], oacc[mt], lsum[mt]);
    }

#if !ASYNC
    STORE_V();  // every warp finished reading Vt(j-1) before the previous barrier
    if (it + 2 < ntiles) {
      PF_STORE(it + 2);  // buffer it & 1: its last readers (loads of tile it) ran before the previous barrier
      if (it + 3 < ntiles) PF_LOAD(it + 3);
    }
    barrier(CLK_LOCAL_MEM_FENCE);  // Vt(j), roff(j+2) visible; every warp is done with Ks(j)
    if (has_next) {
      STORE_K();
      LOAD_V((it + 1) & 1);
      if (it + 2 < ntiles) LOAD_K(it & 1);
    }
#endif

    // O += P V (P rounded to the MMA type), row sums of P by an mma against ones; each V
    // fragment read from local memory serves the warp's MT m-tiles.
    if (vis) {
      ROWSUM_P(pa);
#if ASYNC
      __local const uint4* const vb_ = lbv + (it & 1) * (KEYS * VRS);
#pragma unroll
      for (int kc = 0; kc < KEYS / 16; ++kc) {
#pragma unroll
        for (int n = 0; n < DN; n += 2) {
          uint b0, b1, b2, b3;
          LDSM_X4_T(vb_ + kc * (16 * VRS) + (n & ~7) + lo2[(n & 7) >> 1], b0, b1, b2, b3);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            MMA(oacc[mt][n], pa[mt][kc][0], pa[mt][kc][1], pa[mt][kc][2], pa[mt][kc][3], b0, b1);
            MMA(oacc[mt][n + 1], pa[mt][kc][0], pa[mt][kc][1], pa[mt][kc][2], pa[mt][kc][3], b2, b3);
          }
        }
      }
#else
#pragma unroll
      for (int n = 0; n < DN; ++n) {
#pragma unroll
        for (int c = 0; c < KEYS / 32; ++c) {
          const uint4 b = vp[((4 * c) ^ (8 * n / VD)) & VXM][8 * n * VRQ + ((4 * c) & ~VXM)];
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            MMA(oacc[mt][n], pa[mt][2 * c][0], pa[mt][2 * c][1], pa[mt][2 * c][2], pa[mt][2 * c][3], b.x, b.y);
            MMA(oacc[mt][n], pa[mt][2 * c + 1][0], pa[mt][2 * c + 1][1], pa[mt][2 * c + 1][2], pa[mt][2 * c + 1][3], b.z,
                b.w);
          }
        }
      }
#endif
    }
#if !ASYNC
    barrier(CLK_LOCAL_MEM_FENCE);  // Ks(j+1) visible; every warp is done with Vt(j)
#endif
  }

#endif

  if (bad) atomic_or(faults, CLATTN_FAULT_PAGE_ID);

  // Sinks, normalisation, stores. lsum[mt][0] (= [1]) and lsum[mt][2] are complete row sums.
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const bool ok = hh ? ok_hi[mt] : ok_lo[mt];
#if !WGMMA
      if (!ok) continue;
#endif
      const int pr = hh ? pr_hi[mt] : pr_lo[mt], tok = hh ? tok_hi[mt] : tok_lo[mt];
      float m = hh ? m_hi[mt] : m_lo[mt], l = hh ? lsum[mt][2] : lsum[mt][0], alpha = 1.f;
      const int h = kvh * G + pr % G;
      if (has_sinks) {
        const float sk = sinks[h] * LOG2E;
        const float mx = fmax(m, sk);
        alpha = m == mx ? 1.f : exp2(m - mx);
        l = l * alpha + exp2(sk - mx);
        m = mx;
      }
      const float inv = l > 0.f ? alpha * v_scale / l : 0.f;
      const size_t orow = (size_t)(qo_start + tok) * Hq + h;
#if WGMMA
      // 16-bit o: quad transposes turn the quad's words (word t of each chunk) into whole
      // 16-byte chunks (chunk t + 4j for lane t); every lane joins the shuffles, rows past
      // the end store nothing.
      if (o_dt == DT_F16 || o_dt == DT_BF16) {
        __global uint4* const o16 = (__global uint4*)((__global ushort*)o + orow * HEAD_DIM) + t;
#pragma unroll
        for (int j = 0; j < DN / 4; ++j) {
          uint w_[4];
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            const float a = oacc[mt][4 * j + u][2 * hh] * inv, b = oacc[mt][4 * j + u][2 * hh + 1] * inv;
            w_[u] = o_dt == DT_F16 ? pack2_f16(a, b) : pack2_bf16(a, b);
          }
          const uint4 x = quad_transpose((uint4)(w_[0], w_[1], w_[2], w_[3]), lane);
          if (ok) o16[4 * j] = x;
        }
      }
      if (!ok) continue;
#else
      if (o_dt == DT_F16 || o_dt == DT_BF16) {
        __global uint* o32 = (__global uint*)o + orow * (HEAD_DIM / 2) + t;
#pragma unroll
        for (int n = 0; n < DN; ++n) {
          const float a = oacc[mt][n][2 * hh] * inv, b = oacc[mt][n][2 * hh + 1] * inv;
          o32[4 * n] = o_dt == DT_F16 ? pack2_f16(a, b) : pack2_bf16(a, b);
        }
      }
#endif
      if (o_dt == DT_F32) {
        __global float2* o64 = (__global float2*)o + orow * (HEAD_DIM / 2) + t;
#pragma unroll
        for (int n = 0; n < DN; ++n) o64[4 * n] = (float2)(oacc[mt][n][2 * hh] * inv, oacc[mt][n][2 * hh + 1] * inv);
      } else if (o_dt != DT_F16 && o_dt != DT_BF16) {
#pragma unroll
        for (int n = 0; n < DN; ++n) {
          const size_t col = orow * HEAD_DIM + 8 * n + 2 * t;
          store_elem(o, col, o_dt, oacc[mt][n][2 * hh] * inv);
          store_elem(o, col + 1, o_dt, oacc[mt][n][2 * hh + 1] * inv);
        }
      }
      if (has_lse && t == 0) lse[orow] = l > 0.f ? (m + log2(l)) * LN2 : CLATTN_NEG_INF;
    }
}

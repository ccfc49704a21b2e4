// MLA (absorbed DeepSeek latent attention) on NVIDIA tensor cores: inline PTX mma.sync
// m16n8k16 (f16 or bf16 inputs, f32 accumulation) inside OpenCL C. Same work entries,
// kernel arguments, split-K partial layout and LSE semantics as cl_kernels/mla.cl (see
// there); decode and extend alike (a query vector is a (row, head) pair).
//
//   work-group = one work entry (request, block of 16 query vectors, KV range) = one MMA
//                m-tile (rows = query vectors; fewer than 16 -> masked rows), WARPS warps
//   slices     warp w owns the latent dims [OCOLS w, OCOLS (w + 1)) of ckv (and KPW of the 4
//              16-dim k-steps of kpe): it loads exactly those bytes of every token, from
//              global memory straight into registers, one KEYS-token tile ahead
//   S = Q K^T  each warp's partial S over its own dims (its q slice stays in registers as A
//              fragments, pre-scaled; its loaded latent chunks ARE the B fragments), summed
//              through local memory in warp order (every warp gets the same S, bit for bit):
//              the one barrier per tile
//   softmax    online, exp2 domain, in registers (rows g and g+8 of each lane; row max over
//              the 4 lanes of a row with shfl), row sums by an MMA against ones
//   O += P V   P = the A fragment built from the S accumulators (FlashAttention-2 register
//              reuse); V = ckv, and warp w's output columns are its own ckv slice: the warp
//              stages the chunks it loaded into its private local buffer and reads P V's B
//              fragments back with ldmatrix.trans (no other warp touches them)
// So the latent crosses local memory once (16 KB written and read per 16-token tile), there
// is no tile-wide staging store, and one barrier per tile.
//
// Permuted k order (the same for Q and the latent, which leaves Q K^T unchanged): in each
// 64-dim group G of a warp's ckv slice, lane t holds dims 64G + 16t .. 64G + 16t + 15 of its
// tokens (two 16-byte loads; a warp's load instruction touches the 128-byte lines of 8
// tokens), and its k indices {2t, 2t+1, 2t+8, 2t+9} of the group's k-step s are dims 64G +
// 16t + 4s + 0..3: register c = 2G + h (chunk 8G + 2t + h) is the B fragment of k-steps 2c
// and 2c + 1. A kpe k-step: k {2t, 2t+1, 2t+8, 2t+9} = dims 4t + 0..3 (one 8-byte load).
//
// Staged V (per warp): vb[KEYS][VCH] 16-byte chunks (8 dims), chunk c of token r at c ^
// (r & 7): the staging stores (8 lanes = 2 tokens x chunks 2t + h per phase) and the
// ldmatrix row reads (8 consecutive tokens of one chunk) are conflict-free.
//
// Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16 with floating point type"):
// lane = 4 g + t. A 16x16: a0 = A[g][2t..2t+1], a1 = A[g+8][2t..], a2 = A[g][2t+8..],
// a3 = A[g+8][2t+8..]; B 16x8 "col": b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g];
// C 16x8 f32: c0,c1 = C[g][2t..2t+1], c2,c3 = C[g+8][2t..2t+1].
//
// Work entries (8 int32): {kv_begin, kv_end, part, page_base, q_row0, nrows, vbeg,
// causal_base}, exactly as mla.cl. Scores are in the log2 domain (q_scale = sm_scale *
// log2(e) * kv_scale from the host); fp8 e4m3 is decoded to f16 bits of value * 2^-8
// (KV_RAW), folded back into q and the output scale.
//
// SPARSE_IDX (sparse decode): key t of a work entry is the latent row at position
// MLA_POS(t, ke) of the request's index list (mla_sparse.clh): the loads read it and the mask
// drops keys that add nothing; the rest of the kernel is unchanged.
//
// L2_AHEAD (sparse builds; 0: off): the rows are random, so the register tile (16 rows per
// group, one tile ahead) is all a group has in flight, and each tile's loads wait behind two
// dependent lookups (list entry, then page id). With L2_AHEAD = A, work-item tid looks up key
// tid % KEYS of the tile A tiles ahead, prefetches every WGSZ / KEYS-th 128-byte line of its ckv
// and kpe rows into L2 (prefetch.global.L2: no registers held) and, for tid < KEYS, writes
// (page id, position) into a ring of A + 1 tiles in local memory. The register loads and the
// mask then read the ring (no global lookup on the tile's path) and hit L2. The lookups are
// pipelined over the tiles so that nothing waits on them: each tile prefetches from the page
// id read a tile earlier, reads the page id of the next tile's prefetch from the position read
// a tile earlier, and reads the position of the one after. Ring slots: tile i writes tile
// i + A's (slot (i + A) mod (A + 1) = tile i - 1's, whose last reader ran before tile i's
// barrier) while it reads tile i's (mask) and tile i + 1's (loads).
//
// FUSE_MERGE (decode split-K): a work-group that wrote a partial state counts it in the
// counter of (merge entry, head block) of the run's counter set in the plan's table
// (ops::CounterSets; left zero for the set's next run); the one that completes the count merges
// every part of its 16 query vectors (in part order: deterministic) and writes o / lse.
#include "common.clh"
#include "mla_sparse.clh"

#ifndef KV_DT
#define KV_DT DT_BF16
#endif
#ifndef WARPS
#define WARPS 4
#endif
#ifndef KEYS
#define KEYS 16
#endif
#ifndef FUSE_MERGE
#define FUSE_MERGE 0
#endif
#ifndef L2_AHEAD
#define L2_AHEAD 0
#endif

#if KV_DT == DT_BF16
#define MMA_BF16 1
#else
#define MMA_BF16 0
#endif
#if KV_DT == DT_E4M3
#define KV_RAW 256.0f  // staged f16 = value * 2^-8
#else
#define KV_RAW 1.0f
#endif
#if KV_DT == DT_E4M3 || KV_DT == DT_E5M2
#define FP8 1
#define CHW 2  // global 32-bit words per chunk of 8 values
#else
#define FP8 0
#define CHW 4
#endif

#define WGSZ (32 * WARPS)
#define CKV_DIM 512
#define KPE_DIM 64
#define OCOLS (CKV_DIM / WARPS)     // ckv dims of S and output columns of P V per warp
#define NCG (OCOLS / 32)            // 32-dim groups (two k-steps each) of a warp's slice
#define KPW (KPE_DIM / 16 / WARPS)  // kpe k-steps per warp
#define KSW (2 * NCG + KPW)         // k-steps of S per warp
#define NT (KEYS / 8)               // 8-token n-tiles of S
#define KC (KEYS / 16)              // 16-token k-steps of P V
#define DN (OCOLS / 8)              // 8-column n-tiles of O per warp
#define VCH (OCOLS / 8)             // 16-byte chunks per staged V row
#define LN2 0.6931471805599453f
#define VSW(r) ((r) & 7)
#define CHK(c) (8 * ((c) >> 1) + ((c) & 1))  // slice chunk of a lane's register c, less 2t

#if (WARPS != 2 && WARPS != 4) || (KEYS != 16 && KEYS != 32)
#error "mla_mma_nv.cl: WARPS must be 2 or 4 and KEYS 16 or 32"
#endif
#if L2_AHEAD && (!SPARSE_IDX || L2_AHEAD < 2 || L2_AHEAD > 8)
#error "mla_mma_nv.cl: L2_AHEAD (sparse builds only) must be 0 or 2..8"
#endif

#include "mma_ptx_nv.clh"
#include "mma_softmax_nv.clh"

#if FP8
typedef uint2 RAWC;  // 8 fp8 codes
typedef uint RAWK;   // 4 fp8 codes
// Two fp8 codes (bits 0-7 and 8-15 of x) -> two f16 (lo in the low half), plain integer
// ops. e4m3: the f16 with e4m3's exponent/mantissa fields is value * 2^-8 exactly
// (normals and subnormals alike); e5m2 is the top byte of an f16.
inline uint fp8x2_to_f16x2(uint x) {
  const uint s = (x & 0xffu) | ((x & 0xff00u) << 8);  // byte i -> bits 16 i .. 16 i + 7
#if KV_DT == DT_E4M3
  return ((s & 0x007f007fu) << 7) | ((s & 0x00800080u) << 8);
#else
  return s << 8;
#endif
}
inline uint4 dec_chunk(RAWC w) {
  return (uint4)(fp8x2_to_f16x2(w.x), fp8x2_to_f16x2(w.x >> 16), fp8x2_to_f16x2(w.y), fp8x2_to_f16x2(w.y >> 16));
}
inline uint2 dec_kpe(RAWK w) { return (uint2)(fp8x2_to_f16x2(w), fp8x2_to_f16x2(w >> 16)); }
#else
typedef uint4 RAWC;
typedef uint2 RAWK;
#define dec_chunk(w) (w)
#define dec_kpe(w) (w)
#endif

// Elements d .. d + 3 (d a multiple of 4, all in q_nope or all in q_pe) of query vector row
// `qrow` as raw bits (load4_bits).
inline uint4 q_quad(__global const void* q_nope, __global const void* q_pe, int q_dt, size_t qrow, int d) {
  return d < CKV_DIM ? load4_bits(q_nope, qrow * CKV_DIM + d, q_dt) : load4_bits(q_pe, qrow * KPE_DIM + d - CKV_DIM, q_dt);
}

__kernel __attribute__((reqd_work_group_size(WGSZ, 1, 1)))
void mla_mma(__global const void* q_nope, __global const void* q_pe, int q_dt,
             __global const uint* ckv, __global const uint* kpe, __global const int* page_ids,
             __global const int* tab, int work_off,
             __global void* o, int o_dt, __global float* lse, int has_lse,
             __global float* ws, ulong lse_off, int H,
             long ckv_sp, long ckv_st, long kpe_sp, long kpe_st, long kpe_base,  // in 32-bit words
             int log2_page, float q_scale, float v_scale, int num_pages, __global volatile int* faults
#if FUSE_MERGE
             , __global volatile int* counters, int merge_off, int pmap_off, int counter_off, int n_hblk
#endif
             MLA_SPARSE_ARGS) {
  __local uint4 vb[WARPS * KEYS * VCH];   // every warp's staged V (its own slice)
  __local float4 sp[2 * WARPS * NT * 32];  // partial S of every warp, C-fragment order, 2 buffers
#if L2_AHEAD
  __local int2 ring[(L2_AHEAD + 1) * KEYS];  // per key: (page id in the pool, position; -1: adds nothing)
#endif
#if FUSE_MERGE
  __local int fm_last;
#endif
  PTX_SCRATCH

  const int tid = get_local_id(0);
  const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  __global const int* me = tab + work_off + 8 * (int)get_group_id(0);
  const int kb = me[0], ke = me[1], wpart = me[2], pbase = me[3];
  const int row0 = me[4], nrows = me[5], vbeg = me[6], cbase = me[7];

  // This lane's two query vectors (rows g and g + 8 of the m-tile).
  const int v_lo = vbeg + g, v_hi = vbeg + g + 8;
  const bool ok_lo = v_lo < nrows * H, ok_hi = v_hi < nrows * H;
  const int r_lo = ok_lo ? v_lo / H : 0, r_hi = ok_hi ? v_hi / H : 0;
  const int h_lo = ok_lo ? v_lo % H : 0, h_hi = ok_hi ? v_hi % H : 0;
  const int lim_lo = ok_lo ? cbase + r_lo : -1, lim_hi = ok_hi ? cbase + r_hi : -1;  // last visible key
  const size_t q_lo = (size_t)(row0 + r_lo) * H + h_lo, q_hi = (size_t)(row0 + r_hi) * H + h_hi;

  // A fragments of this warp's k-steps, pre-scaled, in the permuted k order: ckv k-step
  // 2c + e covers dims OCOLS w + 8 CHK(c) + 16t + 4e + 0..3, kpe k-step i dims 512 + 16 (KPW
  // w + i) + 4t + 0..3.
  const float qs = q_scale * KV_RAW;
#if L2_AHEAD
  // Prefetch state: pf_ok / pf_id / pf_p = key pf_k of the tile L2_AHEAD ahead (adds something,
  // page id, position), pf_raw = the unchecked list entry of key pf_t (the tile after it).
  // PF_RAW reads in range whatever t is (clamped into the list). The list entries of the
  // first tiles (0 .. L2_AHEAD, r_) are read here, so that they travel with q.
#define PF_RAW(t) sidx[(size_t)row0 * (size_t)topk + (size_t)max(min((t), ke - 1), 0)]
#define PF_OK(r, t) ((t) < ke && (r) >= 0 && (r) <= cbase)
  const int pf_k = tid % KEYS;
  bool pf_ok = false;
  int pf_id = 0, pf_p = -1, pf_t = kb + (L2_AHEAD + 1) * KEYS + pf_k;
  int r_[L2_AHEAD + 1];
#pragma unroll
  for (int a = 0; a <= L2_AHEAD; ++a) r_[a] = PF_RAW(kb + a * KEYS + pf_k);
  int pf_raw = PF_RAW(pf_t);
#endif

  // Every load is issued before any conversion (a group's q arrives in one round trip).
  uint qa[KSW][4];
  {
    uint4 wl[KSW], wh[KSW];
#pragma unroll
    for (int i = 0; i < KSW; ++i) {
      const int d0 = i < 2 * NCG ? OCOLS * warp + 8 * CHK(i >> 1) + 16 * t + 4 * (i & 1)
                                 : CKV_DIM + 16 * (KPW * warp + i - 2 * NCG) + 4 * t;
      wl[i] = ok_lo ? q_quad(q_nope, q_pe, q_dt, q_lo, d0) : (uint4)(0u);
      wh[i] = ok_hi ? q_quad(q_nope, q_pe, q_dt, q_hi, d0) : (uint4)(0u);
    }
#pragma unroll
    for (int i = 0; i < KSW; ++i) {
      const float4 x = bits4_to_float4(wl[i], q_dt) * qs, y = bits4_to_float4(wh[i], q_dt) * qs;
      qa[i][0] = pack2(x.x, x.y), qa[i][1] = pack2(y.x, y.y);
      qa[i][2] = pack2(x.z, x.w), qa[i][3] = pack2(y.z, y.w);
    }
  }

  // Loads: lane (g, t) of warp w reads tokens T0 + g + 8j of the tile: ckv chunks VCH w +
  // CHK(c) + 2t (c < NCG) and kpe words of its k-steps; word offsets of the chunk columns
  // are per-lane constants.
  const long cgo = (long)(VCH * warp + 2 * t) * CHW;
  const long kgo = kpe_base + (long)(2 * CHW * KPW * warp) + (long)(t * CHW / 2);
  const int pmask = (1 << log2_page) - 1;
  bool bad = false;  // a page id outside [0, num_pages) was met (clamped into the pool)
// Token g + 8 j_ of the tile from page pg_, slot sl_ (LOAD_ROW), or zeros (ZERO_ROW).
#define LOAD_ROW(KCR, KPR)                                                                         \
  {                                                                                                \
    __global const uint* cp_ = ckv + pg_ * ckv_sp + sl_ * ckv_st + cgo;                            \
    __global const uint* kp_ = kpe + pg_ * kpe_sp + sl_ * kpe_st + kgo;                            \
    _Pragma("unroll") for (int c_ = 0; c_ < NCG; ++c_) KCR[j_][c_] = *(__global const RAWC*)(cp_ + CHW * CHK(c_)); \
    _Pragma("unroll") for (int i_ = 0; i_ < KPW; ++i_) KPR[j_][i_] = *(__global const RAWK*)(kp_ + 2 * CHW * i_); \
  }
#define ZERO_ROW(KCR, KPR)                                                                         \
  {                                                                                                \
    _Pragma("unroll") for (int c_ = 0; c_ < NCG; ++c_) KCR[j_][c_] = (RAWC)(0u);                   \
    _Pragma("unroll") for (int i_ = 0; i_ < KPW; ++i_) KPR[j_][i_] = (RAWK)(0u);                   \
  }
#if L2_AHEAD
#define RSLOT(T0) ((((T0) - kb) / KEYS) % (L2_AHEAD + 1))
#define LOAD_TILE(KCR, KPR, T0)                                                                    \
  _Pragma("unroll") for (int j_ = 0; j_ < NT; ++j_) {                                              \
    const int2 e_ = ring[RSLOT(T0) * KEYS + g + 8 * j_];                                           \
    if (e_.y >= 0) {                                                                               \
      const long pg_ = (long)e_.x, sl_ = (long)(e_.y & pmask);                                     \
      LOAD_ROW(KCR, KPR)                                                                           \
    } else {                                                                                       \
      ZERO_ROW(KCR, KPR)                                                                           \
    }                                                                                              \
  }
// Key c (of the tile at T0) is visible to a query vector whose last visible position is lim.
#define KEY_OK(T0, c, lim) ((lim) >= 0 && (uint)ring[RSLOT(T0) * KEYS + (c) - (T0)].y <= (uint)(lim))
#else
#define KEY_OK(T0, c, lim) ((c) < ke && MLA_KEY_OK(c, lim))
#define LOAD_TILE(KCR, KPR, T0)                                                                    \
  _Pragma("unroll") for (int j_ = 0; j_ < NT; ++j_) {                                              \
    const int tk_ = (T0) + g + 8 * j_;                                                             \
    const int p_ = MLA_POS(tk_, ke);                                                               \
    if (MLA_POS_OK(p_, tk_, ke)) {                                                                 \
      const int id_ = page_ids[pbase + (p_ >> log2_page)];                                         \
      bad |= (uint)id_ >= (uint)num_pages;                                                         \
      const long pg_ = (long)POOL_PAGE(id_), sl_ = (long)(p_ & pmask);                             \
      LOAD_ROW(KCR, KPR)                                                                           \
    } else {                                                                                       \
      ZERO_ROW(KCR, KPR)                                                                           \
    }                                                                                              \
  }
#endif

#if L2_AHEAD
#define PF_CKV_LINES (CKV_DIM * CHW / 2 / 128)  // whole lines of a ckv row; + its last byte, kpe's first and last
#define PF_ROUNDS ((PF_CKV_LINES + 3 + WGSZ / KEYS - 1) / (WGSZ / KEYS))  // prefetches per work-item and key
#define PF_LOOKUP(R, T)                                                                            \
  {                                                                                                \
    pf_ok = PF_OK(R, T);                                                                           \
    pf_p = pf_ok ? (R) : -1;                                                                       \
    pf_id = page_ids[pbase + (pf_ok ? (R) >> log2_page : 0)];                                      \
  }
  // Ring entry and L2 prefetch of key pf_k of the tile at TT from the state.
#define PF_TILE(TT)                                                                                \
  {                                                                                                \
    bad |= pf_ok && (uint)pf_id >= (uint)num_pages;                                                \
    const int pg_ = (int)POOL_PAGE(pf_id);                                                         \
    if (tid < KEYS) ring[RSLOT(TT) * KEYS + pf_k] = (int2)(pg_, pf_p);                              \
    if (pf_ok) {                                                                                   \
      const long sl_ = (long)(pf_p & pmask);                                                       \
      __global const uchar* cr_ = (__global const uchar*)(ckv + (long)pg_ * ckv_sp + sl_ * ckv_st);     \
      __global const uchar* kr_ = (__global const uchar*)(kpe + kpe_base + (long)pg_ * kpe_sp + sl_ * kpe_st); \
      _Pragma("unroll") for (int m_ = 0; m_ < PF_ROUNDS; ++m_) {                                   \
        const int j_ = tid / KEYS + m_ * (WGSZ / KEYS);                                            \
        if (j_ < PF_CKV_LINES + 3)                                                                 \
          PREFETCH_L2(j_ < PF_CKV_LINES ? cr_ + 128 * j_ : j_ == PF_CKV_LINES ? cr_ + (CKV_DIM * CHW / 2 - 1) \
                      : j_ == PF_CKV_LINES + 1 ? kr_ : kr_ + (KPE_DIM * CHW / 2 - 1));           \
      }                                                                                            \
    }                                                                                              \
  }
#define PF_STEP(T0)                                                                                \
  {                                                                                                \
    PF_TILE((T0) + L2_AHEAD * KEYS)                                                                \
    PF_LOOKUP(pf_raw, pf_t)                                                                        \
    pf_t += KEYS;                                                                                  \
    pf_raw = PF_RAW(pf_t);                                                                         \
  }
  if (kb < ke) {
    int id_[L2_AHEAD + 1];
#pragma unroll
    for (int a = 0; a <= L2_AHEAD; ++a) {
      const bool ok_ = PF_OK(r_[a], kb + a * KEYS + pf_k);
      id_[a] = page_ids[pbase + (ok_ ? r_[a] >> log2_page : 0)];
      r_[a] = ok_ ? r_[a] : -1;
    }
#pragma unroll
    for (int a = 0; a <= L2_AHEAD; ++a) {
      pf_ok = r_[a] >= 0, pf_p = r_[a], pf_id = id_[a];
      if (a < L2_AHEAD) PF_TILE(kb + a * KEYS)  // (tile L2_AHEAD: the state the first tile starts from)
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);  // the ring's first tiles
#else
#define PF_STEP(T0)
#endif

  // Staging of this warp's chunks (token g + 8j, chunk CHK(c) + 2t) and the ldmatrix addresses:
  // lane l gives token (l & 15) of a 16-token k-step, chunk n + (l >> 4) (n even) at physical
  // chunk n ^ (l >> 4) ^ VSW(l & 7) = (n & ~7) + lo2[(n & 7) / 2].
  __local uint4* const vw = vb + warp * (KEYS * VCH);
  // Chunk CHK(c) + 2t of token g + 8j at 8 (c >> 1) + ((2t ^ VSW(g)) ^ (c & 1)): VST(j, c)
  // below, from one per-lane offset per n-tile.
  int vsw[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) vsw[j] = (g + 8 * j) * VCH + ((2 * t) ^ VSW(g));
#define VST(j, c) (((c) & 1 ? vsw[j] ^ 1 : vsw[j]) + 8 * ((c) >> 1))
  __local const uint4* const lb = vw + (lane & 15) * VCH;
  int lo2[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) lo2[i] = (2 * i) ^ (lane >> 4) ^ VSW(lane & 7);

  float oacc[DN][4];
#pragma unroll
  for (int n = 0; n < DN; ++n) oacc[n][0] = oacc[n][1] = oacc[n][2] = oacc[n][3] = 0.f;
  float lsum[4] = {0.f, 0.f, 0.f, 0.f};  // row sums of P (lsum[0] = row g, lsum[2] = row g + 8)
  float m_lo = CLATTN_NEG_INF, m_hi = CLATTN_NEG_INF;

  // One tile from the registers KCR/KPR (loaded a tile earlier) while the next tile's loads
  // fly into KCN/KPN; sp buffer BUF.
#define TILE(KCR, KPR, KCN, KPN, T0, BUF)                                                          \
  {                                                                                                \
    float s[NT][4], s2[NT][4];                                                                     \
    _Pragma("unroll") for (int j = 0; j < NT; ++j) {                                               \
      s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;                                                 \
      s2[j][0] = s2[j][1] = s2[j][2] = s2[j][3] = 0.f;                                             \
    }                                                                                              \
    _Pragma("unroll") for (int j = 0; j < NT; ++j) {                                               \
      _Pragma("unroll") for (int c = 0; c < NCG; ++c) {                                            \
        const uint4 b = dec_chunk(KCR[j][c]);                                                      \
        MMA(s[j], qa[2 * c][0], qa[2 * c][1], qa[2 * c][2], qa[2 * c][3], b.x, b.y);                \
        MMA(s2[j], qa[2 * c + 1][0], qa[2 * c + 1][1], qa[2 * c + 1][2], qa[2 * c + 1][3], b.z, b.w); \
      }                                                                                            \
      _Pragma("unroll") for (int i = 0; i < KPW; ++i) {                                            \
        const uint2 b = dec_kpe(KPR[j][i]);                                                        \
        const int k_ = 2 * NCG + i;                                                                \
        MMA(s[j], qa[k_][0], qa[k_][1], qa[k_][2], qa[k_][3], b.x, b.y);                            \
      }                                                                                            \
      sp[(((BUF) * WARPS + warp) * NT + j) * 32 + lane] =                                          \
          (float4)(s[j][0] + s2[j][0], s[j][1] + s2[j][1], s[j][2] + s2[j][2], s[j][3] + s2[j][3]); \
    }                                                                                              \
    BAR_WARP(); /* this warp's ldmatrix reads of the previous tile are done */                     \
    _Pragma("unroll") for (int j = 0; j < NT; ++j)                                                 \
      _Pragma("unroll") for (int c = 0; c < NCG; ++c) vw[VST(j, c)] = dec_chunk(KCR[j][c]);    \
    barrier(CLK_LOCAL_MEM_FENCE); /* partial S of every warp and this warp's V visible */          \
    /* the next tile's loads fly during the rest of this one and the next one's start */         \
    if ((T0) + KEYS < ke) { LOAD_TILE(KCN, KPN, (T0) + KEYS) }                                     \
    PF_STEP(T0) /* L2_AHEAD: the tile L2_AHEAD ahead */                                            \
    /* Full S, summed in warp order (identical in every warp), then the mask. */                   \
    _Pragma("unroll") for (int j = 0; j < NT; ++j) {                                               \
      float4 a = sp[((BUF) * WARPS * NT + j) * 32 + lane];                                         \
      _Pragma("unroll") for (int w = 1; w < WARPS; ++w) a += sp[(((BUF) * WARPS + w) * NT + j) * 32 + lane]; \
      const int c0 = (T0) + 8 * j + 2 * t;                                                         \
      s[j][0] = KEY_OK(T0, c0, lim_lo) ? a.x : CLATTN_NEG_INF;                                     \
      s[j][1] = KEY_OK(T0, c0 + 1, lim_lo) ? a.y : CLATTN_NEG_INF;                                 \
      s[j][2] = KEY_OK(T0, c0, lim_hi) ? a.z : CLATTN_NEG_INF;                                     \
      s[j][3] = KEY_OK(T0, c0 + 1, lim_hi) ? a.w : CLATTN_NEG_INF;                                 \
    }                                                                                              \
    float mx_lo = m_lo, mx_hi = m_hi;                                                              \
    _Pragma("unroll") for (int j = 0; j < NT; ++j) {                                               \
      mx_lo = fmax(mx_lo, fmax(s[j][0], s[j][1]));                                                 \
      mx_hi = fmax(mx_hi, fmax(s[j][2], s[j][3]));                                                 \
    }                                                                                              \
    uint pa[KC][4];                                                                                \
    SOFTMAX_STEP(mx_lo, mx_hi, m_lo, m_hi, s, pa, oacc, lsum);                                     \
    /* O += P V over this warp's columns; row sums of the rounded P by an mma against ones. */     \
    _Pragma("unroll") for (int kc = 0; kc < KC; ++kc) {                                            \
      MMA(lsum, pa[kc][0], pa[kc][1], pa[kc][2], pa[kc][3], ONE2, ONE2);                           \
      _Pragma("unroll") for (int n = 0; n < DN; n += 2) {                                          \
        uint b0, b1, b2, b3;                                                                       \
        LDSM_X4_T(lb + kc * (16 * VCH) + (n & ~7) + lo2[(n & 7) >> 1], b0, b1, b2, b3);            \
        MMA(oacc[n], pa[kc][0], pa[kc][1], pa[kc][2], pa[kc][3], b0, b1);                          \
        MMA(oacc[n + 1], pa[kc][0], pa[kc][1], pa[kc][2], pa[kc][3], b2, b3);                      \
      }                                                                                            \
    }                                                                                              \
  }

  RAWC kca[NT][NCG], kcb[NT][NCG];
  RAWK kpa[NT][KPW], kpb[NT][KPW];
  if (kb < ke) { LOAD_TILE(kca, kpa, kb) }
  for (int t0 = kb; t0 < ke; t0 += 2 * KEYS) {
    TILE(kca, kpa, kcb, kpb, t0, 0)
    if (t0 + KEYS >= ke) break;
    TILE(kcb, kpb, kca, kpa, t0 + KEYS, 1)
  }
  if (bad) atomic_or(faults, CLATTN_FAULT_PAGE_ID);

  // Normalisation and stores: lane (g, t) of warp w holds rows g, g+8, columns
  // OCOLS w + 8 n + 2t, +1.
  const int col0 = OCOLS * warp + 2 * t;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const bool ok = hh ? ok_hi : ok_lo;
    if (!ok) continue;
    const float m = hh ? m_hi : m_lo, l = hh ? lsum[2] : lsum[0];
    const float inv = l > 0.f ? v_scale * KV_RAW / l : 0.f;
    const float lse_v = l > 0.f ? (m + log2(l)) * LN2 : CLATTN_NEG_INF;
    const size_t qrow = hh ? q_hi : q_lo;
    if (wpart < 0) {
      if (o_dt == DT_F16 || o_dt == DT_BF16) {
        __global uint* o32 = (__global uint*)o + (qrow * CKV_DIM + col0) / 2;
#pragma unroll
        for (int n = 0; n < DN; ++n) {
          const float a = oacc[n][2 * hh] * inv, b = oacc[n][2 * hh + 1] * inv;
          o32[4 * n] = o_dt == DT_F16 ? pack2_f16(a, b) : pack2_bf16(a, b);
        }
      } else {
        __global float2* o64 = (__global float2*)o + (qrow * CKV_DIM + col0) / 2;
#pragma unroll
        for (int n = 0; n < DN; ++n) o64[4 * n] = (float2)(oacc[n][2 * hh] * inv, oacc[n][2 * hh + 1] * inv);
      }
      if (has_lse && warp == 0 && t == 0) lse[qrow] = lse_v;
    } else {
      const size_t wrow = (size_t)wpart * H + (hh ? h_hi : h_lo);
      __global float2* w64 = (__global float2*)ws + (wrow * CKV_DIM + col0) / 2;
#pragma unroll
      for (int n = 0; n < DN; ++n) w64[4 * n] = (float2)(oacc[n][2 * hh] * inv, oacc[n][2 * hh + 1] * inv);
      if (warp == 0 && t == 0) ws[lse_off + wrow] = lse_v;
    }
  }

#if FUSE_MERGE
  if (wpart < 0 || pmap_off < 0) return;  // uniform over the group; pmap_off < 0: a merge pass follows
  // This part's rows are written; make them visible before counting it (threadfence
  // reduction). The group that brings the count to the merge entry's parts merges them all.
  mem_fence(CLK_GLOBAL_MEM_FENCE);
  barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
  const int mi = tab[pmap_off + wpart];
  __global const int* mg = tab + merge_off + 4 * mi;
  const int first = mg[1], np = mg[2];
  if (tid == 0) {
    __global volatile int* cnt = counters + counter_off + mi * n_hblk + vbeg / 16;
    const int last = atomic_inc(cnt) == np - 1;
    if (last) atomic_xchg(cnt, 0);  // ready for the set's next run
    fm_last = last;
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  if (!fm_last) return;
  mem_fence(CLK_GLOBAL_MEM_FENCE);
  // Rows g, g + 8 (heads h_lo, h_hi), this lane's columns, parts first .. first + np - 1 in
  // order; the parts' lse become weights exp(lse - max), as merge_partials does.
  __global volatile const float* wl = ws + lse_off + (size_t)first * H;
  __global volatile const float2* wx = (__global volatile const float2*)ws + ((size_t)first * H * CKV_DIM + col0) / 2;
  float M_lo = CLATTN_NEG_INF, M_hi = CLATTN_NEG_INF;
  for (int p = 0; p < np; ++p) {
    if (ok_lo) M_lo = fmax(M_lo, wl[(size_t)p * H + h_lo]);
    if (ok_hi) M_hi = fmax(M_hi, wl[(size_t)p * H + h_hi]);
  }
  float2 acc_lo[DN], acc_hi[DN];
#pragma unroll
  for (int n = 0; n < DN; ++n) acc_lo[n] = acc_hi[n] = (float2)(0.f);
  float den_lo = 0.f, den_hi = 0.f;
  for (int p = 0; p < np; ++p) {
    const float l_lo = ok_lo ? wl[(size_t)p * H + h_lo] : CLATTN_NEG_INF;
    const float l_hi = ok_hi ? wl[(size_t)p * H + h_hi] : CLATTN_NEG_INF;
    const float w_lo = l_lo == CLATTN_NEG_INF ? 0.f : exp(l_lo - M_lo);
    const float w_hi = l_hi == CLATTN_NEG_INF ? 0.f : exp(l_hi - M_hi);
    __global volatile const float2* xl = wx + ((size_t)p * H + h_lo) * (CKV_DIM / 2);
    __global volatile const float2* xh = wx + ((size_t)p * H + h_hi) * (CKV_DIM / 2);
    float2 vl[DN], vh[DN];
#pragma unroll
    for (int n = 0; n < DN; ++n) {
      vl[n] = w_lo > 0.f ? xl[4 * n] : (float2)(0.f);
      vh[n] = w_hi > 0.f ? xh[4 * n] : (float2)(0.f);
    }
    den_lo += w_lo, den_hi += w_hi;
#pragma unroll
    for (int n = 0; n < DN; ++n) acc_lo[n] += w_lo * vl[n], acc_hi[n] += w_hi * vh[n];
  }
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    if (!(hh ? ok_hi : ok_lo)) continue;
    const float den = hh ? den_hi : den_lo, inv = den > 0.f ? 1.f / den : 0.f;
    const size_t qrow = hh ? q_hi : q_lo;
#pragma unroll
    for (int n = 0; n < DN; ++n) {
      const float2 v = (hh ? acc_hi[n] : acc_lo[n]) * inv;
      const size_t out = qrow * CKV_DIM + col0 + 8 * n;
      if (o_dt == DT_F16 || o_dt == DT_BF16)
        ((__global uint*)o)[out / 2] = o_dt == DT_F16 ? pack2_f16(v.x, v.y) : pack2_bf16(v.x, v.y);
      else
        ((__global float2*)o)[out / 2] = v;
    }
    if (has_lse && warp == 0 && t == 0) lse[qrow] = den > 0.f ? (hh ? M_hi : M_lo) + log(den) : CLATTN_NEG_INF;
  }
#endif
}

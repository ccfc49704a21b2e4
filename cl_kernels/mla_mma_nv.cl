// MLA (absorbed DeepSeek latent attention) on NVIDIA tensor cores: inline PTX mma.sync
// m16n8k16 (f16 or bf16 inputs, f32 accumulation) inside OpenCL C. Same work entries,
// kernel arguments, split-K partial layout and LSE semantics as cl_kernels/mla.cl (see
// there); decode and extend alike (a query vector is a (row, head) pair).
//
//   work-group = one work entry (request, block of 16 query vectors, KV range) = one MMA
//                m-tile (rows = query vectors; fewer than 16 -> masked rows), WARPS warps
//   tile       = KEYS tokens of the latent (576 values each), staged in local memory as
//                16-bit MMA values (f16/bf16 as stored; fp8 decoded to f16 exactly), loaded
//                into registers one tile ahead (software pipeline), or with ASYNC (16-bit
//                latents) copied one tile ahead by cp.async into a second stage buffer
//   S = Q K^T  split over the 576-wide K dimension: warp w owns the k-steps w + WARPS i
//              (its q slice stays in registers as A fragments, pre-scaled), computes a
//              partial S (16 x KEYS), partials are summed through local memory in a fixed
//              order (every warp gets the same S, bit for bit)
//   softmax    online, exp2 domain, in registers (rows g and g+8 of each lane; row max
//              over the 4 lanes of a row with shfl), row sums by an MMA against ones
//   O += P V   P = the A fragment built from the S accumulators (FlashAttention-2 register
//              reuse); V = ckv: warp w owns output columns [OCOLS w, OCOLS (w+1)), DN
//              8-column n-tiles of f32 accumulators
//
// Local layout of the tile: lat[KEYS][72] 16-byte chunks (8 values), logical chunk c of
// token row r at physical chunk c ^ SWZ(r), SWZ(r) = ((r & 3) << 1) | ((r >> 2) & 1). With it
//   - S's B fragments are one 8-byte read per k-step (the k index is permuted the same way
//     for Q and K: k 2t,2t+1 <-> dims 16 ks + 4t + 0,1; k 2t+8,2t+9 <-> dims 16 ks + 4t +
//     2,3), and the 16 lanes of each phase (rows 4i..4i+3) cover all 32 banks;
//   - P V's B fragments (V[token 2t, 2t+1][dim], V[2t+8, 2t+9][dim]) are 16-bit reads of
//     4 rows 2t + c (c fixed) whose SWZ differ: 4 distinct bank groups, conflict-free;
//   - the staging stores (8 lanes: consecutive chunks of one row) are conflict-free.
// Loads: each work-item owns one ckv chunk column (tid % 64) and one kpe chunk column, so
// every read and staging address is a per-lane offset plus an immediate (few registers).
//
// Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16 with floating point type"):
// lane = 4 g + t. A 16x16: a0 = A[g][2t..2t+1], a1 = A[g+8][2t..], a2 = A[g][2t+8..],
// a3 = A[g+8][2t+8..]; B 16x8 "col": b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g];
// C 16x8 f32: c0,c1 = C[g][2t..2t+1], c2,c3 = C[g+8][2t..2t+1].
//
// Work entries (8 int32): {kv_begin, kv_end, part, page_base, q_row0, nrows, vbeg,
// causal_base}, exactly as mla.cl. Scores are in the log2 domain (q_scale = sm_scale *
// log2(e) * kv_scale from the host); fp8 e4m3 is staged as f16 bits of value * 2^-8
// (KV_RAW), folded back into q and the output scale.
#include "common.clh"

#ifndef KV_DT
#define KV_DT DT_BF16
#endif
#ifndef WARPS
#define WARPS 4
#endif
#ifndef KEYS
#define KEYS 16
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
// ASYNC (16-bit latents): tiles go global -> local by cp.async into NSTAGE = 2 buffers, the
// next tile's copies in flight while this one is computed, with no registers held for
// them (fp8 is decoded on the way, so it keeps the register prefetch below).
#ifndef ASYNC
#define ASYNC 0
#endif
#if FP8
#undef ASYNC
#define ASYNC 0
#endif
#define NSTAGE (ASYNC ? 2 : 1)
// LDSM: P V's B fragments by ldmatrix.x4.trans (one instruction per two n-tiles) instead of
// eight 16-bit local loads and their packing.
#ifndef LDSM
#define LDSM 0
#endif

#define WGSZ (32 * WARPS)
#define CKV_DIM 512
#define KPE_DIM 64
#define NKS 36                  // k-steps of S (576 / 16)
#define KSW (NKS / WARPS)       // k-steps per warp
#define NT (KEYS / 8)           // 8-token n-tiles of S
#define KC (KEYS / 16)          // 16-token k-steps of P V
#define OCOLS (CKV_DIM / WARPS) // output columns per warp
#define DN (OCOLS / 8)          // 8-column n-tiles of O per warp
#define ROWQ 72                 // 16-byte chunks per staged row (64 ckv + 8 kpe)
#define CKQ 64
#define LN2 0.6931471805599453f
#define SWZ(r) ((((r) & 3) << 1) | (((r) >> 2) & 1))

#if (NKS % WARPS) || (CKV_DIM % (8 * WARPS)) || (KEYS % 16)
#error "mla_mma_nv.cl: WARPS must divide 36 k-steps and 64 column tiles (2 or 4); KEYS a multiple of 16"
#endif

#include "mma_ptx_nv.clh"
#include "mma_softmax_nv.clh"

#if FP8
typedef uint2 RAW;
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
inline uint4 stage_chunk(RAW w) {
  return (uint4)(fp8x2_to_f16x2(w.x), fp8x2_to_f16x2(w.x >> 16), fp8x2_to_f16x2(w.y), fp8x2_to_f16x2(w.y >> 16));
}
#else
typedef uint4 RAW;
#define stage_chunk(w) (w)
#endif

// q element d (0..575) of query vector row `qrow`, times `sc`.
inline float q_elem(__global const void* q_nope, __global const void* q_pe, int q_dt, size_t qrow, int d, float sc) {
  return (d < CKV_DIM ? load_elem(q_nope, qrow * CKV_DIM + d, q_dt) : load_elem(q_pe, qrow * KPE_DIM + d - CKV_DIM, q_dt)) *
         sc;
}

__kernel __attribute__((reqd_work_group_size(WGSZ, 1, 1)))
void mla_mma(__global const void* q_nope, __global const void* q_pe, int q_dt,
             __global const uint* ckv, __global const uint* kpe, __global const int* page_ids,
             __global const int* tab, int work_off,
             __global void* o, int o_dt, __global float* lse, int has_lse,
             __global float* ws, ulong lse_off, int H,
             long ckv_sp, long ckv_st, long kpe_sp, long kpe_st, long kpe_base,  // in 32-bit words
             int log2_page, float q_scale, float v_scale) {
  __local uint4 lat[NSTAGE * KEYS * ROWQ];
  __local float4 sp[WARPS * NT * 32];  // partial S of every warp, C-fragment order
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

  // A fragments of this warp's k-steps, pre-scaled, in S's permuted k order.
  const float qs = q_scale * KV_RAW;
  uint qa[KSW][4];
#pragma unroll
  for (int i = 0; i < KSW; ++i) {
    const int d0 = 16 * (WARPS * i + warp) + 4 * t;
    float x[4], y[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      x[e] = ok_lo ? q_elem(q_nope, q_pe, q_dt, q_lo, d0 + e, qs) : 0.0f;
      y[e] = ok_hi ? q_elem(q_nope, q_pe, q_dt, q_hi, d0 + e, qs) : 0.0f;
    }
    qa[i][0] = pack2(x[0], x[1]), qa[i][1] = pack2(y[0], y[1]);
    qa[i][2] = pack2(x[2], x[3]), qa[i][3] = pack2(y[2], y[3]);
  }

  // Per-lane read offsets, few and loop-invariant (everything else is an immediate):
  // S: warp w owns k-steps ks = WARPS i + w; its B fragment is row g (+ 8 j), 8-byte unit
  // 2 ((2 ks + (t >> 1)) ^ SWZ(g)) + (t & 1) = 2 ((2 WARPS i) & ~7) + su[((2 WARPS i) >> 2) & 1].
  __local const uint2* const sb_base = (__local const uint2*)lat + g * (2 * ROWQ) + (t & 1);
  const int fg = SWZ(g), sy = 2 * warp + (t >> 1);  // sy < 8
  const int su0 = 2 * (sy ^ fg), su1 = 2 * ((4 + sy) ^ fg);
#define SU(i) (2 * ((2 * WARPS * (i)) & ~7) + ((((2 * WARPS * (i)) >> 2) & 1) ? su1 : su0))
  // P V: rows 16 kc + 2t + {0, 1, 8, 9}, column OCOLS w + 8 n + g at ushort offset
  // row * 576 + 8 ((col >> 3) ^ SWZ(row)) + g. SWZ(2t + 1) = SWZ(2t) ^ 2 and OCOLS w / 8 is a
  // multiple of 8, so both rows' offsets come from one table: vo[i] = 8 (OCOLS w / 8 + (i ^ SWZ(2t))).
  __local const ushort* const vb0_base = (__local const ushort*)lat + (2 * t) * (8 * ROWQ) + g;
  __local const ushort* const vb1_base = vb0_base + 8 * ROWQ;
  int vo[8];
  {
    const int fe = SWZ(2 * t);
#pragma unroll
    for (int i = 0; i < 8; ++i) vo[i] = OCOLS * warp + 8 * (i ^ fe);
  }
  // LDSM: lane l gives the address of token (l & 15) of the 16-key step, chunk DN w + n +
  // (l >> 4) (n even) at physical chunk DN w + (n & ~7) + lo2[(n & 7) / 2] (the row swizzle
  // flips only the low 3 bits of a chunk index).
  __local const uint4* const lb_base = lat + (lane & 15) * ROWQ + DN * warp;
  int lo2[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) lo2[i] = (2 * i + (lane >> 4)) ^ SWZ(lane & 7);

  // Staging: ckv chunk k = tid % 64 of rows RB i + (tid / 64) (RB = WGSZ / 64 rows per step);
  // kpe chunk 64 + tid % 8 of rows (WGSZ / 8) i + tid / 8. SWZ(2i + b) = SWZ(2i) ^ 2b, so the
  // swizzled ckv chunk is (k ^ 2b) ^ SWZ(RB i) with SWZ(RB i) a constant (RB = 1 or 2).
#define RB (WGSZ / 64)
#define PFC (KEYS * 64 / WGSZ)  // ckv chunks per work-item per tile
#define PFK (KEYS * 8 / WGSZ)   // kpe chunks per work-item per tile
#if (KEYS * 8) % WGSZ || (RB != 1 && RB != 2)
#error "mla_mma_nv.cl: KEYS * 8 must be a multiple of the work-group size (32 WARPS), WARPS 2 or 4"
#endif
  const int ck = tid & 63, cb = tid >> 6, ckx = ck ^ (2 * cb);
  const int kk = tid & 7, kn = tid >> 3, kkx = CKQ + (kk ^ SWZ(kn));
  const long cgo = (long)ck * CHW, kgo = kpe_base + (long)kk * CHW;
  const int pmask = (1 << log2_page) - 1;
  RAW pf[PFC + PFK];
  // This work-item's chunk i of a tile: tile row and swizzled local chunk (ckv, kpe), and
  // the global address of its chunk column in token TK's row (TK < ke).
#define CKV_ROW(I) (RB * (I) + cb)
#define KPE_ROW(I) ((WGSZ / 8) * (I) + kn)
#define CKV_DST(I) (CKV_ROW(I) * ROWQ + (ckx ^ SWZ(RB * (I))))
#define KPE_DST(I) (KPE_ROW(I) * ROWQ + kkx)
#define CKV_SRC(TK) (ckv + (long)page_ids[pbase + ((TK) >> log2_page)] * ckv_sp + (long)((TK) & pmask) * ckv_st + cgo)
#define KPE_SRC(TK) (kpe + (long)page_ids[pbase + ((TK) >> log2_page)] * kpe_sp + (long)((TK) & pmask) * kpe_st + kgo)
#define LOAD_TILE(T0)                                                                              \
  _Pragma("unroll") for (int i_ = 0; i_ < PFC; ++i_) {                                             \
    const int tk_ = (T0) + CKV_ROW(i_);                                                            \
    pf[i_] = (RAW)(0u);                                                                            \
    if (tk_ < ke) pf[i_] = *(__global const RAW*)CKV_SRC(tk_);                                     \
  }                                                                                                \
  _Pragma("unroll") for (int i_ = 0; i_ < PFK; ++i_) {                                             \
    const int tk_ = (T0) + KPE_ROW(i_);                                                            \
    pf[PFC + i_] = (RAW)(0u);                                                                      \
    if (tk_ < ke) pf[PFC + i_] = *(__global const RAW*)KPE_SRC(tk_);                               \
  }
#define STORE_TILE()                                                                               \
  _Pragma("unroll") for (int i_ = 0; i_ < PFC; ++i_) lat[CKV_DST(i_)] = stage_chunk(pf[i_]);       \
  _Pragma("unroll") for (int i_ = 0; i_ < PFK; ++i_) lat[KPE_DST(i_)] = stage_chunk(pf[PFC + i_]);

#if ASYNC
  // Tile T0's chunks into stage buffer B (same places as STORE_TILE); chunks past the range
  // are zero-filled (their address is the first key's, always valid).
#define ISSUE_TILE(T0, B)                                                                          \
  _Pragma("unroll") for (int i_ = 0; i_ < PFC; ++i_) {                                             \
    const int tk_ = (T0) + CKV_ROW(i_);                                                            \
    CP_ASYNC16(lat + (B) * (KEYS * ROWQ) + CKV_DST(i_), CKV_SRC(tk_ < ke ? tk_ : kb), tk_ < ke ? 16 : 0); \
  }                                                                                                \
  _Pragma("unroll") for (int i_ = 0; i_ < PFK; ++i_) {                                             \
    const int tk_ = (T0) + KPE_ROW(i_);                                                            \
    CP_ASYNC16(lat + (B) * (KEYS * ROWQ) + KPE_DST(i_), KPE_SRC(tk_ < ke ? tk_ : kb), tk_ < ke ? 16 : 0); \
  }                                                                                                \
  CP_COMMIT();
#endif

  float oacc[DN][4];
#pragma unroll
  for (int n = 0; n < DN; ++n) oacc[n][0] = oacc[n][1] = oacc[n][2] = oacc[n][3] = 0.f;
  float lsum[4] = {0.f, 0.f, 0.f, 0.f};  // row sums of P (lsum[0] = row g, lsum[2] = row g + 8)
  float m_lo = CLATTN_NEG_INF, m_hi = CLATTN_NEG_INF;

#if ASYNC
  if (kb < ke) { ISSUE_TILE(kb, 0) }
  int stage = 0;
  for (int t0 = kb; t0 < ke; t0 += KEYS, stage ^= 1) {
    barrier(CLK_LOCAL_MEM_FENCE);  // every warp is done with the previous tile (stage ^ 1)
    if (t0 + KEYS < ke) {
      ISSUE_TILE(t0 + KEYS, stage ^ 1)  // next tile's copies fly during this one
    } else {
      CP_COMMIT();  // an empty group: CP_WAIT1 below then waits for this tile's
    }
    CP_WAIT1();
    barrier(CLK_LOCAL_MEM_FENCE);
    __local const uint2* const sb = sb_base + stage * (2 * KEYS * ROWQ);
    __local const ushort* const vb0 = vb0_base + stage * (8 * KEYS * ROWQ);
    __local const ushort* const vb1 = vb1_base + stage * (8 * KEYS * ROWQ);
    __local const uint4* const lb = lb_base + stage * (KEYS * ROWQ);
#else
  if (kb < ke) { LOAD_TILE(kb) }
  for (int t0 = kb; t0 < ke; t0 += KEYS) {
    barrier(CLK_LOCAL_MEM_FENCE);  // every warp is done with the previous tile
    STORE_TILE();
    barrier(CLK_LOCAL_MEM_FENCE);
    if (t0 + KEYS < ke) { LOAD_TILE(t0 + KEYS) }  // next tile's loads fly during this one
    __local const uint2* const sb = sb_base;
    __local const ushort* const vb0 = vb0_base;
    __local const ushort* const vb1 = vb1_base;
    __local const uint4* const lb = lb_base;
#endif

    // Partial S over this warp's k-steps.
    float s[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
    for (int i = 0; i < KSW; ++i) {
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        const uint2 b = sb[8 * j * (2 * ROWQ) + SU(i)];
        MMA(s[j], qa[i][0], qa[i][1], qa[i][2], qa[i][3], b.x, b.y);
      }
    }
#pragma unroll
    for (int j = 0; j < NT; ++j) sp[(warp * NT + j) * 32 + lane] = (float4)(s[j][0], s[j][1], s[j][2], s[j][3]);
    barrier(CLK_LOCAL_MEM_FENCE);
    // Full S, summed in warp order (identical in every warp), then the mask.
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      float4 a = sp[j * 32 + lane];
#pragma unroll
      for (int w = 1; w < WARPS; ++w) a += sp[(w * NT + j) * 32 + lane];
      const int c0 = t0 + 8 * j + 2 * t;
      s[j][0] = (c0 < ke && c0 <= lim_lo) ? a.x : CLATTN_NEG_INF;
      s[j][1] = (c0 + 1 < ke && c0 + 1 <= lim_lo) ? a.y : CLATTN_NEG_INF;
      s[j][2] = (c0 < ke && c0 <= lim_hi) ? a.z : CLATTN_NEG_INF;
      s[j][3] = (c0 + 1 < ke && c0 + 1 <= lim_hi) ? a.w : CLATTN_NEG_INF;
    }

    // Online softmax: row max over the tile (4 lanes share a row).
    float mx_lo = m_lo, mx_hi = m_hi;
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      mx_lo = fmax(mx_lo, fmax(s[j][0], s[j][1]));
      mx_hi = fmax(mx_hi, fmax(s[j][2], s[j][3]));
    }
    uint pa[KC][4];
    SOFTMAX_STEP(mx_lo, mx_hi, m_lo, m_hi, s, pa, oacc, lsum);

    // O += P V over this warp's columns; row sums of the rounded P by an mma against ones.
#pragma unroll
    for (int kc = 0; kc < KC; ++kc) {
      MMA(lsum, pa[kc][0], pa[kc][1], pa[kc][2], pa[kc][3], ONE2, ONE2);
#if LDSM
#pragma unroll
      for (int n = 0; n < DN; n += 2) {
        uint b0, b1, b2, b3;
        LDSM_X4_T(lb + kc * (16 * ROWQ) + (n & ~7) + lo2[(n & 7) >> 1], b0, b1, b2, b3);
        MMA(oacc[n], pa[kc][0], pa[kc][1], pa[kc][2], pa[kc][3], b0, b1);
        MMA(oacc[n + 1], pa[kc][0], pa[kc][1], pa[kc][2], pa[kc][3], b2, b3);
      }
#else
      __local const ushort* const r0 = vb0 + kc * (16 * 8 * ROWQ);
      __local const ushort* const r1 = vb1 + kc * (16 * 8 * ROWQ);
#pragma unroll
      for (int n = 0; n < DN; ++n) {
        const int oe = vo[n & 7] + 8 * (n & ~7), oo = vo[(n ^ 2) & 7] + 8 * (n & ~7);
        const uint b0 = (uint)r0[oe] | ((uint)r1[oo] << 16);
        const uint b1 = (uint)r0[8 * (8 * ROWQ) + oe] | ((uint)r1[8 * (8 * ROWQ) + oo] << 16);
        MMA(oacc[n], pa[kc][0], pa[kc][1], pa[kc][2], pa[kc][3], b0, b1);
      }
#endif
    }
  }

  // Normalisation and stores: lane (g, t) of warp w holds rows g, g+8, columns
  // OCOLS w + 8 n + 2t, +1.
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const bool ok = hh ? ok_hi : ok_lo;
    if (!ok) continue;
    const float m = hh ? m_hi : m_lo, l = hh ? lsum[2] : lsum[0];
    const float inv = l > 0.f ? v_scale * KV_RAW / l : 0.f;
    const float lse_v = l > 0.f ? (m + log2(l)) * LN2 : CLATTN_NEG_INF;
    const size_t qrow = hh ? q_hi : q_lo;
    const int col0 = OCOLS * warp + 2 * t;
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
}

// Chunked varlen prefill of Gated DeltaNet (LIN_GDN 1) and simple GLA (LIN_GDN 0) on NVIDIA
// tensor cores: inline PTX mma.sync m16n8k16 (f16 or bf16 operands, f32 accumulation)
// inside OpenCL C. Same arguments, semantics and work decomposition as the f32 prefill in
// linear_common.clh (one work-group per (request, v-head, Dv slice of MDVT columns) walking
// the request's chunks of MC tokens in order); maths and precision: docs/linear.md.
//
// Per chunk (L <= MC tokens, G = cumulative log decay, rq/rk = L2-norm factors or 1):
//   A[t][s] = beta_t e^{G_t-G_s} rk_t rk_s k_t.k_s (s < t)           K K^T    on mma (GDN)
//   P[t][s] = e^{G_t-G_s} rq_t rk_s q_t.k_s (s <= t)                  Q K^T    on mma
//   GDN: (I + A) D = beta (V - e^G rk (K S0))   K S0 on mma, forward substitution in f32
//   GLA: D = V
//   O  = scale (e^G rq (Q S0) + P D)                                  Q S0, P D on mma
//   S0 = e^{G_L-1} S0 + K^T (e^{G_L-1 - G} rk D)                      K^T D    on mma
//
// Warps: MDVT / 16. Warp w owns state columns j = 16w .. 16w+15 of the slice: it holds
// S^T[j][0..DK) in f32 mma accumulator fragments (sacc: DK/8 n-tiles x 4 registers, m = j,
// n = i), the only copy of the state for the whole request. Those accumulators are, packed
// to the MMA type, exactly the B fragments of K S0 and Q S0 for the warp's columns
// (b0 = S0[2t..2t+1][g] = S^T[g][2t..2t+1] = c0, c1), so the state never goes through local
// memory. S_SPLIT 1: S0 = hi + lo, both rounded to the MMA type, two MMAs each (the state
// operand then carries ~2^-16 (bf16) / 2^-22 (f16) relative error instead of 2^-9 / 2^-12).
// The same warp computes O[:, its columns] (accumulators started as Q S0, rows rescaled,
// then += P D) and its state update S^T += D'^T K (D' = e^{G_L-1 - G} rk D rounded).
// The C x C products are spread over the warps by (16-token, 8-token) tile; tiles above the
// diagonal are skipped.
//
// Local memory (16-bit MMA values as stored, rows padded by 16 bytes so that every fragment
// read of a warp hits 32 distinct banks; no ldmatrix):
//   Kb, Qb [MC][KP]     K and Q rows of the chunk (raw values; norms applied in f32)
//   Pb [MC][CP]         P rounded, row-major (A operand of P D)
//   Db, Eb [MDVT][CP]   D^T and D'^T rounded (B operand of P D, A operand of K^T D)
//   Al [MC][MC+1] f32   A (GDN);   Dl [MC][DLP] f32   R, then D (GDN forward substitution)
// The forward substitution is column-parallel (work-item j owns column j; 8-row blocks, no
// barriers). V goes straight to registers at the lane's D fragment positions, loaded with the
// chunk's K/Q staging.
//
// Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16 with floating point type"),
// lane = 4 g + t: A 16x16 row-major a0 = A[g][2t..2t+1], a1 = A[g+8][2t..], a2 = A[g][2t+8..],
// a3 = A[g+8][2t+8..]; B 16x8 b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g]; C 16x8 f32
// c0, c1 = C[g][2t..2t+1], c2, c3 = C[g+8][2t..2t+1]. Low half of a .b32 = lower k.
//
// -D: DK (64, 128), DV, IO_DT (DT_F16 / DT_BF16: the MMA type), ST_DT (state storage),
// LIN_GDN, MC (chunk, multiple of 16), MDVT (16 x warps), S_SPLIT. Host:
// backends/ops/linear.cpp (variant nv_mma_sync, parameter PF_MMA).
#include "common.clh"

#ifndef DK
#define DK 128
#endif
#ifndef DV
#define DV 128
#endif
#ifndef IO_DT
#define IO_DT DT_BF16
#endif
#ifndef ST_DT
#define ST_DT DT_F32
#endif
#ifndef LIN_GDN
#define LIN_GDN 1
#endif
#ifndef MC
#define MC 32
#endif
#ifndef MDVT
#define MDVT 64
#endif
#ifndef S_SPLIT
#define S_SPLIT 1
#endif

#define MMA_BF16 (IO_DT == DT_BF16)
#define WARPS (MDVT / 16)
#define WGSZ (32 * WARPS)
#define KP (DK + 8)         // 16-bit values per Kb / Qb row
#define KW (KP / 2)         // words per Kb / Qb row
#define CP (MC + 8)         // 16-bit values per Pb / Db / Eb row
#define CW (CP / 2)
#define DLP (MDVT + 4)      // floats per Dl row
#define NCT (MC / 16)       // 16-token m-tiles of a chunk
#define NCC (NCT * (MC / 8))  // (16 x 8) tiles of the C x C products
#define LIN_L2NORM 1
#define LIN_BETA_LOGITS 2

#if (MC % 16) || (MDVT % 16) || (DK % 16) || (DV % MDVT) || IO_DT == DT_F32
#error "linear_prefill_mma_nv.cl: MC, MDVT, DK multiples of 16, DV of MDVT, 16-bit q/k/v/o"
#endif

#if IO_DT == DT_F16
typedef half io_t;
#define LD_IO(p, i) vload_half((i), (p))
#define ST_IO(p, i, x) vstore_half_rte((x), (i), (p))
#define LD16(p, i) vload_half((i), (__local const half*)(p))
#else
typedef ushort io_t;
#define LD_IO(p, i) bf16_bits_to_float((p)[i])
#define ST_IO(p, i, x) ((p)[i] = float_to_bf16_bits(x))
#define LD16(p, i) bf16_bits_to_float((p)[i])
#endif

#if ST_DT == DT_F32
typedef float st_t;
#define LD_ST(p, i) ((p)[i])
#define ST_ST(p, i, x) ((p)[i] = (x))
#elif ST_DT == DT_F16
typedef half st_t;
#define LD_ST(p, i) vload_half((i), (p))
#define ST_ST(p, i, x) vstore_half_rte((x), (i), (p))
#else
typedef ushort st_t;
#define LD_ST(p, i) bf16_bits_to_float((p)[i])
#define ST_ST(p, i, x) ((p)[i] = float_to_bf16_bits(x))
#endif

#include "mma_ptx_nv.clh"

// Loops that index register arrays are unrolled on the GPU (the emulation may keep them).
#ifndef MMA_UNROLL
#define MMA_UNROLL _Pragma("unroll")
#endif

inline float lin_beta(float b, int flags) { return (flags & LIN_BETA_LOGITS) ? 1.0f / (1.0f + exp(-b)) : b; }

// The two values of a packed MMA word as f32.
inline void unpack2(uint w, float* lo, float* hi) {
#if MMA_BF16
  *lo = as_float(w << 16), *hi = as_float(w & 0xffff0000u);
#else
  unpack2_f16(w, lo, hi);
#endif
}

// A fragment of a 16 x 16 tile of a row-major 16-bit matrix; p = the tile's first word,
// ldw = words per row.
inline uint4 frag_a(__local const uint* p, int ldw, int g, int t) {
  return (uint4)(p[g * ldw + t], p[(g + 8) * ldw + t], p[g * ldw + t + 4], p[(g + 8) * ldw + t + 4]);
}
// B fragment (16 x 8, k x n) of a matrix stored n-major (row n holds B[.][n], k pairs
// adjacent); p = the tile's first word (row n0, k0).
inline uint2 frag_b(__local const uint* p, int ldw, int g, int t) {
  return (uint2)(p[g * ldw + t], p[g * ldw + t + 4]);
}
// B fragment (16 x 8) of a matrix stored k-major (row k holds B[k][.]); p = element (k0, n0),
// ld = 16-bit values per row: two 16-bit reads per word.
inline uint2 frag_b_kmajor(__local const ushort* p, int ld, int g, int t) {
  const uint x0 = p[2 * t * ld + g], x1 = p[(2 * t + 1) * ld + g];
  const uint y0 = p[(2 * t + 8) * ld + g], y1 = p[(2 * t + 9) * ld + g];
  return (uint2)(x0 | (x1 << 16), y0 | (y1 << 16));
}

__kernel __attribute__((reqd_work_group_size(WGSZ, 1, 1)))
void lin_prefill_mma(__global const io_t* q, __global const io_t* k, __global const io_t* v,
                     __global const float* g, __global const float* beta, __global io_t* o,
                     __global st_t* state, __global const int* state_indices,
                     __global const int* cu_seqlens, int Hqk, int Hv, int g_tok_stride, float scale,
                     int flags, int num_slots, int num_tokens, __global volatile int* faults) {
  __local uint4 Kb4[MC * KW / 4], Qb4[MC * KW / 4];
  __local uint Pb[MC * CW], Db[MDVT * CW], Eb[MDVT * CW];
#if LIN_GDN
  __local float Al[MC * (MC + 1)];
  __local float Dl[MC * DLP];
#endif
  __local float Gr[MC], Gc[MC], bt[MC], rk[MC], rq[MC];
  PTX_SCRATCH
  __local const uint* Kw = (__local const uint*)Kb4;
  __local const uint* Qw = (__local const uint*)Qb4;
  __local const ushort* Kh = (__local const ushort*)Kb4;
  __local const ushort* Qh = (__local const ushort*)Qb4;

  const int lid = get_local_id(0);
  const int warp = lid >> 5, lane = lid & 31, gi = lane >> 2, ti = lane & 3;
  const int j0 = get_group_id(0) * MDVT;  // slice start
  const int jw = 16 * warp;               // this warp's columns within the slice
  const int bh = get_group_id(1);
  const int b = bh / Hv, hv = bh - b * Hv;
  const int hq = hv / (Hv / Hqk);
  const int reporter = lid == 0 && hv == 0 && j0 == 0;
  const int2 tr = token_range(cu_seqlens, b, num_tokens, faults, reporter);
  const int t0 = tr.x, t1 = tr.y;
  if (t1 <= t0) return;  // empty request: state untouched (uniform over the work-group)
  const int slot = pool_index(state_indices, b, num_slots, faults, reporter);
  __global st_t* S = state + ((size_t)(slot < 0 ? 0 : slot) * Hv + hv) * DK * DV + j0;
  const int qk_stride = Hqk * DK;
  const int use_norm = LIN_GDN && (flags & LIN_L2NORM);

  // S^T fragments: sacc[nn] = S^T[jw + g (+8)][8 nn + 2t (+1)] = S[i][j].
  float sacc[DK / 8][4];
  MMA_UNROLL for (int nn = 0; nn < DK / 8; ++nn) {
    MMA_UNROLL for (int e = 0; e < 4; ++e) {
      const int i = 8 * nn + 2 * ti + (e & 1), j = jw + gi + (e >> 1) * 8;
      sacc[nn][e] = slot >= 0 ? LD_ST(S, (size_t)i * DV + j) : 0.f;
    }
  }

  uint vpre[NCT][2][2];  // V[tt][j, j+1] of this lane's fragment positions (t < L, else 0)
  for (int c0 = t0; c0 < t1; c0 += MC) {
    const int L = min(MC, t1 - c0);
    // ---- stage K, Q rows (16-byte copies, rows >= L zero) and the per-token scalars
    {
      __global const uint4* kc = (__global const uint4*)(k + ((size_t)c0 * Hqk + hq) * DK);
      __global const uint4* qc = (__global const uint4*)(q + ((size_t)c0 * Hqk + hq) * DK);
      for (int e = lid; e < MC * (DK / 8); e += WGSZ) {
        const int t = e / (DK / 8), c = e - t * (DK / 8);
        uint4 x = (uint4)(0u), y = (uint4)(0u);
        if (t < L) {
          x = kc[(size_t)t * (qk_stride / 8) + c];
          y = qc[(size_t)t * (qk_stride / 8) + c];
        }
        Kb4[t * (KW / 4) + c] = x;
        Qb4[t * (KW / 4) + c] = y;
      }
      // V at this lane's D fragment positions (two adjacent columns per word), issued with
      // the staging loads so that their latency is hidden behind the C x C and S0 products.
      MMA_UNROLL for (int mt = 0; mt < NCT; ++mt) {
        MMA_UNROLL for (int h = 0; h < 2; ++h) {
          const int tt = 16 * mt + gi + 8 * h;
          MMA_UNROLL for (int nb = 0; nb < 2; ++nb) {
            const size_t vi = ((size_t)(c0 + tt) * Hv + hv) * DV + j0 + jw + 8 * nb + 2 * ti;
            vpre[mt][h][nb] = tt < L ? *(__global const uint*)(v + vi) : 0u;
          }
        }
      }
      for (int t = lid; t < MC; t += WGSZ) {
        float gg = 0.f, bb = 0.f;
        if (t < L) {
          gg = g[(size_t)(c0 + t) * g_tok_stride + hv];
#if LIN_GDN
          bb = lin_beta(beta[(size_t)(c0 + t) * Hv + hv], flags);
#else
          bb = 1.f;
#endif
        }
        Gr[t] = gg;
        bt[t] = bb;
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    // Cumulative decay (work-item t sums g_0..g_t itself, in order: the serial scan's bits
    // without its chain of dependent local-memory updates) and the inverse norms (q and k
    // rows on separate work-items).
    for (int e = lid; e < 2 * MC; e += WGSZ) {
      const int t = e < MC ? e : e - MC;
      if (e < MC) {
        float a = 0.f;
        for (int u = 0; u <= t; ++u) a += Gr[u];
        Gc[t] = a;
      }
      float n = 1.f;
      if (use_norm && t < L) {
        __local const ushort* row = (e < MC ? Kh : Qh) + t * KP;
        float sa = 0.f;
        for (int i = 0; i < DK; ++i) {
          const float x = LD16(row, i);
          sa += x * x;
        }
        n = rsqrt(sa + 1e-6f);
      }
      if (e < MC) rk[t] = n;
      else rq[t] = n;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const float glast = Gc[L - 1];

    // ---- C x C products: tile it = (m-tile mt, n-tile nt), spread over the warps.
    for (int it0 = 0; it0 < NCC; it0 += WARPS) {
      const int it = it0 + warp;
      const int itc = min(it, NCC - 1);  // address of padding tiles (emulation computes them)
      const int mt = itc / (MC / 8), nt = itc - mt * (MC / 8);
      float aqk[4] = {0.f, 0.f, 0.f, 0.f};
#if LIN_GDN
      float akk[4] = {0.f, 0.f, 0.f, 0.f};
#endif
      if (WARP_VISIBLE(it < NCC && nt <= 2 * mt + 1)) {
        MMA_UNROLL for (int ks = 0; ks < DK / 16; ++ks) {
          const uint2 bk = frag_b(Kw + 8 * nt * KW + 8 * ks, KW, gi, ti);
          const uint4 aq = frag_a(Qw + 16 * mt * KW + 8 * ks, KW, gi, ti);
          MMA(aqk, aq.x, aq.y, aq.z, aq.w, bk.x, bk.y);
#if LIN_GDN
          const uint4 ak = frag_a(Kw + 16 * mt * KW + 8 * ks, KW, gi, ti);
          MMA(akk, ak.x, ak.y, ak.z, ak.w, bk.x, bk.y);
#endif
        }
      }
      if (it < NCC) {
        MMA_UNROLL for (int h = 0; h < 2; ++h) {
          const int tt = 16 * mt + gi + 8 * h, s = 8 * nt + 2 * ti;
          float p0 = 0.f, p1 = 0.f;
          if (tt < L) {
            const float f = rq[tt];
            if (s <= tt) p0 = exp(Gc[tt] - Gc[s]) * f * rk[s] * aqk[2 * h];
            if (s + 1 <= tt) p1 = exp(Gc[tt] - Gc[s + 1]) * f * rk[s + 1] * aqk[2 * h + 1];
          }
          Pb[tt * CW + s / 2] = pack2(p0, p1);
#if LIN_GDN
          float a0 = 0.f, a1 = 0.f;
          if (tt < L) {
            const float f = bt[tt] * rk[tt];
            if (s < tt) a0 = exp(Gc[tt] - Gc[s]) * f * rk[s] * akk[2 * h];
            if (s + 1 < tt) a1 = exp(Gc[tt] - Gc[s + 1]) * f * rk[s + 1] * akk[2 * h + 1];
          }
          Al[tt * (MC + 1) + s] = a0;
          Al[tt * (MC + 1) + s + 1] = a1;
#endif
        }
      }
    }

    // ---- K S0, then Q S0, for this warp's 16 columns over all MC tokens (B fragments from
    // sacc; two passes keep one set of accumulators live). SPLIT_B(ks) fills bh[2 nb + h]
    // (n-tile nb = columns jw + 8 nb + g, register b_h) and bl, the rounding residual.
#define SPLIT_B(ks)                                                                             \
  MMA_UNROLL for (int x_ = 0; x_ < 4; ++x_) {                                                   \
    const int nb_ = x_ >> 1, h_ = x_ & 1;                                                       \
    const float s0_ = sacc[2 * (ks) + h_][2 * nb_], s1_ = sacc[2 * (ks) + h_][2 * nb_ + 1];     \
    bh[x_] = pack2(s0_, s1_);                                                                   \
    float r0_, r1_;                                                                             \
    unpack2(bh[x_], &r0_, &r1_);                                                                \
    bl[x_] = pack2(s0_ - r0_, s1_ - r1_);                                                       \
  }
#if S_SPLIT
#define MMA_S0(acc, a)                                                                          \
  MMA_UNROLL for (int nb_ = 0; nb_ < 2; ++nb_) {                                                \
    MMA(acc[nb_], a.x, a.y, a.z, a.w, bh[2 * nb_], bh[2 * nb_ + 1]);                            \
    MMA(acc[nb_], a.x, a.y, a.z, a.w, bl[2 * nb_], bl[2 * nb_ + 1]);                            \
  }
#else
#define MMA_S0(acc, a)                                                                          \
  MMA_UNROLL for (int nb_ = 0; nb_ < 2; ++nb_) MMA(acc[nb_], a.x, a.y, a.z, a.w, bh[2 * nb_], bh[2 * nb_ + 1]);
#endif
// ACC[mt] = the 16-row tile mt of W (row stride KW) times S0 over the DK dims.
#define TIMES_S0(ACC, W)                                                                        \
  MMA_UNROLL for (int mt = 0; mt < NCT; ++mt) {                                                 \
    MMA_UNROLL for (int e = 0; e < 8; ++e) ACC[mt][e >> 2][e & 3] = 0.f;                        \
  }                                                                                             \
  MMA_UNROLL for (int ks = 0; ks < DK / 16; ++ks) {                                             \
    uint bh[4], bl[4];                                                                          \
    SPLIT_B(ks);                                                                                \
    MMA_UNROLL for (int mt = 0; mt < NCT; ++mt) {                                               \
      const uint4 a_ = frag_a(W + 16 * mt * KW + 8 * ks, KW, gi, ti);                           \
      MMA_S0(ACC[mt], a_);                                                                      \
    }                                                                                           \
  }
#if LIN_GDN
    {
      float kacc[NCT][2][4];
      TIMES_S0(kacc, Kw)
      // R = beta (V - e^G rk K S0) into Dl.
      MMA_UNROLL for (int mt = 0; mt < NCT; ++mt) {
        MMA_UNROLL for (int h = 0; h < 2; ++h) {
          const int tt = 16 * mt + gi + 8 * h;
          const bool in = tt < L;
          const float fk = in ? exp(Gc[tt]) * rk[tt] : 0.f, bb = in ? bt[tt] : 0.f;
          MMA_UNROLL for (int nb = 0; nb < 2; ++nb) {
            const int j = jw + 8 * nb + 2 * ti;
            float v0, v1;
            unpack2(vpre[mt][h][nb], &v0, &v1);
            Dl[tt * DLP + j] = bb * (v0 - fk * kacc[mt][nb][2 * h]);
            Dl[tt * DLP + j + 1] = bb * (v1 - fk * kacc[mt][nb][2 * h + 1]);
          }
        }
      }
    }
#endif
    float oacc[NCT][2][4];
    TIMES_S0(oacc, Qw)
#undef TIMES_S0
#undef SPLIT_B
#undef MMA_S0
    // O's accumulators become e^G rq Q S0; GLA: D = V straight to Db and D' to Eb.
    MMA_UNROLL for (int mt = 0; mt < NCT; ++mt) {
      MMA_UNROLL for (int h = 0; h < 2; ++h) {
        const int tt = 16 * mt + gi + 8 * h;
        const bool in = tt < L;
        const float fo = in ? exp(Gc[tt]) * rq[tt] : 0.f;
        MMA_UNROLL for (int nb = 0; nb < 2; ++nb) {
          oacc[mt][nb][2 * h] *= fo;
          oacc[mt][nb][2 * h + 1] *= fo;
#if !LIN_GDN
          const int j = jw + 8 * nb + 2 * ti;
          float v0, v1;
          unpack2(vpre[mt][h][nb], &v0, &v1);
          const float fe = in ? exp(glast - Gc[tt]) : 0.f;
          __local ushort* dh = (__local ushort*)Db;
          __local ushort* eh = (__local ushort*)Eb;
          const uint dw = pack2(v0, v1), ew = pack2(fe * v0, fe * v1);
          dh[j * CP + tt] = (ushort)(dw & 0xffffu);
          dh[(j + 1) * CP + tt] = (ushort)(dw >> 16);
          eh[j * CP + tt] = (ushort)(ew & 0xffffu);
          eh[(j + 1) * CP + tt] = (ushort)(ew >> 16);
#endif
        }
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);

#if LIN_GDN
    // ---- (I + A) D = R: forward substitution in f32, one work-item per column, blocks of
    // 8 rows: first what the finished rows above contribute (8 independent FMA chains, one
    // D read shared by the 8 rows), then the 8 x 8 triangle in registers. Rows >= L have
    // R = 0 and A = 0, so they stay 0 without a bound on L.
    for (int jj = lid; jj < MDVT; jj += WGSZ) {
      for (int r0 = 0; r0 < MC; r0 += 8) {
        float acc[8];
        MMA_UNROLL for (int r = 0; r < 8; ++r) acc[r] = Dl[(r0 + r) * DLP + jj];
        __local const float* ar = Al + r0 * (MC + 1);
        for (int s = 0; s < r0; ++s) {
          const float ds = Dl[s * DLP + jj];
          MMA_UNROLL for (int r = 0; r < 8; ++r) acc[r] -= ar[r * (MC + 1) + s] * ds;
        }
        MMA_UNROLL for (int r = 1; r < 8; ++r) {
          MMA_UNROLL for (int s = 0; s < 8; ++s) {
            if (s < r) acc[r] -= ar[r * (MC + 1) + r0 + s] * acc[s];
          }
        }
        MMA_UNROLL for (int r = 0; r < 8; ++r) Dl[(r0 + r) * DLP + jj] = acc[r];
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    // ---- D^T and D'^T = (e^{G_L-1 - G} rk D)^T rounded to the MMA type (token pairs per word).
    for (int e = lid; e < MDVT * (MC / 2); e += WGSZ) {
      const int j = e / (MC / 2), sp = e - j * (MC / 2), s = 2 * sp;
      const float d0 = Dl[s * DLP + j], d1 = Dl[(s + 1) * DLP + j];
      const float f0 = s < L ? exp(glast - Gc[s]) * rk[s] : 0.f;
      const float f1 = s + 1 < L ? exp(glast - Gc[s + 1]) * rk[s + 1] : 0.f;
      Db[j * CW + sp] = pack2(d0, d1);
      Eb[j * CW + sp] = pack2(f0 * d0, f1 * d1);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#endif

    // ---- O += P D (k-steps at or below the diagonal), then store.
    MMA_UNROLL for (int mt = 0; mt < NCT; ++mt) {
      MMA_UNROLL for (int ks = 0; ks < NCT; ++ks) {
        if (WARP_VISIBLE(ks <= mt)) {
          const uint4 a = frag_a(Pb + 16 * mt * CW + 8 * ks, CW, gi, ti);
          MMA_UNROLL for (int nb = 0; nb < 2; ++nb) {
            const uint2 bd = frag_b(Db + (jw + 8 * nb) * CW + 8 * ks, CW, gi, ti);
            MMA(oacc[mt][nb], a.x, a.y, a.z, a.w, bd.x, bd.y);
          }
        }
      }
    }
    MMA_UNROLL for (int mt = 0; mt < NCT; ++mt) {
      MMA_UNROLL for (int h = 0; h < 2; ++h) {
        const int tt = 16 * mt + gi + 8 * h;
        if (tt < L) {
          __global io_t* orow = o + ((size_t)(c0 + tt) * Hv + hv) * DV + j0;
          MMA_UNROLL for (int nb = 0; nb < 2; ++nb) {
            const int j = jw + 8 * nb + 2 * ti;
            ST_IO(orow, j, scale * oacc[mt][nb][2 * h]);
            ST_IO(orow, j + 1, scale * oacc[mt][nb][2 * h + 1]);
          }
        }
      }
    }

    // ---- S^T = e^{G_L-1} S^T + D'^T K   (m = this warp's 16 columns, n = key dim, k = tokens)
    const float decay = exp(glast);
    MMA_UNROLL for (int nn = 0; nn < DK / 8; ++nn) {
      MMA_UNROLL for (int e = 0; e < 4; ++e) sacc[nn][e] *= decay;
    }
    MMA_UNROLL for (int ks = 0; ks < NCT; ++ks) {
      const uint4 a = frag_a(Eb + jw * CW + 8 * ks, CW, gi, ti);
      MMA_UNROLL for (int nn = 0; nn < DK / 8; ++nn) {
        const uint2 bk = frag_b_kmajor(Kh + 16 * ks * KP + 8 * nn, KP, gi, ti);
        MMA(sacc[nn], a.x, a.y, a.z, a.w, bk.x, bk.y);
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);  // every warp is done with Kb, Qb, Pb, Db, Eb of this chunk
  }

  if (slot >= 0) {
    MMA_UNROLL for (int nn = 0; nn < DK / 8; ++nn) {
      MMA_UNROLL for (int e = 0; e < 4; ++e) {
        const int i = 8 * nn + 2 * ti + (e & 1), j = jw + gi + (e >> 1) * 8;
        ST_ST(S, (size_t)i * DV + j, sacc[nn][e]);
      }
    }
  }
}

// Paged decode over int4 caches on NVIDIA tensor cores (variant nv_mma_sync; inline PTX
// mma.sync m16n8k16 f16 x f16 -> f32, sm_80+). The int8 kernel's design (decode_mma_nv.cl:
// why tensor cores, q and the weights as hi / lo f16 pairs in f32 accuracy, keys and dims as
// MMA rows, the V side's own running maximum) with what groups change (docs/kv_formats.md,
// "int4: decode"):
// - A nibble becomes an f16 by a mask under the exponent of 1024 ((w >> s) & 0x000F000F |
//   0x64006400: two elements per word), and one sub.f16x2 of {1024 + zero} leaves u - zero,
//   exact: the zero point costs nothing per element and nothing cancels.
// - S^T = K Q^T: every k-step lies inside one group. Lane c holds word slots of a K row (KDIM
//   below: as loaded where a row is one group, else exchanged or transposed across the quad so
//   that slot J of the four lanes lies in one group); a word's nibbles e0..e7 are dims KDIM + e,
//   k-step 2J + h takes {e2h, e2h+4} (a0 / a1) and {e2h+1, e2h+5} (a2 / a3), and q's B fragment
//   is loaded in that order (MMA_Q_DIM). Each group has its own score accumulator; the key's
//   group scales weigh them once per block.
// - O^T = V^T P^T: the group's V scale multiplies the weights (P' per group, its own hi / lo
//   split and B fragment), so every m-tile's 16 dims lie in one group: lane g loads PB =
//   QGROUP / 16 bytes at (QGROUP / 2) J + PB g of group J (dims QGROUP J + (QGROUP / 8) g ..),
//   and m-tile (J, t) takes byte t of those pieces: its low nibbles are row g, its high ones
//   row g + 8 (dims + 2t, + 2t + 1). The V side's running maximum, over score + exponent of the
//   group's V scale, runs per group, and so does the lazy rescale of the group's O tiles.
//
// Work-group, work split, loads and the end of the kernel as decode_mma_nv.cl. Lane (g, c)
// loads keys g and 8 + g's K words and [scale, zero] pairs and V scales, and keys 2c, 2c + 1,
// 8 + 2c, 9 + 2c's V pieces and V zero points, of every group.
//
// Build options (-D): HEAD_DIM (64 or 128), QGROUP (32, 64 or 128, dividing HEAD_DIM), SC_F16
// (scale caches in f16), GMAX, NWARPS, UNROLL, FUSE_MERGE, MERGE_BATCH.
#include "decode_mma_defs_nv.clh"
#ifndef QGROUP
#define QGROUP 64
#endif
#if (QGROUP != 32 && QGROUP != 64 && QGROUP != 128) || HEAD_DIM % QGROUP
#error "int4 nv_mma_sync decode takes QGROUP 32, 64 or 128 dividing HEAD_DIM"
#endif

#define KC (HEAD_DIM / 32)     // 16-byte chunks of a K row: one word of each per lane
#define NG (HEAD_DIM / QGROUP)  // groups per row
#define PB (QGROUP / 16)       // bytes of a lane's V piece per group
#define VT PB                  // m-tiles of O^T per group (byte t of the pieces)
#define VWD ((PB + 3) / 4)     // words of a V piece
#define MT (HEAD_DIM / 16)     // m-tiles of O^T
// K word slots: lane c's word J holds dims KDIM(c, J) + 0..7 (nibble e = dim + e), and k-steps
// 2J, 2J + 1 take slot J of every lane of the quad, so slot J must lie in one group (KGRP(J)):
// - one group a row: the lane's own D / 8 bytes, no exchange;
// - D = 128 in two groups: the lane's 16 bytes, half of them swapped with lane c ^ 2 (lanes c
//   and c ^ 2 hold chunks c & 1 and (c & 1) + 2, i.e. one chunk of each group);
// - otherwise word c of each 16-byte chunk (a quad transpose of 16-byte loads at D = 128, 4-byte
//   loads at D = 64).
#if NG == 1
#define KMODE 0
#define KDIM(c, J) ((HEAD_DIM / 4) * (c) + 8 * (J))
#elif HEAD_DIM == 128 && NG == 2
#define KMODE 1
#define KDIM(c, J) (32 * (2 * ((J) / 2) + ((c) & 1)) + 8 * (((J) & 1) + 2 * ((c) >> 1)))
#else
#define KMODE 2
#define KDIM(c, J) (32 * (J) + 8 * (c))
#endif
#define KGRP(J) (KDIM(0, J) / QGROUP)
#define MMA_Q_DIM(c, s, k) (KDIM(c, (s) / 2) + 2 * ((s) % 2) + (k) / 2 + 4 * ((k) % 2))
#ifndef NIB16
#define NIB16 (QGROUP >= 64)  // at group 32 the extra zero constants cost more than the shifts
#endif
#if NIB16
#define MMA_Q_B1_SCALE 0.0625f  // the high nibbles' factor 16 (NIB_HI below)
#endif
#include "decode_mma_nv.clh"

// A row's NG [scale, zero] pairs from element i of a scale cache of SC_F16 (1: f16) elements,
// as wide loads (at most 16 bytes each; the host checks that the scale strides keep them
// aligned): out[2J] the scale, out[2J + 1] the zero of group J.
inline void load_pairs(__global const uchar* p, size_t i, float* out) {
#if SC_F16
#if NG == 1
  const uint w[1] = {((__global const uint*)p)[i / 2]};
#elif NG == 2
  const uint2 x = ((__global const uint2*)p)[i / 4];
  const uint w[2] = {x.x, x.y};
#else
  const uint4 x = ((__global const uint4*)p)[i / 8];
  const uint w[4] = {x.x, x.y, x.z, x.w};
#endif
  for (int J = 0; J < NG; ++J) unpack2_f16(w[J], &out[2 * J], &out[2 * J + 1]);
#elif NG == 1
  const float2 x = ((__global const float2*)p)[i / 2];
  out[0] = x.x, out[1] = x.y;
#else
  for (int h = 0; h < NG / 2; ++h) {
    const float4 x = ((__global const float4*)p)[i / 4 + h];
    out[4 * h] = x.x, out[4 * h + 1] = x.y, out[4 * h + 2] = x.z, out[4 * h + 3] = x.w;
  }
#endif
}

// Lane c's K word slots of a row (KDIM above); the quad's loads cover the row's bytes once.
inline void load_k_words(__global const uchar* kp, int c, int lane, uint* kw PTX_SCR_PARAM) {
#if KMODE == 0 && HEAD_DIM == 128
  const uint4 x = *(__global const uint4*)(kp + 16 * c);
  kw[0] = x.x, kw[1] = x.y, kw[2] = x.z, kw[3] = x.w;
#elif KMODE == 0
  const uint2 x = *(__global const uint2*)(kp + 8 * c);
  kw[0] = x.x, kw[1] = x.y;
#elif KMODE == 1
  const uint4 x = *(__global const uint4*)(kp + 16 * c);
  const bool lo = c < 2;  // keeps words 0, 1 of its chunk; lane c ^ 2 keeps words 2, 3 of its
  const uint r0 = shfl_idx_u(lo ? x.z : x.x, lane ^ 2), r1 = shfl_idx_u(lo ? x.w : x.y, lane ^ 2);
  kw[0] = lo ? x.x : r0, kw[1] = lo ? x.y : r1, kw[2] = lo ? r0 : x.z, kw[3] = lo ? r1 : x.w;
#elif HEAD_DIM == 128
  const uint4 x = quad_transpose(*(__global const uint4*)(kp + 16 * c), lane);
  kw[0] = x.x, kw[1] = x.y, kw[2] = x.z, kw[3] = x.w;
#else
  for (int J = 0; J < KC; ++J) kw[J] = *(__global const uint*)(kp + 16 * J + 4 * c);
#endif
}
// A lane's V piece of one group (PB bytes).
inline void load_v_piece(__global const uchar* vp, uint* w) {
#if PB == 2
  w[0] = *(__global const ushort*)vp;
#elif PB == 4
  w[0] = *(__global const uint*)vp;
#else
  const uint2 x = *(__global const uint2*)vp;
  w[0] = x.x, w[1] = x.y;
#endif
}

#define F16_1024 0x64006400u  // f16x2 {1024, 1024}
// Nibbles s and s + 4 of w (after the shift by 4s) as f16x2 {1024 + u, 1024 + u'}; minus
// {1024 + zero, ...}: u - zero, exact.
#define NIB_PAIR(w, sh, zz) hsub2((((w) >> (sh)) & 0x000F000Fu) | F16_1024, (zz))
// {1024 + z0, 1024 + z1} as f16x2 (exact: z in 0 .. 15).
#define ZZ(z0, z1) pack2_f16(1024.0f + (z0), 1024.0f + (z1))
#define NIB_LO(w, zz) hsub2(((w) & 0x000F000Fu) | F16_1024, (zz))
#define NIB_HI(w, zz16) hsub2(((w) & 0x00F000F0u) | F16_1024, (zz16))
#define ZZ16(z0, z1) pack2_f16(1024.0f + 16.0f * (z0), 1024.0f + 16.0f * (z1))

__kernel __attribute__((reqd_work_group_size(WGSIZE, 1, 1))) void paged_decode_mma(DECODE_KERNEL_ARGS) {
  __local float sm_o[NWARPS * GMAX * HEAD_DIM];
  __local float sm_st[2 * NWARPS * GMAX];  // per warp and head: score max, sum
  __local ulong key_row[NWARPS * UNROLL * BLK];    // per warp: the step's key row offsets
  __local float key_vz[NWARPS * UNROLL * BLK * NG];  // and V zero points
#if FUSE_MERGE
  __local int is_last;
#endif
  PTX_SCRATCH
  const int lid = get_local_id(0), lane = lid & 31, warp = lid >> 5;
  const int g = lane >> 2, c = lane & 3;  // fragment row group / quad lane
  __global const int* wk = tab + work_off + 8 * (int)get_group_id(0);
  const int req = wk[0], begin = wk[1], end = wk[2], part = wk[3], page_base = wk[4], tok_off = wk[5];
  if (req < 0) return;  // an unused slot of a fixed-capacity plan (the whole work-group)
  const int kvh = (int)get_group_id(1) / n_hblk, hblk = (int)get_group_id(1) % n_hblk;
  const int h0 = kvh * group + hblk * GMAX;
  const int ng = min(GMAX, group - hblk * GMAX);
  const int pmask = (1 << log2_page) - 1;
  const long head_off = (long)kvh * stride_head, sc_hoff = (long)kvh * sc_head;
  const float vs_h = v_scale * (has_hs ? v_hs[kvh] : 1.0f);

  uint qb[NB][KSTEPS][2];
  float descale[NB];  // of head 4b + c (the lane's score column)
  mma_load_q(q, q_dt, req, num_qo_heads, h0, ng, q_scale * (has_hs ? k_hs[kvh] : 1.0f), g, c, qb, descale PTX_SCR_ARG);

  float acc[NB][MT][4];  // O^T: rows dims, columns head 4b + c (hi, lo); tile (J, t) = J * VT + t
UNROLL_LOOP
  for (int b = 0; b < NB; ++b)
UNROLL_LOOP
    for (int j = 0; j < MT; ++j) acc[b][j][0] = acc[b][j][1] = acc[b][j][2] = acc[b][j][3] = 0.0f;
  float ml[NB], lsum[NB], mo[NB][NG];  // head 4b + c: score max, this lane's sum, V-side max per group
UNROLL_LOOP
  for (int b = 0; b < NB; ++b) {
    ml[b] = CLATTN_NEG_INF, lsum[b] = 0.0f;
UNROLL_LOOP
    for (int J = 0; J < NG; ++J) mo[b][J] = CLATTN_NEG_INF;
  }
  bool bad = false;
  const uint psel = (g & 1) ? 0x7632u : 0x5410u;  // the lane's P part: lo or hi halves

#define KTOK(tb, r) ((tb) + 8 * (r) + g)
#define STEP (NWARPS * BLK * UNROLL)
  // Page ids of a step's K and score keys (g, 8 + g of each block), loaded a step ahead of
  // their rows so the row loads never wait on them. The V keys (2c, 2c + 1, 8 + 2c, 9 + 2c) are
  // other lanes' K keys: their row offsets and V zero points come through the warp's key table
  // (key_row, key_vz) instead of a second page lookup and offset computation per key.
  int kid[UNROLL][2];
#define LOAD_IDS(t)                                                                                        \
  UNROLL_LOOP for (int u = 0; u < UNROLL; ++u) {                                                           \
    UNROLL_LOOP for (int r = 0; r < 2; ++r) kid[u][r] = PAGE_OF(KTOK((t) + u * BLK, r));                   \
  }
#define KSLOT(u, k) ((warp * UNROLL + (u)) * BLK + (k))
  // A step's rows and pairs: K words, [scale, zero] pairs and V scales of keys g and 8 + g; V
  // pieces and zero points of the V keys; every group.
  uint kw[UNROLL][2][KC], vw[UNROLL][4][NG][VWD];
  float ks[UNROLL][2][NG], kz[UNROLL][2][NG], vs[UNROLL][2][NG], vz[UNROLL][4][NG];
#define LOAD_ROWS(t)                                                                                       \
  BAR_WARP(); /* the previous step's table readers are done */                                            \
  UNROLL_LOOP for (int u = 0; u < UNROLL; ++u) {                                                           \
    const int tb = (t) + u * BLK;                                                                          \
    UNROLL_LOOP for (int r = 0; r < 2; ++r) {                                                              \
      size_t row, sc;                                                                                      \
      KEY_AT(KTOK(tb, r), kid[u][r], row, sc);                                                             \
      load_k_words(k_cache + row / 2, c, lane, kw[u][r] PTX_SCR_ARG);                                      \
      if (c == r) key_row[KSLOT(u, 8 * r + g)] = row;                                                      \
      float kp[2 * NG], vp[2 * NG];                                                                        \
      load_pairs(k_scales, sc, kp);                                                                        \
      load_pairs(v_scales, sc, vp);                                                                        \
      UNROLL_LOOP for (int J = 0; J < NG; ++J) {                                                           \
        ks[u][r][J] = kp[2 * J], kz[u][r][J] = kp[2 * J + 1], vs[u][r][J] = vp[2 * J];                     \
        if (c == r) key_vz[KSLOT(u, 8 * r + g) * NG + J] = vp[2 * J + 1];                                  \
      }                                                                                                    \
    }                                                                                                      \
  }                                                                                                        \
  BAR_WARP();                                                                                              \
  UNROLL_LOOP for (int u = 0; u < UNROLL; ++u) {                                                           \
    UNROLL_LOOP for (int i = 0; i < 4; ++i) {                                                              \
      const int k = 8 * (i >> 1) + 2 * c + (i & 1);                                                        \
      const ulong row = key_row[KSLOT(u, k)];                                                              \
      UNROLL_LOOP for (int J = 0; J < NG; ++J) {                                                           \
        load_v_piece(v_cache + row / 2 + (QGROUP / 2) * J + PB * g, vw[u][i][J]);                          \
        vz[u][i][J] = key_vz[KSLOT(u, k) * NG + J];                                                        \
      }                                                                                                    \
    }                                                                                                      \
  }
  const int first = begin + warp * BLK * UNROLL;
  if (begin < end) {
    LOAD_IDS(first)
  }
  for (int t0 = first; MMA_LOOP_MORE(t0); t0 += STEP) {
    LOAD_ROWS(t0)
    LOAD_IDS(t0 + STEP)

UNROLL_LOOP
    for (int u = 0; u < UNROLL; ++u) {
      // S^T = K Q^T per group: lane (g, c) gets keys g (c0 hi + c1 lo) and 8 + g (c2 + c3) of
      // head 4b + c.
      float sacc[NG][NB][4];
UNROLL_LOOP
      for (int J = 0; J < KC; ++J) {
        const int gj = KGRP(J);  // the slot's group
        const uint z0 = ZZ(kz[u][0][gj], kz[u][0][gj]), z1 = ZZ(kz[u][1][gj], kz[u][1][gj]);
#if NIB16
        const uint y0 = ZZ16(kz[u][0][gj], kz[u][0][gj]), y1 = ZZ16(kz[u][1][gj], kz[u][1][gj]);
#endif
UNROLL_LOOP
        for (int h = 0; h < 2; ++h) {
#if NIB16
          const uint w0 = kw[u][0][J] >> (8 * h), w1 = kw[u][1][J] >> (8 * h);
          const uint a0 = NIB_LO(w0, z0), a1 = NIB_LO(w1, z1), a2 = NIB_HI(w0, y0), a3 = NIB_HI(w1, y1);
#else
          const uint a0 = NIB_PAIR(kw[u][0][J], 8 * h, z0), a1 = NIB_PAIR(kw[u][1][J], 8 * h, z1);
          const uint a2 = NIB_PAIR(kw[u][0][J], 8 * h + 4, z0), a3 = NIB_PAIR(kw[u][1][J], 8 * h + 4, z1);
#endif
UNROLL_LOOP
          for (int b = 0; b < NB; ++b) {
            // The group's first k-step starts its accumulator (slots of a group are consecutive).
            if (h == 0 && (J == 0 || KGRP(J - 1) != gj)) MMA_Z(sacc[gj][b], a0, a1, a2, a3, qb[b][2 * J][0], qb[b][2 * J][1]);
            else MMA(sacc[gj][b], a0, a1, a2, a3, qb[b][2 * J + h][0], qb[b][2 * J + h][1]);
          }
        }
      }
      uint pb[NB][NG][2];  // B operand of O^T = V^T P'^T per group
UNROLL_LOOP
      for (int b = 0; b < NB; ++b) {
        float x[2] = {0.0f, 0.0f};
        float mt = CLATTN_NEG_INF;
UNROLL_LOOP
        for (int r = 0; r < 2; ++r) {
UNROLL_LOOP
          for (int J = 0; J < NG; ++J) x[r] += (sacc[J][b][2 * r] + sacc[J][b][2 * r + 1]) * ks[u][r][J];
          float xi = x[r] * descale[b];
          if (cap_log2 > 0.0f) xi = cap_log2 * tanh(xi * inv_cap);
          x[r] = KTOK(t0 + u * BLK, r) < end ? xi : CLATTN_NEG_INF;
          mt = fmax(mt, x[r]);
        }
        // Lazy maxima: a lane's own keys decide whether any column must move (a vote); only
        // then is the column maximum over its 8 key rows formed (rare after the first blocks).
        if (MMA_LAZY_ANY(mt > ml[b] + RESCALE_SLACK)) {
UNROLL_LOOP
          for (int m = 4; m < 32; m <<= 1) mt = fmax(mt, shfl_xor(mt, m));  // over the 8 key rows g
          if (mt > ml[b] + RESCALE_SLACK) {
            lsum[b] *= ml[b] == CLATTN_NEG_INF ? 0.0f : exp2(ml[b] - mt);
            ml[b] = mt;
          }
        }
UNROLL_LOOP
        for (int r = 0; r < 2; ++r) lsum[b] += x[r] == CLATTN_NEG_INF ? 0.0f : exp2(x[r] - ml[b]);
UNROLL_LOOP
        for (int J = 0; J < NG; ++J) {
          // The group's V scale: exponent into the V-side score, mantissa onto the weight.
          float xo[2], fv[2];
          float mot = CLATTN_NEG_INF;
UNROLL_LOOP
          for (int r = 0; r < 2; ++r) {
            const float v = vs[u][r][J];
            const float ve = v_scale_split(v, &fv[r]);
            xo[r] = v > 0.0f ? x[r] + ve : CLATTN_NEG_INF;
            mot = fmax(mot, xo[r]);
          }
          if (MMA_LAZY_ANY(mot > mo[b][J] + RESCALE_SLACK)) {
UNROLL_LOOP
            for (int m = 4; m < 32; m <<= 1) mot = fmax(mot, shfl_xor(mot, m));
            if (mot > mo[b][J] + RESCALE_SLACK) {
              const float al = mo[b][J] == CLATTN_NEG_INF ? 0.0f : exp2(mo[b][J] - mot);
UNROLL_LOOP
              for (int t = 0; t < VT; ++t) {
                float* a = acc[b][J * VT + t];
                a[0] *= al, a[1] *= al, a[2] *= al, a[3] *= al;
              }
              mo[b][J] = mot;
            }
          }
          float pv[2];
UNROLL_LOOP
          for (int r = 0; r < 2; ++r) pv[r] = xo[r] == CLATTN_NEG_INF ? 0.0f : exp2(xo[r] - mo[b][J]) * fv[r];
          mma_weights_to_b(pv[0], pv[1], g, c, psel, &pb[b][J][0], &pb[b][J][1] PTX_SCR_ARG);
        }
      }
      // O^T += V^T P'^T: m-tile (J, t) takes byte t of the lane's group-J pieces of keys 2c,
      // 2c + 1 (a0: low nibbles, row g; a1: high, row g + 8) and 8 + 2c, 9 + 2c (a2, a3).
UNROLL_LOOP
      for (int J = 0; J < NG; ++J) {
        const uint z01 = ZZ(vz[u][0][J], vz[u][1][J]), z23 = ZZ(vz[u][2][J], vz[u][3][J]);
UNROLL_LOOP
        for (int t = 0; t < VT; ++t) {
          const uint sel = (t % 4) * 0x11u + (4 + t % 4) * 0x1100u;  // bytes 0, 2 <- byte t of each key
          const uint x01 = prmt(vw[u][0][J][t / 4], vw[u][1][J][t / 4], sel);
          const uint x23 = prmt(vw[u][2][J][t / 4], vw[u][3][J][t / 4], sel);
#if NIB16
          const uint y01 = ZZ16(vz[u][0][J], vz[u][1][J]), y23 = ZZ16(vz[u][2][J], vz[u][3][J]);
          const uint a0 = NIB_LO(x01, z01), a1 = NIB_HI(x01, y01), a2 = NIB_LO(x23, z23), a3 = NIB_HI(x23, y23);
#else
          const uint a0 = NIB_PAIR(x01, 0, z01), a1 = NIB_PAIR(x01, 4, z01);
          const uint a2 = NIB_PAIR(x23, 0, z23), a3 = NIB_PAIR(x23, 4, z23);
#endif
UNROLL_LOOP
          for (int b = 0; b < NB; ++b) MMA(acc[b][J * VT + t], a0, a1, a2, a3, pb[b][J][0], pb[b][J][1]);
        }
      }
    }
  }
  // ---- Merge the warps' states (warp order) and write.
  mma_store_states(sm_st, ml, lsum, bad, faults, warp, g, c PTX_SCR_ARG);
UNROLL_LOOP
  for (int b = 0; b < NB; ++b) {
    const int hg = 4 * b + c;
    if (hg < GMAX) {
      const float M = mma_head_max(sm_st, hg);
      __local float* dst = sm_o + (warp * GMAX + hg) * HEAD_DIM + (QGROUP / 8) * g;
UNROLL_LOOP
      for (int J = 0; J < NG; ++J) {
        // Group J's O is relative to mo[b][J]; relative to the head's M it is O * 2^(mo - M).
        const float f = mo[b][J] == CLATTN_NEG_INF || M == CLATTN_NEG_INF ? 0.0f : exp2(mo[b][J] - M);
UNROLL_LOOP
        for (int t = 0; t < VT; ++t) {
          const float* a = acc[b][J * VT + t];
          dst[QGROUP * J + 2 * t] = (a[0] + a[1]) * f;
          dst[QGROUP * J + 2 * t + 1] = (a[2] + a[3]) * (NIB16 ? f * 0.0625f : f);
        }
      }
    }
  }
  MMA_DECODE_WRITE();
}

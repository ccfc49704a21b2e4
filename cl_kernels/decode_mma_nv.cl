// Paged decode over int8 caches on NVIDIA tensor cores (variant nv_mma_sync; inline PTX
// mma.sync m16n8k16 f16 x f16 -> f32, sm_80+).
//
// Why: with f32 math the int8 decode loop is issue-bound at GQA 4 (a conversion and eight
// FMAs per K/V element pair: more instructions than the memory time allows), so the work
// moves to the tensor cores, keeping f32 accuracy:
// - int8 values are exact in f16; a byte becomes an f16 by a byte permute under the
//   exponent of 1024 and one f16x2 subtraction (two elements per instruction, no int-to-float
//   conversion): b ^ 0x80 = b + 128 in the low mantissa bits, 1152 + b - 1152 = b.
// - q and the softmax weights are split into f16 pairs hi + lo (hi = f16(x), lo = f16(x -
//   hi): 22 significant bits) that ride two MMA columns: column 2h' holds head h's hi, 2h' + 1
//   its lo (h' = h mod 4, n-tile h / 4), and the f32 accumulators of the two columns are
//   added, so every product of an int8 value and a weight is formed exactly and summed in f32.
// - q is scaled by a power of two per head (its largest element into [128, 256)) so lo does
//   not fall into f16 subnormals; the score takes the inverse power back.
// - The weights carry the token's V scale. They must stay below the f16 range, so the V
//   side keeps its own running maximum over x + log2(v scale) (the exponent of the scale
//   joins the log2-space score, its mantissa in [1, 2) multiplies the weight): weights stay
//   below 2^(RESCALE_SLACK + 1) whatever the scales. The denominator keeps the usual
//   maximum over the scores; the epilogue brings the two together.
// - Keys and dims are the MMA rows (S^T = K Q^T, O^T = V^T P^T), heads x {hi, lo} the eight
//   columns: at GQA <= 4 no row or column is padding, one MMA per k-step covers 16 keys, and
//   O takes 4 registers per 16 dims (D / 4 per lane at D = 128). (Queries as rows, the
//   FlashAttention-2 orientation, wastes half the rows at GQA 4, doubles the MMAs and the O
//   registers, and ran at 65 % of the stream-read against 87 %: fewer warps per SM.)
//
// Work-group: NWARPS warps, one KV head, up to GMAX (<= 8) query heads of its group, one
// planner work item (request, key range [begin, end)); warp w takes blocks of 16 keys,
// UNROLL consecutive blocks per step, steps NWARPS * UNROLL blocks apart. In a block, lane
// (g = lane / 4, c = lane % 4) loads 16-byte pieces c, c + 4, ... of keys g and 8 + g (its A
// fragment of S^T, dims permuted to match q's B fragment) with their scales, and bytes
// [g D/8, (g+1) D/8) of keys 2c, 2c+1, 8+2c, 9+2c (its A fragment of O^T). The score fragment
// (keys g, 8 + g of head 4b + c) becomes the B fragment of O^T (keys 2c.., column g) through
// four shuffles per block. After the loop the warps' states merge through local memory in
// warp order and the work-group writes o/lse or a partial state, with the optional fused
// merge, as decode.cl does (same table layout and arguments: DECODE_KERNEL_ARGS).
//
// Build options (-D): HEAD_DIM (64 or 128), SC_F16 (scale caches in f16), GMAX, NWARPS, UNROLL,
// FUSE_MERGE, MERGE_BATCH.
#include "decode_mma_defs_nv.clh"

#define KW (HEAD_DIM / 16)  // K words per key and lane (KBYTE below): one per k-step
#define VW (HEAD_DIM / 32)  // V words per key and lane (bytes [n D/8, (n+1) D/8))
#define MT (HEAD_DIM / 16)  // m-tiles of O^T = V^T P^T (rows: dims)
// Byte of word s (one per k-step) of lane c's share of a K row: each 16-byte load of a quad
// covers 64 contiguous bytes (whole 32-byte sectors per instruction).
#define KBYTE(c, s) (64 * ((s) / 4) + 16 * (c) + 4 * ((s) % 4))
#define MMA_Q_DIM(c, s, k) (KBYTE(c, s) + (k))
#include "decode_mma_nv.clh"
#define F16_1152 0x64806480u  // f16x2 {1152, 1152}
#define F16_EXP 0x64646464u   // bytes 0x64: the high byte of f16 1024

// Bytes 0, 1 (sel 0x4140) or 2, 3 (sel 0x4342) of w, sign-flipped, as an exact f16x2 pair.
#define I8_PAIR(w, sel) hsub2(prmt((w), F16_EXP, (sel)), F16_1152)

__kernel __attribute__((reqd_work_group_size(WGSIZE, 1, 1))) void paged_decode_mma(DECODE_KERNEL_ARGS) {
  __local float sm_o[NWARPS * GMAX * HEAD_DIM];
  __local float sm_st[2 * NWARPS * GMAX];  // per warp and head: score max, sum
  PTX_SCRATCH
#if FUSE_MERGE
  __local int is_last;
#endif
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

  // q as the B operand of S^T = K Q^T, in KBYTE order (decode_mma_nv.clh).
  uint qb[NB][KW][2];
  float descale[NB];  // of head 4b + c (the lane's score column)
  mma_load_q(q, q_dt, req, num_qo_heads, h0, ng, q_scale * (has_hs ? k_hs[kvh] : 1.0f), g, c, qb, descale PTX_SCR_ARG);

  float acc[NB][MT][4];  // O^T: rows dims, columns head 4b + c (hi, lo)
UNROLL_LOOP
  for (int b = 0; b < NB; ++b)
UNROLL_LOOP
    for (int j = 0; j < MT; ++j) acc[b][j][0] = acc[b][j][1] = acc[b][j][2] = acc[b][j][3] = 0.0f;
  float ml[NB], mo[NB], lsum[NB];  // head 4b + c: score max, V-side max, this lane's sum
UNROLL_LOOP
  for (int b = 0; b < NB; ++b) ml[b] = mo[b] = CLATTN_NEG_INF, lsum[b] = 0.0f;
  bool bad = false;
  const uint psel = (g & 1) ? 0x7632u : 0x5410u;  // the lane's P part: lo or hi halves

  // Page ids of the step's keys, loaded one step ahead so the row loads never wait on them:
  // K (and score) keys g and 8 + g, V keys 2c, 2c + 1, 8 + 2c, 9 + 2c of each block.
#define KTOK(tb, r) ((tb) + 8 * (r) + g)
#define VTOK(tb, i) ((tb) + 8 * ((i) >> 1) + 2 * c + ((i) & 1))
  int kid[UNROLL][2], vid[UNROLL][4];
  const int first = begin + warp * BLK * UNROLL;
UNROLL_LOOP
  for (int u = 0; u < UNROLL; ++u) {
UNROLL_LOOP
    for (int r = 0; r < 2; ++r) kid[u][r] = begin < end ? PAGE_OF(KTOK(first + u * BLK, r)) : 0;
UNROLL_LOOP
    for (int i = 0; i < 4; ++i) vid[u][i] = begin < end ? PAGE_OF(VTOK(first + u * BLK, i)) : 0;
  }
  for (int t0 = first; MMA_LOOP_MORE(t0); t0 += NWARPS * BLK * UNROLL) {
    // Every load of the step first: K rows and scales of keys g and 8 + g, V rows of the
    // lane's four V keys, per block; then the next step's page ids.
    uint kw[UNROLL][2][KW], vw[UNROLL][4][VW];
    float ks[UNROLL][2], vsc[UNROLL][2];
    bool valid[UNROLL][2];
UNROLL_LOOP
    for (int u = 0; u < UNROLL; ++u) {
      const int tb = t0 + u * BLK;
UNROLL_LOOP
      for (int r = 0; r < 2; ++r) {
        valid[u][r] = KTOK(tb, r) < end;
        size_t row, sc;
        KEY_AT(KTOK(tb, r), kid[u][r], row, sc);
UNROLL_LOOP
        for (int i = 0; i < KW / 4; ++i) {
          const uint4 x = *(__global const uint4*)(k_cache + row + KBYTE(c, 4 * i));
          kw[u][r][4 * i] = x.x, kw[u][r][4 * i + 1] = x.y, kw[u][r][4 * i + 2] = x.z, kw[u][r][4 * i + 3] = x.w;
        }
        ks[u][r] = kv_row_scale(k_scales, sc, SC_F16);
        vsc[u][r] = kv_row_scale(v_scales, sc, SC_F16);
      }
UNROLL_LOOP
      for (int i = 0; i < 4; ++i) {
        size_t row, sc;
        KEY_AT(VTOK(tb, i), vid[u][i], row, sc);
#if VW == 4
        const uint4 x = *(__global const uint4*)(v_cache + row + g * (HEAD_DIM / 8));
        vw[u][i][0] = x.x, vw[u][i][1] = x.y, vw[u][i][2] = x.z, vw[u][i][3] = x.w;
#else
        const uint2 x = *(__global const uint2*)(v_cache + row + g * (HEAD_DIM / 8));
        vw[u][i][0] = x.x, vw[u][i][1] = x.y;
#endif
      }
    }
    const int tn = t0 + NWARPS * BLK * UNROLL;
UNROLL_LOOP
    for (int u = 0; u < UNROLL; ++u) {
UNROLL_LOOP
      for (int r = 0; r < 2; ++r) kid[u][r] = PAGE_OF(KTOK(tn + u * BLK, r));
UNROLL_LOOP
      for (int i = 0; i < 4; ++i) vid[u][i] = PAGE_OF(VTOK(tn + u * BLK, i));
    }

UNROLL_LOOP
    for (int u = 0; u < UNROLL; ++u) {
      // S^T = K Q^T: one MMA per k-step and n-tile covers the block's 16 keys; lane (g, c)
      // gets keys g (c0 hi + c1 lo) and 8 + g (c2 + c3) of head 4b + c.
      float sacc[NB][4];
UNROLL_LOOP
      for (int b = 0; b < NB; ++b) sacc[b][0] = sacc[b][1] = sacc[b][2] = sacc[b][3] = 0.0f;
UNROLL_LOOP
      for (int s = 0; s < KW; ++s) {
        const uint w0 = kw[u][0][s] ^ 0x80808080u, w1 = kw[u][1][s] ^ 0x80808080u;
        const uint a0 = I8_PAIR(w0, 0x4140u), a1 = I8_PAIR(w1, 0x4140u);
        const uint a2 = I8_PAIR(w0, 0x4342u), a3 = I8_PAIR(w1, 0x4342u);
UNROLL_LOOP
        for (int b = 0; b < NB; ++b) MMA(sacc[b], a0, a1, a2, a3, qb[b][s][0], qb[b][s][1]);
      }
      uint pb[NB][2];  // B operand of O^T = V^T P^T: this lane's column, keys 2c, 2c+1 / 8+2c, 9+2c
UNROLL_LOOP
      for (int b = 0; b < NB; ++b) {
        float x[2] = {sacc[b][0] + sacc[b][1], sacc[b][2] + sacc[b][3]};
        float xo[2], fv[2];
        float mt = CLATTN_NEG_INF, mot = CLATTN_NEG_INF;
UNROLL_LOOP
        for (int r = 0; r < 2; ++r) {
          float xi = x[r] * (ks[u][r] * descale[b]);
          if (cap_log2 > 0.0f) xi = cap_log2 * tanh(xi * inv_cap);
          xi = valid[u][r] ? xi : CLATTN_NEG_INF;
          // The V scale: exponent into the V-side score, mantissa (in [1, 2)) onto the weight.
          const float v = vsc[u][r];
          const float ve = v_scale_split(v, &fv[r]);
          xo[r] = v > 0.0f ? xi + ve : CLATTN_NEG_INF;
          x[r] = xi;
          mt = fmax(mt, xi);
          mot = fmax(mot, xo[r]);
        }
UNROLL_LOOP
        for (int m = 4; m < 32; m <<= 1) {  // over the 8 key rows g
          mt = fmax(mt, shfl_xor(mt, m));
          mot = fmax(mot, shfl_xor(mot, m));
        }
        // Lazy rescaling as in decode.cl, separately for the sum and for O.
        if (mt > ml[b] + RESCALE_SLACK) {
          lsum[b] *= ml[b] == CLATTN_NEG_INF ? 0.0f : exp2(ml[b] - mt);
          ml[b] = mt;
        }
        if (mot > mo[b] + RESCALE_SLACK) {
          const float al = mo[b] == CLATTN_NEG_INF ? 0.0f : exp2(mo[b] - mot);
UNROLL_LOOP
          for (int j = 0; j < MT; ++j) acc[b][j][0] *= al, acc[b][j][1] *= al, acc[b][j][2] *= al, acc[b][j][3] *= al;
          mo[b] = mot;
        }
        float pv[2];
UNROLL_LOOP
        for (int r = 0; r < 2; ++r) {
          lsum[b] += x[r] == CLATTN_NEG_INF ? 0.0f : exp2(x[r] - ml[b]);
          pv[r] = xo[r] == CLATTN_NEG_INF ? 0.0f : exp2(xo[r] - mo[b]) * fv[r];
        }
        mma_weights_to_b(pv[0], pv[1], g, c, psel, &pb[b][0], &pb[b][1] PTX_SCR_ARG);
      }
      // O^T += V^T P^T: m-tile j takes bytes 2j (row g) and 2j + 1 (row g + 8) of the lane's
      // V piece (dims g D/8 + 2j, + 1) for keys 2c, 2c + 1 (a0, a1) and 8 + 2c, 9 + 2c (a2, a3).
UNROLL_LOOP
      for (int wi = 0; wi < VW; ++wi) {
        const uint e01 = prmt(vw[u][0][wi], vw[u][1][wi], 0x5140u) ^ 0x80808080u;  // bytes 0, 1 of both keys
        const uint f01 = prmt(vw[u][0][wi], vw[u][1][wi], 0x7362u) ^ 0x80808080u;  // bytes 2, 3
        const uint e23 = prmt(vw[u][2][wi], vw[u][3][wi], 0x5140u) ^ 0x80808080u;
        const uint f23 = prmt(vw[u][2][wi], vw[u][3][wi], 0x7362u) ^ 0x80808080u;
        const uint ea0 = I8_PAIR(e01, 0x4140u), ea1 = I8_PAIR(e01, 0x4342u);
        const uint ea2 = I8_PAIR(e23, 0x4140u), ea3 = I8_PAIR(e23, 0x4342u);
        const uint fa0 = I8_PAIR(f01, 0x4140u), fa1 = I8_PAIR(f01, 0x4342u);
        const uint fa2 = I8_PAIR(f23, 0x4140u), fa3 = I8_PAIR(f23, 0x4342u);
UNROLL_LOOP
        for (int b = 0; b < NB; ++b) {
          MMA(acc[b][2 * wi], ea0, ea1, ea2, ea3, pb[b][0], pb[b][1]);
          MMA(acc[b][2 * wi + 1], fa0, fa1, fa2, fa3, pb[b][0], pb[b][1]);
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
      // O here is relative to mo; relative to the head's M it is O * 2^(mo - M).
      const float M = mma_head_max(sm_st, hg);
      const float f = mo[b] == CLATTN_NEG_INF || M == CLATTN_NEG_INF ? 0.0f : exp2(mo[b] - M);
      __local float* dst = sm_o + (warp * GMAX + hg) * HEAD_DIM + g * (HEAD_DIM / 8);
UNROLL_LOOP
      for (int j = 0; j < MT; ++j) {
        dst[2 * j] = (acc[b][j][0] + acc[b][j][1]) * f;
        dst[2 * j + 1] = (acc[b][j][2] + acc[b][j][3]) * f;
      }
    }
  }
  MMA_DECODE_WRITE();
}

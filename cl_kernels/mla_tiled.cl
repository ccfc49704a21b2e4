// MLA (absorbed DeepSeek latent attention), portable register-blocked kernel (variant
// "tiled"): decode and extend, FlashAttention-2 in shape, CLBlast xgemm's micro-tiles for
// both products. Same work entries, arguments (mla_latent.clh), split-K partial layout and
// LSE semantics as mla.cl (see there; SPARSE_IDX=1: sparse decode, mla_sparse.clh); OpenCL
// C 1.2, no extension.
//
//   work-group = one work entry (request, block of QB query vectors, KV range);
//                WG = QB / MS * DS work-items
//   tile       = KT tokens. Every work-item loads its LOAD_BYTES chunks of the next tile into
//                registers while this one is computed (software pipeline), then converts
//                them once to f32 in local memory: lat[KT][576]. Keys and values are the same
//                latent rows, so one staging serves S (all 576 dims) and P V (ckv, 512).
//   S = Q K^T  work-item (sv, ds) keeps the float4 columns ds + DS*i of the 576 (NQ4 of
//              them, pre-scaled) of query vectors sv + QS*m (m < MS, QS = QB / MS) in
//              registers and dots them with all KT keys: an MS x KT micro-tile per d-slice,
//              each float4 read feeding 4 MS FMAs. The DS partials of a score meet in local
//              memory (rows of DS + 1 floats: conflict-free writes and reads). Work-item
//              order: DSW slices, then the QS vector groups, then the other slices, so a
//              32-wide sub-group at DSW = 8 reads 8 distinct float4s (128 bytes) per load,
//              each broadcast to 4 vector groups.
//   softmax    work-item so < QB*KT owns score (so / KT, so % KT): sum of the partials, masks,
//              the vector's tile max from local memory, online rescale (log2 domain), p to
//              local memory (key-major), the vector's alpha to local memory; it keeps the
//              running max and a running sum over its own key column (summed at the end).
//   O += P V   work-item (pq, cb) owns MO query vectors x NO4 float4 output columns
//              cb + CB*j (CB = WG * MO / QB): MO * 512 / CB accumulators; per key,
//              MO broadcast p values (float4 reads) and NO4 float4 reads of the staged row
//              (a sub-group reads consecutive float4s: conflict-free).
// Local memory: 16*KT*144 (lat) + 4*QB*KT*(DS + 3) + 4*QB bytes (+ p rounded to float4s).
// Five barriers per tile: staged, partials, scores, probabilities, and the next staging.
// int8 latents (KV_DT = DT_I8): each loaded chunk comes with its token's ckv or kpe scale
// (mla_latent.clh) and is staged dequantised (value x scale), so S and P V are those of
// the float latents: one multiplication per staged element, shared by the QB vectors.
#ifndef QB  // query vectors per work-group
#define QB 16
#endif
#ifndef KT  // tokens per tile (one online-softmax step)
#define KT 8
#endif
#ifndef MS  // S: query vectors per work-item
#define MS 1
#endif
#ifndef DS  // S: work-items per query vector (each a 576 / DS slice of the dims)
#define DS 16
#endif
#ifndef DSW  // S: slices adjacent in the work-item order (a divisor of DS)
#define DSW 8
#endif
#ifndef MO  // P V: query vectors per work-item
#define MO 8
#endif

#define QS (QB / MS)  // S: vector groups
#define WG (QS * DS)

// Full unrolling keeps the per-work-item arrays (q, scores, accumulators) in registers on
// GPUs; on CPU devices the dispatcher leaves the choice to the compiler (UNROLL_HINTS=0:
// PoCL compiles fully unrolled code for seconds longer), unlike common.clh's UNROLL_LOOP,
// which keeps the loops rolled there. The math is unchanged.
#if !defined(UNROLL_HINTS) || UNROLL_HINTS
#define MLA_UNROLL _Pragma("unroll")
#else
#define MLA_UNROLL
#endif
#define TILE_TOKENS KT
#include "mla_latent.clh"

#define ROW4 ((CKV_DIM + KPE_DIM) / 4)  // float4s per staged latent row
#define NQ4 (ROW4 / DS)                 // q float4s per work-item
#define CB (WG / (QB / MO))             // P V: work-items per block of MO vectors
#define NO4 (CKV_DIM / 4 / CB)          // P V: float4 output columns per work-item
#define NS (QB * KT)                    // scores per tile
#define RS ((NS + WG - 1) / WG)         // scores per work-item
#define PST (DS + 1)                    // partials per score (padded)
#define FPC (VW * EPW)                  // floats per loaded chunk
#if KV_I8
#define STAGE_SCALE(i) * psc[i]
#else
#define STAGE_SCALE(i)
#endif

#if (ROW4 % DS) || (DS % DSW) || (QB % MS) || (QB % MO) || ((WG * MO) % QB) || ((CKV_DIM / 4) % CB)
#error "mla_tiled.cl: DS must divide 144, DSW divide DS, MS and MO divide QB, WG * MO / QB divide 128"
#endif

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) SIMD_ATTR
void mla_tiled(MLA_KERNEL_ARGS) {
  __local float4 lat[KT * ROW4];
  __local float4 pr4[(NS + 3) / 4];
  __local float part[NS * PST];
  __local float sc[NS];
  __local float al[QB];
  __local float* pr = (__local float*)pr4;

  const int wi = get_local_id(0);
  __global const int* me = tab + work_off + 8 * (int)get_group_id(0);
  const int kb = me[0], ke = me[1], wpart = me[2], pbase = me[3];
  const int row0 = me[4], nrows = me[5], vbeg = me[6], cbase = me[7];
  const int nvec = nrows * H;
  const int ds = wi % DSW + DSW * (wi / (DSW * QS)), sv = (wi / DSW) % QS;  // S roles
  const int cb = wi % CB, pq = wi / CB;                                    // P V roles

  // This work-item's q slices, pre-scaled: every load issued before any conversion.
  float4 q4[MS * NQ4];
  {
    uint4 raw[MS * NQ4];
    MLA_UNROLL
    for (int m = 0; m < MS; ++m) {
      const int v = vbeg + sv + QS * m;
      const size_t qrow = (size_t)(row0 + (v < nvec ? v / H : 0)) * H + (v < nvec ? v % H : 0);
      MLA_UNROLL
      for (int i = 0; i < NQ4; ++i) {
        const int g = ds + DS * i;
        raw[m * NQ4 + i] = v >= nvec ? (uint4)(0u)
                           : g < CKV_DIM / 4 ? load4_bits(q_nope, qrow * CKV_DIM + 4 * g, q_dt)
                                             : load4_bits(q_pe, qrow * KPE_DIM + 4 * (g - CKV_DIM / 4), q_dt);
      }
    }
    MLA_UNROLL
    for (int i = 0; i < MS * NQ4; ++i) q4[i] = bits4_to_float4(raw[i], q_dt) * q_scale;
  }

  // Softmax state of the scores this work-item owns; last visible key of their vectors.
  float m_r[RS], l_r[RS], s_r[RS];
  int lim[RS];
  MLA_UNROLL
  for (int r = 0; r < RS; ++r) {
    const int v = vbeg + (wi + WG * r) / KT;
    m_r[r] = CLATTN_NEG_INF, l_r[r] = 0.0f;
    lim[r] = wi + WG * r < NS && v < nvec ? cbase + v / H : -1;
  }
  float4 acc[MO * NO4];
  MLA_UNROLL
  for (int c = 0; c < MO * NO4; ++c) acc[c] = (float4)(0.0f);

  const int pmask = (1 << log2_page) - 1;
  bool bad = false;  // a page id outside [0, num_pages) was met (clamped into the pool)
  VT pf[PF];
#if KV_I8
  float psc[PF];
#endif
  LOAD_TILE(kb)
  __local float* lf = (__local float*)lat;
  for (int t0 = kb; t0 < ke; t0 += KT) {
    barrier(CLK_LOCAL_MEM_FENCE);  // the previous tile's readers are done
    MLA_UNROLL
    for (int i = 0; i < PF; ++i) {
      const int ch = wi + i * WG;
      if (ch < TCH) {
        __local float* dst = lf + (ch / ROWC) * (4 * ROW4) + (ch % ROWC) * FPC;
        float x[FPC];
        MLA_UNROLL
        for (int w = 0; w < VW; ++w) {
          MLA_UNROLL
          for (int e = 0; e < EPW; ++e) x[w * EPW + e] = ELEM(VWORD(pf[i], w), e) STAGE_SCALE(i);
        }
#if FPC % 4 == 0
        MLA_UNROLL
        for (int c = 0; c < FPC / 4; ++c) vstore4((float4)(x[4 * c], x[4 * c + 1], x[4 * c + 2], x[4 * c + 3]), c, dst);
#else
        MLA_UNROLL
        for (int c = 0; c < FPC; ++c) dst[c] = x[c];
#endif
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (t0 + KT < ke) { LOAD_TILE(t0 + KT) }  // next tile's loads fly during this one

    // S: this slice's partial scores of its MS vectors against the KT keys.
    float s[MS * KT];
    MLA_UNROLL
    for (int c = 0; c < MS * KT; ++c) s[c] = 0.0f;
    MLA_UNROLL
    for (int i = 0; i < NQ4; ++i) {
      MLA_UNROLL
      for (int n = 0; n < KT; ++n) {
        const float4 k = lat[n * ROW4 + ds + DS * i];
        MLA_UNROLL
        for (int m = 0; m < MS; ++m) {
          const float4 q = q4[m * NQ4 + i];
          s[m * KT + n] = fma(q.w, k.w, fma(q.z, k.z, fma(q.y, k.y, fma(q.x, k.x, s[m * KT + n]))));
        }
      }
    }
    MLA_UNROLL
    for (int m = 0; m < MS; ++m) {
      MLA_UNROLL
      for (int n = 0; n < KT; ++n) part[((sv + QS * m) * KT + n) * PST + ds] = s[m * KT + n];
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    // Scores: sum the slices, mask.
    MLA_UNROLL
    for (int r = 0; r < RS; ++r) {
      const int so = wi + WG * r;
      if (so < NS) {
        float x = 0.0f;
        MLA_UNROLL
        for (int d = 0; d < DS; ++d) x += part[so * PST + d];
        const int t = t0 + so % KT;
        s_r[r] = t < ke && MLA_KEY_OK(t, lim[r]) ? x : CLATTN_NEG_INF;
        sc[so] = s_r[r];
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    // Online softmax: each score's owner rescales with its vector's tile max.
    MLA_UNROLL
    for (int r = 0; r < RS; ++r) {
      const int so = wi + WG * r, q = so / KT, n = so % KT;
      if (so < NS) {
        float tmax = CLATTN_NEG_INF;
        MLA_UNROLL
        for (int j = 0; j < KT; ++j) tmax = fmax(tmax, sc[q * KT + j]);
        const float mn = fmax(m_r[r], tmax);
        const float alpha = mn == CLATTN_NEG_INF ? 1.0f : exp2(m_r[r] - mn);
        const float p = mn == CLATTN_NEG_INF ? 0.0f : exp2(s_r[r] - mn);
        pr[n * QB + q] = p;
        if (n == 0) al[q] = alpha;
        l_r[r] = l_r[r] * alpha + p;
        m_r[r] = mn;
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    // O = alpha O + P V over this tile's ckv rows.
    MLA_UNROLL
    for (int mi = 0; mi < MO; ++mi) {
      const float a = al[pq * MO + mi];
      MLA_UNROLL
      for (int j = 0; j < NO4; ++j) acc[mi * NO4 + j] *= a;
    }
    MLA_UNROLL
    for (int n = 0; n < KT; ++n) {
      float p[MO];
#if MO % 4 == 0
      MLA_UNROLL
      for (int c = 0; c < MO / 4; ++c) {
        const float4 p4 = pr4[(n * QB + pq * MO) / 4 + c];
        p[4 * c] = p4.x, p[4 * c + 1] = p4.y, p[4 * c + 2] = p4.z, p[4 * c + 3] = p4.w;
      }
#else
      MLA_UNROLL
      for (int mi = 0; mi < MO; ++mi) p[mi] = pr[n * QB + pq * MO + mi];
#endif
      MLA_UNROLL
      for (int j = 0; j < NO4; ++j) {
        const float4 v = lat[n * ROW4 + cb + CB * j];
        MLA_UNROLL
        for (int mi = 0; mi < MO; ++mi) acc[mi * NO4 + j] = fma((float4)(p[mi]), v, acc[mi * NO4 + j]);
      }
    }
  }

  // Row sums (each score's owner summed its own key column) and maxima through local memory.
  barrier(CLK_LOCAL_MEM_FENCE);
  MLA_UNROLL
  for (int r = 0; r < RS; ++r) {
    const int so = wi + WG * r;
    if (so < NS) {
      sc[so] = l_r[r];
      if (so % KT == 0) al[so / KT] = m_r[r];
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  if (bad) atomic_or(faults, CLATTN_FAULT_PAGE_ID);
  MLA_UNROLL
  for (int mi = 0; mi < MO; ++mi) {
    const int q = pq * MO + mi, v = vbeg + q;
    if (v >= nvec) continue;
    float l = 0.0f;
    for (int j = 0; j < KT; ++j) l += sc[q * KT + j];
    const float inv = l > 0.0f ? v_scale / l : 0.0f;
    const float lse_v = l > 0.0f ? (al[q] + log2(l)) * LOG2E_INV : CLATTN_NEG_INF;
    const int head = v % H;
    const size_t qrow = (size_t)(row0 + v / H) * H + head, wrow = (size_t)(wpart + v / H) * H + head;
    MLA_UNROLL
    for (int j = 0; j < NO4; ++j) {
      const float4 x = acc[mi * NO4 + j] * inv;
      const int d = 4 * (cb + CB * j);
      if (wpart < 0) {
        store_elem(o, qrow * CKV_DIM + d, o_dt, x.x), store_elem(o, qrow * CKV_DIM + d + 1, o_dt, x.y);
        store_elem(o, qrow * CKV_DIM + d + 2, o_dt, x.z), store_elem(o, qrow * CKV_DIM + d + 3, o_dt, x.w);
      } else {
        vstore4(x, 0, ws + wrow * CKV_DIM + d);
      }
    }
    if (cb == 0) {
      if (wpart < 0) {
        if (has_lse) lse[qrow] = lse_v;
      } else {
        ws[lse_off + wrow] = lse_v;
      }
    }
  }
}

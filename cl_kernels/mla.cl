// MLA (absorbed DeepSeek latent attention) over a paged latent cache: decode and extend
// in one kernel. Every query vector (query row x head) of a request reads the same latent
// rows, so a work-group takes QB query vectors of one request and one KV range, and all of
// them share each latent load:
//
//   work-group = one work entry (request, block of QB query vectors, KV chunk)
//   work-item  = (query vector qv, lane ln): owns the latent words ln, ln+LANES, ... of
//                every row (ckv: CW words, kpe: KW words) -> its slice of q and of the
//                512-wide output accumulator, in registers
//   tile       = LANES tokens: loaded with LOAD_BYTES-wide global loads into registers one
//                tile ahead (software pipeline), stored raw (dtype bits) in local memory;
//                scores: per-lane partial dots -> local -> lane j of each vector sums the
//                partials of token j; one online-softmax rescale per tile; P x ckv from
//                local memory.
// Local-memory reads are word-interleaved across lanes (conflict-free; the query vectors
// of one warp read the same words = broadcasts). Scores are in the log2 domain (q_scale
// carries sm_scale * log2(e) * kv_scale); lse is written in natural log.
//
// Work entries (8 int32 at work_off + 8 * group): {kv_begin, kv_end, part, page_base,
// q_row0, nrows, vbeg, causal_base}. Query vector v in [vbeg, vbeg + QB) of the entry is
// (row v / H, head v % H) for v < nrows * H; row r sees keys <= causal_base + r (decode:
// causal_base = kv_len - 1). part >= 0: write row r's normalised partial state to the
// workspace row part + r (o [P, H, 512] f32, lse [P, H] at lse_off floats) for the merge pass
// (decode: r = 0; an extend split on a device that bounds a work-item's loops: a row per token).
// Arguments, latent decoding and the tile's global loads: mla_latent.clh (shared with
// mla_tiled.cl, the register-blocked variant). SPARSE_IDX=1: sparse decode (mla_sparse.clh).
// int8 latents (KV_DT = DT_I8): the tile's token scales go to local memory beside it (loaded
// by the chunks that start the ckv and the kpe part of a row); a lane's partial score is
// its ckv dot times the token's ckv scale plus its kpe dot times the kpe scale, and the
// token's weight in P x ckv is p times its ckv scale (the row sum keeps p): two operations
// per token and lane, none per element.
#ifndef QB
#define QB 16
#endif
#ifndef LANES
#define LANES 16
#endif

#define WG (QB * LANES)
#define TILE_TOKENS LANES
#define MLA_I8_NEED(k) ((k) == 0 || (k) == CKC)  // int8: the scales of each row's two parts
#include "mla_latent.clh"

#define ROWW (CKW + KPW)          // words per latent row in local memory
#define CW (CKW / LANES)          // ckv words per lane
#define KW (KPW / LANES)          // kpe words per lane

#if KV_I8
#define KPE_ACC dp  // the kpe part of a partial score, scaled apart from the ckv part
#else
#define KPE_ACC d
#endif

#if (CKW % LANES) || (KPW % LANES) || KW < 1
#error "LANES must divide the latent row's words (ckv and kpe)"
#endif

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) SIMD_ATTR
void mla_attn(MLA_KERNEL_ARGS) {
  __local VT lat[LANES * ROWC];
  __local float part[WG * (LANES + 1)];
  __local float sc[WG];
  __local float pr[WG];
#if KV_I8
  __local float lsc[2 * LANES];  // the tile's token scales: (ckv, kpe) per token
#endif

  const int wi = get_local_id(0);
  const int qv = wi / LANES, ln = wi % LANES;
  __global const int* me = tab + work_off + 8 * (int)get_group_id(0);
  const int kb = me[0], ke = me[1], wpart = me[2], pbase = me[3];
  const int row0 = me[4], nrows = me[5], vbeg = me[6], cbase = me[7];
  const int v = vbeg + qv;
  const bool active = v < nrows * H;
  const int row = active ? v / H : 0, head = active ? v % H : 0;
  const int limit = active ? cbase + row : -1;  // last visible key
  const size_t qrow = (size_t)(row0 + row) * H + head;

  float qn[CW * EPW], qp[KW * EPW], acc[CW * EPW];
#pragma unroll
  for (int c = 0; c < CW; ++c)
#pragma unroll
    for (int e = 0; e < EPW; ++e) {
      const int d = (c * LANES + ln) * EPW + e;
      qn[c * EPW + e] = active ? load_elem(q_nope, qrow * CKV_DIM + d, q_dt) * q_scale : 0.0f;
      acc[c * EPW + e] = 0.0f;
    }
#pragma unroll
  for (int c = 0; c < KW; ++c)
#pragma unroll
    for (int e = 0; e < EPW; ++e) {
      const int d = (c * LANES + ln) * EPW + e;
      qp[c * EPW + e] = active ? load_elem(q_pe, qrow * KPE_DIM + d, q_dt) * q_scale : 0.0f;
    }

  const int pmask = (1 << log2_page) - 1;
  bool bad = false;  // a page id outside [0, num_pages) was met (clamped into the pool)
  VT pf[PF];
#if KV_I8
  float psc[PF];
#endif

  float m = CLATTN_NEG_INF, lsum = 0.0f;
  LOAD_TILE(kb)
  __local const uint* lw = (__local const uint*)lat;
  for (int t0 = kb; t0 < ke; t0 += LANES) {
    barrier(CLK_LOCAL_MEM_FENCE);  // the previous tile's readers are done
#pragma unroll
    for (int i = 0; i < PF; ++i) {
      const int ch = wi + i * WG;
      if (ch < TCH) {
        lat[ch] = pf[i];
#if KV_I8
        const int k = ch % ROWC;
        if (k == 0) lsc[2 * (ch / ROWC)] = psc[i];
        else if (k == CKC) lsc[2 * (ch / ROWC) + 1] = psc[i];
#endif
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (t0 + LANES < ke) { LOAD_TILE(t0 + LANES) }  // next tile's loads fly during this one

    // Partial scores of this lane's slice, for every token of the tile.
    for (int n = 0; n < LANES; ++n) {
      float d = 0.0f;
#pragma unroll
      for (int c = 0; c < CW; ++c) {
        const uint w = lw[n * ROWW + c * LANES + ln];
#pragma unroll
        for (int e = 0; e < EPW; ++e) d = fma(qn[c * EPW + e], ELEM(w, e), d);
      }
#if KV_I8
      float dp = 0.0f;
#endif
#pragma unroll
      for (int c = 0; c < KW; ++c) {
        const uint w = lw[n * ROWW + CKW + c * LANES + ln];
#pragma unroll
        for (int e = 0; e < EPW; ++e) KPE_ACC = fma(qp[c * EPW + e], ELEM(w, e), KPE_ACC);
      }
#if KV_I8
      d = fma(dp, lsc[2 * n + 1], d * lsc[2 * n]);
#endif
      part[wi * (LANES + 1) + n] = d;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    // Lane ln of vector qv finishes token ln's score.
    float s = 0.0f;
    for (int l = 0; l < LANES; ++l) s += part[(qv * LANES + l) * (LANES + 1) + ln];
    const int t = t0 + ln;
    s = (t < ke && MLA_KEY_OK(t, limit)) ? s : CLATTN_NEG_INF;
    sc[wi] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    float tmax = CLATTN_NEG_INF;
    for (int n = 0; n < LANES; ++n) tmax = fmax(tmax, sc[qv * LANES + n]);
    const float mn = fmax(m, tmax);
    const float alpha = mn == CLATTN_NEG_INF ? 1.0f : exp2(m - mn);
    const float p = mn == CLATTN_NEG_INF ? 0.0f : exp2(s - mn);
#if KV_I8
    pr[wi] = p * lsc[2 * ln];  // the V side's scale (ckv) on the weight
#else
    pr[wi] = p;
#endif
    lsum = lsum * alpha + p;
    m = mn;
    barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
    for (int c = 0; c < CW * EPW; ++c) acc[c] *= alpha;
    for (int n = 0; n < LANES; ++n) {
      const float pn = pr[qv * LANES + n];
#pragma unroll
      for (int c = 0; c < CW; ++c) {
        const uint w = lw[n * ROWW + c * LANES + ln];
#pragma unroll
        for (int e = 0; e < EPW; ++e) acc[c * EPW + e] = fma(pn, ELEM(w, e), acc[c * EPW + e]);
      }
    }
  }

  // Row sum over the vector's lanes (each lane summed its own tokens' p).
  barrier(CLK_LOCAL_MEM_FENCE);
  sc[wi] = lsum;
  barrier(CLK_LOCAL_MEM_FENCE);
  float l = 0.0f;
  for (int n = 0; n < LANES; ++n) l += sc[qv * LANES + n];
  if (bad) atomic_or(faults, CLATTN_FAULT_PAGE_ID);
  if (!active) return;
  const float inv = l > 0.0f ? v_scale / l : 0.0f;
  const float lse_v = l > 0.0f ? (m + log2(l)) * LOG2E_INV : CLATTN_NEG_INF;
  if (wpart < 0) {
#pragma unroll
    for (int c = 0; c < CW; ++c)
#pragma unroll
      for (int e = 0; e < EPW; ++e) {
        const int d = (c * LANES + ln) * EPW + e;
        store_elem(o, qrow * CKV_DIM + d, o_dt, acc[c * EPW + e] * inv);
      }
    if (has_lse && ln == 0) lse[qrow] = lse_v;
  } else {
    const size_t wrow = (size_t)(wpart + row) * H + head;  // (extend splits: a part row per token)
#pragma unroll
    for (int c = 0; c < CW; ++c)
#pragma unroll
      for (int e = 0; e < EPW; ++e) {
        const int d = (c * LANES + ln) * EPW + e;
        ws[wrow * CKV_DIM + d] = acc[c * EPW + e] * inv;
      }
    if (ln == 0) ws[lse_off + wrow] = lse_v;
  }
}

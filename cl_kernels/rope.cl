// Rotary position embedding (include/clattn/rope.hpp): apply_rope (q -> q_out, k -> k_out) and
// rope_append_kv (q -> q_out; k rotated and v as is into the paged cache at slot_mapping[t],
// stored = value / (scale * head scale) in the cache dtype, as append_kv.cl; int8 caches:
// rope_append_kv_i8, int4 caches: rope_append_kv_i4).
//
// Work-item (i, b, c): pair i (0 <= i < D/2) of head rows b*ROPE_ROWS .. b*ROPE_ROWS +
// ROPE_ROWS - 1 of tokens c*ROPE_TOKENS .. c*ROPE_TOKENS + ROPE_TOKENS - 1. Pair i < R/2 is rotated (NeoX dims (i, i + R/2), GPT-J (2i, 2i+1));
// pairs from R/2 on are dims (2i, 2i+1), copied (partial rotary), and so are a v row's
// pairs. The pair's cos/sin are computed once per work-item and serve its ROPE_ROWS rows;
// consecutive work-items touch consecutive elements in both styles. Rows are numbered q
// heads first, then k heads, then (rope_append_kv) v heads. Source and destination dtypes
// are runtime arguments (one program per parameter set).
//
// Angles: from the cos/sin cache row of the position (has_cache), else pos * inv_scale *
// exp2(-(2i / R) * log2(theta)) in f32 with full-precision sincos (FlashInfer's and vLLM's
// f32 convention). A position < 0, or >= cache rows with a cache, writes nothing for the
// token and sets CLATTN_FAULT_POSITION.
#include "common.clh"
#include "int8_quant.clh"
#include "int4_quant.clh"

#ifndef ROPE_WG
#define ROPE_WG 64
#endif
#ifndef ROPE_ROWS
#define ROPE_ROWS 4
#endif
// Tokens per work-item (dimension 2 covers ceil(T / ROPE_TOKENS)): 1 on GPUs; more on CPUs,
// where each work-group has a fixed cost.
#ifndef ROPE_TOKENS
#define ROPE_TOKENS 1
#endif

// Position of token t, or -1 when outside [0, cache_rows) (no upper bound without a cache),
// which the token's lead work-item reports as CLATTN_FAULT_POSITION.
inline long rope_position(__global const void* pos, int pos_i64, long t, int has_cache, long cache_rows, bool lead,
                          __global volatile int* faults) {
  const long p = pos_i64 ? ((__global const long*)pos)[t] : (long)((__global const int*)pos)[t];
  if (p >= 0 && (!has_cache || p < cache_rows)) return p;
  if (lead) atomic_or(faults, CLATTN_FAULT_POSITION);
  return -1;
}

// (cos, sin) of pair i (< R/2) at position p.
inline float2 rope_cos_sin(int i, int R, long p, int has_cache, __global const float* cs, float log2_theta,
                           float inv_scale) {
  if (has_cache) return (float2)(cs[p * R + i], cs[p * R + R / 2 + i]);
  const float inv_freq = exp2(-((float)(2 * i) / (float)R) * log2_theta);
  float c;
  const float s = sincos((float)p * inv_scale * inv_freq, &c);
  return (float2)(c, s);
}

// Element offsets (a, b) of pair i in a row: rotated NeoX / GPT-J pairs, else (2i, 2i + 1).
inline int2 rope_dims(int i, int R, int gptj, int rotate) {
  if (rotate && i < R / 2 && !gptj) return (int2)(i, i + R / 2);
  return (int2)(2 * i, 2 * i + 1);
}

// The pair (x, y) rotated by (cos, sin) = cs: every kernel rotates with this one expression,
// so the fused int4 / int8 appends quantise the values apply_rope writes, bit for bit.
inline float2 rope_turn(float x, float y, float2 cs) { return (float2)(x * cs.x - y * cs.y, y * cs.x + x * cs.y); }

__kernel __attribute__((reqd_work_group_size(ROPE_WG, 1, 1))) SIMD_ATTR
void apply_rope(__global const void* q, __global void* q_out, long q_st, long q_sh, int Hq,
                __global const void* k, __global void* k_out, long k_st, long k_sh, int Hk, int dt, int D, int R,
                int gptj, __global const void* pos, int pos_i64, int has_cache, __global const float* cs,
                long cache_rows, float log2_theta, float inv_scale, long T, __global volatile int* faults) {
  const int i = get_global_id(0);
  const int b = get_global_id(1);
  if (i >= D / 2) return;
  const long t_end = min((long)(get_global_id(2) + 1) * ROPE_TOKENS, T);
  for (long t = (long)get_global_id(2) * ROPE_TOKENS; t < t_end; ++t) {
    const long p = rope_position(pos, pos_i64, t, has_cache, cache_rows, i == 0 && b == 0, faults);
    if (p < 0) continue;
    const bool rot = i < R / 2;
    const float2 cs2 = rot ? rope_cos_sin(i, R, p, has_cache, cs, log2_theta, inv_scale) : (float2)(1.0f, 0.0f);
    const int2 ab = rope_dims(i, R, gptj, 1);
    for (int r = b * ROPE_ROWS; r < min(b * ROPE_ROWS + ROPE_ROWS, Hq + Hk); ++r) {
      const bool isq = r < Hq;
      const int h = isq ? r : r - Hq;
      const size_t base = isq ? (size_t)(t * q_st + h * q_sh) : (size_t)(t * k_st + h * k_sh);
      __global const void* src = isq ? q : k;
      __global void* dst = isq ? q_out : k_out;
      const float x = load_elem(src, base + ab.x, dt), y = load_elem(src, base + ab.y, dt);
      const float2 o = rot ? rope_turn(x, y, cs2) : (float2)(x, y);
      store_elem(dst, base + ab.x, dt, o.x);
      store_elem(dst, base + ab.y, dt, o.y);
    }
  }
}

__kernel __attribute__((reqd_work_group_size(ROPE_WG, 1, 1))) SIMD_ATTR
void rope_append_kv(__global const void* q, __global void* q_out, long q_st, long q_sh, int Hq, int q_out_dt,
                    __global const void* k, __global const void* v, int src_dt, long src_st, long src_sh,
                    __global const void* slots, int slots_i64, long num_slots, __global void* k_cache,
                    __global void* v_cache, int kv_dt, long c_sp, long c_st, long c_sh, int page_size, int Hkv,
                    float k_scale, float v_scale, __global const float* k_hs, __global const float* v_hs, int has_hs,
                    int D, int R, int gptj, __global const void* pos, int pos_i64,
                    int has_cache, __global const float* cs, long cache_rows, float log2_theta, float inv_scale,
                    long T, __global volatile int* faults) {
  const int i = get_global_id(0);
  const int b = get_global_id(1);
  if (i >= D / 2) return;
  const long t_end = min((long)(get_global_id(2) + 1) * ROPE_TOKENS, T);
  for (long t = (long)get_global_id(2) * ROPE_TOKENS; t < t_end; ++t) {
    const bool lead = i == 0 && b == 0;  // reports the token's faults once
    const long p = rope_position(pos, pos_i64, t, has_cache, cache_rows, lead, faults);
    if (p < 0) continue;
    const long slot = Hkv == 0 ? -1 : slots_i64 ? ((__global const long*)slots)[t] : (long)((__global const int*)slots)[t];
    if (slot >= num_slots && lead) atomic_or(faults, CLATTN_FAULT_SLOT);
    const bool store_kv = slot >= 0 && slot < num_slots;
    const long page = store_kv ? slot / page_size : 0, off = store_kv ? slot - page * page_size : 0;
    const bool rot = i < R / 2;
    const float2 cs2 = rot ? rope_cos_sin(i, R, p, has_cache, cs, log2_theta, inv_scale) : (float2)(1.0f, 0.0f);
    for (int r = b * ROPE_ROWS; r < min(b * ROPE_ROWS + ROPE_ROWS, Hq + 2 * Hkv); ++r) {
      const int kind = r < Hq ? 0 : r < Hq + Hkv ? 1 : 2;  // q, k, v
      if (kind && !store_kv) break;                       // rows are ordered: the rest are k / v
      const int h = kind == 0 ? r : kind == 1 ? r - Hq : r - Hq - Hkv;
      const int2 ab = rope_dims(i, R, gptj, kind != 2);
      const bool turn = rot && kind != 2;
      const size_t sb = kind == 0 ? (size_t)(t * q_st + h * q_sh) : (size_t)(t * src_st + h * src_sh);
      __global const void* src = kind == 0 ? q : kind == 1 ? k : v;
      const float x = load_elem(src, sb + ab.x, src_dt), y = load_elem(src, sb + ab.y, src_dt);
      const float2 o = turn ? rope_turn(x, y, cs2) : (float2)(x, y);
      const float xo = o.x, yo = o.y;
      if (kind == 0) {
        store_elem(q_out, sb + ab.x, q_out_dt, xo);
        store_elem(q_out, sb + ab.y, q_out_dt, yo);
      } else {
        const size_t db = (size_t)(page * c_sp + off * c_st + h * c_sh);
        __global void* dst = kind == 1 ? k_cache : v_cache;
        // Per-KV-head scales (has_hs) on top of the per-tensor ones, as append_kv.cl folds them.
        const float sc = (kind == 1 ? k_scale : v_scale) * (has_hs ? (kind == 1 ? k_hs : v_hs)[h] : 1.0f);
        store_elem(dst, db + ab.x, kv_dt, xo / sc);
        store_elem(dst, db + ab.y, kv_dt, yo / sc);
      }
    }
  }
}

// int8 and int4 caches (rope_append_kv): one launch, work-group (b, c) for tokens
// c*ROPE_TOKENS .. c*ROPE_TOKENS + ROPE_TOKENS - 1 and the rows of block b: KV heads
// b*ROPE_KV_HEADS .. b*ROPE_KV_HEADS + ROPE_KV_HEADS - 1 (k rotated, v as is), quantised with
// append_kv's rules (int8_quant.clh, int4_quant.clh), and an even share of the q heads,
// rotated into q_out as rope_append_kv writes them. A pair's cos/sin is computed once per
// token for all of the group's rows. Each work-item puts its partial max |x| (int8) or lo / hi
// (int4) of each row in local memory, one work-item per row (int8) or per quant group of a row
// (int4) folds them and stores the scale / [scale, zero] pair (two barriers, not a tree's
// log2(ROPE_WG) + 1), and each work-item then writes the bytes of the values it kept. ROPE_WG
// is a power of two (the host's), >= G/2 for int4.
#ifndef ROPE_KV_HEADS
#define ROPE_KV_HEADS 8
#endif
#define ROPE_KV_ROWS (2 * ROPE_KV_HEADS)  // at most; row r < nh: k head h0 + r, then v head h0 + r - nh

// q heads [qa, qb) of token t at pair i (dims ab, turned by c where turn), as rope_append_kv
// writes them.
inline void rope_q_pair(__global const void* q, __global void* q_out, long q_st, long q_sh, int src_dt, int q_out_dt,
                        long t, int qa, int qb, int2 ab, bool turn, float2 c) {
  for (int h = qa; h < qb; ++h) {
    const size_t sb = (size_t)(t * q_st + h * q_sh);
    const float x = load_elem(q, sb + ab.x, src_dt), y = load_elem(q, sb + ab.y, src_dt);
    const float2 o = turn ? rope_turn(x, y, c) : (float2)(x, y);
    store_elem(q_out, sb + ab.x, q_out_dt, o.x);
    store_elem(q_out, sb + ab.y, q_out_dt, o.y);
  }
}

// The q heads of row block b of nb: an even share, [*qa, *qb).
inline void rope_q_share(int Hq, int b, int nb, int* qa, int* qb) {
  const int per = (Hq + nb - 1) / nb;
  *qa = min(b * per, Hq), *qb = min(*qa + per, Hq);
}

// Token t's position (< 0: nothing written) and whether it has a cache slot; the lead
// work-item reports the faults. Uniform over the group, so all of it passes the barriers.
inline bool rope_kv_token(__global const void* pos, int pos_i64, long t, int has_cache, long cache_rows,
                          __global const void* slots, int slots_i64, int page_size, long num_slots, bool lead,
                          __global volatile int* faults, long* p, long* page, long* off) {
  *p = rope_position(pos, pos_i64, t, has_cache, cache_rows, lead, faults);
  return *p >= 0 && slot_page(slots, slots_i64, t, page_size, num_slots, lead, faults, page, off);
}

// int8: work-item j takes pairs j, j + ROPE_WG, .. of every row (apply_rope's pairs; a v row's
// pair i is (2i, 2i + 1)); a row's bytes follow its pairs.
__kernel __attribute__((reqd_work_group_size(ROPE_WG, 1, 1))) SIMD_ATTR
void rope_append_kv_i8(__global const void* q, __global void* q_out, long q_st, long q_sh, int Hq, int q_out_dt,
                       __global const void* k, __global const void* v, int src_dt, long src_st, long src_sh,
                       __global const void* slots, int slots_i64, long num_slots, __global char* k_cache,
                       __global char* v_cache, long c_sp, long c_st, long c_sh, int page_size, int Hkv,
                       __global void* k_scales, __global void* v_scales, long s_sp, long s_st, long s_sh, int s_f16,
                       int D, int R, int gptj, __global const void* pos, int pos_i64, int has_cache,
                       __global const float* cs, long cache_rows, float log2_theta, float inv_scale, long T,
                       __global volatile int* faults) {
  __local float amax[ROPE_KV_ROWS][ROPE_WG];  // per row: the work-items' max |x|, then its scale
  const int j = get_local_id(0), b = get_group_id(1), h0 = b * ROPE_KV_HEADS, nh = min(ROPE_KV_HEADS, Hkv - h0);
  int qa, qb;
  rope_q_share(Hq, b, get_num_groups(1), &qa, &qb);
  const bool lead = j == 0 && b == 0;  // reports the token's faults once
  const long t_end = min((long)(get_group_id(2) + 1) * ROPE_TOKENS, T);
  for (long t = (long)get_group_id(2) * ROPE_TOKENS; t < t_end; ++t) {
    long p = 0, page = 0, off = 0;
    const bool kv = rope_kv_token(pos, pos_i64, t, has_cache, cache_rows, slots, slots_i64, page_size, num_slots,
                                  lead, faults, &p, &page, &off);
    float2 c0 = (float2)(1.0f, 0.0f), x0[ROPE_KV_ROWS];  // pair j's angle and values, kept for the bytes
    for (int r = 0; r < 2 * nh; ++r) amax[r][j] = 0.0f;
    for (int i = j; p >= 0 && i < D / 2; i += ROPE_WG) {
      const bool turn = i < R / 2;
      const float2 c = turn ? rope_cos_sin(i, R, p, has_cache, cs, log2_theta, inv_scale) : (float2)(1.0f, 0.0f);
      if (i == j) c0 = c;
      rope_q_pair(q, q_out, q_st, q_sh, src_dt, q_out_dt, t, qa, qb, rope_dims(i, R, gptj, 1), turn, c);
      if (!kv) continue;
      UNROLL_LOOP for (int r = 0; r < ROPE_KV_ROWS; ++r) {
        if (r >= 2 * nh) continue;
        const bool isk = r < nh;
        const int h = h0 + (isk ? r : r - nh);
        const size_t sb = (size_t)(t * src_st + h * src_sh);
        const int2 ab = rope_dims(i, R, gptj, isk);
        const float x = load_elem(isk ? k : v, sb + ab.x, src_dt), y = load_elem(isk ? k : v, sb + ab.y, src_dt);
        const float2 o = isk && turn ? rope_turn(x, y, c) : (float2)(x, y);
        if (i == j) x0[r] = o;
        amax[r][j] = fmax(amax[r][j], fmax(fabs(o.x), fabs(o.y)));
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    // Row r's max and scale, stored, by work-item r (two barriers a token, not a tree's log2);
    // the group reads the scale back as stored.
    for (int r = j; kv && r < 2 * nh; r += ROPE_WG) {
      float m = 0.0f;
      for (int u = 0; u < ROPE_WG; ++u) m = fmax(m, amax[r][u]);
      const int h = h0 + (r < nh ? r : r - nh);
      amax[r][0] = store_scale(r < nh ? k_scales : v_scales, (size_t)(page * s_sp + off * s_st + h * s_sh), s_f16,
                               m * (1.0f / 127.0f));
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int i = j; kv && i < D / 2; i += ROPE_WG) {
      const bool turn = i < R / 2;
      const float2 c = i == j ? c0 : turn ? rope_cos_sin(i, R, p, has_cache, cs, log2_theta, inv_scale) : (float2)(1.0f, 0.0f);
      UNROLL_LOOP for (int r = 0; r < ROPE_KV_ROWS; ++r) {
        if (r >= 2 * nh) continue;
        const bool isk = r < nh;
        const int h = h0 + (isk ? r : r - nh);
        const float scale = amax[r][0];
        const int2 ab = rope_dims(i, R, gptj, isk);
        float2 o = x0[r];
        if (i != j) {
          const size_t sb = (size_t)(t * src_st + h * src_sh);
          const float x = load_elem(isk ? k : v, sb + ab.x, src_dt), y = load_elem(isk ? k : v, sb + ab.y, src_dt);
          o = isk && turn ? rope_turn(x, y, c) : (float2)(x, y);
        }
        __global char* dst = isk ? k_cache : v_cache;
        const size_t db = (size_t)(page * c_sp + off * c_st + h * c_sh);
        dst[db + ab.x] = int8_quantize(o.x, scale);
        dst[db + ab.y] = int8_quantize(o.y, scale);
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);  // amax is rewritten for the next token
  }
}

// int4: a byte holds elements (e, e + 1), e even, which are one pair only in GPT-J. So the k
// rows are rotated in apply_rope's pairs, as int8 does, into k_l (a local argument, a row of
// D floats per KV head), and then work-item j takes elements (e, e + 1), e = 2j (+ 2*ROPE_WG
// per chunk of a longer row; a chunk holds whole quant groups, G/2 consecutive work-items
// each), of the k rows from k_l and of the v rows as loaded.
__kernel __attribute__((reqd_work_group_size(ROPE_WG, 1, 1))) SIMD_ATTR
void rope_append_kv_i4(__global const void* q, __global void* q_out, long q_st, long q_sh, int Hq, int q_out_dt,
                       __global const void* k, __global const void* v, int src_dt, long src_st, long src_sh,
                       __global const void* slots, int slots_i64, long num_slots, __global uchar* k_cache,
                       __global uchar* v_cache, long c_sp, long c_st, long c_sh, int page_size, int Hkv,
                       __global void* k_scales, __global void* v_scales, long s_sp, long s_st, long s_sh, int s_f16,
                       int D, int G, int R, int gptj, __global const void* pos, int pos_i64, int has_cache,
                       __global const float* cs, long cache_rows, float log2_theta, float inv_scale, long T,
                       __global volatile int* faults, __local float* k_l) {
  // Per row: the work-items' lo and hi, then each quant group's [scale, zero] pair
  __local float lo[ROPE_KV_ROWS][ROPE_WG], hi[ROPE_KV_ROWS][ROPE_WG];
  const int j = get_local_id(0), b = get_group_id(1), h0 = b * ROPE_KV_HEADS, nh = min(ROPE_KV_HEADS, Hkv - h0);
  const int span = G / 2, first = j & ~(span - 1);  // work-items per quant group; j's group's first
  int qa, qb;
  rope_q_share(Hq, b, get_num_groups(1), &qa, &qb);
  const bool lead = j == 0 && b == 0;
  const long t_end = min((long)(get_group_id(2) + 1) * ROPE_TOKENS, T);
  for (long t = (long)get_group_id(2) * ROPE_TOKENS; t < t_end; ++t) {
    long p = 0, page = 0, off = 0;
    const bool kv = rope_kv_token(pos, pos_i64, t, has_cache, cache_rows, slots, slots_i64, page_size, num_slots,
                                  lead, faults, &p, &page, &off);
    for (int i = j; p >= 0 && i < D / 2; i += ROPE_WG) {
      const bool turn = i < R / 2;
      const float2 c = turn ? rope_cos_sin(i, R, p, has_cache, cs, log2_theta, inv_scale) : (float2)(1.0f, 0.0f);
      const int2 ab = rope_dims(i, R, gptj, 1);
      rope_q_pair(q, q_out, q_st, q_sh, src_dt, q_out_dt, t, qa, qb, ab, turn, c);
      for (int r = 0; kv && r < nh; ++r) {
        const size_t sb = (size_t)(t * src_st + (h0 + r) * src_sh);
        const float x = load_elem(k, sb + ab.x, src_dt), y = load_elem(k, sb + ab.y, src_dt);
        const float2 o = turn ? rope_turn(x, y, c) : (float2)(x, y);
        k_l[r * D + ab.x] = o.x, k_l[r * D + ab.y] = o.y;
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int c = 0; kv && c < D; c += 2 * ROPE_WG) {
      const int e = c + 2 * j;
      const bool live = e < D;
      float2 x[ROPE_KV_ROWS];
      UNROLL_LOOP for (int r = 0; r < ROPE_KV_ROWS; ++r) {
        if (r >= 2 * nh) continue;
        const bool isk = r < nh;
        const int h = h0 + (isk ? r : r - nh);
        const size_t sb = (size_t)(t * src_st + h * src_sh);
        x[r] = !live ? (float2)(0.0f)
               : isk ? (float2)(k_l[r * D + e], k_l[r * D + e + 1])
                     : (float2)(load_elem(v, sb + e, src_dt), load_elem(v, sb + e + 1, src_dt));
        lo[r][j] = fmin(x[r].x, x[r].y);
        hi[r][j] = fmax(x[r].x, x[r].y);
      }
      barrier(CLK_LOCAL_MEM_FENCE);
      // Quant group g of row r (of the chunk's per): its range over its span work-items, in
      // element order from 0 as append_kv folds it, and its pair, stored, by one work-item;
      // the group's work-items read the pair back as stored (at its first's slot).
      const int per = 2 * ROPE_WG / G;
      for (int task = j; task < 2 * nh * per; task += ROPE_WG) {
        const int r = task / per, u0 = (task - r * per) * span, h = h0 + (r < nh ? r : r - nh);
        if (c + 2 * u0 >= D) continue;
        float l = 0.0f, m = 0.0f;
        for (int u = u0; u < u0 + span; ++u) l = fmin(l, lo[r][u]), m = fmax(m, hi[r][u]);
        const size_t so = (size_t)(page * s_sp + off * s_st + h * s_sh) + 2 * (size_t)((c + 2 * u0) / G);
        const float2 sz = int4_store_group(r < nh ? k_scales : v_scales, so, s_f16, l, m);
        lo[r][u0] = sz.x, hi[r][u0] = sz.y;
      }
      barrier(CLK_LOCAL_MEM_FENCE);
      UNROLL_LOOP for (int r = 0; r < ROPE_KV_ROWS; ++r) {
        if (!live || r >= 2 * nh) continue;
        const bool isk = r < nh;
        const int h = h0 + (isk ? r : r - nh);
        const float2 sz = (float2)(lo[r][first], hi[r][first]);
        // c_* in elements (nibbles, even): the row's first byte.
        const size_t db = (size_t)((page * c_sp + off * c_st + h * c_sh) / 2) + e / 2;
        (isk ? k_cache : v_cache)[db] = int4_byte(x[r], sz);
      }
      barrier(CLK_LOCAL_MEM_FENCE);  // lo / hi are rewritten for the next chunk
    }
    barrier(CLK_LOCAL_MEM_FENCE);  // k_l is rewritten for the next token
  }
}

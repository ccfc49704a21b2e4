// Rotary position embedding (include/clattn/rope.hpp): apply_rope (q -> q_out, k -> k_out) and
// rope_append_kv (q -> q_out; k rotated and v as is into the paged cache at slot_mapping[t],
// stored = value / scale in the cache dtype, as append_kv.cl; int8 caches: rope_append_kv_i8,
// int4 caches: rope_append_kv_i4).
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
                    float k_scale, float v_scale, int D, int R, int gptj, __global const void* pos, int pos_i64,
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
        const float sc = kind == 1 ? k_scale : v_scale;
        store_elem(dst, db + ab.x, kv_dt, xo / sc);
        store_elem(dst, db + ab.y, kv_dt, yo / sc);
      }
    }
  }
}

// int8 caches (rope_append_kv; rope_append_kv above then takes the q rows only): work-item
// (h, t) quantises KV head h's k row of token t, rotated, and its v row as append_kv_i8 does
// (int8_quant.clh): the row's largest |value| gives the scale, then each value its integer.
// The rotation is computed twice (for the max, then for the values) rather than kept: a row
// of D floats per work-item would not stay in registers.
__kernel __attribute__((reqd_work_group_size(ROPE_WG, 1, 1))) SIMD_ATTR
void rope_append_kv_i8(__global const void* k, __global const void* v, int src_dt, long src_st, long src_sh,
                       __global const void* slots, int slots_i64, long num_slots, __global char* k_cache,
                       __global char* v_cache, long c_sp, long c_st, long c_sh, int page_size, int Hkv,
                       __global void* k_scales, __global void* v_scales, long s_sp, long s_st, long s_sh, int s_f16,
                       int D, int R, int gptj, __global const void* pos, int pos_i64, int has_cache,
                       __global const float* cs, long cache_rows, float log2_theta, float inv_scale, long T,
                       __global volatile int* faults) {
  const int h = get_global_id(0);
  const long t = get_global_id(1);
  if (h >= Hkv || t >= T) return;
  const long p = rope_position(pos, pos_i64, t, has_cache, cache_rows, h == 0, faults);
  if (p < 0) return;
  long page, off;
  if (!slot_page(slots, slots_i64, t, page_size, num_slots, h == 0, faults, &page, &off)) return;
  const size_t sb = (size_t)(t * src_st + h * src_sh), db = (size_t)(page * c_sp + off * c_st + h * c_sh);
  const size_t so = (size_t)(page * s_sp + off * s_st + h * s_sh);
  for (int kind = 0; kind < 2; ++kind) {  // k (rotated), v
    __global const void* src = kind ? v : k;
    float amax = 0.0f, scale = 0.0f;
    for (int pass = 0; pass < 2; ++pass) {
      for (int i = 0; i < D / 2; ++i) {
        const bool turn = kind == 0 && i < R / 2;
        const float2 cs2 = turn ? rope_cos_sin(i, R, p, has_cache, cs, log2_theta, inv_scale) : (float2)(1.0f, 0.0f);
        const int2 ab = rope_dims(i, R, gptj, kind == 0);
        const float x = load_elem(src, sb + ab.x, src_dt), y = load_elem(src, sb + ab.y, src_dt);
        const float2 o = turn ? rope_turn(x, y, cs2) : (float2)(x, y);
        const float xo = o.x, yo = o.y;
        if (pass == 0) {
          amax = fmax(amax, fmax(fabs(xo), fabs(yo)));
        } else {
          __global char* dst = kind ? v_cache : k_cache;
          dst[db + ab.x] = int8_quantize(xo, scale);
          dst[db + ab.y] = int8_quantize(yo, scale);
        }
      }
      if (pass == 0) {
        scale = store_scale(kind ? v_scales : k_scales, so, s_f16, amax * (1.0f / 127.0f));
      }
    }
  }
}

// Elements e and e + 1 (e even) of a row after RoPE (rotate = 0: as loaded). GPT-J: they are
// one pair; NeoX: each is in its own pair (e, e + R/2) or (e - R/2, e), so the partner is
// loaded and the pair rotated for the one element; dims from R on pass through.
inline float neox_elem(__global const void* src, size_t sb, int src_dt, int e, float own, int R, long p,
                       int has_cache, __global const float* cs, float log2_theta, float inv_scale) {
  const int r2 = R / 2, i = e < r2 ? e : e - r2;
  const float2 cs2 = rope_cos_sin(i, R, p, has_cache, cs, log2_theta, inv_scale);
  if (e < r2) return rope_turn(own, load_elem(src, sb + e + r2, src_dt), cs2).x;
  return rope_turn(load_elem(src, sb + i, src_dt), own, cs2).y;
}

inline float2 rope_two(__global const void* src, size_t sb, int src_dt, int e, int rotate, int R, int gptj, long p,
                       int has_cache, __global const float* cs, float log2_theta, float inv_scale) {
  const float a = load_elem(src, sb + e, src_dt), b = load_elem(src, sb + e + 1, src_dt);
  if (!rotate || e >= R) return (float2)(a, b);
  if (gptj) return rope_turn(a, b, rope_cos_sin(e / 2, R, p, has_cache, cs, log2_theta, inv_scale));
  return (float2)(neox_elem(src, sb, src_dt, e, a, R, p, has_cache, cs, log2_theta, inv_scale),
                  neox_elem(src, sb, src_dt, e + 1, b, R, p, has_cache, cs, log2_theta, inv_scale));
}

// NeoX groups g0 (first half) and g0 + R/2 (second half), G dividing R/2: pair i of group g0
// turns into element i of the one and element i + R/2 of the other, so the two groups are
// quantised together and each pair's angle is computed once per walk (as rope_append_kv_i8
// computes it), not once per element.
inline void i4_neox_groups(__global const void* src, size_t sb, int src_dt, int g0, int G, int R, long p,
                           int has_cache, __global const float* cs, float log2_theta, float inv_scale,
                           __global uchar* dst, size_t db, __global void* scales, size_t so, int s_f16) {
  const int r2 = R / 2;
  float lo0 = 0.0f, hi0 = 0.0f, lo1 = 0.0f, hi1 = 0.0f;
  for (int i = g0; i < g0 + G; ++i) {
    const float2 o = rope_turn(load_elem(src, sb + i, src_dt), load_elem(src, sb + i + r2, src_dt),
                               rope_cos_sin(i, R, p, has_cache, cs, log2_theta, inv_scale));
    lo0 = fmin(lo0, o.x), hi0 = fmax(hi0, o.x), lo1 = fmin(lo1, o.y), hi1 = fmax(hi1, o.y);
  }
  const float2 sz0 = int4_store_group(scales, so + 2 * (size_t)(g0 / G), s_f16, lo0, hi0);
  const float2 sz1 = int4_store_group(scales, so + 2 * (size_t)((g0 + r2) / G), s_f16, lo1, hi1);
  for (int i = g0; i < g0 + G; i += 2) {
    const float2 a = rope_turn(load_elem(src, sb + i, src_dt), load_elem(src, sb + i + r2, src_dt),
                               rope_cos_sin(i, R, p, has_cache, cs, log2_theta, inv_scale));
    const float2 b = rope_turn(load_elem(src, sb + i + 1, src_dt), load_elem(src, sb + i + 1 + r2, src_dt),
                               rope_cos_sin(i + 1, R, p, has_cache, cs, log2_theta, inv_scale));
    dst[db + (size_t)(i / 2)] = int4_byte((float2)(a.x, b.x), sz0);
    dst[db + (size_t)((i + r2) / 2)] = int4_byte((float2)(a.y, b.y), sz1);
  }
}

// int4 caches (rope_append_kv; rope_append_kv above then takes the q rows only): work-item
// (h, t) quantises KV head h's k row of token t, rotated, and its v row, group by group with
// append_kv_i4's rules (int4_quant.clh): a group's lo and hi give its [scale, zero] pair, then
// each element pair its byte. A group is walked twice (rotated for lo / hi, then for the
// codes) rather than kept, as in rope_append_kv_i8. NeoX groups go in first-half /
// second-half couples where G divides R/2 (i4_neox_groups); otherwise (GPT-J, dims from R on,
// NeoX groups that straddle the halves) the walk goes by the stored byte, each element rotated
// with its partner (rope_two).
__kernel __attribute__((reqd_work_group_size(ROPE_WG, 1, 1))) SIMD_ATTR
void rope_append_kv_i4(__global const void* k, __global const void* v, int src_dt, long src_st, long src_sh,
                       __global const void* slots, int slots_i64, long num_slots, __global uchar* k_cache,
                       __global uchar* v_cache, long c_sp, long c_st, long c_sh, int page_size, int Hkv,
                       __global void* k_scales, __global void* v_scales, long s_sp, long s_st, long s_sh, int s_f16,
                       int D, int G, int R, int gptj, __global const void* pos, int pos_i64, int has_cache,
                       __global const float* cs, long cache_rows, float log2_theta, float inv_scale, long T,
                       __global volatile int* faults) {
  const int h = get_global_id(0);
  const long t = get_global_id(1);
  if (h >= Hkv || t >= T) return;
  const long p = rope_position(pos, pos_i64, t, has_cache, cache_rows, h == 0, faults);
  if (p < 0) return;
  long page, off;
  if (!slot_page(slots, slots_i64, t, page_size, num_slots, h == 0, faults, &page, &off)) return;
  // c_* in elements (nibbles, even): the row's first byte.
  const size_t sb = (size_t)(t * src_st + h * src_sh), db = (size_t)((page * c_sp + off * c_st + h * c_sh) / 2);
  const size_t so = (size_t)(page * s_sp + off * s_st + h * s_sh);
  const bool couples = !gptj && (R / 2) % G == 0;
  for (int kind = 0; kind < 2; ++kind) {  // k (rotated), v
    __global const void* src = kind ? v : k;
    __global uchar* dst = kind ? v_cache : k_cache;
    __global void* scales = kind ? v_scales : k_scales;
    for (int g0 = 0; g0 < D; g0 += G) {
      if (kind == 0 && couples && g0 < R) {
        if (g0 < R / 2)  // the second-half group goes with its first-half one
          i4_neox_groups(src, sb, src_dt, g0, G, R, p, has_cache, cs, log2_theta, inv_scale, dst, db, scales, so, s_f16);
        continue;
      }
      float lo = 0.0f, hi = 0.0f;
      for (int e = g0; e < g0 + G; e += 2) {
        const float2 x = rope_two(src, sb, src_dt, e, kind == 0, R, gptj, p, has_cache, cs, log2_theta, inv_scale);
        lo = fmin(lo, fmin(x.x, x.y)), hi = fmax(hi, fmax(x.x, x.y));
      }
      const float2 sz = int4_store_group(scales, so + 2 * (size_t)(g0 / G), s_f16, lo, hi);
      for (int e = g0; e < g0 + G; e += 2)
        dst[db + (size_t)(e / 2)] =
            int4_byte(rope_two(src, sb, src_dt, e, kind == 0, R, gptj, p, has_cache, cs, log2_theta, inv_scale), sz);
    }
  }
}

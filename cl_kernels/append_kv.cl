// KV append (vLLM reshape_and_cache / SGLang set_kv_buffer): writes token t's K and V rows
// to the paged cache at slot_mapping[t] (page = slot / P, offset = slot % P); negative
// slots (padding) are skipped, and so are slots past the cache, which set CLATTN_FAULT_SLOT. Source and cache dtypes are runtime arguments (one
// program for every combination): stored = value / scale, rounded to nearest even, fp8
// saturating (common.clh). Work-item (i, t): elements i*APPEND_ITEMS .. of token t's [Hkv, D] rows.
#include "common.clh"
#include "int8_quant.clh"
#include "int4_quant.clh"

#ifndef APPEND_WG
#define APPEND_WG 64
#endif
// Consecutive elements per work-item (a divisor of D; the host lowers it). 1 on GPUs (one
// element per lane); a whole row on CPUs, where the dtype switch is taken once per row
// and each case is a plain loop the compiler vectorises.
#ifndef APPEND_ITEMS
#define APPEND_ITEMS 1
#endif

#if APPEND_ITEMS > 1
// Row pass: src[0..n) as f32 / scale into buf, then buf into dst[0..n) in the cache dtype.
inline void load_row(__global const void* p, size_t i, int dt, float scale, float* buf) {
  switch (dt) {
    case DT_F16: for (int j = 0; j < APPEND_ITEMS; ++j) buf[j] = vload_half(i + j, (__global const half*)p) / scale; break;
    case DT_BF16:
      for (int j = 0; j < APPEND_ITEMS; ++j) buf[j] = bf16_bits_to_float(((__global const ushort*)p)[i + j]) / scale;
      break;
    default: for (int j = 0; j < APPEND_ITEMS; ++j) buf[j] = ((__global const float*)p)[i + j] / scale; break;
  }
}

inline void store_row(__global void* p, size_t i, int dt, const float* buf) {
  switch (dt) {
    case DT_F16: for (int j = 0; j < APPEND_ITEMS; ++j) vstore_half_rte(buf[j], i + j, (__global half*)p); break;
    case DT_BF16: for (int j = 0; j < APPEND_ITEMS; ++j) ((__global ushort*)p)[i + j] = float_to_bf16_bits(buf[j]); break;
    case DT_E4M3: for (int j = 0; j < APPEND_ITEMS; ++j) ((__global uchar*)p)[i + j] = float_to_e4m3(buf[j]); break;
    case DT_E5M2: for (int j = 0; j < APPEND_ITEMS; ++j) ((__global uchar*)p)[i + j] = float_to_e5m2(buf[j]); break;
    default: for (int j = 0; j < APPEND_ITEMS; ++j) ((__global float*)p)[i + j] = buf[j]; break;
  }
}
#endif

__kernel __attribute__((reqd_work_group_size(APPEND_WG, 1, 1))) SIMD_ATTR
void append_kv(__global const void* k, __global const void* v, int src_dt, long src_st, long src_sh,
               __global const void* slots, int slots_i64, long num_slots,
               __global void* k_cache, __global void* v_cache, int kv_dt, long c_sp, long c_st, long c_sh,
               int page_size, int Hkv, int D, float k_scale, float v_scale, __global const float* k_hs,
               __global const float* v_hs, int has_hs, __global volatile int* faults) {
  const int i = get_global_id(0) * APPEND_ITEMS;
  const long t = get_global_id(1);
  if (i >= Hkv * D) return;
  long page, off;
  if (!slot_page(slots, slots_i64, t, page_size, num_slots, i == 0, faults, &page, &off)) return;
  const int h = i / D, d = i - h * D;
  const size_t src = (size_t)(t * src_st + h * src_sh + d);
  const size_t dst = (size_t)(page * c_sp + off * c_st + h * c_sh + d);
  // Per-KV-head scales (has_hs) on top of the per-tensor ones.
  const float ks = k_scale * (has_hs ? k_hs[h] : 1.0f), vs = v_scale * (has_hs ? v_hs[h] : 1.0f);
#if APPEND_ITEMS > 1
  float buf[APPEND_ITEMS];
  load_row(k, src, src_dt, ks, buf);
  store_row(k_cache, dst, kv_dt, buf);
  load_row(v, src, src_dt, vs, buf);
  store_row(v_cache, dst, kv_dt, buf);
#else
  store_elem(k_cache, dst, kv_dt, load_elem(k, src, src_dt) / ks);
  store_elem(v_cache, dst, kv_dt, load_elem(v, src, src_dt) / vs);
#endif
}

// int8 caches (PagedKV dtype I8): work-item (h, t) quantises token t's head-h K and V rows:
// scale = max |x| * fl(1/127) (a multiplication, so every device rounds it alike; stored in
// the scale cache as f32, or f16 with s_f16, rounded to nearest even), stored = the integer
// nearest to x / scale (the exact quotient, ties to even; OpenCL's division may be off by
// ulps, so the quotient is corrected with two fmas) saturated to [-127, 127], with the scale
// as stored (so loaded = stored * scale is what decode reads); an all-zero row stores scale 0
// and zeros. Slots as append_kv.

// (int8_quant.clh's rules, shared with mla_append.cl and rope.cl.)
inline void quantize_row_i8(__global const void* src, size_t s0, int src_dt, int D, __global char* dst, size_t d0,
                            __global void* scales, size_t so, int s_f16) {
  float amax = 0.0f;
  for (int d = 0; d < D; ++d) amax = fmax(amax, fabs(load_elem(src, s0 + d, src_dt)));
  const float scale = store_scale(scales, so, s_f16, amax * (1.0f / 127.0f));
  for (int d = 0; d < D; ++d) dst[d0 + d] = int8_quantize(load_elem(src, s0 + d, src_dt), scale);
}

__kernel __attribute__((reqd_work_group_size(APPEND_WG, 1, 1))) SIMD_ATTR
void append_kv_i8(__global const void* k, __global const void* v, int src_dt, long src_st, long src_sh,
                  __global const void* slots, int slots_i64, long num_slots, __global char* k_cache,
                  __global char* v_cache, long c_sp, long c_st, long c_sh, int page_size, int Hkv, int D,
                  __global void* k_scales, __global void* v_scales, long s_sp, long s_st, long s_sh, int s_f16,
                  __global volatile int* faults) {
  const int h = get_global_id(0);
  const long t = get_global_id(1);
  if (h >= Hkv) return;
  long page, off;
  if (!slot_page(slots, slots_i64, t, page_size, num_slots, h == 0, faults, &page, &off)) return;
  const size_t src = (size_t)(t * src_st + h * src_sh);
  const size_t dst = (size_t)(page * c_sp + off * c_st + h * c_sh);
  const size_t so = (size_t)(page * s_sp + off * s_st + h * s_sh);
  quantize_row_i8(k, src, src_dt, D, k_cache, dst, k_scales, so, s_f16);
  quantize_row_i8(v, src, src_dt, D, v_cache, dst, v_scales, so, s_f16);
}

// int4 caches (PagedKV dtype I4): work-item (h, t) quantises token t's head-h K and V rows,
// group by group (G = quant_group consecutive elements) with int4_quant.clh's rules (shared
// with rope.cl's rope_append_kv_i4): the group's lo and hi give its [scale, zero] pair (at so
// + 2 * group), then each element pair its byte.
inline void quantize_row_i4(__global const void* src, size_t s0, int src_dt, int D, int G, __global uchar* dst,
                            size_t b0, __global void* scales, size_t so, int s_f16) {
  for (int g0 = 0; g0 < D; g0 += G) {
    float lo = 0.0f, hi = 0.0f;
    for (int d = 0; d < G; ++d) {
      const float x = load_elem(src, s0 + g0 + d, src_dt);
      lo = fmin(lo, x), hi = fmax(hi, x);
    }
    const float2 sz = int4_store_group(scales, so + 2 * (size_t)(g0 / G), s_f16, lo, hi);
    for (int d = 0; d < G; d += 2) {
      const float2 ab = (float2)(load_elem(src, s0 + g0 + d, src_dt), load_elem(src, s0 + g0 + d + 1, src_dt));
      dst[b0 + (size_t)((g0 + d) / 2)] = int4_byte(ab, sz);
    }
  }
}

// c_* strides in elements (nibbles, even); D and G as the cache's head_dim and quant_group.
__kernel __attribute__((reqd_work_group_size(APPEND_WG, 1, 1))) SIMD_ATTR
void append_kv_i4(__global const void* k, __global const void* v, int src_dt, long src_st, long src_sh,
                  __global const void* slots, int slots_i64, long num_slots, __global uchar* k_cache,
                  __global uchar* v_cache, long c_sp, long c_st, long c_sh, int page_size, int Hkv, int D, int G,
                  __global void* k_scales, __global void* v_scales, long s_sp, long s_st, long s_sh, int s_f16,
                  __global volatile int* faults) {
  const int h = get_global_id(0);
  const long t = get_global_id(1);
  if (h >= Hkv) return;
  long page, off;
  if (!slot_page(slots, slots_i64, t, page_size, num_slots, h == 0, faults, &page, &off)) return;
  const size_t src = (size_t)(t * src_st + h * src_sh);
  const size_t dst = (size_t)((page * c_sp + off * c_st + h * c_sh) / 2);
  const size_t so = (size_t)(page * s_sp + off * s_st + h * s_sh);
  quantize_row_i4(k, src, src_dt, D, G, k_cache, dst, k_scales, so, s_f16);
  quantize_row_i4(v, src, src_dt, D, G, v_cache, dst, v_scales, so, s_f16);
}

// append_latent: writes new latent rows (ckv [T, 512], kpe [T, 64]) into the paged latent
// cache at slot_mapping (slot s -> page s / P, offset s % P). Negative slots (padding) are
// skipped, and so are slots past the cache, which set CLATTN_FAULT_SLOT. One work-group per token, its work-items striding over the 576
// elements; dtypes are runtime arguments (one program for every combination): stored =
// value / scale, RNE, fp8 saturating (common.clh). int8 latents: append_latent_i8.
#include "common.clh"
#include "int8_quant.clh"

__kernel void append_latent(__global const void* src_ckv, __global const void* src_kpe, int src_dt, long s_ckv,
                            long s_kpe, __global const void* slots, int slot64, long num_tokens,
                            __global void* ckv_cache, __global void* kpe_cache, int dst_dt, long ckv_sp, long ckv_st,
                            long kpe_sp, long kpe_st, long kpe_base, long page_size, long num_slots,
                            float scale, __global volatile int* faults) {
  const long i = get_group_id(0);
  long page, off;
  if (i >= num_tokens || !slot_page(slots, slot64, i, page_size, num_slots, get_local_id(0) == 0, faults, &page, &off))
    return;
  for (int d = get_local_id(0); d < 576; d += get_local_size(0)) {
    if (d < 512) {
      const float v = load_elem(src_ckv, (size_t)(i * s_ckv + d), src_dt);
      store_elem(ckv_cache, (size_t)(page * ckv_sp + off * ckv_st + d), dst_dt, v / scale);
    } else {
      const float v = load_elem(src_kpe, (size_t)(i * s_kpe + d - 512), src_dt);
      store_elem(kpe_cache, (size_t)(kpe_base + page * kpe_sp + off * kpe_st + d - 512), dst_dt, v / scale);
    }
  }
}

// int8 latent cache (MlaCache dtype I8): the token's ckv part and kpe part are quantised
// each with its own scale (int8_quant.clh), written as a pair (ckv, kpe) to the scale cache
// at page * sc_sp + off * sc_st (f32, or f16 with sc_f16). The work-group's maxima meet in
// local memory (at most APPEND_MAX_WG work-items).
#define APPEND_MAX_WG 64
__kernel void append_latent_i8(__global const void* src_ckv, __global const void* src_kpe, int src_dt, long s_ckv,
                               long s_kpe, __global const void* slots, int slot64, long num_tokens,
                               __global char* ckv_cache, __global char* kpe_cache, long ckv_sp, long ckv_st,
                               long kpe_sp, long kpe_st, long kpe_base, long page_size, long num_slots,
                               __global void* scales, long sc_sp, long sc_st, int sc_f16,
                               __global volatile int* faults) {
  __local float amax[2 * APPEND_MAX_WG];
  const long i = get_group_id(0);
  const int wi = get_local_id(0), ls = get_local_size(0);
  long page, off;
  // (A skipped token's group returns as a whole: the barrier below is then never reached.)
  if (i >= num_tokens || !slot_page(slots, slot64, i, page_size, num_slots, get_local_id(0) == 0, faults, &page, &off))
    return;
  float mc = 0.0f, mk = 0.0f;
  for (int d = wi; d < 576; d += ls) {
    if (d < 512) mc = fmax(mc, fabs(load_elem(src_ckv, (size_t)(i * s_ckv + d), src_dt)));
    else mk = fmax(mk, fabs(load_elem(src_kpe, (size_t)(i * s_kpe + d - 512), src_dt)));
  }
  amax[wi] = mc, amax[APPEND_MAX_WG + wi] = mk;
  barrier(CLK_LOCAL_MEM_FENCE);
  mc = 0.0f, mk = 0.0f;
  for (int j = 0; j < ls; ++j) mc = fmax(mc, amax[j]), mk = fmax(mk, amax[APPEND_MAX_WG + j]);
  const float sc = int8_scale(mc, sc_f16), sk = int8_scale(mk, sc_f16);
  if (wi < 2) {
    const size_t so = (size_t)(page * sc_sp + off * sc_st) + wi;
    store_scale(scales, so, sc_f16, wi ? sk : sc);  // (already rounded: stores the same value)
  }
  for (int d = wi; d < 576; d += ls) {
    if (d < 512) {
      const float x = load_elem(src_ckv, (size_t)(i * s_ckv + d), src_dt);
      ckv_cache[page * ckv_sp + off * ckv_st + d] = int8_quantize(x, sc);
    } else {
      const float x = load_elem(src_kpe, (size_t)(i * s_kpe + d - 512), src_dt);
      kpe_cache[kpe_base + page * kpe_sp + off * kpe_st + d - 512] = int8_quantize(x, sk);
    }
  }
}

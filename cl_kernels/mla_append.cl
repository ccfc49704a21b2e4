// append_latent: writes new latent rows (ckv [T, 512], kpe [T, 64]) into the paged latent
// cache at slot_mapping (slot s -> page s / P, offset s % P). Negative slots (padding) are
// skipped, and so are slots past the cache, which set CLATTN_FAULT_SLOT. One work-group per token, its work-items striding over the 576
// elements; dtypes are runtime arguments (one program for every combination): stored =
// value / scale, RNE, fp8 saturating (common.clh).
#include "common.clh"

__kernel void append_latent(__global const void* src_ckv, __global const void* src_kpe, int src_dt, long s_ckv,
                            long s_kpe, __global const void* slots, int slot64, long num_tokens,
                            __global void* ckv_cache, __global void* kpe_cache, int dst_dt, long ckv_sp, long ckv_st,
                            long kpe_sp, long kpe_st, long kpe_base, long page_size, long num_slots,
                            float scale, __global volatile int* faults) {
  const long i = get_group_id(0);
  if (i >= num_tokens) return;
  const long slot = slot64 ? ((__global const long*)slots)[i] : (long)((__global const int*)slots)[i];
  if (slot >= num_slots && get_local_id(0) == 0) atomic_or(faults, CLATTN_FAULT_SLOT);
  if (slot < 0 || slot >= num_slots) return;
  const long page = slot / page_size, off = slot % page_size;
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

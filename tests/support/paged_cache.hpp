// The paged-cache setup the quantised-KV suites share (decode, extend, MLA int8): requests
// laid out on shuffled pages (CSR, slots), a cache and its scale caches on the device filled
// with a byte pattern, rows written by append_kv, and the stored rows read back as a kernel
// reads them. The checks stay in each suite.
#pragma once
#include <cstdint>
#include <vector>

#include "support/test_support.hpp"

namespace clattn::test {

// Requests of lens[i] tokens on pages taken in order from a shuffled permutation of
// (pages needed) + spare_pages page ids.
struct ShuffledPages {
  int num_pages = 0;
  std::vector<std::vector<int32_t>> pages;  // per request
  std::vector<int64_t> slots;               // every token of every request, in order
  PagedCsr csr;                             // page_size, kv_indptr, kv_indices, kv_last_page_len
};
ShuffledPages shuffled_pages(const std::vector<int>& lens, int page_size, int spare_pages, Rng& rng);

// A paged cache on the device: K and V filled with `fill` bytes and, for int8 / int4, the two
// scale caches with `scale_fill` bytes (unwritten slots and stray reads then show).
struct KVBuffers {
  PagedKV cache;
  size_t bytes = 0, scale_bytes = 0;  // per cache; scale_bytes 0 for a float cache (no scale caches)
  DeviceBuffer k, v, k_scales, v_scales;
};
KVBuffers kv_buffers(const PagedKV& cache, uint8_t fill, uint8_t scale_fill);

// append_kv of f32 rows [slots.size(), Hkv, D] at int64 slots into kv (its scale caches when
// quantised), finished. k_scale / v_scale and the head scales are taken from `scales`.
void append_rows(const KVBuffers& kv, const std::vector<double>& k, const std::vector<double>& v,
                 const std::vector<int64_t>& slots, const AppendKVArgs& scales = {});

// The stored bytes of every buffer of kv.
struct StoredKV {
  std::vector<uint8_t> k, v, k_scales, v_scales;
};
StoredKV stored(const KVBuffers& kv);

// Where row (slot, head) starts: in cache elements (an int4 row's byte is this / 2) and in
// scale-cache elements.
int64_t row_offset(const PagedKV& c, int64_t slot, int head);
int64_t scale_offset(const PagedKV& c, int64_t slot, int head);
// Element i of a scale cache's bytes (f32 or f16).
double scale_at(const std::vector<uint8_t>& scales, int64_t i, DType dt);
// Row (slot, head) of an int8 / int4 cache dequantised with its stored scales, head_dim values.
void dequantized_row(const PagedKV& c, const std::vector<uint8_t>& bytes, const std::vector<uint8_t>& scales,
                     int64_t slot, int head, double* out);

}  // namespace clattn::test

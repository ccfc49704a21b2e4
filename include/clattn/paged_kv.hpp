// The paged K/V cache descriptor every attention op on a paged cache takes (decode,
// extend, append_kv, the engine backends). Layout contract: DESIGN.md "Data contracts".
#pragma once
#include <cstdint>

#include "clattn/types.hpp"

namespace clattn {

// One layer's paged K (or V) cache (FlashInfer's paged_kv_t): K and V buffers share it.
// Element (page, token-in-page, head, d) sits at page*stride_page + token*stride_token +
// head*stride_head + d (elements of `dtype`); zero strides take the contiguous layout's:
// NHD [num_pages, page_size, num_kv_heads, head_dim], HND [num_pages, num_kv_heads,
// page_size, head_dim]. Strides must keep rows 4-byte aligned (16 for the fastest loads).
//
// int8 (dtype I8; append_kv, decode, extend, cascade): symmetric, one scale per (token, KV head):
// loaded = stored * scale, scale = max |row| / 127 computed by append_kv. The scales live in
// scale caches beside K and V (k_scale_cache / v_scale_cache buffers, the same page ids) of
// scale_dtype (f32 or f16), element (page, token-in-page, head) at page*scale_stride_page +
// token*scale_stride_token + head*scale_stride_head; zero strides take the cache layout's
// order: NHD [num_pages, page_size, num_kv_heads], HND [num_pages, num_kv_heads, page_size].
//
// int4 (dtype I4; append_kv, decode, extend, cascade): unsigned nibbles 0..15, two per byte, element 2i in
// the low nibble of byte i and 2i+1 in the high one. Strides stay in elements (nibbles) and
// must be even (a row starts on a byte); required_bytes() is in bytes. Asymmetric per group
// of quant_group (32, 64 or 128, dividing head_dim) consecutive head-dim elements: loaded =
// (u - zero) * scale. The scale caches hold a pair [scale, zero] of scale_dtype per (page,
// token, head, group) at page*scale_stride_page + token*scale_stride_token +
// head*scale_stride_head + 2*group (+1 for the zero); zero strides take NHD [num_pages,
// page_size, num_kv_heads, head_dim / quant_group, 2], HND [num_pages, num_kv_heads,
// page_size, head_dim / quant_group, 2].
// Layout and reasoning: docs/kv_formats.md.
struct PagedKV {
  int num_pages = 0;
  int page_size = 16;
  int num_kv_heads = 0;
  int head_dim = 0;
  KVLayout layout = KVLayout::NHD;
  DType dtype = DType::BF16;  // f32 f16 bf16 fp8_e4m3 fp8_e5m2 int8 int4
  int64_t stride_page = 0, stride_token = 0, stride_head = 0;
  DType scale_dtype = DType::F32;  // int8 / int4: the scale caches' dtype, f32 or f16
  int64_t scale_stride_page = 0, scale_stride_token = 0, scale_stride_head = 0;  // elements
  int quant_group = 0;  // int4: head-dim elements per [scale, zero] pair (32, 64, 128); else unused

  CLATTN_API int64_t page_stride() const;   // resolved strides (elements)
  CLATTN_API int64_t token_stride() const;
  CLATTN_API int64_t head_stride() const;
  // Bytes a buffer must hold: one past the last element the strides can address.
  CLATTN_API int64_t required_bytes() const;
  // int8 / int4: the scale caches' resolved strides (elements) and the bytes each must hold
  // (0 for other dtypes).
  CLATTN_API int64_t scale_page_stride() const;
  CLATTN_API int64_t scale_token_stride() const;
  CLATTN_API int64_t scale_head_stride() const;
  CLATTN_API int64_t scale_required_bytes() const;
};

}  // namespace clattn

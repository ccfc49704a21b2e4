/* clattn C ABI: opaque handles, status codes, thread-local last error. Every entry point
 * catches C++ exceptions at the boundary and never aborts. */
#ifndef CLATTN_H
#define CLATTN_H

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 300
#endif
#include <CL/cl.h>
#include <stddef.h>
#include <stdint.h>

#include "clattn/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Numbers match clattn::Status. */
typedef enum clattn_status {
  CLATTN_SUCCESS = 0,
  CLATTN_INVALID_ARGUMENT = 1,
  CLATTN_UNSUPPORTED = 2,
  CLATTN_DEVICE_NOT_FOUND = 3,
  CLATTN_BUILD_FAILED = 4,
  CLATTN_OPENCL_ERROR = 5,
  CLATTN_OUT_OF_MEMORY = 6,
  CLATTN_INTERNAL = 7
} clattn_status;

typedef struct clattn_context_s* clattn_context;

/* Library version, e.g. "0.1.0". */
CLATTN_API const char* clattn_version(void);
/* Message of the last failed call on this thread ("" after a success). Valid until the
 * next clattn call on this thread. */
CLATTN_API const char* clattn_last_error(void);
CLATTN_API const char* clattn_status_name(clattn_status s);

/* selector: NULL or "" = $CLATTN_DEVICE / first GPU / first CPU; else index, vendor or
 * name substring. */
CLATTN_API clattn_status clattn_context_create(const char* selector, clattn_context* out);
/* Adopts an engine's objects (retained; released once by clattn_context_release). */
CLATTN_API clattn_status clattn_context_adopt(cl_context ctx, cl_device_id device, cl_command_queue queue,
                                              clattn_context* out);
/* The same with the kernel variants the context may choose (clattn::ContextOptions::variants):
 * NULL or "" = $CLATTN_VARIANTS (unset: all), "all", or "portable" (no vendor-specific
 * variant: inline PTX, vendor extensions or builtins). Another value: CLATTN_INVALID_ARGUMENT. */
CLATTN_API clattn_status clattn_context_create_with_variants(const char* selector, const char* variants,
                                                             clattn_context* out);
CLATTN_API clattn_status clattn_context_adopt_with_variants(cl_context ctx, cl_device_id device,
                                                            cl_command_queue queue, const char* variants,
                                                            clattn_context* out);
CLATTN_API void clattn_context_release(clattn_context ctx);
CLATTN_API clattn_status clattn_context_queue(clattn_context ctx, cl_command_queue* out);

/* Device profile as a JSON document (the same keys as clattn-probe --json's "profile").
 * Writes at most `capacity` bytes including the NUL; `*needed` gets the full size. */
CLATTN_API clattn_status clattn_device_profile_json(clattn_context ctx, char* buf, size_t capacity, size_t* needed);
CLATTN_API clattn_status clattn_self_check(clattn_context ctx);
/* Device fault bits (CLATTN_FAULT_*) recorded by kernels that skipped an index outside its
 * pool (page id, append slot, state index, token range) instead of following it. Blocking
 * read on the context's queue (finish your own queues first); clear != 0 resets them. */
#define CLATTN_FAULT_PAGE_ID 1u
#define CLATTN_FAULT_SLOT 2u
#define CLATTN_FAULT_STATE 4u
#define CLATTN_FAULT_TOKEN_RANGE 8u
#define CLATTN_FAULT_POSITION 16u
CLATTN_API clattn_status clattn_context_device_faults(clattn_context ctx, uint32_t* out, int clear);


/* ------------------------ ops (see clattn/paged_kv.hpp, decode.hpp, append_kv.hpp, rope.hpp, merge_state.hpp)
 * dtype codes match clattn::DType: 0 f32, 1 f16, 2 bf16, 3 fp8 e4m3, 4 fp8 e5m2, 5 i32, 6 i64,
 * 7 int8, 8 int4 (KV caches).
 * layout: 0 NHD [pages, P, Hkv, D], 1 HND [pages, Hkv, P, D]. Strides in elements, 0 = the
 * layout's contiguous stride. Every op only enqueues on `queue` (NULL = the context's
 * queue) after `num_wait` events; `event` (nullable) receives its last command. */
typedef struct clattn_paged_kv {
  int num_pages, page_size, num_kv_heads, head_dim;
  int layout, dtype;                       /* dtype 7 int8, 8 int4 (append_kv, decode, extend, cascade) */
  int64_t stride_page, stride_token, stride_head;
  /* int8 / int4: the scale caches' dtype (0 f32, 1 f16) and strides (elements; 0 = the
   * layout's order, clattn/paged_kv.hpp). Zero-initialised: f32, contiguous. */
  int scale_dtype;
  int64_t scale_stride_page, scale_stride_token, scale_stride_head;
  /* int4: head-dim elements per [scale, zero] pair (32, 64 or 128, dividing head_dim);
   * unused otherwise. Int4 strides are in elements (nibbles) and even. */
  int quant_group;
} clattn_paged_kv;

typedef struct clattn_enqueue {
  cl_command_queue queue;
  cl_uint num_wait;
  const cl_event* wait;
  cl_event* event;
} clattn_enqueue;

/* FlashInfer CSR metadata on the host (decode: qo_indptr unused). kv_start_offset may be NULL. */
typedef struct clattn_csr {
  int batch_size, page_size;
  const int32_t* kv_indptr;        /* [B+1] */
  const int32_t* kv_indices;       /* [kv_indptr[B]] */
  const int32_t* kv_last_page_len; /* [B] */
  const int32_t* kv_start_offset;  /* [B] or NULL */
  const int32_t* qo_indptr;        /* [B+1] query rows; extend/cascade-unique only, NULL for decode */
} clattn_csr;

/* FlashAttention/vLLM page table on the host. */
typedef struct clattn_page_table {
  int batch_size, page_size, max_pages;
  const int32_t* page_table; /* [B, max_pages] */
  const int32_t* seq_lens;   /* [B] */
  const int32_t* cu_seqlens_q; /* [B+1] query rows; extend only, NULL for decode */
} clattn_page_table;

typedef struct clattn_decode_options {
  int num_qo_heads;
  int q_dtype, o_dtype;
  float sm_scale;         /* 0: 1/sqrt(head_dim) */
  float logits_soft_cap;  /* 0: off */
  int window_left;        /* -1: off */
  int deterministic;      /* fixed split tile: output independent of batch mates */
  int split_tokens;       /* deterministic tile, 0 = default */
  int max_splits;         /* 0 = planner's choice, 1 = never split */
  int validate;           /* 1 = validate metadata (default) */
  const char* params;     /* parameter overrides "NAME=int,NAME=int" (names the op has), NULL = none */
} clattn_decode_options;
CLATTN_API void clattn_decode_options_init(clattn_decode_options* opt);

typedef struct clattn_decode_plan_s* clattn_decode_plan;
CLATTN_API clattn_status clattn_decode_plan_csr(clattn_context ctx, const clattn_csr* csr, const clattn_paged_kv* cache,
                                                const clattn_decode_options* opt, clattn_decode_plan* out);
CLATTN_API clattn_status clattn_decode_plan_page_table(clattn_context ctx, const clattn_page_table* table,
                                                       const clattn_paged_kv* cache, const clattn_decode_options* opt,
                                                       clattn_decode_plan* out);
/* Workspace bytes decode_run needs (0 = none). */
CLATTN_API clattn_status clattn_decode_plan_workspace_bytes(clattn_decode_plan plan, int64_t* out);
CLATTN_API void clattn_decode_plan_release(clattn_decode_plan plan);

typedef struct clattn_decode_buffers {
  cl_mem q, k_cache, v_cache;
  cl_mem page_ids;   /* int32 device copy of kv_indices (CSR plan) or the page table */
  cl_mem o, lse;     /* lse nullable */
  cl_mem workspace;  /* >= workspace bytes */
  cl_mem sinks;      /* [Hq] f32, nullable */
  float k_scale, v_scale;
  cl_mem k_scale_cache, v_scale_cache;  /* int8 / int4 caches: the row / group scales; NULL otherwise */
  cl_mem k_head_scales, v_head_scales;  /* optional [Hkv] f32 per-head scales (x k_scale / v_scale); both or NULL */
} clattn_decode_buffers;
CLATTN_API clattn_status clattn_decode_run(clattn_context ctx, clattn_decode_plan plan, const clattn_decode_buffers* b,
                                           const clattn_enqueue* e);

typedef struct clattn_append_kv_args {
  cl_mem k, v;               /* [num_tokens, Hkv, D] */
  int src_dtype;             /* f32 f16 bf16 */
  int64_t src_stride_token, src_stride_head;
  cl_mem slot_mapping;       /* [num_tokens] */
  int slot_dtype;            /* 5 i32 or 6 i64 */
  int64_t num_tokens;
  const void* slot_mapping_host; /* optional host copy, validated before enqueue */
  cl_mem k_cache, v_cache;
  clattn_paged_kv cache;
  float k_scale, v_scale;
  cl_mem k_scale_cache, v_scale_cache;  /* int8 / int4 caches: the scales written; NULL otherwise */
  cl_mem k_head_scales, v_head_scales;  /* optional [Hkv] f32 per-head scales (x k_scale / v_scale); both or NULL */
} clattn_append_kv_args;
CLATTN_API clattn_status clattn_append_kv(clattn_context ctx, const clattn_append_kv_args* a, const clattn_enqueue* e);

/* Rotary position embedding (see clattn/rope.hpp, docs/rope.md). Pair i < R/2 is dims
 * (i, i + R/2) (NeoX, rotate_half) or (2i, 2i + 1) (GPT-J, interleaved), rotated by
 * (x, y) -> (x cos - y sin, y cos + x sin); dims R .. D-1 pass through. */
typedef struct clattn_rope_config {
  int style;                 /* 0 NeoX, 1 GPT-J */
  int rotary_dim;            /* R: even, 2 <= R <= head_dim; 0 = head_dim */
  float theta;               /* > 0 (no cache): angle_i = pos / scale * theta^(-2i/R), in f32 */
  float scale;               /* > 0 (no cache): positions are divided by it */
  cl_mem cos_sin_cache;      /* optional [cache_positions, R] f32: row p = R/2 cosines, R/2 sines */
  int64_t cache_positions;   /* rows of cos_sin_cache (> 0 when it is set) */
} clattn_rope_config;
/* NeoX, full rotary (R = head_dim), theta 10000, scale 1, no cache. */
CLATTN_API void clattn_rope_config_init(clattn_rope_config* c);

/* q [num_tokens, Hq, D] -> q_out and k [num_tokens, Hk, D] -> k_out (Hq or Hk may be 0:
 * that pair is not touched), in place when the output is the input. One position per
 * token, >= 0 (and < cache_positions with a cache): a device position outside that range
 * leaves the token's outputs unwritten and sets CLATTN_FAULT_POSITION. */
typedef struct clattn_rope_args {
  cl_mem q, q_out;           /* [num_tokens, Hq, D] */
  cl_mem k, k_out;           /* [num_tokens, Hk, D] */
  int dtype;                 /* q, k and their outputs: f32 f16 bf16 (outputs rounded to nearest even) */
  int64_t num_tokens;
  int num_qo_heads, num_kv_heads, head_dim;  /* Hq, Hk >= 0, not both 0 */
  int64_t q_stride_token, q_stride_head;     /* q and q_out */
  int64_t k_stride_token, k_stride_head;     /* k and k_out */
  cl_mem positions;          /* [num_tokens] */
  int positions_dtype;       /* 5 i32 or 6 i64 */
  const void* positions_host; /* optional host copy (same dtype), validated before enqueue */
  clattn_rope_config rope;
} clattn_rope_args;
CLATTN_API clattn_status clattn_apply_rope(clattn_context ctx, const clattn_rope_args* a, const clattn_enqueue* e);

/* clattn_append_kv with RoPE on the way, in one kernel: append.k is rotated, then stored as
 * clattn_append_kv stores it (per-tensor and per-KV-head scales alike); append.v is stored
 * unchanged; q is rotated into q_out. The slot decides only the cache writes: a token with a
 * negative slot still gets its q_out row. clattn_append_kv's checks apply to `append` unchanged. */
typedef struct clattn_rope_append_kv_args {
  clattn_append_kv_args append; /* k, v, slot_mapping, caches, scales */
  cl_mem q, q_out;           /* [append.num_tokens, Hq, D]: q in append.src_dtype */
  int num_qo_heads;          /* Hq >= 0 (0: no q) */
  int64_t q_stride_token, q_stride_head;     /* q and q_out */
  int q_out_dtype;           /* f32 f16 bf16 */
  cl_mem positions;          /* [append.num_tokens] */
  int positions_dtype;       /* 5 i32 or 6 i64 */
  const void* positions_host; /* optional host copy (same dtype), validated before enqueue */
  clattn_rope_config rope;
} clattn_rope_append_kv_args;
CLATTN_API clattn_status clattn_rope_append_kv(clattn_context ctx, const clattn_rope_append_kv_args* a,
                                               const clattn_enqueue* e);

/* (v_a, s_a) + (v_b, s_b) -> (v_out, s_out); s_out nullable; in place allowed. */
CLATTN_API clattn_status clattn_merge_state(clattn_context ctx, cl_mem v_a, cl_mem s_a, cl_mem v_b, cl_mem s_b,
                                            cl_mem v_out, cl_mem s_out, int num_tokens, int num_heads, int head_dim,
                                            int dtype, const clattn_enqueue* e);
/* v [T, n, H, D], s [T, n, H] -> v_out [T, H, D], s_out [T, H] (nullable). */
CLATTN_API clattn_status clattn_merge_states(clattn_context ctx, cl_mem v, cl_mem s, cl_mem v_out, cl_mem s_out,
                                             int num_tokens, int num_states, int num_heads, int head_dim, int dtype,
                                             const clattn_enqueue* e);

/* ---------------------------------------------------------------- devices (see clattn/context.hpp)
 * The device profile as a plain struct. Strings are NUL-terminated and cut to their array
 * (the JSON form above carries them whole, plus the extension list). */
typedef struct clattn_device_info {
  int index;                     /* global index across platforms (CLATTN_DEVICE=<n>) */
  char vendor[32];               /* normalised: nvidia amd intel apple arm qualcomm cpu generic */
  char vendor_forced[32];        /* CLATTN_FORCE_VENDOR in effect, "" when none */
  char device_name[256];
  char device_vendor[128];
  char driver_version[128];
  char device_version[128];
  char platform_name[128];
  char opencl_c_version[64];
  char architecture[64];         /* "sm_90", "gfx90a", ... "" when unknown */
  int is_gpu, is_cpu;
  unsigned compute_units;
  uint64_t max_work_group_size;
  uint64_t local_mem_bytes, global_mem_bytes, max_alloc_bytes;
  int fp16, fp64;
  int subgroups;                 /* sub-groups usable */
  int num_subgroup_sizes;        /* entries of subgroup_sizes used (at most 8) */
  unsigned subgroup_sizes[8];
  int intel_subgroups, intel_required_subgroup_size, integer_dot_product;
  int nv_inline_ptx;
  int nv_compute_capability;     /* major*10+minor, 0 when not NVIDIA */
  unsigned amd_wavefront;        /* 0 when not AMD */
  unsigned warp_size;            /* hardware SIMD width where known, else 0 */
  int portable_only;             /* portable-only mode: no vendor-specific kernel variant */
  int reserved[15];              /* zero; room for later fields */
} clattn_device_info;

/* The context's device (index -1 when an adopted device is not in the list). */
CLATTN_API clattn_status clattn_device_info_get(clattn_context ctx, clattn_device_info* out);
/* Every OpenCL device on every platform (0 when there is none: not an error). */
CLATTN_API clattn_status clattn_device_count(int* out);
/* Device `index` of that list, 0 <= index < count. */
CLATTN_API clattn_status clattn_device_info_at(int index, clattn_device_info* out);

/* ---------------------------------------------------------------- metadata (see clattn/metadata.hpp)
 * Host builders from SGLang-style engine tables. They write into caller arrays: ask for the
 * sizes first (clattn_metadata_sizes_get gives the exact ones for a batch, clattn_max_csr_pages /
 * clattn_max_table_pages bounds for any batch of a shape). A rejected call (bad batch, array
 * too small) writes nothing to the output arrays. */
typedef struct clattn_engine_batch {
  const int32_t* req_to_token;      /* [pool_size, max_ctx] token -> slot */
  int pool_size, max_ctx;
  const int32_t* req_pool_indices;  /* [B] */
  const int32_t* seq_lens;          /* [B] KV length after this step */
  int batch_size;
  const int32_t* prefix_lens;       /* [B]; extend only (required with extend_lens) */
  const int32_t* extend_lens;       /* [B]; NULL = decode (one query per request) */
} clattn_engine_batch;

/* Exact sizes of the builders' outputs for one batch. */
typedef struct clattn_metadata_sizes {
  int64_t csr_indices;   /* kv_indices entries clattn_build_csr writes (kv_indptr[B]) at window_left */
  int table_width;       /* tightest page-table width (max pages of a request, >= 1) */
  int64_t num_slots;     /* slot_mapping entries: B (decode) or sum of extend_lens */
  int64_t num_qo_rows;   /* query rows: B (decode) or sum of extend_lens */
} clattn_metadata_sizes;
CLATTN_API clattn_status clattn_metadata_sizes_get(const clattn_engine_batch* b, int page_size, int window_left,
                                                   clattn_metadata_sizes* out);
/* Bounds for any batch of this shape: batch_size * ceil(max_ctx / page_size) and
 * ceil(max_ctx / page_size) (>= 1). */
CLATTN_API clattn_status clattn_max_csr_pages(int batch_size, int max_ctx, int page_size, int64_t* out);
CLATTN_API clattn_status clattn_max_table_pages(int max_ctx, int page_size, int* out);

/* Where clattn_build_csr writes. qo_indptr is written when non-NULL for an extend batch
 * (decode: left alone). kv_start_offset is required when window_left >= 0 and, when given
 * without a window, filled with zeros. */
typedef struct clattn_csr_out {
  int32_t* kv_indptr;           /* [B+1] */
  int32_t* kv_indices;          /* [kv_indices_capacity] */
  int64_t kv_indices_capacity;  /* entries */
  int32_t* kv_last_page_len;    /* [B] */
  int32_t* qo_indptr;           /* [B+1] or NULL */
  int32_t* kv_start_offset;     /* [B] or NULL */
} clattn_csr_out;
/* FlashInfer CSR; window_left = W >= 0 keeps the keys the first query row can see.
 * *num_indices (nullable) gets kv_indptr[B], also when the capacity is too small. */
CLATTN_API clattn_status clattn_build_csr(const clattn_engine_batch* b, int page_size, int window_left,
                                          const clattn_csr_out* out, int64_t* num_indices);

typedef struct clattn_page_table_out {
  int32_t* page_table;          /* [B, width], padded with -1 */
  int64_t page_table_capacity;  /* entries */
  int32_t* cu_seqlens_q;        /* [B+1] or NULL (extend only; decode leaves it alone) */
  int32_t* cu_seqlens_k;        /* [B+1] or NULL */
  int32_t* seq_lens;            /* [B] or NULL: the requests' KV lengths */
} clattn_page_table_out;
/* max_pages = 0: the tightest width; larger pads. *width (nullable) gets the row width,
 * also when the capacity is too small. */
CLATTN_API clattn_status clattn_build_page_table(const clattn_engine_batch* b, int page_size, int max_pages,
                                                 const clattn_page_table_out* out, int* width);
/* Decode: slot of position seq_len-1 per request (-1 for seq_len 0); extend: slots of
 * positions prefix_len .. seq_len-1, request-major. *num_slots (nullable) gets the count. */
CLATTN_API clattn_status clattn_build_slot_mapping(const clattn_engine_batch* b, int32_t* slots, int64_t capacity,
                                                   int64_t* num_slots);
/* Page ids at a fixed block size (MLA's 64): [B, width] padded with -1. */
CLATTN_API clattn_status clattn_build_block_table(const clattn_engine_batch* b, int block_size, int max_blocks,
                                                  int32_t* table, int64_t capacity, int* width);

/* Conversions between the two forms (exact inverses on builder output), into caller
 * arrays like the builders; *num_indices / *width as there. A windowed CSR (with
 * kv_start_offset) has no page-table form and is rejected. qo_indptr <-> cu_seqlens_q are
 * carried over when the input has them and the output pointer is non-NULL. */
CLATTN_API clattn_status clattn_csr_to_page_table(const clattn_csr* csr, const clattn_page_table_out* out, int* width);
CLATTN_API clattn_status clattn_page_table_to_csr(const clattn_page_table* table, const clattn_csr_out* out,
                                                  int64_t* num_indices);

/* Validation against a cache of num_pages pages. On failure CLATTN_INVALID_ARGUMENT and
 * clattn_last_error() names the field, the request and the value. csr.qo_indptr is checked
 * when given; seq_lens ([B], nullable) must match the CSR's lengths. */
CLATTN_API clattn_status clattn_validate_csr(const clattn_csr* csr, int num_pages, const int32_t* seq_lens);
CLATTN_API clattn_status clattn_validate_page_table(const clattn_page_table* table, int num_pages);
/* slot_dtype 5 i32 or 6 i64; negative slots are padding. */
CLATTN_API clattn_status clattn_validate_slot_mapping(const void* slots, int slot_dtype, int64_t n, int num_pages,
                                                      int page_size);
/* The engine batch token by token (every slot in the cache, page alignment for P > 1). */
CLATTN_API clattn_status clattn_validate_engine_batch(const clattn_engine_batch* b, int num_pages, int page_size);

/* Device builders: the same outputs from device-resident engine tables (int32 cl_mems),
 * computed by OpenCL kernels; enqueue only (wait list / event as markers on the queue).
 * Host-side argument and buffer-size checks run first. The kernels assume a valid batch:
 * an out-of-range pool index or seq_len outside [0, max_ctx] makes that request empty. */
typedef struct clattn_device_engine_batch {
  cl_mem req_to_token;              /* [pool_size, max_ctx] */
  int pool_size, max_ctx;
  cl_mem req_pool_indices, seq_lens;/* [B] */
  int batch_size;
  cl_mem prefix_lens, extend_lens;  /* [B]; extend_lens NULL = decode (prefix_lens unread) */
} clattn_device_engine_batch;
typedef struct clattn_device_csr {
  cl_mem kv_indptr;        /* [B+1] */
  cl_mem kv_indices;       /* >= the real total (size it by clattn_max_csr_pages); excess writes dropped */
  cl_mem kv_last_page_len; /* [B] */
  cl_mem qo_indptr;        /* [B+1], optional, extend only */
  cl_mem kv_start_offset;  /* [B], required when window_left >= 0 */
} clattn_device_csr;
typedef struct clattn_device_page_table {
  cl_mem page_table;       /* [B, max_pages] */
  cl_mem seq_lens;         /* [B], optional copy */
  cl_mem cu_seqlens_q;     /* [B+1], optional, extend only */
  cl_mem cu_seqlens_k;     /* [B+1], optional */
} clattn_device_page_table;
CLATTN_API clattn_status clattn_build_csr_device(clattn_context ctx, const clattn_device_engine_batch* b,
                                                 int page_size, int window_left, const clattn_device_csr* out,
                                                 const clattn_enqueue* e);
/* max_pages: the row width (>= 1); rows of requests needing more are cut. */
CLATTN_API clattn_status clattn_build_page_table_device(clattn_context ctx, const clattn_device_engine_batch* b,
                                                        int page_size, int max_pages,
                                                        const clattn_device_page_table* out, const clattn_enqueue* e);
/* slot_mapping: decode [B], extend [sum of extend_lens] (excess writes dropped). */
CLATTN_API clattn_status clattn_build_slot_mapping_device(clattn_context ctx, const clattn_device_engine_batch* b,
                                                          cl_mem slot_mapping, const clattn_enqueue* e);
CLATTN_API clattn_status clattn_build_block_table_device(clattn_context ctx, const clattn_device_engine_batch* b,
                                                         int block_size, int max_blocks, cl_mem block_table,
                                                         const clattn_enqueue* e);

/* ---------------------------------------------------------------- extend (see clattn/extend.hpp)
 * Many query rows per request over a paged KV (CSR with qo_indptr, or page table with
 * cu_seqlens_q), ragged prefill over contiguous K/V, and the cascade (shared prefix once). */
typedef struct clattn_extend_options {
  int num_qo_heads;
  int q_dtype, o_dtype;          /* f32 f16 bf16 */
  float sm_scale;                /* 0: 1/sqrt(head_dim) */
  float logits_soft_cap;         /* 0: off */
  int window_left;               /* -1: off */
  int causal;                    /* 1 (default) */
  /* Custom mask (FlashInfer packed_custom_mask): [B+1] byte offsets into the mask buffer,
   * NULL = none. Read (copied) by the plan call only. */
  const int32_t* mask_indptr;
  int validate;                  /* 1 = validate metadata (default) */
  const char* variant;           /* NULL or "" = the profile's choice; "generic"; "nv_mma_sync" */
  const char* params;            /* parameter overrides "NAME=int,NAME=int" (names the op has), NULL = none */
} clattn_extend_options;
CLATTN_API void clattn_extend_options_init(clattn_extend_options* opt);

/* Contiguous K or V rows for ragged prefill; strides in elements, 0 = [tokens, Hkv, D]. */
typedef struct clattn_ragged_kv {
  int64_t num_tokens;
  int num_kv_heads, head_dim;
  int dtype;
  int64_t stride_token, stride_head;
} clattn_ragged_kv;

typedef struct clattn_extend_plan_s* clattn_extend_plan;
/* csr->qo_indptr is required. */
CLATTN_API clattn_status clattn_extend_plan_csr(clattn_context ctx, const clattn_csr* csr, const clattn_paged_kv* cache,
                                                const clattn_extend_options* opt, clattn_extend_plan* out);
/* table->cu_seqlens_q is required. */
CLATTN_API clattn_status clattn_extend_plan_page_table(clattn_context ctx, const clattn_page_table* table,
                                                       const clattn_paged_kv* cache, const clattn_extend_options* opt,
                                                       clattn_extend_plan* out);
/* qo_indptr [B+1] over q rows, kv_indptr [B+1] over K/V token rows. */
CLATTN_API clattn_status clattn_prefill_plan_ragged(clattn_context ctx, int batch_size, const int32_t* qo_indptr,
                                                    const int32_t* kv_indptr, const clattn_ragged_kv* kv,
                                                    const clattn_extend_options* opt, clattn_extend_plan* out);
/* What the run needs; each output nullable. */
typedef struct clattn_extend_plan_info {
  int64_t num_tokens;       /* query rows */
  int64_t page_ids_needed;  /* int32 entries of page_ids (0 for ragged) */
  int64_t mask_bytes_needed;
  int num_tiles;
  char variant[32];
  int64_t workspace_bytes;  /* clattn_extend_buffers.workspace size, 0 = none (nv_wgmma TMA: 256) */
} clattn_extend_plan_info;
CLATTN_API clattn_status clattn_extend_plan_info_get(clattn_extend_plan plan, clattn_extend_plan_info* out);
CLATTN_API void clattn_extend_plan_release(clattn_extend_plan plan);

typedef struct clattn_extend_buffers {
  cl_mem q;            /* [num_tokens, Hq, D] */
  cl_mem k, v;         /* paged: the caches; ragged: K/V rows */
  cl_mem page_ids;     /* paged only: int32 kv_indices or page_table */
  cl_mem o, lse;       /* lse nullable */
  cl_mem sinks;        /* [Hq] f32, nullable */
  cl_mem custom_mask;  /* required iff the plan has a mask */
  float k_scale, v_scale;
  cl_mem workspace;    /* >= info.workspace_bytes when nonzero (per-run state of the run) */
  cl_mem k_scale_cache, v_scale_cache;  /* int8 / int4 caches (paged): the row / group scales; NULL otherwise */
  cl_mem k_head_scales, v_head_scales;  /* optional [Hkv] f32 per-head scales (x k_scale / v_scale); both or NULL */
} clattn_extend_buffers;
CLATTN_API clattn_status clattn_extend_run(clattn_context ctx, clattn_extend_plan plan, const clattn_extend_buffers* b,
                                           const clattn_enqueue* e);

/* shared: ONE request's CSR (the common prefix, qo_indptr ignored); unique: per-request
 * suffix CSR with qo_indptr. Window and custom mask are rejected. */
typedef struct clattn_cascade_plan_s* clattn_cascade_plan;
CLATTN_API clattn_status clattn_cascade_plan_create(clattn_context ctx, const clattn_csr* shared,
                                                    const clattn_csr* unique, const clattn_paged_kv* cache,
                                                    const clattn_extend_options* opt, clattn_cascade_plan* out);
/* Scratch the run needs: tmp_o bytes ([T, Hq, D] o_dtype), each tmp_lse buffer's bytes
 * ([T, Hq] f32). Outputs nullable. */
CLATTN_API clattn_status clattn_cascade_tmp_bytes(clattn_cascade_plan plan, int64_t* tmp_o_bytes,
                                                  int64_t* tmp_lse_bytes);
/* clattn_cascade_buffers.workspace bytes (0 = none needed). */
CLATTN_API clattn_status clattn_cascade_workspace_bytes(clattn_cascade_plan plan, int64_t* out);
CLATTN_API void clattn_cascade_plan_release(clattn_cascade_plan plan);
typedef struct clattn_cascade_buffers {
  cl_mem q, k_cache, v_cache;
  cl_mem shared_page_ids, unique_page_ids;
  cl_mem o, lse;                                /* lse nullable */
  cl_mem tmp_o, tmp_lse_shared, tmp_lse_unique; /* tmp_lse_unique only when lse is NULL */
  cl_mem sinks;
  float k_scale, v_scale;
  cl_mem workspace;                             /* >= clattn_cascade_workspace_bytes when nonzero */
  cl_mem k_scale_cache, v_scale_cache;          /* int8 / int4 caches: the row / group scales; NULL otherwise */
  cl_mem k_head_scales, v_head_scales;          /* optional [Hkv] f32 per-head scales; both or NULL */
} clattn_cascade_buffers;
CLATTN_API clattn_status clattn_cascade_run(clattn_context ctx, clattn_cascade_plan plan,
                                            const clattn_cascade_buffers* b, const clattn_enqueue* e);

/* ---------------------------------------------------------------- MLA (see clattn/mla.hpp)
 * DeepSeek absorbed form: q_nope [T, H, 512], q_pe [T, H, 64], latent cache ckv [pages, P,
 * 512] + kpe [pages, P, 64] or one 576-wide buffer (single_buffer), o [T, H, 512]. */
typedef struct clattn_mla_cache {
  int num_pages, page_size;
  int dtype;                    /* f16 bf16 fp8_e4m3 int8 (7) (f32 where local memory allows) */
  int single_buffer;
  int64_t stride_page, stride_token;                        /* elements, 0 = contiguous */
  int64_t kpe_stride_page, kpe_stride_token, kpe_offset;
  /* int8: the scale cache's dtype (0 f32, 1 f16) and strides (elements; 0 = [pages, P, 2]:
   * per token the pair ckv scale, kpe scale). Zero-initialised: f32, contiguous. */
  int scale_dtype;
  int64_t scale_stride_page, scale_stride_token;
} clattn_mla_cache;
/* Bytes the ckv (or single) and kpe buffers must hold; outputs nullable. */
CLATTN_API clattn_status clattn_mla_cache_bytes(const clattn_mla_cache* cache, int64_t* ckv_bytes, int64_t* kpe_bytes);
/* Bytes the int8 scale cache must hold (0 for other dtypes). */
CLATTN_API clattn_status clattn_mla_scale_cache_bytes(const clattn_mla_cache* cache, int64_t* out);

typedef struct clattn_mla_options {
  int num_heads;
  int q_dtype, o_dtype;  /* f32 f16 bf16 */
  float sm_scale;        /* required (> 0) */
  int causal;            /* extend only; 1 (default) */
  int max_splits;        /* decode: 0 = planner's choice, 1 = never split */
  int validate;          /* 1 (default) */
  const char* params;    /* overrides "NAME=int,...", NULL = none */
} clattn_mla_options;
CLATTN_API void clattn_mla_options_init(clattn_mla_options* opt);

typedef struct clattn_mla_plan_s* clattn_mla_plan;
CLATTN_API clattn_status clattn_mla_decode_plan_csr(clattn_context ctx, const clattn_csr* csr,
                                                    const clattn_mla_cache* cache, const clattn_mla_options* opt,
                                                    clattn_mla_plan* out);
CLATTN_API clattn_status clattn_mla_decode_plan_page_table(clattn_context ctx, const clattn_page_table* table,
                                                           const clattn_mla_cache* cache,
                                                           const clattn_mla_options* opt, clattn_mla_plan* out);
/* Extend: csr->qo_indptr / table->cu_seqlens_q required. */
CLATTN_API clattn_status clattn_mla_extend_plan_csr(clattn_context ctx, const clattn_csr* csr,
                                                    const clattn_mla_cache* cache, const clattn_mla_options* opt,
                                                    clattn_mla_plan* out);
CLATTN_API clattn_status clattn_mla_extend_plan_page_table(clattn_context ctx, const clattn_page_table* table,
                                                           const clattn_mla_cache* cache,
                                                           const clattn_mla_options* opt, clattn_mla_plan* out);
CLATTN_API clattn_status clattn_mla_plan_workspace_bytes(clattn_mla_plan plan, int64_t* out);
CLATTN_API void clattn_mla_plan_release(clattn_mla_plan plan);

typedef struct clattn_mla_buffers {
  cl_mem q_nope, q_pe;
  cl_mem ckv, kpe;      /* kpe ignored with single_buffer */
  cl_mem page_ids;      /* int32 kv_indices (CSR plan) or page_table */
  cl_mem o, lse;        /* lse nullable */
  cl_mem workspace;     /* >= workspace bytes when nonzero */
  float kv_scale;       /* 1 with int8 */
  cl_mem scale_cache;   /* int8 latent: the token scale pairs; NULL otherwise */
} clattn_mla_buffers;
CLATTN_API clattn_status clattn_mla_run(clattn_context ctx, clattn_mla_plan plan, const clattn_mla_buffers* b,
                                        const clattn_enqueue* e);

typedef struct clattn_append_latent_args {
  cl_mem ckv, kpe;                   /* [num_tokens, 512], [num_tokens, 64] */
  int src_dtype;                     /* f32 f16 bf16 */
  int64_t src_stride_ckv, src_stride_kpe;  /* elements; 0 = 512 / 64 */
  cl_mem slot_mapping;
  int slot_dtype;                    /* 5 i32 or 6 i64 */
  int64_t num_tokens;
  const void* slot_mapping_host;     /* optional host copy, validated before enqueue */
  cl_mem ckv_cache, kpe_cache;       /* kpe_cache ignored with single_buffer */
  clattn_mla_cache cache;
  float scale;                       /* 1 with int8 */
  cl_mem scale_cache;                /* int8 latent: the token scale pairs written; NULL otherwise */
} clattn_append_latent_args;
CLATTN_API clattn_status clattn_append_latent(clattn_context ctx, const clattn_append_latent_args* a,
                                              const clattn_enqueue* e);

/* y[t, h, :out] = alpha * x[t, h, :in] x W[h] (W[h] [in, out], or [out, in] when
 * w_transposed); f32 or f16 (CLBlast). */
typedef struct clattn_absorb_args {
  int num_tokens, num_heads, in_dim, out_dim;
  int dtype;
  cl_mem x, w, y;
  int64_t x_row_stride, y_row_stride;  /* elements; 0 = H*in / H*out */
  int w_transposed;
  float alpha;
} clattn_absorb_args;
CLATTN_API void clattn_absorb_args_init(clattn_absorb_args* a);
CLATTN_API clattn_status clattn_mla_absorb(clattn_context ctx, const clattn_absorb_args* a, const clattn_enqueue* e);
/* Blocking: builds CLBlast's GEMMs for these dtypes. *available (nullable) = 0 when
 * CLBlast is absent or unusable (not an error). */
CLATTN_API clattn_status clattn_mla_absorb_warmup(clattn_context ctx, int f32, int f16, int* available);

/* ---------------------------------------------------------------- HSA (see clattn/sparse.hpp)
 * Hierarchical sparse attention decode: the last slot of every page holds the page's
 * landmark key; selection scores each request's completed pages before the window by
 * q . K_lmk and keeps the topk highest per selection list (strategy group: one list per KV
 * head, its query heads' rows summed; head: one per query head), written in candidate
 * order and padded with -1 / -inf: selected_page_ids / selected_scores [B, H_sel, topk]
 * (H_sel = Hkv or Hq). Decode attends each query head to the union of the window (fused)
 * and the keys of its list's pages, each key once. Exact semantics: clattn/sparse.hpp. */
typedef enum clattn_hsa_strategy { CLATTN_HSA_GROUP = 0, CLATTN_HSA_HEAD = 1 } clattn_hsa_strategy;

typedef struct clattn_hsa_options {
  int num_qo_heads;       /* Hq, a multiple of the cache's num_kv_heads */
  int topk;               /* pages per selection list, >= 1 */
  int strategy;           /* clattn_hsa_strategy */
  int window_size;        /* W >= 0 last tokens attended densely, 0 = none */
  int num_candidates;     /* C > 0: select scores explicit candidates [B, C]; 0 = the requests' pages */
  int fuse_window;        /* 1 (default): decode attends window + selection, merged by their LSEs;
                             0: the selection only (keys before the window), the caller merges */
  int q_dtype, o_dtype;   /* f32 f16 bf16 */
  float sm_scale;         /* 0: 1/sqrt(head_dim); selection and attention */
  float logits_soft_cap;  /* 0: off (attention scores only) */
  int max_splits;         /* decode parts per request, 0 = planner's choice */
  int validate;           /* 1 = validate metadata (default) */
  const char* params;     /* overrides "NAME=int,..." (decode's and SELECT_WG), NULL = none */
} clattn_hsa_options;
CLATTN_API void clattn_hsa_options_init(clattn_hsa_options* opt);

typedef struct clattn_hsa_plan_s* clattn_hsa_plan;
/* CSR without kv_start_offset (the window is HSA's own), or a page table. */
CLATTN_API clattn_status clattn_hsa_plan_csr(clattn_context ctx, const clattn_csr* csr, const clattn_paged_kv* cache,
                                             const clattn_hsa_options* opt, clattn_hsa_plan* out);
CLATTN_API clattn_status clattn_hsa_plan_page_table(clattn_context ctx, const clattn_page_table* table,
                                                    const clattn_paged_kv* cache, const clattn_hsa_options* opt,
                                                    clattn_hsa_plan* out);
typedef struct clattn_hsa_plan_info {
  int batch_size, num_qo_heads, num_kv_heads, head_dim, page_size;
  int topk, num_sel_heads;    /* H_sel: rows of selected_page_ids per request */
  int strategy, window_size, fuse_window;
  int max_candidates;         /* most candidate pages of one request (or C) */
  int num_work, num_partials, num_merges;
  int64_t page_ids_needed;    /* int32 entries of page_ids */
  int64_t workspace_bytes;    /* clattn_hsa_buffers.workspace size */
  char select_variant[32], decode_variant[32];
} clattn_hsa_plan_info;
CLATTN_API clattn_status clattn_hsa_plan_info_get(clattn_hsa_plan plan, clattn_hsa_plan_info* out);
CLATTN_API clattn_status clattn_hsa_plan_workspace_bytes(clattn_hsa_plan plan, int64_t* out);
/* Candidate pages per request, [batch_size] into out (capacity entries). */
CLATTN_API clattn_status clattn_hsa_plan_num_candidates(clattn_hsa_plan plan, int32_t* out, int64_t capacity);
CLATTN_API void clattn_hsa_plan_release(clattn_hsa_plan plan);

typedef struct clattn_hsa_buffers {
  cl_mem q;                  /* [B, Hq, D] q_dtype */
  cl_mem k_cache, v_cache;   /* paged; v_cache unread by select */
  cl_mem page_ids;           /* int32 kv_indices (CSR plan) or page_table */
  cl_mem selected_page_ids;  /* [B, H_sel, topk] int32: select's output, decode's input */
  cl_mem selected_scores;    /* [B, H_sel, topk] f32, nullable */
  cl_mem candidates;         /* [B, C] int32, plans with num_candidates = C > 0 only */
  cl_mem candidate_mask;     /* [B, C] uint8, nullable */
  cl_mem o, lse;             /* [B, Hq, D] o_dtype, [B, Hq] f32 natural log (nullable) */
  cl_mem sinks;              /* [Hq] f32, nullable */
  cl_mem workspace;          /* >= workspace bytes */
  float k_scale, v_scale;    /* dequantisation scales, > 0 (1 = none) */
} clattn_hsa_buffers;
/* Selection only (writes selected_page_ids, selected_scores). */
CLATTN_API clattn_status clattn_hsa_select(clattn_context ctx, clattn_hsa_plan plan, const clattn_hsa_buffers* b,
                                           const clattn_enqueue* e);
/* Sparse decode over selected_page_ids (writes o, lse). */
CLATTN_API clattn_status clattn_hsa_decode(clattn_context ctx, clattn_hsa_plan plan, const clattn_hsa_buffers* b,
                                           const clattn_enqueue* e);
/* Both, back to back on one queue. */
CLATTN_API clattn_status clattn_hsa_run(clattn_context ctx, clattn_hsa_plan plan, const clattn_hsa_buffers* b,
                                        const clattn_enqueue* e);

/* ---------------------------------------------------------------- DSA (see clattn/sparse.hpp)
 * DeepSeek sparse attention for MLA. Indexer: per request (one query row)
 *   score(b, t) = sum_h weights[b, h] * relu(q[b, h] . k[t])   for positions t < L_b
 * (the caller folds its scales into weights), then the topk highest positions (ties: the
 * lower position) in ascending position order, padded with -1 / -inf: indices [B, topk]
 * int32 logical positions, scores [B, topk] f32. The key cache is a clattn_paged_kv of one
 * head (num_kv_heads 1, head_dim Di). Sparse MLA decode: request b's query row attends only
 * to the latent rows at positions indices[b, 0 .. topk) (-1 and positions outside [0, L_b)
 * add nothing; a position listed twice counts twice); the rest is clattn_mla_run's decode. */
#define CLATTN_DSA_MAX_TOPK 65536 /* most index entries per request (clattn::kDsaMaxTopk) */

typedef struct clattn_dsa_index_options {
  int num_index_heads;  /* Hi (64 in DeepSeek-V3.2) */
  int topk;             /* 1..CLATTN_DSA_MAX_TOPK (2048 in DeepSeek-V3.2) */
  int q_dtype;          /* f32 f16 bf16 */
  int validate;         /* 1 = validate metadata (default) */
  const char* params;   /* overrides "NAME=int,..." (TT TM TH HP DK TOPK_WG), NULL = none */
} clattn_dsa_index_options;
CLATTN_API void clattn_dsa_index_options_init(clattn_dsa_index_options* opt);

typedef struct clattn_dsa_index_plan_s* clattn_dsa_index_plan;
/* CSR without kv_start_offset, or a page table; index_cache: one head. */
CLATTN_API clattn_status clattn_dsa_index_plan_csr(clattn_context ctx, const clattn_csr* csr,
                                                   const clattn_paged_kv* index_cache,
                                                   const clattn_dsa_index_options* opt, clattn_dsa_index_plan* out);
CLATTN_API clattn_status clattn_dsa_index_plan_page_table(clattn_context ctx, const clattn_page_table* table,
                                                          const clattn_paged_kv* index_cache,
                                                          const clattn_dsa_index_options* opt,
                                                          clattn_dsa_index_plan* out);
typedef struct clattn_dsa_index_plan_info {
  int batch_size, num_index_heads, index_dim, page_size, topk;
  int page_table;           /* 1: page ids from a page table, 0: CSR kv_indices */
  int max_kv_len;           /* longest request */
  int64_t page_ids_needed;  /* int32 entries of page_ids */
  int64_t workspace_bytes;  /* clattn_dsa_index_buffers.workspace size */
  char variant[32];
} clattn_dsa_index_plan_info;
CLATTN_API clattn_status clattn_dsa_index_plan_info_get(clattn_dsa_index_plan plan, clattn_dsa_index_plan_info* out);
CLATTN_API clattn_status clattn_dsa_index_plan_workspace_bytes(clattn_dsa_index_plan plan, int64_t* out);
CLATTN_API void clattn_dsa_index_plan_release(clattn_dsa_index_plan plan);

typedef struct clattn_dsa_index_buffers {
  cl_mem q;          /* [B, Hi, Di] q_dtype */
  cl_mem weights;    /* [B, Hi] f32 */
  cl_mem k_cache;    /* the paged index key cache */
  cl_mem page_ids;   /* int32 kv_indices (CSR plan) or page_table */
  cl_mem indices;    /* [B, topk] int32 out */
  cl_mem scores;     /* [B, topk] f32 out, nullable */
  cl_mem workspace;  /* >= workspace bytes */
  float k_scale;     /* dequantisation scale of an fp8 cache, > 0 (1 = none) */
} clattn_dsa_index_buffers;
/* Scores, then the top-k: two kernels on one queue, nothing allocated. */
CLATTN_API clattn_status clattn_dsa_index_run(clattn_context ctx, clattn_dsa_index_plan plan,
                                              const clattn_dsa_index_buffers* b, const clattn_enqueue* e);

/* Sparse MLA decode plans: an MLA plan (clattn_mla_plan_workspace_bytes, _release apply)
 * that only clattn_mla_sparse_run runs (clattn_mla_run refuses it). csr->qo_indptr /
 * table->cu_seqlens_q: NULL or all ones. */
CLATTN_API clattn_status clattn_mla_sparse_decode_plan_csr(clattn_context ctx, const clattn_csr* csr,
                                                           const clattn_mla_cache* cache,
                                                           const clattn_mla_options* opt, int topk,
                                                           clattn_mla_plan* out);
CLATTN_API clattn_status clattn_mla_sparse_decode_plan_page_table(clattn_context ctx, const clattn_page_table* table,
                                                                  const clattn_mla_cache* cache,
                                                                  const clattn_mla_options* opt, int topk,
                                                                  clattn_mla_plan* out);
/* clattn_mla_run with indices [B, topk] int32 (device; e.g. clattn_dsa_index_run's output). */
CLATTN_API clattn_status clattn_mla_sparse_run(clattn_context ctx, clattn_mla_plan plan, const clattn_mla_buffers* b,
                                               cl_mem indices, const clattn_enqueue* e);

/* ---------------------------------------------------------------- linear attention (see clattn/linear.hpp)
 * Gated DeltaNet and simple gated linear attention over a pooled state [slots, Hv, Dk, Dv].
 * state_indices / cu_seqlens come twice: host arrays (validation only) and device int32
 * copies (read by the kernels). `e`: the queue, plus a marker for wait list / event
 * (the queue must be in-order for the wait list to hold). */
typedef struct clattn_linear_config {
  int num_qk_heads, num_v_heads;
  int head_dim_k, head_dim_v;   /* 64, 128 or 256 */
  int dtype;                    /* q, k, v, o: f32 f16 bf16 */
  float scale;                  /* 0 = 1/sqrt(Dk) */
  int l2norm_qk;                /* GDN only */
  int beta_is_logits;           /* GDN only */
  int constant_decay;           /* g is [Hv] */
} clattn_linear_config;
CLATTN_API void clattn_linear_config_init(clattn_linear_config* cfg);

typedef struct clattn_linear_tensors {
  cl_mem q, k, v, g, beta, o;   /* beta: GDN only */
} clattn_linear_tensors;

typedef struct clattn_linear_state_pool {
  cl_mem state;
  int num_slots;
  int dtype;                    /* f32 f16 bf16 */
} clattn_linear_state_pool;

typedef struct clattn_linear_batch {
  int batch_size;
  const int32_t* state_indices;  /* [B] host, -1 = no state */
  cl_mem state_indices_dev;      /* [B] device */
  const int32_t* cu_seqlens;     /* [B+1] host, prefill only */
  cl_mem cu_seqlens_dev;         /* [B+1] device, prefill only */
  int num_tokens;                /* prefill only */
} clattn_linear_batch;

CLATTN_API clattn_status clattn_gdn_decode(clattn_context ctx, const clattn_linear_config* cfg,
                                           const clattn_linear_tensors* t, const clattn_linear_state_pool* pool,
                                           const clattn_linear_batch* batch, const clattn_enqueue* e);
CLATTN_API clattn_status clattn_gdn_prefill(clattn_context ctx, const clattn_linear_config* cfg,
                                            const clattn_linear_tensors* t, const clattn_linear_state_pool* pool,
                                            const clattn_linear_batch* batch, const clattn_enqueue* e);
CLATTN_API clattn_status clattn_gla_decode(clattn_context ctx, const clattn_linear_config* cfg,
                                           const clattn_linear_tensors* t, const clattn_linear_state_pool* pool,
                                           const clattn_linear_batch* batch, const clattn_enqueue* e);
CLATTN_API clattn_status clattn_gla_prefill(clattn_context ctx, const clattn_linear_config* cfg,
                                            const clattn_linear_tensors* t, const clattn_linear_state_pool* pool,
                                            const clattn_linear_batch* batch, const clattn_enqueue* e);
/* Zero n slots / copy slot src to dst (slot size from cfg's Hv, Dk, Dv). */
CLATTN_API clattn_status clattn_linear_zero_slots(clattn_context ctx, const clattn_linear_config* cfg,
                                                  const clattn_linear_state_pool* pool, const int32_t* slots, int n,
                                                  const clattn_enqueue* e);
CLATTN_API clattn_status clattn_linear_copy_slot(clattn_context ctx, const clattn_linear_config* cfg,
                                                 const clattn_linear_state_pool* pool, int src, int dst,
                                                 const clattn_enqueue* e);

/* ---- engine backend (see clattn/backend.hpp, docs/backend.md) ----
 * SGLang-shaped attention backends over a KV pool: describe the model's layers once, then
 * per step clattn_backend_init_forward_metadata and per layer clattn_backend_forward. */
typedef enum clattn_layer_kind { CLATTN_LAYER_MHA = 0, CLATTN_LAYER_MLA = 1, CLATTN_LAYER_LINEAR = 2 } clattn_layer_kind;
typedef enum clattn_forward_mode { CLATTN_MODE_DECODE = 0, CLATTN_MODE_EXTEND = 1, CLATTN_MODE_MIXED = 2 } clattn_forward_mode;

typedef struct clattn_layer_spec {
  int layer_id;                 /* index in the KV pool, 0 .. num_layers-1 */
  int kind;                     /* clattn_layer_kind */
  int num_qo_heads, num_kv_heads, head_dim, head_dim_v;  /* MLA: num_qo_heads = H only */
  float sm_scale;               /* 0 = 1/sqrt(D) for MHA; required for MLA */
  float logits_soft_cap;        /* MHA */
  int window_left;              /* MHA, -1 = none */
  cl_mem sinks;                 /* MHA, [Hq] f32, nullable */
  int linear_kind;              /* 0 Gated DeltaNet, 1 GLA */
  clattn_linear_config linear;  /* linear layers (dtype comes from the backend's act_dtype) */
} clattn_layer_spec;
CLATTN_API void clattn_layer_spec_init(clattn_layer_spec* l);

typedef struct clattn_kv_pool_config {
  int num_pages, page_size;     /* full-attention / MLA layers */
  int kv_dtype, layout;         /* cache dtype (7 int8; 8 int4: MHA layers only), NHD/HND (MHA) */
  float k_scale, v_scale;       /* fp8: loaded = stored * scale; int8 / int4: 1 */
  int num_state_slots, state_dtype;  /* linear layers */
  int scale_dtype;              /* int8 / int4: the scale caches' dtype, 0 f32 (init), 1 f16 */
  int quant_group;              /* int4 (kv_dtype 8): head-dim elements per [scale, zero] pair,
                                 * 32, 64 (init) or 128, dividing every MHA layer's head_dim */
} clattn_kv_pool_config;
CLATTN_API void clattn_kv_pool_config_init(clattn_kv_pool_config* c);

typedef struct clattn_kv_pool_s* clattn_kv_pool;
/* allocate != 0: the pool allocates every layer's buffers; 0: the engine supplies them
 * with clattn_kv_pool_set_layer (never released by clattn). */
CLATTN_API clattn_status clattn_kv_pool_create(clattn_context ctx, const clattn_kv_pool_config* cfg,
                                               const clattn_layer_spec* layers, int num_layers, int allocate,
                                               clattn_kv_pool* out);
/* MHA: k and v caches; MLA: ckv and kpe caches; linear: the state pool in `k` (v unused). */
CLATTN_API clattn_status clattn_kv_pool_set_layer(clattn_kv_pool pool, int layer_id, cl_mem k, cl_mem v);
CLATTN_API clattn_status clattn_kv_pool_get_layer(clattn_kv_pool pool, int layer_id, cl_mem* k, cl_mem* v);
/* MHA layers of a format with scale caches (int8, int4): the K and V scale caches (clattn_paged_kv's
 * layout; set: engine-owned ones beside clattn_kv_pool_set_layer's caches, never released).
 * MLA layers of an int8 pool: k_scale_cache is the latent's scale cache (a (ckv, kpe) pair per
 * token, clattn_mla_cache's), v_scale_cache NULL. */
CLATTN_API clattn_status clattn_kv_pool_set_layer_scales(clattn_kv_pool pool, int layer_id, cl_mem k_scale_cache,
                                                         cl_mem v_scale_cache);
CLATTN_API clattn_status clattn_kv_pool_get_layer_scales(clattn_kv_pool pool, int layer_id, cl_mem* k_scale_cache,
                                                         cl_mem* v_scale_cache);
CLATTN_API clattn_status clattn_kv_pool_bytes(clattn_kv_pool pool, int64_t* allocated, int64_t* per_page,
                                              int64_t* per_state_slot);
/* Linear layers: fork (copy) or zero request states in every linear layer (enqueue only). */
CLATTN_API clattn_status clattn_kv_pool_copy_state(clattn_context ctx, clattn_kv_pool pool, int src_slot, int dst_slot);
CLATTN_API clattn_status clattn_kv_pool_zero_states(clattn_context ctx, clattn_kv_pool pool, const int32_t* slots, int n);
CLATTN_API void clattn_kv_pool_release(clattn_kv_pool pool);

typedef struct clattn_backend_config {
  int act_dtype;                /* q/k/v/o: f32 f16 bf16 */
  int deterministic, max_splits;
  cl_command_queue queue;       /* NULL = the context's */
  const char* prefill_backend;  /* "hybrid": MHA backend for extend/mixed (NULL = "paged") */
  const char* decode_backend;   /* "hybrid": MHA backend for decode (NULL = "paged"; "hsa" allowed) */
  /* "hsa" (and "hybrid" decoding with "hsa"): see HsaBackendConfig in clattn/backend.hpp. */
  int hsa_topk;                 /* pages per selection list, >= 1 */
  int hsa_strategy;             /* 0 group (per KV head), 1 head (per query head) */
  int hsa_window_size;          /* last W tokens attended densely, 0 = none */
  int hsa_fuse_window;          /* 1 (init): window and pages in one call; 0: merged after */
  const int32_t* hsa_layers;    /* layer ids using HSA; NULL / 0 = every layer without a window */
  int num_hsa_layers;
  int split_tokens;             /* deterministic / replayed decode split tile, 0 = DET_CHUNK */
} clattn_backend_config;
CLATTN_API void clattn_backend_config_init(clattn_backend_config* c);

typedef struct clattn_backend_s* clattn_backend;
/* name: "paged", "paged_table", "mla", "linear", "hybrid" or "hsa". The pool must outlive the
 * backend. Builds every kernel the layers need; a device that cannot run a layer gives
 * CLATTN_UNSUPPORTED naming the layer. */
CLATTN_API clattn_status clattn_backend_create(clattn_context ctx, const char* name, clattn_kv_pool pool,
                                               const clattn_layer_spec* layers, int num_layers,
                                               const clattn_backend_config* cfg, clattn_backend* out);
CLATTN_API const char* clattn_backend_names(void);  /* comma-separated */

typedef struct clattn_forward_batch {
  int mode;                          /* clattn_forward_mode */
  int batch_size;
  const int32_t* req_to_token;       /* [pool_size, max_ctx] slots */
  int pool_size, max_ctx;
  const int32_t* req_pool_indices;   /* [B] */
  const int32_t* seq_lens;           /* [B], after this step */
  const int32_t* prefix_lens;        /* [B], extend/mixed */
  const int32_t* extend_lens;        /* [B], extend/mixed */
  const int64_t* out_cache_loc;      /* [num_tokens] or NULL (from req_to_token) */
  const int32_t* mask_indptr;        /* [B+1] bytes, tree mask, or NULL */
  cl_mem custom_mask;                /* packed mask bits, or NULL */
  const int32_t* state_slots;        /* [B] linear state slots, NULL = req_pool_indices */
} clattn_forward_batch;
CLATTN_API clattn_status clattn_backend_init_forward_metadata(clattn_backend b, const clattn_forward_batch* batch);

typedef struct clattn_layer_io {
  cl_mem q, q_pe, k, v, o;           /* MLA: q = q_nope, k = new ckv rows, v = new kpe rows */
  cl_mem g, beta;                    /* linear */
  cl_mem lse;                        /* optional */
} clattn_layer_io;
CLATTN_API clattn_status clattn_backend_forward(clattn_backend b, int layer_id, const clattn_layer_io* io,
                                                int save_kv_cache);
CLATTN_API clattn_status clattn_backend_scratch_bytes(clattn_backend b, int64_t* out);
CLATTN_API void clattn_backend_release(clattn_backend b);

/* Capture and replay of decode steps ("paged", "paged_table"; AttentionBackend in
 * clattn/backend.hpp, docs/replay.md). buckets NULL / 0: 1 2 4 8, then multiples of 8 up to
 * max_bs. req_to_token: the engine's device table [pool_size, max_ctx] int32. */
typedef struct clattn_replay_config {
  int max_bs;
  const int32_t* buckets;
  int num_buckets;
  cl_mem req_to_token;
  int pool_size, max_ctx;
  int command_buffer;           /* 1 (init): cl_khr_command_buffer where the device has it */
} clattn_replay_config;
CLATTN_API void clattn_replay_config_init(clattn_replay_config* c);
CLATTN_API clattn_status clattn_backend_init_replay_state(clattn_backend b, const clattn_replay_config* cfg);
/* forward() calls between these two are recorded into the bucket (LayerIO buffers fixed). */
CLATTN_API clattn_status clattn_backend_begin_capture(clattn_backend b, int bucket);
CLATTN_API clattn_status clattn_backend_end_capture(clattn_backend b);
/* The bucket a batch of bs runs in (0: none). */
CLATTN_API clattn_status clattn_backend_replay_bucket(clattn_backend b, int bs, int* out);
/* Host arrays [bs], or both NULL when the engine wrote clattn_backend_replay_inputs itself. */
CLATTN_API clattn_status clattn_backend_replay(clattn_backend b, int bs, const int32_t* req_pool_indices,
                                               const int32_t* seq_lens);
CLATTN_API clattn_status clattn_backend_replay_inputs(clattn_backend b, cl_mem* req_pool_indices, cl_mem* seq_lens);
/* A captured bucket: kernels recorded and whether a replay is one command buffer. */
CLATTN_API clattn_status clattn_backend_replay_info(clattn_backend b, int bucket, int* launches, int* command_buffer);

/* Op-level capture and replay (clattn/capture.hpp, docs/replay.md): between begin and end,
 * the op calls of this thread on the capture's queue (NULL = the context's) are recorded;
 * replay enqueues them again (one command buffer where the device has cl_khr_command_buffer
 * and command_buffer != 0). clattn_capture_kernel records the engine's own kernel (its
 * arguments as set now) into whatever capture is active on the queue on this thread,
 * including a backend's between clattn_backend_begin_capture and _end_capture. */
typedef struct clattn_capture_s* clattn_capture;
CLATTN_API clattn_status clattn_capture_create(clattn_context ctx, cl_command_queue queue, int command_buffer,
                                               clattn_capture* out);
CLATTN_API clattn_status clattn_capture_begin(clattn_capture c);
CLATTN_API clattn_status clattn_capture_end(clattn_capture c);
CLATTN_API clattn_status clattn_capture_replay(clattn_capture c, const clattn_enqueue* e);  /* e may be NULL */
CLATTN_API clattn_status clattn_capture_info(clattn_capture c, int* launches, int* command_buffer);
CLATTN_API void clattn_capture_release(clattn_capture c);
CLATTN_API clattn_status clattn_capture_kernel(cl_command_queue queue, cl_kernel kernel, cl_uint work_dim,
                                               const size_t* global_size, const size_t* local_size);

/* Device buffers clattn has created in this process (steady-state steps create none). */
CLATTN_API unsigned long long clattn_device_allocation_count(void);


#ifdef __cplusplus
}
#endif
#endif

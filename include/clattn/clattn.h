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
CLATTN_API void clattn_context_release(clattn_context ctx);
CLATTN_API clattn_status clattn_context_queue(clattn_context ctx, cl_command_queue* out);

/* Device profile as a JSON document (the same keys as clattn-probe --json's "profile").
 * Writes at most `capacity` bytes including the NUL; `*needed` gets the full size. */
CLATTN_API clattn_status clattn_device_profile_json(clattn_context ctx, char* buf, size_t capacity, size_t* needed);
CLATTN_API clattn_status clattn_self_check(clattn_context ctx);


/* ----------------------------------------------------------------- ops (see clattn/ops.hpp)
 * dtype codes match clattn::DType: 0 f32, 1 f16, 2 bf16, 3 fp8 e4m3, 4 fp8 e5m2, 5 i32, 6 i64.
 * layout: 0 NHD [pages, P, Hkv, D], 1 HND [pages, Hkv, P, D]. Strides in elements, 0 = the
 * layout's contiguous stride. Every op only enqueues on `queue` (NULL = the context's
 * queue) after `num_wait` events; `event` (nullable) receives its last command. */
typedef struct clattn_paged_kv {
  int num_pages, page_size, num_kv_heads, head_dim;
  int layout, dtype;
  int64_t stride_page, stride_token, stride_head;
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
} clattn_csr;

/* FlashAttention/vLLM page table on the host. */
typedef struct clattn_page_table {
  int batch_size, page_size, max_pages;
  const int32_t* page_table; /* [B, max_pages] */
  const int32_t* seq_lens;   /* [B] */
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
} clattn_append_kv_args;
CLATTN_API clattn_status clattn_append_kv(clattn_context ctx, const clattn_append_kv_args* a, const clattn_enqueue* e);

/* (v_a, s_a) + (v_b, s_b) -> (v_out, s_out); s_out nullable; in place allowed. */
CLATTN_API clattn_status clattn_merge_state(clattn_context ctx, cl_mem v_a, cl_mem s_a, cl_mem v_b, cl_mem s_b,
                                            cl_mem v_out, cl_mem s_out, int num_tokens, int num_heads, int head_dim,
                                            int dtype, const clattn_enqueue* e);
/* v [T, n, H, D], s [T, n, H] -> v_out [T, H, D], s_out [T, H] (nullable). */
CLATTN_API clattn_status clattn_merge_states(clattn_context ctx, cl_mem v, cl_mem s, cl_mem v_out, cl_mem s_out,
                                             int num_tokens, int num_states, int num_heads, int head_dim, int dtype,
                                             const clattn_enqueue* e);

#ifdef __cplusplus
}
#endif
#endif

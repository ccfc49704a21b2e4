// Paged-KV metadata builders (backends/metadata/device.cpp enqueues them; the host
// builders in backends/metadata/builders.cpp are the specification: output must match
// them element for element on every valid batch).
//
// One work-group per request. A request's output offset (its kv_indptr / qo_indptr /
// cu_seqlens entry) is the sum over the requests before it, which each work-group
// recomputes from the engine tables: O(B / local size) loads plus a local-memory tree
// sum, so one launch builds everything and no inter-group scan is needed (B is at most a
// few thousand). The local size must be a power of two (the host rounds it down).
//
// Invalid requests (pool index outside [0, pool_size), seq_len outside [0, max_ctx]) are
// treated as empty so nothing is read out of bounds; the host validates before trusting.

typedef struct {
  long base;   // offset of the request's req_to_token row
  int seq;     // KV length
  int start;   // first kept key position (0 without a window)
  int qo;      // new tokens: extend_len (extend), 1 (decode)
} ReqInfo;

inline ReqInfo req_info(__global const int* req_pool_indices, __global const int* seq_lens,
                        __global const int* extend_lens, int is_extend, int pool_size, int max_ctx,
                        int window_left, int i) {
  ReqInfo r;
  int row = req_pool_indices[i];
  int seq = seq_lens[i];
  if (row < 0 || row >= pool_size || seq < 0 || seq > max_ctx) {
    row = 0;
    seq = 0;
  }
  int qo = 1;
  int first_query = seq - 1;  // decode: the one query sits at seq - 1
  if (is_extend) {
    qo = clamp(extend_lens[i], 0, seq);
    first_query = seq - qo;   // = prefix_len
  }
  int start = 0;
  if (window_left >= 0) start = max(0, first_query - window_left);
  r.base = (long)row * (long)max_ctx;
  r.seq = seq;
  r.start = start;
  r.qo = qo;
  return r;
}

// Pages holding keys start .. seq-1 (0 when none are kept).
inline int req_pages(ReqInfo r, int page_size) {
  if (r.seq <= r.start) return 0;
  return (r.seq + page_size - 1) / page_size - r.start / page_size;
}

// Sum of v over the work-group, returned to every work-item. `scratch` holds local-size
// longs: totals over a batch of huge device tables may pass 2^31, and an output offset
// that wrapped negative would pass the `< cap` check.
inline long wg_sum(__local long* scratch, long v) {
  int lid = (int)get_local_id(0);
  barrier(CLK_LOCAL_MEM_FENCE);  // previous readers of scratch[0] are done
  scratch[lid] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int h = (int)get_local_size(0) >> 1; h > 0; h >>= 1) {
    if (lid < h) scratch[lid] += scratch[lid + h];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  return scratch[0];
}

// FlashInfer CSR (decode or extend, optional window). Outputs selected by want_* flags
// are written; the others' pointers are never touched.
__kernel void build_csr(__global const int* req_to_token, int pool_size, int max_ctx,
                        __global const int* req_pool_indices, __global const int* seq_lens,
                        __global const int* extend_lens, int is_extend, int page_size, int window_left,
                        __global int* kv_indptr, __global int* kv_indices, int kv_indices_cap,
                        __global int* kv_last_page_len, __global int* qo_indptr, int want_qo,
                        __global int* kv_start_offset, int want_offset, __local long* scratch) {
  const int i = (int)get_group_id(0);
  const int lid = (int)get_local_id(0), lsz = (int)get_local_size(0);

  long pages_before = 0, qo_before = 0;
  for (int j = lid; j < i; j += lsz) {
    ReqInfo rj = req_info(req_pool_indices, seq_lens, extend_lens, is_extend, pool_size, max_ctx, window_left, j);
    pages_before += req_pages(rj, page_size);
    qo_before += rj.qo;
  }
  pages_before = wg_sum(scratch, pages_before);
  if (want_qo) qo_before = wg_sum(scratch, qo_before);

  ReqInfo r = req_info(req_pool_indices, seq_lens, extend_lens, is_extend, pool_size, max_ctx, window_left, i);
  const int n = req_pages(r, page_size);
  if (lid == 0) {
    if (i == 0) {
      kv_indptr[0] = 0;
      if (want_qo) qo_indptr[0] = 0;
    }
    kv_indptr[i + 1] = (int)(pages_before + n);
    kv_last_page_len[i] = n > 0 ? r.seq - ((r.seq + page_size - 1) / page_size - 1) * page_size : 0;
    if (want_qo) qo_indptr[i + 1] = (int)(qo_before + r.qo);
    if (want_offset) kv_start_offset[i] = n > 0 ? r.start % page_size : 0;
  }
  const int first_page = r.start / page_size;
  for (int p = lid; p < n; p += lsz) {
    const long o = pages_before + p;
    if (o < kv_indices_cap) kv_indices[o] = req_to_token[r.base + (long)(first_page + p) * page_size] / page_size;
  }
}

// FlashAttention/vLLM page table [B, max_pages] padded with -1, plus optional seq_lens
// copy and cu_seqlens_q / cu_seqlens_k.
__kernel void build_page_table(__global const int* req_to_token, int pool_size, int max_ctx,
                               __global const int* req_pool_indices, __global const int* seq_lens,
                               __global const int* extend_lens, int is_extend, int page_size, int max_pages,
                               __global int* page_table, __global int* seq_out, int want_seq,
                               __global int* cu_seqlens_q, int want_q, __global int* cu_seqlens_k, int want_k,
                               __local long* scratch) {
  const int i = (int)get_group_id(0);
  const int lid = (int)get_local_id(0), lsz = (int)get_local_size(0);

  long q_before = 0, k_before = 0;
  if (want_q || want_k) {
    for (int j = lid; j < i; j += lsz) {
      ReqInfo rj = req_info(req_pool_indices, seq_lens, extend_lens, is_extend, pool_size, max_ctx, -1, j);
      q_before += rj.qo;
      k_before += rj.seq;
    }
    if (want_q) q_before = wg_sum(scratch, q_before);
    if (want_k) k_before = wg_sum(scratch, k_before);
  }
  ReqInfo r = req_info(req_pool_indices, seq_lens, extend_lens, is_extend, pool_size, max_ctx, -1, i);
  if (lid == 0) {
    if (i == 0) {
      if (want_q) cu_seqlens_q[0] = 0;
      if (want_k) cu_seqlens_k[0] = 0;
    }
    if (want_q) cu_seqlens_q[i + 1] = (int)(q_before + r.qo);
    if (want_k) cu_seqlens_k[i + 1] = (int)(k_before + r.seq);
    if (want_seq) seq_out[i] = r.seq;
  }
  const int n = req_pages(r, page_size);
  __global int* row = page_table + (long)i * (long)max_pages;
  for (int p = lid; p < max_pages; p += lsz)
    row[p] = p < n ? req_to_token[r.base + (long)p * page_size] / page_size : -1;
}

// slot_mapping: decode one slot per request (seq_len - 1, or -1 when seq_len == 0);
// extend the slots of positions prefix_len .. seq_len-1, request-major.
__kernel void build_slot_mapping(__global const int* req_to_token, int pool_size, int max_ctx,
                                 __global const int* req_pool_indices, __global const int* seq_lens,
                                 __global const int* extend_lens, int is_extend, __global int* slot_mapping,
                                 int cap, __local long* scratch) {
  const int i = (int)get_group_id(0);
  const int lid = (int)get_local_id(0), lsz = (int)get_local_size(0);
  if (!is_extend) {
    if (lid == 0 && i < cap) {
      ReqInfo r = req_info(req_pool_indices, seq_lens, extend_lens, 0, pool_size, max_ctx, -1, i);
      slot_mapping[i] = r.seq > 0 ? req_to_token[r.base + r.seq - 1] : -1;
    }
    return;
  }
  long before = 0;
  for (int j = lid; j < i; j += lsz)
    before += req_info(req_pool_indices, seq_lens, extend_lens, 1, pool_size, max_ctx, -1, j).qo;
  before = wg_sum(scratch, before);
  ReqInfo r = req_info(req_pool_indices, seq_lens, extend_lens, 1, pool_size, max_ctx, -1, i);
  const int prefix = r.seq - r.qo;
  for (int t = lid; t < r.qo; t += lsz) {
    const long o = before + t;
    if (o < cap) slot_mapping[o] = req_to_token[r.base + prefix + t];
  }
}

// A fixed-capacity decode plan's work list, rewritten for this step from seq_lens (the plan's
// tables keep their size, so a recorded launch stays valid). Request r owns work slots
// r * nmax .. r * nmax + nmax - 1, partial rows at the same indices and merge entry r. The
// split is the host planner's deterministic one (planner::plan_split_kv): chunks of `chunk`
// keys from the window's first key, widened to round_up(ceil(len / max_splits), align) where
// more than max_splits would be needed; one chunk: the item writes o itself (part -1).
// seq_lens[r] == 0 (a padded request): no work and no output. Page ids: the page table
// [cap, max_pages] (page_base r * max_pages); max_keys = min(max_ctx, max_pages * page_size).
// One work-item per work slot.
// positions (want_pos): seq_len - 1 per request, the new token's RoPE position.
__kernel void refresh_decode_work(__global const int* seq_lens, int cap, int nmax, int chunk, int align,
                                  int max_splits, int window_left, int max_pages, int max_keys, __global int* tab, int work_off,
                                  int merge_off, __global int* positions, int want_pos) {
  const int w = (int)get_global_id(0);
  if (w >= cap * nmax) return;
  const int r = w / nmax, j = w % nmax;
  const int raw = seq_lens[r];
  const int seq = raw < 0 || raw > max_keys ? 0 : raw;  // out of range: empty (build_page_table agrees)
  const int begin = window_left >= 0 ? max(0, seq - 1 - window_left) : 0;
  const int len = seq - begin;
  int c = chunk;
  if (len > 0 && (len + c - 1) / c > max_splits) c = ((len + max_splits - 1) / max_splits + align - 1) / align * align;
  const int n = len > 0 ? (len + c - 1) / c : 0;
  __global int* e = tab + work_off + 8 * w;
  if (j < n) {
    e[0] = r, e[1] = begin + j * c, e[2] = min(seq, begin + (j + 1) * c), e[3] = n == 1 ? -1 : w;
    e[4] = r * max_pages, e[5] = 0, e[6] = r, e[7] = 0;
  } else {
    e[0] = -1, e[1] = 0, e[2] = 0, e[3] = -1, e[4] = 0, e[5] = 0, e[6] = 0, e[7] = 0;
  }
  if (j == 0) {
    if (nmax > 1) {  // plans that can split have a merge entry per request
      __global int* m = tab + merge_off + 4 * r;
      m[0] = r, m[1] = r * nmax, m[2] = n >= 2 ? n : 0, m[3] = 0;
    }
    if (want_pos) positions[r] = max(seq - 1, 0);
  }
}

// The C ABI's plumbing: handle types, the thread-local last error, and the guard that turns
// every exception into a status (CLBlast's DispatchExceptionForC).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "clattn/append_kv.hpp"
#include "clattn/clattn.h"
#include "clattn/context.hpp"
#include "clattn/linear.hpp"
#include "clattn/metadata.hpp"
#include "clattn/paged_kv.hpp"
#include "runtime/error.hpp"

struct clattn_context_s {
  clattn::Context ctx;
};

namespace clattn::capi {

void set_last_error(const std::string& msg);

template <class F>
clattn_status guard(F&& f) noexcept {
  try {
    f();
    set_last_error("");
    return CLATTN_SUCCESS;
  } catch (const Error& e) {
    set_last_error(e.what());
    return static_cast<clattn_status>(e.status());
  } catch (const std::bad_alloc&) {
    set_last_error("out of host memory");
    return CLATTN_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set_last_error(std::string("internal error: ") + e.what());
    return CLATTN_INTERNAL;
  } catch (...) {
    set_last_error("internal error: unknown exception");
    return CLATTN_INTERNAL;
  }
}

// Throws InvalidArgument naming `what` when p is null.
template <class T>
T* need(T* p, const char* what) {
  if (!p) throw Error(Status::InvalidArgument, std::string(what) + " is NULL");
  return p;
}

[[noreturn]] inline void invalid(const std::string& msg) { throw Error(Status::InvalidArgument, msg); }

// A host array of n entries copied into a vector (null allowed only when n == 0).
inline std::vector<int32_t> copy(const int32_t* p, int64_t n, const char* what) {
  if (n < 0) invalid(std::string(what) + ": negative length");
  if (n > 0) need(p, what);
  return n > 0 ? std::vector<int32_t>(p, p + n) : std::vector<int32_t>();
}

inline PagedKV to_cpp(const clattn_paged_kv& c) {
  PagedKV k;
  k.num_pages = c.num_pages;
  k.page_size = c.page_size;
  k.num_kv_heads = c.num_kv_heads;
  k.head_dim = c.head_dim;
  k.layout = static_cast<KVLayout>(c.layout);
  k.dtype = static_cast<DType>(c.dtype);
  k.stride_page = c.stride_page;
  k.stride_token = c.stride_token;
  k.stride_head = c.stride_head;
  k.scale_dtype = static_cast<DType>(c.scale_dtype);
  k.scale_stride_page = c.scale_stride_page;
  k.scale_stride_token = c.scale_stride_token;
  k.scale_stride_head = c.scale_stride_head;
  k.quant_group = c.quant_group;
  return k;
}

// KV append arguments (clattn_append_kv, and the append part of clattn_rope_append_kv).
inline AppendKVArgs to_cpp(const clattn_append_kv_args& a) {
  AppendKVArgs x;
  x.k = a.k;
  x.v = a.v;
  x.src_dtype = static_cast<DType>(a.src_dtype);
  x.src_stride_token = a.src_stride_token;
  x.src_stride_head = a.src_stride_head;
  x.slot_mapping = a.slot_mapping;
  x.slot_dtype = static_cast<DType>(a.slot_dtype);
  x.num_tokens = a.num_tokens;
  x.slot_mapping_host = a.slot_mapping_host;
  x.k_cache = a.k_cache;
  x.v_cache = a.v_cache;
  x.cache = to_cpp(a.cache);
  x.k_scale = a.k_scale;
  x.v_scale = a.v_scale;
  x.k_scale_cache = a.k_scale_cache;
  x.v_scale_cache = a.v_scale_cache;
  x.k_head_scales = a.k_head_scales;
  x.v_head_scales = a.v_head_scales;
  return x;
}

// Linear-attention config (linear ops and backend layer specs).
inline LinearConfig to_cpp(const clattn_linear_config* c) {
  need(c, "cfg");
  LinearConfig x;
  x.num_qk_heads = c->num_qk_heads;
  x.num_v_heads = c->num_v_heads;
  x.head_dim_k = c->head_dim_k;
  x.head_dim_v = c->head_dim_v;
  x.dtype = static_cast<DType>(c->dtype);
  x.scale = c->scale;
  x.l2norm_qk = c->l2norm_qk != 0;
  x.beta_is_logits = c->beta_is_logits != 0;
  x.constant_decay = c->constant_decay != 0;
  return x;
}

inline Enqueue to_cpp(const clattn_enqueue* e) {
  Enqueue q;
  if (e) {
    q.queue = e->queue;
    q.num_wait = e->num_wait;
    q.wait = e->wait;
    q.event = e->event;
  }
  return q;
}

// The C CSR as the C++ one; `what` prefixes messages ("csr", "shared", ...). qo_indptr is
// copied when `with_qo` (required then unless `qo_optional`) — decode ignores it.
inline PagedCsr to_cpp(const clattn_csr* csr, const char* what, bool with_qo, bool qo_optional = false) {
  need(csr, what);
  const std::string w(what);
  if (csr->batch_size < 0) invalid(w + ".batch_size = " + std::to_string(csr->batch_size) + " is negative");
  PagedCsr c;
  c.page_size = csr->page_size;
  c.kv_indptr = copy(csr->kv_indptr, int64_t(csr->batch_size) + 1, (w + ".kv_indptr").c_str());
  c.kv_last_page_len = copy(csr->kv_last_page_len, csr->batch_size, (w + ".kv_last_page_len").c_str());
  if (c.kv_indptr.back() < 0) invalid(w + ".kv_indptr[B] = " + std::to_string(c.kv_indptr.back()) + " is negative");
  c.kv_indices = copy(csr->kv_indices, c.kv_indptr.back(), (w + ".kv_indices").c_str());
  if (csr->kv_start_offset) c.kv_start_offset = copy(csr->kv_start_offset, csr->batch_size, (w + ".kv_start_offset").c_str());
  if (with_qo && (csr->qo_indptr || !qo_optional))
    c.qo_indptr = copy(need(csr->qo_indptr, (w + ".qo_indptr").c_str()), int64_t(csr->batch_size) + 1,
                       (w + ".qo_indptr").c_str());
  return c;
}

// The C page table as the C++ one (cu_seqlens_k derived from seq_lens).
inline PageTable to_cpp(const clattn_page_table* t, const char* what, bool with_qo, bool qo_optional = false) {
  need(t, what);
  const std::string w(what);
  if (t->batch_size < 0 || t->max_pages < 0)
    invalid(w + ".batch_size/max_pages is negative (" + std::to_string(t->batch_size) + ", " +
            std::to_string(t->max_pages) + ")");
  PageTable pt;
  pt.page_size = t->page_size;
  pt.max_pages = t->max_pages;
  pt.page_table = copy(t->page_table, int64_t(t->batch_size) * t->max_pages, (w + ".page_table").c_str());
  pt.seq_lens = copy(t->seq_lens, t->batch_size, (w + ".seq_lens").c_str());
  if (with_qo && (t->cu_seqlens_q || !qo_optional))
    pt.cu_seqlens_q = copy(need(t->cu_seqlens_q, (w + ".cu_seqlens_q").c_str()), int64_t(t->batch_size) + 1,
                           (w + ".cu_seqlens_q").c_str());
  return pt;
}

// "NAME=int,NAME=int" (spaces allowed) -> parameter overrides; NULL or "" = none.
inline std::map<std::string, int> parse_params(const char* s, const char* what) {
  std::map<std::string, int> m;
  if (!s) return m;
  std::string str(s);
  size_t pos = 0;
  while (pos <= str.size()) {
    size_t end = str.find(',', pos);
    if (end == std::string::npos) end = str.size();
    std::string item = str.substr(pos, end - pos);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (!item.empty()) {
      size_t eq = item.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
        invalid(std::string(what) + ": \"" + item + "\" is not NAME=int");
      std::string name = item.substr(0, eq), val = item.substr(eq + 1);
      char* endp = nullptr;
      long v = std::strtol(val.c_str(), &endp, 10);
      if (!endp || *endp != '\0') invalid(std::string(what) + ": value of " + name + " (\"" + val + "\") is not an integer");
      m[name] = int(v);
    }
    pos = end + 1;
  }
  return m;
}

// For C++ calls that take a queue only (linear attention, device metadata builders): the
// C ABI's wait list and event become markers before / after `op(queue)` on that queue,
// which orders them on an in-order queue (the context's queues are).
template <class F>
void with_enqueue(clattn_context ctx, const clattn_enqueue* e, const char* what, F&& op) {
  need(ctx, "ctx");
  cl_command_queue q = e && e->queue ? e->queue : ctx->ctx.cl_queue();
  if (e && e->num_wait) {
    if (!e->wait) invalid("enqueue.wait is NULL with num_wait > 0");
    rt::check_cl(clEnqueueMarkerWithWaitList(q, e->num_wait, e->wait, nullptr), "clEnqueueMarkerWithWaitList", what);
  }
  op(q);
  if (e && e->event) {
    rt::check_cl(clEnqueueMarkerWithWaitList(q, 0, nullptr, e->event), "clEnqueueMarkerWithWaitList", what);
  }
}

// Copies a string into a fixed C array, cut and NUL-terminated.
template <size_t N>
void copy_str(char (&dst)[N], const std::string& s) {
  size_t n = std::min(N - 1, s.size());
  std::memcpy(dst, s.data(), n);
  dst[n] = '\0';
}

}  // namespace clattn::capi

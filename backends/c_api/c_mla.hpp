// The C MLA plan handle and the C-to-C++ conversions of the MLA structs, shared by the MLA
// entry points (c_mla.cpp) and sparse MLA decode (c_dsa.cpp).
#pragma once
#include "backends/c_api/c_api_common.hpp"
#include "clattn/mla.hpp"

struct clattn_mla_plan_s {
  clattn::MlaPlan plan;
};

namespace clattn::capi {

inline MlaCache to_cpp_cache(const clattn_mla_cache& c) {
  MlaCache m;
  m.num_pages = c.num_pages;
  m.page_size = c.page_size;
  m.dtype = static_cast<DType>(c.dtype);
  m.single_buffer = c.single_buffer != 0;
  m.stride_page = c.stride_page;
  m.stride_token = c.stride_token;
  m.kpe_stride_page = c.kpe_stride_page;
  m.kpe_stride_token = c.kpe_stride_token;
  m.kpe_offset = c.kpe_offset;
  m.scale_dtype = static_cast<DType>(c.scale_dtype);
  m.scale_stride_page = c.scale_stride_page;
  m.scale_stride_token = c.scale_stride_token;
  return m;
}

inline MlaOptions to_cpp_opt(const clattn_mla_options* o) {
  need(o, "opt");
  MlaOptions m;
  m.num_heads = o->num_heads;
  m.q_dtype = static_cast<DType>(o->q_dtype);
  m.o_dtype = static_cast<DType>(o->o_dtype);
  m.sm_scale = o->sm_scale;
  m.causal = o->causal != 0;
  m.max_splits = o->max_splits;
  m.validate = o->validate != 0;
  m.params = parse_params(o->params, "opt.params");
  return m;
}

inline MlaBuffers to_cpp(const clattn_mla_buffers* b) {
  need(b, "buffers");
  MlaBuffers x;
  x.q_nope = b->q_nope;
  x.q_pe = b->q_pe;
  x.ckv = b->ckv;
  x.kpe = b->kpe;
  x.page_ids = b->page_ids;
  x.o = b->o;
  x.lse = b->lse;
  x.workspace = b->workspace;
  x.kv_scale = b->kv_scale;
  x.scale_cache = b->scale_cache;
  return x;
}

}  // namespace clattn::capi

// C ABI: rotary position embedding, apply_rope and rope_append_kv (flat args converted to
// clattn::RopeArgs / RopeAppendKVArgs; the library checks the values).
#include "backends/c_api/c_api_common.hpp"
#include "clattn/rope.hpp"

using clattn::capi::guard;
using clattn::capi::need;
using clattn::capi::to_cpp;

namespace {

clattn::RopeConfig rope_config(const clattn_rope_config& c) {
  clattn::RopeConfig r;
  r.style = static_cast<clattn::RopeStyle>(c.style);
  r.rotary_dim = c.rotary_dim;
  r.theta = c.theta;
  r.scale = c.scale;
  r.cos_sin_cache = c.cos_sin_cache;
  r.cache_positions = c.cache_positions;
  return r;
}

clattn::RopePositions positions(cl_mem p, int dtype, const void* host) {
  clattn::RopePositions x;
  x.positions = p;
  x.dtype = static_cast<clattn::DType>(dtype);
  x.positions_host = host;
  return x;
}

}  // namespace

extern "C" {

void clattn_rope_config_init(clattn_rope_config* c) {
  if (!c) return;
  const clattn::RopeConfig d;
  *c = clattn_rope_config{};
  c->style = static_cast<int>(d.style);
  c->rotary_dim = d.rotary_dim;
  c->theta = d.theta;
  c->scale = d.scale;
}

clattn_status clattn_apply_rope(clattn_context ctx, const clattn_rope_args* a, const clattn_enqueue* e) {
  return guard([&] {
    need(a, "args");
    clattn::RopeArgs x;
    x.q = a->q;
    x.q_out = a->q_out;
    x.k = a->k;
    x.k_out = a->k_out;
    x.dtype = static_cast<clattn::DType>(a->dtype);
    x.num_tokens = a->num_tokens;
    x.num_qo_heads = a->num_qo_heads;
    x.num_kv_heads = a->num_kv_heads;
    x.head_dim = a->head_dim;
    x.q_stride_token = a->q_stride_token;
    x.q_stride_head = a->q_stride_head;
    x.k_stride_token = a->k_stride_token;
    x.k_stride_head = a->k_stride_head;
    x.pos = positions(a->positions, a->positions_dtype, a->positions_host);
    x.rope = rope_config(a->rope);
    clattn::apply_rope(need(ctx, "ctx")->ctx, x, to_cpp(e));
  });
}

clattn_status clattn_rope_append_kv(clattn_context ctx, const clattn_rope_append_kv_args* a, const clattn_enqueue* e) {
  return guard([&] {
    need(a, "args");
    clattn::RopeAppendKVArgs x;
    x.append = to_cpp(a->append);
    x.q = a->q;
    x.q_out = a->q_out;
    x.num_qo_heads = a->num_qo_heads;
    x.q_stride_token = a->q_stride_token;
    x.q_stride_head = a->q_stride_head;
    x.q_out_dtype = static_cast<clattn::DType>(a->q_out_dtype);
    x.pos = positions(a->positions, a->positions_dtype, a->positions_host);
    x.rope = rope_config(a->rope);
    clattn::rope_append_kv(need(ctx, "ctx")->ctx, x, to_cpp(e));
  });
}

}  // extern "C"

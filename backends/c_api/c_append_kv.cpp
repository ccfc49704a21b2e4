// C ABI: KV append into the paged cache (flat args converted to clattn::AppendKVArgs).
#include "backends/c_api/c_api_common.hpp"
#include "clattn/append_kv.hpp"

using clattn::capi::guard;
using clattn::capi::need;
using clattn::capi::to_cpp;

extern "C" {

clattn_status clattn_append_kv(clattn_context ctx, const clattn_append_kv_args* a, const clattn_enqueue* e) {
  return guard([&] {
    need(a, "args");
    clattn::AppendKVArgs x;
    x.k = a->k;
    x.v = a->v;
    x.src_dtype = static_cast<clattn::DType>(a->src_dtype);
    x.src_stride_token = a->src_stride_token;
    x.src_stride_head = a->src_stride_head;
    x.slot_mapping = a->slot_mapping;
    x.slot_dtype = static_cast<clattn::DType>(a->slot_dtype);
    x.num_tokens = a->num_tokens;
    x.slot_mapping_host = a->slot_mapping_host;
    x.k_cache = a->k_cache;
    x.v_cache = a->v_cache;
    x.cache = to_cpp(a->cache);
    x.k_scale = a->k_scale;
    x.v_scale = a->v_scale;
    clattn::append_kv(need(ctx, "ctx")->ctx, x, to_cpp(e));
  });
}

}  // extern "C"

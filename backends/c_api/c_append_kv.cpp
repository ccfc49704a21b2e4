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
    clattn::append_kv(need(ctx, "ctx")->ctx, to_cpp(*a), to_cpp(e));
  });
}

}  // extern "C"

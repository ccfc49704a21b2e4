// C ABI: linear attention (Gated DeltaNet, gated linear attention) and state-pool helpers.
// The C++ ops take a queue only: with_enqueue (c_api_common.hpp) puts the wait list and
// the event around them as markers.
#include "backends/c_api/c_api_common.hpp"
#include "clattn/linear.hpp"

namespace {

using clattn::capi::need;
using clattn::capi::with_enqueue;

clattn::LinearStatePool to_cpp_pool(const clattn_linear_state_pool* p) {
  need(p, "pool");
  clattn::LinearStatePool x;
  x.state = p->state;
  x.num_slots = p->num_slots;
  x.dtype = static_cast<clattn::DType>(p->dtype);
  return x;
}

using LinearFn = void (*)(const clattn::Context&, const clattn::LinearConfig&, const clattn::LinearTensors&,
                          const clattn::LinearStatePool&, const clattn::LinearBatch&, cl_command_queue);

clattn_status linear_op(LinearFn fn, const char* what, clattn_context ctx, const clattn_linear_config* cfg,
                        const clattn_linear_tensors* t, const clattn_linear_state_pool* pool,
                        const clattn_linear_batch* batch, const clattn_enqueue* e) {
  return clattn::capi::guard([&] {
    auto c = clattn::capi::to_cpp(cfg);
    auto p = to_cpp_pool(pool);
    need(t, "tensors");
    need(batch, "batch");
    clattn::LinearTensors x;
    x.q = t->q;
    x.k = t->k;
    x.v = t->v;
    x.g = t->g;
    x.beta = t->beta;
    x.o = t->o;
    clattn::LinearBatch b;
    b.batch_size = batch->batch_size;
    b.state_indices = batch->state_indices;
    b.state_indices_dev = batch->state_indices_dev;
    b.cu_seqlens = batch->cu_seqlens;
    b.cu_seqlens_dev = batch->cu_seqlens_dev;
    b.num_tokens = batch->num_tokens;
    with_enqueue(ctx, e, what, [&](cl_command_queue q) { fn(ctx->ctx, c, x, p, b, q); });
  });
}

}  // namespace

using clattn::capi::guard;

extern "C" {

void clattn_linear_config_init(clattn_linear_config* c) {
  if (!c) return;
  *c = clattn_linear_config{};
  c->dtype = int(clattn::DType::F16);
}

// The four ops share one signature and one conversion (linear_op).
#define CLATTN_LINEAR_OP(NAME)                                                                                  \
  clattn_status clattn_##NAME(clattn_context ctx, const clattn_linear_config* cfg, const clattn_linear_tensors* t, \
                              const clattn_linear_state_pool* pool, const clattn_linear_batch* batch,              \
                              const clattn_enqueue* e) {                                                         \
    return linear_op(&clattn::NAME, #NAME, ctx, cfg, t, pool, batch, e);                                         \
  }
CLATTN_LINEAR_OP(gdn_decode)
CLATTN_LINEAR_OP(gdn_prefill)
CLATTN_LINEAR_OP(gla_decode)
CLATTN_LINEAR_OP(gla_prefill)
#undef CLATTN_LINEAR_OP

clattn_status clattn_linear_zero_slots(clattn_context ctx, const clattn_linear_config* cfg,
                                       const clattn_linear_state_pool* pool, const int32_t* slots, int n,
                                       const clattn_enqueue* e) {
  return guard([&] {
    auto c = clattn::capi::to_cpp(cfg);
    auto p = to_cpp_pool(pool);
    if (n > 0) need(slots, "slots");
    with_enqueue(ctx, e, "linear_zero_slots",
                 [&](cl_command_queue q) { clattn::linear_zero_slots(ctx->ctx, c, p, slots, n, q); });
  });
}

clattn_status clattn_linear_copy_slot(clattn_context ctx, const clattn_linear_config* cfg,
                                      const clattn_linear_state_pool* pool, int src, int dst,
                                      const clattn_enqueue* e) {
  return guard([&] {
    auto c = clattn::capi::to_cpp(cfg);
    auto p = to_cpp_pool(pool);
    with_enqueue(ctx, e, "linear_copy_slot",
                 [&](cl_command_queue q) { clattn::linear_copy_slot(ctx->ctx, c, p, src, dst, q); });
  });
}

}  // extern "C"

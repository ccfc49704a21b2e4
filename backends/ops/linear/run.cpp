// Linear attention (GDN, simple GLA): argument and batch validation on the host, then the
// first kernel of the call's candidates (variants.cpp) that builds and fits, launched once, or
// once per segment of the longest request where a device bounds a work-item's loops (each
// segment carries the state through the pool). Nothing blocks; a rejected call enqueues
// nothing. Kernel maths: cl_kernels/linear_common.clh, linear_cpu.clh; docs/linear.md.
#include <algorithm>
#include <cmath>

#include "backends/ops/linear/linear_impl.hpp"

namespace clattn {
namespace {

using namespace ops::linear;

int flags_of(const LinearConfig& c) { return (c.l2norm_qk ? kL2Norm : 0) | (c.beta_is_logits ? kBetaLogits : 0); }
float scale_of(const LinearConfig& c) { return c.scale > 0.f ? c.scale : 1.0f / std::sqrt(float(c.head_dim_k)); }

// Tokens a prefill segment covers where the chosen kernel's loop-trip bound needs segments
// (0: one launch).
int segment_length(const DeviceProfile& prof, const ops::Variant& v, const LinearBatch& b, const char* op) {
  const int64_t max_tokens = ops::max_keys_per_item(prof, v.trips_fixed, v.trips_per_key,
                                                    std::string(op) + " variant " + v.name);
  if (max_tokens <= 0) return 0;
  int64_t longest = 0;
  for (int i = 0; i < b.batch_size; ++i) longest = std::max<int64_t>(longest, b.cu_seqlens[i + 1] - b.cu_seqlens[i]);
  return longest > max_tokens ? int(max_tokens) : 0;
}

void run(const char* op, bool gdn, bool prefill, const Context& ctx, const LinearConfig& cfg, const LinearTensors& t,
         const LinearStatePool& pool, const LinearBatch& b, cl_command_queue queue) {
  check_config(op, cfg, pool, gdn);
  check_indices(op, b, pool);
  int64_t T = b.batch_size;
  if (prefill) {
    if (b.batch_size > 0 || b.cu_seqlens) T = check_cu_seqlens(op, b);
    else T = 0;
  }
  if (b.batch_size == 0 || T == 0) return;
  check_tensors(op, cfg, t, pool, T, gdn);

  auto& c = rt::impl(ctx);
  cl_command_queue q = queue ? queue : c.queue;
  const ops::BuiltVariant built = ops::select_and_build(
      c, op, candidates(c.profile, ops::preferred_float_width(c), cfg, pool, gdn, prefill, b.batch_size, op));
  const ops::Tile& tile = built.variant.tile;
  rt::log().debug("{}: variant {} {}", op, built.variant.name, ops::tile_text(tile));
  const int seg_len = prefill ? segment_length(c.profile, built.variant, b, op) : 0;
  // An unused beta/state argument still needs a valid buffer: alias one we have.
  cl_mem beta = gdn ? t.beta : t.g;
  cl_mem state = pool.state ? pool.state : t.o;
  const int Hqk = cfg.num_qk_heads, Hv = cfg.num_v_heads;
  const int g_stride = cfg.constant_decay ? 0 : Hv;
  const float scale = scale_of(cfg);
  const int flags = flags_of(cfg);
  rt::Kernel& k = *built.kernel;
  const bool cpu = built.variant.name == "cpu";
  const size_t dvt = size_t(ops::knob(tile, "DVT")), wg = size_t(ops::knob(tile, "WG"));
  if (!prefill) {
    if (cpu) {  // one work-item per group; grid (Dv slice, request x v-head)
      const size_t gws[2] = {size_t(cfg.head_dim_v) / dvt, size_t(b.batch_size) * Hv}, lws[2] = {1, 1};
      k.launch(q, 2, gws, lws, 0, nullptr, nullptr, t.q, t.k, t.v, t.g, beta, t.o, state, b.state_indices_dev, Hqk,
               Hv, g_stride, scale, flags, cl_int(pool.num_slots), c.faults);
    } else {
      const size_t vec = size_t(ops::knob(tile, "VEC")), rows = size_t(ops::knob(tile, "ROWS"));
      const size_t gws[3] = {size_t(cfg.head_dim_v) / vec, rows, size_t(b.batch_size) * Hv};
      const size_t lws[3] = {dvt / vec, rows, 1};
      k.launch(q, 3, gws, lws, 0, nullptr, nullptr, t.q, t.k, t.v, t.g, beta, t.o, state, b.state_indices_dev, Hqk,
               Hv, g_stride, scale, flags, cl_int(pool.num_slots), c.faults);
    }
    return;
  }
  // Prefill: grid (work-groups of Dv slices, request x v-head).
  const size_t gws[2] = {wg * (size_t(cfg.head_dim_v) / dvt), size_t(b.batch_size) * Hv}, lws[2] = {wg, 1};
  if (built.variant.name == "nv_mma_sync") {
    k.launch(q, 2, gws, lws, 0, nullptr, nullptr, t.q, t.k, t.v, t.g, beta, t.o, state, b.state_indices_dev,
             b.cu_seqlens_dev, Hqk, Hv, g_stride, scale, flags, cl_int(pool.num_slots), cl_int(T), c.faults);
    return;
  }
  // One launch, or one per segment, each ordered after the one before (the queue may be
  // out of order).
  int64_t longest = 0;
  for (int i = 0; i < b.batch_size; ++i) longest = std::max<int64_t>(longest, b.cu_seqlens[i + 1] - b.cu_seqlens[i]);
  const int nseg = seg_len > 0 ? int((longest + seg_len - 1) / seg_len) : 1;
  // A request without a slot carries its state between segments in a scratch row of its own
  // (released here: OpenCL keeps it until the launches that use it are done).
  cl_mem scratch = nullptr;
  bool slotless = false;
  for (int i = 0; i < b.batch_size; ++i) slotless |= b.state_indices[i] < 0;
  if (nseg > 1 && slotless) {
    cl_int err = CL_SUCCESS;
    const int64_t bytes = rt::checked::mul(b.batch_size, slot_bytes(cfg, pool), "linear prefill scratch states");
    scratch = rt::create_buffer(c.ctx, CL_MEM_READ_WRITE, size_t(bytes), &err);
    rt::check_cl(err, "clCreateBuffer", std::string(op) + " scratch states (" + num(bytes) + " bytes)");
  }
  struct Release {
    cl_mem m;
    ~Release() {
      if (m) clReleaseMemObject(m);
    }
  } release{scratch};
  cl_event prev = nullptr;
  for (int s = 0; s < nseg; ++s) {
    cl_event ev = nullptr;
    try {
      k.launch(q, 2, gws, lws, prev ? 1 : 0, prev ? &prev : nullptr, s + 1 < nseg ? &ev : nullptr, t.q, t.k, t.v, t.g,
               beta, t.o, state, b.state_indices_dev, b.cu_seqlens_dev, Hqk, Hv, g_stride, scale, flags,
               cl_int(pool.num_slots), cl_int(T), c.faults, cl_int(s), cl_int(seg_len), scratch ? scratch : state);
    } catch (...) {
      if (prev) clReleaseEvent(prev);
      throw;
    }
    if (prev) clReleaseEvent(prev);
    prev = ev;
  }
}

void check_slot(const char* op, const LinearStatePool& p, int s, const std::string& field) {
  if (s < 0 || s >= p.num_slots)
    bad(op, field + " = " + num(s) + " out of range [0, num_slots = " + num(p.num_slots) + ")");
}

}  // namespace

void gdn_decode(const Context& ctx, const LinearConfig& cfg, const LinearTensors& t, const LinearStatePool& pool,
                const LinearBatch& b, cl_command_queue queue) {
  run("gdn_decode", true, false, ctx, cfg, t, pool, b, queue);
}
void gdn_prefill(const Context& ctx, const LinearConfig& cfg, const LinearTensors& t, const LinearStatePool& pool,
                 const LinearBatch& b, cl_command_queue queue) {
  run("gdn_prefill", true, true, ctx, cfg, t, pool, b, queue);
}
void gla_decode(const Context& ctx, const LinearConfig& cfg, const LinearTensors& t, const LinearStatePool& pool,
                const LinearBatch& b, cl_command_queue queue) {
  run("gla_decode", false, false, ctx, cfg, t, pool, b, queue);
}
void gla_prefill(const Context& ctx, const LinearConfig& cfg, const LinearTensors& t, const LinearStatePool& pool,
                 const LinearBatch& b, cl_command_queue queue) {
  run("gla_prefill", false, true, ctx, cfg, t, pool, b, queue);
}

void linear_zero_slots(const Context& ctx, const LinearConfig& cfg, const LinearStatePool& pool, const int32_t* slots,
                       int n, cl_command_queue queue) {
  const char* op = "linear_zero_slots";
  check_config(op, cfg, pool, true);
  if (n < 0) bad(op, "n = " + num(n) + ", must be >= 0");
  if (n == 0) return;
  if (!slots) bad(op, "slots: null host array");
  for (int i = 0; i < n; ++i) check_slot(op, pool, slots[i], "slots[" + num(i) + "]");
  const int64_t sb = slot_bytes(cfg, pool);
  need(op, pool.state, rt::checked::mul(pool.num_slots, sb, "state pool bytes"), "state");
  cl_command_queue q = queue ? queue : rt::impl(ctx).queue;
  const cl_uchar zero = 0;  // +0.0 is all-zero bits in f32, f16 and bf16
  for (int i = 0; i < n; ++i)
    rt::check_cl(clEnqueueFillBuffer(q, pool.state, &zero, 1, size_t(slots[i] * sb), size_t(sb), 0, nullptr, nullptr),
                 "clEnqueueFillBuffer", std::string(op) + " slot " + num(slots[i]));
}

void linear_copy_slot(const Context& ctx, const LinearConfig& cfg, const LinearStatePool& pool, int src, int dst,
                      cl_command_queue queue) {
  const char* op = "linear_copy_slot";
  check_config(op, cfg, pool, true);
  check_slot(op, pool, src, "src");
  check_slot(op, pool, dst, "dst");
  const int64_t sb = slot_bytes(cfg, pool);
  need(op, pool.state, rt::checked::mul(pool.num_slots, sb, "state pool bytes"), "state");
  if (src == dst) return;
  cl_command_queue q = queue ? queue : rt::impl(ctx).queue;
  rt::check_cl(clEnqueueCopyBuffer(q, pool.state, pool.state, size_t(src * sb), size_t(dst * sb), size_t(sb), 0,
                                   nullptr, nullptr),
               "clEnqueueCopyBuffer", std::string(op) + " " + num(src) + " -> " + num(dst));
}

}  // namespace clattn

// merge_state / merge_states: argument checks, then one launch of cl_kernels/merge_state.cl.
#include "backends/ops/merge_state.hpp"

#include <algorithm>

#include "backends/dispatch/variant.hpp"
#include "backends/ops/op_util.hpp"
#include "backends/params/database.hpp"
#include "clattn/merge_state.hpp"
#include "runtime/log.hpp"

namespace clattn {
namespace ops {

Variant merge_variant(const DeviceProfile& p) {
  params::Entry e = params::lookup(p, "merge");
  size_t wg = size_t(e.get("MERGE_WG"));
  wg = std::max<size_t>(1, std::min(wg, p.max_work_group_size));
  return wg_variant("generic", "merge_state.cl", "merge_partials", "MERGE_WG", int(wg), 1,
                    [](int w) { return rt::make_options({{"MERGE_WG", std::to_string(w)}}); });
}

MergeProgram merge_program(detail::ContextImpl& c) {
  const BuiltVariant b = select_and_build(c, "merge", {merge_variant(c.profile)});
  MergeProgram m;
  m.wg = b.variant.wg;
  m.program = b.program;
  return m;
}

int merge_col_blocks(const DeviceProfile& p, int num_merges, int heads, int head_dim) {
  const int64_t rows = std::max<int64_t>(1, int64_t(num_merges) * heads);
  const int64_t want = 2 * int64_t(std::max(1u, p.compute_units));
  const int64_t cb = (want + rows - 1) / rows;
  return int(std::clamp<int64_t>(cb, 1, std::max(1, head_dim / 4 / 8)));
}

namespace {

void check_dims(int num_tokens, int num_heads, int head_dim, const char* op) {
  if (num_tokens < 0) rt::invalid(std::string(op) + ": num_tokens = " + std::to_string(num_tokens) + ", must be >= 0");
  if (num_heads < 1) rt::invalid(std::string(op) + ": num_heads = " + std::to_string(num_heads) + ", must be >= 1");
  if (head_dim < 1) rt::invalid(std::string(op) + ": head_dim = " + std::to_string(head_dim) + ", must be >= 1");
}


}  // namespace
}  // namespace ops

void merge_state(const Context& ctx, const MergeStateArgs& a, const Enqueue& e) {
  ops::check_dims(a.num_tokens, a.num_heads, a.head_dim, "merge_state");
  ops::require_io_dtype(a.dtype, "merge_state dtype");
  namespace ck = rt::checked;
  const int64_t rows64 = ck::mul(a.num_tokens, a.num_heads, "merge_state rows (num_tokens x num_heads)");
  const size_t rows = size_t(rows64);
  const ops::Shape vshape{{a.num_tokens, a.num_heads, a.head_dim}, dtype_name(a.dtype)};
  const ops::Shape sshape{{a.num_tokens, a.num_heads}, "f32"};
  const int64_t vbytes = ck::product({rows64, a.head_dim, int64_t(dtype_size(a.dtype))}, "merge_state v bytes");
  const int64_t sbytes = ck::mul(rows64, 4, "merge_state s bytes");
  cl_command_queue q = ops::queue_of(ctx, e);
  if (rows == 0) return ops::marker_if_needed(q, e);
  ops::require_buffer(a.v_a, vbytes, "v_a", vshape);
  ops::require_buffer(a.s_a, sbytes, "s_a", sshape);
  ops::require_buffer(a.v_b, vbytes, "v_b", vshape);
  ops::require_buffer(a.s_b, sbytes, "s_b", sshape);
  ops::require_buffer(a.v_out, vbytes, "v_out", vshape);
  if (a.s_out) ops::require_buffer(a.s_out, sbytes, "s_out", sshape);
  auto& c = rt::impl(ctx);
  auto mp = ops::merge_program(c);
  rt::Kernel& k = mp.program->kernel("merge_state");
  size_t gws = size_t(ck::mul(rows64, int64_t(mp.wg), "merge work-items")), lws = mp.wg;
  cl_mem so = a.s_out ? a.s_out : a.s_a;  // never written when has_so == 0
  k.launch(q, 1, &gws, &lws, e.num_wait, e.wait, e.event, a.v_a, a.s_a, a.v_b, a.s_b, a.v_out, so,
           cl_int(a.s_out != nullptr), cl_int(a.head_dim), cl_int(a.dtype));
}

void merge_states(const Context& ctx, const MergeStatesArgs& a, const Enqueue& e) {
  ops::check_dims(a.num_tokens, a.num_heads, a.head_dim, "merge_states");
  if (a.num_states < 0) rt::invalid("merge_states: num_states = " + std::to_string(a.num_states) + ", must be >= 0");
  ops::require_io_dtype(a.dtype, "merge_states dtype");
  namespace ck = rt::checked;
  const int64_t rows64 = ck::mul(a.num_tokens, a.num_heads, "merge_states rows (num_tokens x num_heads)");
  const size_t rows = size_t(rows64);
  const int64_t es = int64_t(dtype_size(a.dtype));
  cl_command_queue q = ops::queue_of(ctx, e);
  if (rows == 0) return ops::marker_if_needed(q, e);
  const int64_t parts = ck::mul(rows64, a.num_states, "merge_states parts");
  if (a.num_states > 0) {
    ops::require_buffer(a.v, ck::product({parts, a.head_dim, es}, "merge_states v bytes"), "v",
                        {{a.num_tokens, a.num_states, a.num_heads, a.head_dim}, dtype_name(a.dtype)});
    ops::require_buffer(a.s, ck::mul(parts, 4, "merge_states s bytes"), "s",
                        {{a.num_tokens, a.num_states, a.num_heads}, "f32"});
  }
  ops::require_buffer(a.v_out, ck::product({rows64, a.head_dim, es}, "merge_states v_out bytes"), "v_out",
                      {{a.num_tokens, a.num_heads, a.head_dim}, dtype_name(a.dtype)});
  if (a.s_out)
    ops::require_buffer(a.s_out, ck::mul(rows64, 4, "merge_states s_out bytes"), "s_out",
                        {{a.num_tokens, a.num_heads}, "f32"});
  auto& c = rt::impl(ctx);
  auto mp = ops::merge_program(c);
  rt::Kernel& k = mp.program->kernel("merge_states");
  size_t gws = size_t(ck::mul(rows64, int64_t(mp.wg), "merge work-items")), lws = mp.wg;
  // With no parts, v and s are never read: bind v_out in their place.
  cl_mem v = a.num_states > 0 ? a.v : a.v_out, s = a.num_states > 0 ? a.s : a.v_out;
  cl_mem so = a.s_out ? a.s_out : a.v_out;
  k.launch(q, 1, &gws, &lws, e.num_wait, e.wait, e.event, v, s, a.v_out, so, cl_int(a.s_out != nullptr),
           cl_int(a.num_states), cl_int(a.num_heads), cl_int(a.head_dim), cl_int(a.dtype));
}

namespace ops {

void enqueue_merge(cl_command_queue q, const MergeLaunch& m, cl_event after, cl_event* done, cl_mem o, DType o_dt,
                   cl_mem lse, bool has_lse, cl_mem sinks, bool has_sinks) {
  const size_t gws[2] = {size_t(m.num_merges) * size_t(m.cb) * m.wg, size_t(m.heads)}, lws[2] = {m.wg, 1};
  try {
    m.kernel->launch(q, 2, gws, lws, 1, &after, done, m.table, cl_int(m.merge_off), m.ws, cl_ulong(m.lse_off), o,
                     cl_int(o_dt), lse, cl_int(has_lse), sinks, cl_int(has_sinks), cl_int(m.heads), cl_int(m.head_dim),
                     cl_int(m.cb));
  } catch (...) {
    clReleaseEvent(after);
    throw;
  }
  clReleaseEvent(after);
}

}  // namespace ops
}  // namespace clattn

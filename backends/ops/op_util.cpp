#include "backends/ops/op_util.hpp"

#include <cmath>

#include "backends/params/variants.hpp"
#include "runtime/log.hpp"

namespace clattn::ops {

std::size_t buffer_bytes(cl_mem m, const char* what) {
  if (!m) rt::invalid(std::string(what) + ": null buffer");
  std::size_t n = 0;
  const cl_int err = clGetMemObjectInfo(m, CL_MEM_SIZE, sizeof n, &n, nullptr);
  if (err != CL_SUCCESS) rt::throw_cl(err, "clGetMemObjectInfo", what);
  return n;
}

Shape::Shape(std::initializer_list<int64_t> d, const char* unit_, const char* prefix_) : unit(unit_), prefix(prefix_) {
  for (int64_t x : d)
    if (rank < 4) dims[rank++] = x;
}

std::string Shape::str() const {
  std::string s = std::string(prefix) + "[";
  for (int i = 0; i < rank; ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  s += "]";
  if (*unit) s += std::string(" ") + unit;
  return s;
}

void require_buffer(cl_mem m, int64_t need, const char* what, const Shape& shape) {
  if (!m) rt::invalid(std::string(what) + ": null buffer (needs " + std::to_string(need) + " bytes for " + shape.str() + ")");
  const std::size_t have = buffer_bytes(m, what);
  if (need > 0 && have < uint64_t(need))
    rt::invalid(std::string(what) + ": buffer holds " + std::to_string(have) + " bytes, needs " +
                std::to_string(need) + " (" + shape.str() + ")");
}

void check_attention_options(const AttentionOptions& o) {
  if (!supported_head_dim(o.head_dim))
    throw Error(Status::Unsupported,
                "head_dim = " + std::to_string(o.head_dim) + " unsupported (64, 80, 96, 128, 192, 256)");
  if (o.num_qo_heads < 1) rt::invalid("num_qo_heads = " + std::to_string(o.num_qo_heads) + ", must be >= 1");
  if (o.num_qo_heads % o.num_kv_heads != 0)
    rt::invalid("num_qo_heads = " + std::to_string(o.num_qo_heads) + " is not a multiple of num_kv_heads = " +
                std::to_string(o.num_kv_heads));
  require_io_dtype(o.q_dtype, "q_dtype");
  require_io_dtype(o.o_dtype, "o_dtype");
  if (!std::isfinite(o.sm_scale)) rt::invalid("sm_scale is not finite");
  if (!(o.logits_soft_cap >= 0.0f) || !std::isfinite(o.logits_soft_cap))
    rt::invalid("logits_soft_cap = " + std::to_string(o.logits_soft_cap) + ", must be >= 0 and finite");
  if (o.window_left < -1) rt::invalid("window_left = " + std::to_string(o.window_left) + ", must be >= -1");
}

RowBytes row_bytes(int64_t rows, int64_t q_width, DType q_dtype, int64_t o_width, DType o_dtype, int64_t page_ids) {
  namespace ck = rt::checked;
  RowBytes b;
  b.q = ck::product({rows, q_width, int64_t(dtype_size(q_dtype))}, "q bytes");
  b.o = ck::product({rows, o_width, int64_t(dtype_size(o_dtype))}, "o bytes");
  b.lse = ck::mul(rows, 4, "lse bytes");
  b.page_ids = ck::mul(page_ids, 4, "page_ids bytes");
  return b;
}

ScoreScale score_scale(float sm_scale, float logits_soft_cap, int head_dim) {
  constexpr float kLog2e = 1.4426950408889634f;
  const float sm = sm_scale != 0.0f ? sm_scale : 1.0f / std::sqrt(float(head_dim));
  ScoreScale s;
  if (logits_soft_cap > 0.0f) {
    s.q_scale = sm, s.cap_log2 = logits_soft_cap * kLog2e, s.inv_cap = 1.0f / logits_soft_cap;
  } else {
    s.q_scale = sm * kLog2e;
  }
  return s;
}

bool is_float_io(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }
bool is_kv_dtype(DType t) { return is_float_io(t) || t == DType::FP8_E4M3 || t == DType::FP8_E5M2; }

void require_io_dtype(DType t, const std::string& what) {
  if (!is_float_io(t))
    throw Error(Status::Unsupported, what + ": dtype " + std::string(dtype_name(t)) + " unsupported (f32, f16, bf16)");
}


void check_page_table_shape(const PageTable& t, int cache_page_size) {
  if (t.page_size != cache_page_size)
    rt::invalid("page_table.page_size = " + std::to_string(t.page_size) + " != cache.page_size = " +
                std::to_string(cache_page_size));
  if (t.max_pages < 0) rt::invalid("page_table.max_pages = " + std::to_string(t.max_pages) + ", must be >= 0");
  if (t.page_table.size() < size_t(t.batch_size()) * size_t(t.max_pages))
    rt::invalid("page_table: " + std::to_string(t.page_table.size()) + " entries, needs batch_size x max_pages = " +
                std::to_string(int64_t(t.batch_size()) * t.max_pages));
}

void enqueue_marker(cl_command_queue q, cl_uint num_wait, const cl_event* wait, cl_event* event) {
  cl_event ev = nullptr;
  rt::check_cl(clEnqueueMarkerWithWaitList(q, num_wait, wait, event ? &ev : nullptr), "clEnqueueMarkerWithWaitList");
  if (event) *event = ev;
}

CounterSets::~CounterSets() {
  for (const Last& l : last_) {
    if (l.event) clReleaseEvent(l.event);
    if (l.queue) clReleaseCommandQueue(l.queue);
  }
}

CounterSets::Turn CounterSets::begin(cl_command_queue q, WaitList& wl) const {
  Turn t{next_, true, nullptr};
  next_ = (next_ + 1) % kSets;
  const Last& last = last_[t.set];
  cl_command_queue_properties props = 0;
  clGetCommandQueueInfo(q, CL_QUEUE_PROPERTIES, sizeof props, &props, nullptr);
  t.in_order = (props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE) == 0;
  if (last.event) {
    wl.push(last.event);  // the set's previous run, from an out-of-order queue
  } else if (last.queue && last.queue != q) {
    // Everything so far on the previous run's in-order queue; flushed so it makes progress.
    rt::check_cl(clEnqueueMarkerWithWaitList(last.queue, 0, nullptr, &t.marker), "clEnqueueMarkerWithWaitList",
                 "ordering a shared plan's counter set across queues");
    clFlush(last.queue);
    wl.push(t.marker);
  }
  return t;
}

void CounterSets::end(const Turn& t, cl_command_queue q, bool launched, cl_event ev, cl_event* event) const {
  Last& last = last_[t.set];
  if (t.marker) clReleaseEvent(t.marker);
  if (!launched) return;
  if (last.event) clReleaseEvent(last.event);
  last.event = nullptr;
  if (!t.in_order) {
    last.event = ev;  // the set's reference
    if (event) clRetainEvent(ev);
  }
  if (event) *event = ev;
  if (last.queue != q) {
    clRetainCommandQueue(q);
    if (last.queue) clReleaseCommandQueue(last.queue);
    last.queue = q;
  }
}

PlanTable::~PlanTable() {
  if (upload) {
    clWaitForEvents(1, &upload);
    clReleaseEvent(upload);
  }
  if (table && owned) clReleaseMemObject(table);
}

int64_t PlanTable::upload_host(detail::ContextImpl& c, cl_command_queue q, const std::string& what,
                               const PlanBuffer& into) {
  if (host.empty()) host.assign(8, 0);  // keep a valid buffer to bind
  cl_int err = CL_SUCCESS;
  const size_t bytes = host.size() * sizeof(int32_t);
  if (into.mem && into.bytes >= bytes) {
    table = into.mem;
    owned = false;
  } else {
    // Read-write: the fused split-K merge keeps its counter sets (CounterSets) in the table.
    table = rt::create_buffer(c.ctx, CL_MEM_READ_WRITE, bytes, &err);
    rt::check_cl(err, "clCreateBuffer", what + " (" + std::to_string(bytes) + " bytes)");
  }
  rt::check_cl(clEnqueueWriteBuffer(q ? q : c.queue, table, CL_FALSE, 0, bytes, host.data(), 0, nullptr, &upload),
               "clEnqueueWriteBuffer", what);
  return int64_t(bytes);
}

void add_emulation(const DeviceProfile& p, const std::string& feature, std::map<std::string, std::string>& defines) {
  static const std::map<std::string, std::string> names = {
      {"cl_khr_subgroups", "EMULATE_KHR_SUBGROUPS"},
      {"cl_intel_subgroups", "EMULATE_INTEL_SUBGROUPS"},
      {"cl_intel_subgroup_matrix_multiply_accumulate", "EMULATE_INTEL_DPAS"},
      {"amd_wmma", "EMULATE_AMD_WMMA"},
      {"amd_mfma", "EMULATE_AMD_MFMA"},
      {"nv_mma_sync", "EMULATE_NV_MMA"}};
  const auto it = names.find(feature);
  if (it == names.end()) throw Error(Status::Internal, "add_emulation: unknown feature " + feature);
  if (params::emulated(p, feature)) defines[it->second] = "1";
}

}  // namespace clattn::ops

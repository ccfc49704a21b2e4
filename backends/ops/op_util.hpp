// Helpers shared by the op dispatchers (append, decode, merge): argument checks that run
// before anything is enqueued, buffer-size checks through clGetMemObjectInfo, queue and
// wait-list plumbing, and kernel-variant selection with build-failure fallback.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/params/database.hpp"
#include "clattn/append_kv.hpp"
#include "clattn/context.hpp"
#include "clattn/metadata.hpp"
#include "clattn/paged_kv.hpp"
#include "clattn/rope.hpp"
#include "runtime/checked.hpp"
#include "runtime/context_impl.hpp"
#include "runtime/error.hpp"
#include "runtime/program_cache.hpp"

namespace clattn::ops {

// A tile parameter: the caller's override (the options' params map) if it names it, else
// the looked-up row's value, else `fallback` (for parameters not every row names).
inline int param_or(const params::Entry& e, const std::map<std::string, int>& over, const char* name, int fallback) {
  auto it = over.find(name);
  return it != over.end() ? it->second : e.get_or(name, fallback);
}
// The same for a parameter every row of the op names.
inline int param(const params::Entry& e, const std::map<std::string, int>& over, const char* name) {
  auto it = over.find(name);
  return it != over.end() ? it->second : e.get(name);
}

// The device's preferred float vector width (CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT; 16 on
// AVX-512 CPUs, 8 on AVX2), 1 when it does not say. CPU variants take it as their default
// vector width.
inline int preferred_float_width(const detail::ContextImpl& c) {
  cl_uint w = 0;
  if (clGetDeviceInfo(c.device, CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT, sizeof w, &w, nullptr) != CL_SUCCESS) return 1;
  return w ? int(w) : 1;
}

// The device keeps f32 denormals (CL_FP_DENORM in CL_DEVICE_SINGLE_FP_CONFIG): the CPU
// variants' fast fp8 decode is exact only then.
inline bool fp32_denorms(const detail::ContextImpl& c) {
  cl_device_fp_config fp = 0;
  clGetDeviceInfo(c.device, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, nullptr);
  return (fp & CL_FP_DENORM) != 0;
}

// Head dims the decode and extend kernels are built for.
inline bool supported_head_dim(int d) { return d == 64 || d == 80 || d == 96 || d == 128 || d == 192 || d == 256; }

// What decode and extend both take: heads, q/o dtypes, softmax scale, soft cap, window.
// Throws InvalidArgument / Unsupported naming the option.
struct AttentionOptions {
  int num_qo_heads, num_kv_heads, head_dim;
  DType q_dtype, o_dtype;
  float sm_scale, logits_soft_cap;
  int window_left;
};
void check_attention_options(const AttentionOptions& o);

// Byte sizes of the row buffers a run checks, fixed at plan time by checked arithmetic:
// q [rows, q_width] and o [rows, o_width] in their dtypes, lse [rows] f32, page ids int32.
struct RowBytes {
  int64_t q = 0, o = 0, lse = 0, page_ids = 0;
};
RowBytes row_bytes(int64_t rows, int64_t q_width, DType q_dtype, int64_t o_width, DType o_dtype, int64_t page_ids);

// The softmax scales as the kernels take them: scores in log2 units, so q is multiplied by
// sm_scale * log2(e); with a soft cap by sm_scale alone, and the kernel applies
// cap * log2(e) * tanh(s / cap). sm_scale 0 means 1 / sqrt(head_dim).
struct ScoreScale {
  float q_scale = 1.0f, cap_log2 = 0.0f, inv_cap = 0.0f;
};
ScoreScale score_scale(float sm_scale, float logits_soft_cap, int head_dim);

// Integer helpers for tile and page-size arithmetic.
inline bool is_pow2(int64_t x) { return x > 0 && (x & (x - 1)) == 0; }
// Smallest power of two >= x (x <= 2^30, else InvalidArgument naming `what`).
inline int pow2_ceil(int64_t x, const char* what = "tile size") { return rt::checked::pow2_ceil(x, what); }
// The CPU kernels' vector width from their VW parameter: 4, 8 or 16 as asked, or 0 = the
// device's preferred float width (preferred_float_width below) rounded up to a power of two
// in 4..16; then halved (not below 4) while it does not divide `dim` (0: no constraint).
// A bad VW is InvalidArgument naming `op`'s parameter.
inline int cpu_vector_width(int asked, int preferred, int dim, const char* op) {
  if (asked != 0 && asked != 4 && asked != 8 && asked != 16)
    rt::invalid(std::string(op) + " parameter VW = " + std::to_string(asked) + " must be 0 (device), 4, 8 or 16");
  int vw = asked != 0 ? asked : pow2_ceil(std::min(std::max(1, preferred), 16));
  vw = vw < 4 ? 4 : vw;
  while (vw > 4 && dim > 0 && dim % vw != 0) vw /= 2;
  return vw;
}
// The CPU kernels' PREFETCH_BUILTIN build option (cpu_vec.clh): "1" where clang's
// __builtin_prefetch takes __global pointers, i.e. PoCL's CPU targets (one flat address
// space); NVIDIA's compiler and address-space-strict ones reject it, and touch loads serve.
inline const char* prefetch_builtin(const DeviceProfile& p) {
  return p.is_cpu && p.platform_name.find("Portable Computing Language") != std::string::npos ? "1" : "0";
}
// Adds EMULATE_<NAME>=1 to a variant's defines where `feature` is emulated for tests
// (DeviceProfile::emulated, CLATTN_EMULATE) rather than present: the kernel then includes
// its emulation header. Defines: cl_khr_subgroups -> EMULATE_KHR_SUBGROUPS,
// cl_intel_subgroups -> EMULATE_INTEL_SUBGROUPS, cl_intel_subgroup_matrix_multiply_accumulate
// -> EMULATE_INTEL_DPAS, amd_wmma -> EMULATE_AMD_WMMA, amd_mfma -> EMULATE_AMD_MFMA,
// nv_mma_sync -> EMULATE_NV_MMA (the decode tensor-core kernels' PTX helpers).
void add_emulation(const DeviceProfile& p, const std::string& feature, std::map<std::string, std::string>& defines);
inline int log2_int(int x) {  // ceil(log2(x)) for 1 <= x <= 2^30
  int l = 0;
  while (l < 30 && (1 << l) < x) ++l;
  return l;
}

inline cl_command_queue queue_of(const Context& ctx, const Enqueue& e) { return e.queue ? e.queue : ctx.cl_queue(); }

// Bytes a cl_mem holds (non-blocking query). A null buffer is rejected naming `what`.
std::size_t buffer_bytes(cl_mem m, const char* what);

// What a buffer must hold, for messages: "<prefix>[d0, d1, ...] <unit>". Formatted only when
// a check fails, so the run path builds no string on success.
struct Shape {
  Shape(std::initializer_list<int64_t> d, const char* unit_ = "", const char* prefix_ = "");
  std::string str() const;
  int64_t dims[4] = {0, 0, 0, 0};
  int rank = 0;
  const char* unit;
  const char* prefix;
};
// Throws InvalidArgument "<what>: buffer holds N bytes, needs M (<shape>)" when m is null or
// holds fewer than `need` bytes.
void require_buffer(cl_mem m, int64_t need, const char* what, const Shape& shape);

bool is_float_io(DType t);  // f32 f16 bf16
bool is_kv_dtype(DType t);  // f32 f16 bf16 fp8
// Rejects `t` unless allowed, naming the argument.
void require_io_dtype(DType t, const std::string& what);

// Checks a cache descriptor (positive shapes, supported page size and dtype, strides that
// fit) and returns nothing; `what` names the argument in messages. In paged_kv.cpp.
// allow_int8 / allow_int4: the op reads int8 / int4 caches (append_kv, decode, extend,
// cascade); elsewhere they are Unsupported. int4 also needs quant_group
// 32/64/128 dividing head_dim and even strides.
void check_paged_kv(const PagedKV& c, const std::string& what, bool allow_int8 = false, bool allow_int4 = false);

// The scale arguments of an op that reads or writes cache c (append_kv, decode_run; `fn`
// prefixes the messages): an int8 / int4 cache takes k_scale = v_scale = 1; the per-KV-head
// scale arrays come in pairs, not with int8 / int4, each [Hkv] f32. In paged_kv.cpp.
void check_kv_scales(const PagedKV& c, float k_scale, float v_scale, cl_mem k_head_scales, cl_mem v_head_scales,
                     const std::string& fn);
// An int8 / int4 cache's two scale caches hold `bytes` each (c.scale_required_bytes());
// nothing for other dtypes. In paged_kv.cpp.
void require_scale_caches(const PagedKV& c, int64_t bytes, cl_mem k_scale_cache, cl_mem v_scale_cache);


// append_kv's argument checks (rope_append_kv shares them): resolved source strides, and
// whether there is nothing to write (no tokens or no pages). In append_kv.cpp.
struct AppendChecked {
  int64_t st = 0, sh = 0;
  bool empty = false;
};
AppendChecked check_append_kv(const AppendKVArgs& a);

// A RoPE configuration's checks for rows of head_dim (rotary dim, style, theta / scale or
// the cos/sin cache's size); `what` prefixes the messages. In rope.cpp.
void check_rope_config(const RopeConfig& r, int head_dim, const std::string& what);

// A page table's own shape: page size equal to the cache's, max_pages >= 0, enough
// entries for batch_size x max_pages. Messages name page_table's fields.
void check_page_table_shape(const PageTable& t, int cache_page_size);

// The wait list of an op's first command: the caller's events plus `extra` (may be null).
// Up to kInline events live in the object (the run path allocates nothing); more spill to
// the heap.
class WaitList {
 public:
  WaitList(const Enqueue& e, cl_event extra) {
    for (cl_uint i = 0; i < e.num_wait; ++i) push(e.wait[i]);
    if (extra) push(extra);
  }
  void push(cl_event ev) {
    if (n_ < kInline) {
      inline_[n_++] = ev;
      return;
    }
    if (heap_.empty()) heap_.assign(inline_, inline_ + n_);
    heap_.push_back(ev);
    ++n_;
  }
  cl_uint size() const { return cl_uint(n_); }
  const cl_event* data() const { return n_ == 0 ? nullptr : n_ <= kInline ? inline_ : heap_.data(); }

 private:
  static constexpr size_t kInline = 8;
  cl_event inline_[kInline] = {};
  std::vector<cl_event> heap_;
  size_t n_ = 0;
};

// A marker after `wait` standing for an op with no work, so callers can still order on it;
// `event` (nullable) receives it.
void enqueue_marker(cl_command_queue q, cl_uint num_wait, const cl_event* wait, cl_event* event);
// The same for the caller's Enqueue, only when it waits on something or wants an event.
inline void marker_if_needed(cl_command_queue q, const Enqueue& e) {
  if (e.event || e.num_wait) enqueue_marker(q, e.num_wait, e.wait, e.event);
}

// A plan's device table: `host` words uploaded once with a non-blocking write into a
// plan-owned buffer. Plan states derive from it; the destructor waits for the write
// before the host source goes away.
struct PlanTable {
  cl_mem table = nullptr;
  std::vector<int32_t> host;  // source of the non-blocking upload
  cl_event upload = nullptr;
  bool owned = true;          // false: `table` is the caller's PlanBuffer

  PlanTable() = default;
  PlanTable(const PlanTable&) = delete;
  PlanTable& operator=(const PlanTable&) = delete;
  ~PlanTable();
  // Enqueues the write of `host` on q (nullptr = the context's queue) into the caller's
  // buffer when it is big enough, else into a table it creates. Returns the table bytes.
  int64_t upload_host(detail::ContextImpl& c, cl_command_queue q, const std::string& what, const PlanBuffer& into = {});
};

// The fused split-K merge's counters (decode, MLA): kSets copies in the plan's table, each
// left zero by the kernel that used it. A run takes the next set and is ordered after that
// set's previous run, so one plan may run on several queues at once (up to kSets runs
// overlap) without two runs sharing counters, and nothing is zeroed per run. On one
// in-order queue the order is the queue's own: no event, no extra wait (H100: an event
// per run and a wait on it cost split decode ~3 us a call).
struct CounterSets {
  static constexpr int kSets = 4;
  int base = 0;     // table index of set 0
  int per_set = 0;  // counters in one set (0: no fused merge)

  CounterSets() = default;
  CounterSets(const CounterSets&) = delete;
  CounterSets& operator=(const CounterSets&) = delete;
  ~CounterSets();
  // Runs launch(first_counter, num_wait, wait, event) with the next set, the wait list
  // extended by what orders it after that set's previous run; `event` (nullable) receives
  // the launch's event.
  template <class Launch>
  void run(cl_command_queue q, WaitList wl, cl_event* event, Launch&& launch) const {
    std::lock_guard<std::mutex> lock(mu_);
    const Turn t = begin(q, wl);
    cl_event ev = nullptr;
    try {
      launch(base + t.set * per_set, wl.size(), wl.data(), (event || !t.in_order) ? &ev : nullptr);
    } catch (...) {
      end(t, q, false, nullptr, nullptr);
      throw;
    }
    end(t, q, true, ev, event);
  }

 private:
  struct Turn {
    int set;
    bool in_order;
    cl_event marker;  // ordering on another queue (released by end)
  };
  Turn begin(cl_command_queue q, WaitList& wl) const;  // under mu_
  // `launched` false: the launch failed and the set keeps its previous run.
  void end(const Turn& t, cl_command_queue q, bool launched, cl_event ev, cl_event* event) const;
  struct Last {
    cl_command_queue queue = nullptr;  // retained: a later run on another queue waits on it
    cl_event event = nullptr;          // the run's kernel, kept only for out-of-order queues
  };
  mutable std::mutex mu_;
  mutable int next_ = 0;
  mutable Last last_[kSets];
};


}  // namespace clattn::ops

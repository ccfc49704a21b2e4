// Recording: kernels with their arguments set once, in a cl_khr_command_buffer when it can
// be used, else replayed launch by launch. The extension's entry points are looked up per
// platform (clGetExtensionFunctionAddressForPlatform) with this file's own signatures, the
// ones every provisional version (0.9.x) shares for the calls used here.
#include "runtime/recording.hpp"

#include <cstring>
#include <string>

#include "runtime/context_impl.hpp"
#include "runtime/env.hpp"
#include "runtime/error.hpp"
#include "runtime/log.hpp"

namespace clattn::rt {

namespace {
using cb_t = void*;
constexpr cl_uint kDeviceCbCapabilities = 0x12A9;       // CL_DEVICE_COMMAND_BUFFER_CAPABILITIES_KHR
constexpr cl_uint kDeviceCbRequiredQueueProps = 0x12AA; // CL_DEVICE_COMMAND_BUFFER_REQUIRED_QUEUE_PROPERTIES_KHR
constexpr cl_bitfield kCapSimultaneousUse = 1 << 2;     // CL_COMMAND_BUFFER_CAPABILITY_SIMULTANEOUS_USE_KHR
constexpr cl_properties kCbFlags = 0x1293;              // CL_COMMAND_BUFFER_FLAGS_KHR
constexpr cl_bitfield kCbSimultaneousUse = 1 << 0;      // CL_COMMAND_BUFFER_SIMULTANEOUS_USE_KHR
}  // namespace

struct Recording::Api {
  cb_t(CL_API_CALL* create)(cl_uint, const cl_command_queue*, const cl_properties*, cl_int*) = nullptr;
  cl_int(CL_API_CALL* finalize)(cb_t) = nullptr;
  cl_int(CL_API_CALL* release)(cb_t) = nullptr;
  cl_int(CL_API_CALL* enqueue)(cl_uint, cl_command_queue*, cb_t, cl_uint, const cl_event*, cl_event*) = nullptr;
  cl_int(CL_API_CALL* ndrange)(cb_t, cl_command_queue, const cl_properties*, cl_kernel, cl_uint, const size_t*,
                               const size_t*, const size_t*, cl_uint, const cl_uint*, cl_uint*, void**) = nullptr;

  // nullptr with *why set when the platform lacks an entry point.
  static std::shared_ptr<const Api> load(cl_platform_id p, std::string* why) {
    auto a = std::make_shared<Api>();
    auto get = [&](const char* name, auto& fn) {
      void* f = clGetExtensionFunctionAddressForPlatform(p, name);
      std::memcpy(&fn, &f, sizeof f);
      if (!f) *why = std::string("the platform has no ") + name;
      return f != nullptr;
    };
    if (!get("clCreateCommandBufferKHR", a->create) || !get("clFinalizeCommandBufferKHR", a->finalize) ||
        !get("clReleaseCommandBufferKHR", a->release) || !get("clEnqueueCommandBufferKHR", a->enqueue) ||
        !get("clCommandNDRangeKernelKHR", a->ndrange))
      return nullptr;
    return a;
  }
};

std::string command_buffer_version(cl_device_id device) {
  size_t n = 0;
  if (clGetDeviceInfo(device, CL_DEVICE_EXTENSIONS_WITH_VERSION, 0, nullptr, &n) != CL_SUCCESS || n == 0)
    return "?";
  std::vector<cl_name_version> v(n / sizeof(cl_name_version));
  if (clGetDeviceInfo(device, CL_DEVICE_EXTENSIONS_WITH_VERSION, n, v.data(), nullptr) != CL_SUCCESS) return "?";
  for (const auto& e : v)
    if (std::strcmp(e.name, "cl_khr_command_buffer") == 0)
      return std::to_string(CL_VERSION_MAJOR(e.version)) + "." + std::to_string(CL_VERSION_MINOR(e.version)) + "." +
             std::to_string(CL_VERSION_PATCH(e.version));
  return "?";
}

Recording::Recording(const detail::ContextImpl& c, cl_command_queue q, bool command_buffer) : ctx_(c.ctx), q_(q) {
  if (!command_buffer) return;
  if (env("CLATTN_COMMAND_BUFFER") == "0") {
    drop_command_buffer("CLATTN_COMMAND_BUFFER=0");
    return;
  }
  if (c.profile.command_buffer.empty()) {
    drop_command_buffer("the device lacks cl_khr_command_buffer");
    return;
  }
  api_ = Api::load(c.platform, &why_);
  if (!api_) {
    drop_command_buffer(why_);
    return;
  }
  // The queue must have the properties the device requires of command-buffer queues.
  cl_bitfield required = 0, caps = 0;
  cl_command_queue_properties props = 0;
  clGetDeviceInfo(c.device, kDeviceCbRequiredQueueProps, sizeof required, &required, nullptr);
  clGetDeviceInfo(c.device, kDeviceCbCapabilities, sizeof caps, &caps, nullptr);
  clGetCommandQueueInfo(q, CL_QUEUE_PROPERTIES, sizeof props, &props, nullptr);
  if ((required & ~cl_bitfield(props)) != 0) {
    drop_command_buffer("the queue lacks the properties the device requires (" + std::to_string(required) + ")");
    return;
  }
  simultaneous_ = (caps & kCapSimultaneousUse) != 0;
  const cl_properties with_flags[] = {kCbFlags, kCbSimultaneousUse, 0};
  cl_int err = CL_SUCCESS;
  cb_ = api_->create(1, &q_, simultaneous_ ? with_flags : nullptr, &err);
  if (err != CL_SUCCESS || !cb_) {
    cb_ = nullptr;
    drop_command_buffer("clCreateCommandBufferKHR failed (" + std::to_string(err) + ")");
  }
}

Recording::~Recording() {
  if (last_replay_) clWaitForEvents(1, &last_replay_), clReleaseEvent(last_replay_);
  if (cb_) api_->release(cb_);
  for (auto& c : cmds_) clReleaseKernel(c.k);
  if (done_) clReleaseEvent(done_);
}

void Recording::drop_command_buffer(const std::string& why) {
  if (cb_) api_->release(cb_);
  cb_ = nullptr;
  why_ = why;
  log().info("recording: kernels replayed one launch each ({})", why);
}

void Recording::add(cl_kernel k, cl_uint dims, const size_t* global, const size_t* local) {
  if (finalized_) {
    clReleaseKernel(k);
    invalid("recording: a launch after the recording was finalised");
  }
  Cmd c{k, dims, {1, 1, 1}, {1, 1, 1}, local != nullptr};
  for (cl_uint d = 0; d < dims && d < 3; ++d) c.global[d] = global[d], c.local[d] = local ? local[d] : 1;
  cmds_.push_back(c);
  if (!cb_) return;
  // Each command waits for the one before it (the queue's order, kept inside the buffer).
  cl_uint sync = 0;
  const cl_int err = api_->ndrange(cb_, nullptr, nullptr, k, dims, nullptr, c.global, local ? c.local : nullptr,
                                   cmds_.size() > 1 ? 1 : 0, cmds_.size() > 1 ? &last_sync_ : nullptr, &sync, nullptr);
  if (err != CL_SUCCESS) return drop_command_buffer("clCommandNDRangeKernelKHR failed (" + std::to_string(err) + ")");
  last_sync_ = sync;
}

void Recording::finalize() {
  if (finalized_) return;
  finalized_ = true;
  if (cb_) {
    const cl_int err = api_->finalize(cb_);
    if (err != CL_SUCCESS) drop_command_buffer("clFinalizeCommandBufferKHR failed (" + std::to_string(err) + ")");
  }
}

void Recording::replay(cl_uint num_wait, const cl_event* wait, cl_event* event) {
  if (!finalized_) invalid("recording: replay before the recording was finalised");
  if (cb_) {
    // Without simultaneous use the buffer may not be enqueued while its last replay is pending.
    if (!simultaneous_ && last_replay_) {
      check_cl(clWaitForEvents(1, &last_replay_), "clWaitForEvents", "previous replay of a command buffer");
      clReleaseEvent(last_replay_);
      last_replay_ = nullptr;
    }
    cl_event ev = nullptr;
    const bool want = event || !simultaneous_;
    check_cl(api_->enqueue(0, nullptr, cb_, num_wait, wait, want ? &ev : nullptr), "clEnqueueCommandBufferKHR",
             "replay");
    if (!simultaneous_) {
      last_replay_ = ev;
      if (event) clRetainEvent(ev);
    }
    if (event) *event = ev;
    return;
  }
  if (cmds_.empty()) {
    check_cl(clEnqueueMarkerWithWaitList(q_, num_wait, wait, event), "clEnqueueMarkerWithWaitList", "replay");
    return;
  }
  for (size_t i = 0; i < cmds_.size(); ++i) {
    const Cmd& c = cmds_[i];
    const bool first = i == 0, last = i + 1 == cmds_.size();
    const cl_int err = clEnqueueNDRangeKernel(q_, c.k, c.dims, nullptr, c.global, c.has_local ? c.local : nullptr,
                                              first ? num_wait : 0, first ? wait : nullptr, last ? event : nullptr);
    if (err != CL_SUCCESS) throw_cl(err, "clEnqueueNDRangeKernel", "replay of recorded launch " + std::to_string(i));
  }
}

cl_event Recording::complete_event() {
  if (!done_) {
    cl_int err = CL_SUCCESS;
    done_ = clCreateUserEvent(ctx_, &err);
    check_cl(err, "clCreateUserEvent", "recording");
    clSetUserEventStatus(done_, CL_COMPLETE);
  }
  clRetainEvent(done_);
  return done_;
}

CaptureScope::CaptureScope(Recording& r) : prev_(tls_recording) { tls_recording = &r; }
CaptureScope::~CaptureScope() { tls_recording = prev_; }

}  // namespace clattn::rt

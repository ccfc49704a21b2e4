// Launch capture (CUDA stream capture's idea, on OpenCL): while a Recording is active on a
// thread for a queue, every Kernel::launch from that thread on that queue is recorded
// instead of enqueued: the arguments go into a kernel object of the command's own (set once,
// never again), and the launch into a cl_khr_command_buffer where the device has one. A
// replay is then one clEnqueueCommandBufferKHR, or without the extension one
// clEnqueueNDRangeKernel per recorded launch with nothing else on the host (docs/replay.md).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "clattn/context.hpp"

namespace clattn::detail {
class ContextImpl;
}

namespace clattn::rt {

class Recording {
 public:
  // command_buffer: use cl_khr_command_buffer where the device and the queue allow it.
  // Records launches on `q` of c's context (c must outlive the recording).
  Recording(const detail::ContextImpl& c, cl_command_queue q, bool command_buffer);
  ~Recording();
  Recording(const Recording&) = delete;
  Recording& operator=(const Recording&) = delete;

  cl_command_queue queue() const { return q_; }
  // Records a launch of `k` (a kernel object this recording now owns, its arguments set).
  void add(cl_kernel k, cl_uint dims, const size_t* global, const size_t* local);
  // Ends the recording (the command buffer is finalised); no add() after it.
  void finalize();
  // Enqueues the recorded launches on the recording's queue after `wait`; `event` receives
  // the last one's event.
  void replay(cl_uint num_wait, const cl_event* wait, cl_event* event);
  bool uses_command_buffer() const { return cb_ != nullptr; }
  std::size_t size() const { return cmds_.size(); }
  // Why the command buffer is not used (empty when it is, or was not asked for).
  const std::string& fallback_reason() const { return why_; }
  // An event in the complete state, for launches that ask for one while recorded (retained
  // for the caller, who releases it).
  cl_event complete_event();

 private:
  struct Cmd {
    cl_kernel k;
    cl_uint dims;
    size_t global[3], local[3];
    bool has_local;
  };
  void drop_command_buffer(const std::string& why);

  cl_context ctx_;
  cl_command_queue q_;
  std::vector<Cmd> cmds_;
  struct Api;
  std::shared_ptr<const Api> api_;
  void* cb_ = nullptr;            // cl_command_buffer_khr
  unsigned last_sync_ = 0;        // sync point of the last recorded command
  bool simultaneous_ = false;     // the buffer may be enqueued while pending
  cl_event last_replay_ = nullptr;  // without simultaneous use: the pending replay
  cl_event done_ = nullptr;
  bool finalized_ = false;
  std::string why_;
};

// The recording launches on `q` from this thread go to, or nullptr.
inline thread_local Recording* tls_recording = nullptr;
inline Recording* recording_for(cl_command_queue q) {
  Recording* r = tls_recording;
  return r && r->queue() == q ? r : nullptr;
}

// Makes `r` this thread's recording for its lifetime (one at a time per thread).
class CaptureScope {
 public:
  explicit CaptureScope(Recording& r);
  ~CaptureScope();
  CaptureScope(const CaptureScope&) = delete;
  CaptureScope& operator=(const CaptureScope&) = delete;

 private:
  Recording* prev_;
};

// The version of the device's cl_khr_command_buffer (which it must have) as "major.minor.patch",
// "?" where the driver does not report it.
std::string command_buffer_version(cl_device_id device);

}  // namespace clattn::rt

// Capture and replay of op calls (CUDA graphs' stream capture, on OpenCL): between begin()
// and end(), every kernel an op would enqueue on the capture's queue from this thread is
// recorded instead, with its arguments; replay() then enqueues the whole sequence with one
// clEnqueueCommandBufferKHR where the device has cl_khr_command_buffer, else one
// clEnqueueNDRangeKernel per launch with nothing else on the host (arguments set once, in
// kernel objects of the capture's own). An op's host checks run at capture time, not per
// replay; what its launches waited for has finished when begin..end returns. The recorded
// launches keep their buffers and values: run-to-run changes must come through device
// buffers (decode_plan_fixed + decode_refresh for decode metadata). Replays are ordered on
// the queue like any command. The engine backends capture whole decode steps with it
// (AttentionBackend::begin_capture). docs/replay.md.
#pragma once
#include <memory>
#include <string>

#include "clattn/context.hpp"

namespace clattn {

namespace detail { struct CaptureState; }

class CLATTN_API Capture {
 public:
  // queue nullptr = the context's queue; command_buffer false: launch-by-launch replay even
  // where the extension exists.
  explicit Capture(const Context& ctx, cl_command_queue queue = nullptr, bool command_buffer = true);
  ~Capture();
  Capture(Capture&&) noexcept;
  Capture& operator=(Capture&&) noexcept;
  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;

  void begin();  // records this thread's launches on the queue (once per Capture)
  void end();    // stops recording and finalises
  // Enqueues the recording after e.wait; e.event receives its last command. e.queue must be
  // null or the capture's queue.
  void replay(const Enqueue& e = {});

  int launches() const;
  bool uses_command_buffer() const;
  std::string fallback_reason() const;  // why not a command buffer (empty when it is one)

 private:
  std::unique_ptr<detail::CaptureState> s_;
};

// Records an engine's own kernel launch into the capture active on this thread for `queue`
// (a Capture, or an AttentionBackend between begin_capture and end_capture), in order with
// clattn's launches: the engine's projections between attention layers then replay within
// the same recording. The arguments `kernel` has now are what every replay uses: clattn
// records a clone of it (clCloneKernel) where the driver can clone, else retains `kernel`
// itself, whose arguments must then stay unchanged while the recording lives. Throws
// InvalidArgument when nothing is capturing on `queue` on this thread.
CLATTN_API void capture_kernel(cl_command_queue queue, cl_kernel kernel, cl_uint work_dim, const size_t* global_size,
                               const size_t* local_size);
// Whether this thread is capturing launches on `queue`.
CLATTN_API bool is_capturing(cl_command_queue queue);

// The device's cl_khr_command_buffer version ("0.9.4"), empty without the extension.
CLATTN_API std::string command_buffer_version(const Context& ctx);

}  // namespace clattn

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

// The device's cl_khr_command_buffer version ("0.9.4"), empty without the extension.
CLATTN_API std::string command_buffer_version(const Context& ctx);

}  // namespace clattn

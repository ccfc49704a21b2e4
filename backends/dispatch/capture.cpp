// clattn::Capture: the public face of rt::Recording (runtime/recording.hpp).
#include "clattn/capture.hpp"

#include "runtime/context_impl.hpp"
#include "runtime/error.hpp"
#include "runtime/recording.hpp"

namespace clattn {

namespace detail {
struct CaptureState {
  rt::Recording rec;
  std::unique_ptr<rt::CaptureScope> scope;
  bool begun = false, ended = false;
  CaptureState(ContextImpl& c, cl_command_queue q, bool cb) : rec(c, q, cb) {}
};
}  // namespace detail

Capture::Capture(const Context& ctx, cl_command_queue queue, bool command_buffer) {
  auto& c = rt::impl(ctx);
  s_ = std::make_unique<detail::CaptureState>(c, queue ? queue : c.queue, command_buffer);
}
Capture::~Capture() = default;
Capture::Capture(Capture&&) noexcept = default;
Capture& Capture::operator=(Capture&&) noexcept = default;

void Capture::begin() {
  if (!s_) rt::invalid("Capture::begin: moved-from capture");
  if (s_->begun) rt::invalid("Capture::begin: this capture has begun already (one recording per Capture)");
  if (rt::tls_recording) rt::invalid("Capture::begin: this thread is already capturing");
  s_->begun = true;
  s_->scope = std::make_unique<rt::CaptureScope>(s_->rec);
}

void Capture::end() {
  if (!s_ || !s_->begun || s_->ended) rt::invalid("Capture::end without Capture::begin");
  if (rt::tls_recording != &s_->rec) rt::invalid("Capture::end: called from another thread than begin");
  s_->scope.reset();
  s_->ended = true;
  s_->rec.finalize();
}

void Capture::replay(const Enqueue& e) {
  if (!s_ || !s_->ended) rt::invalid("Capture::replay before Capture::end");
  if (e.queue && e.queue != s_->rec.queue()) rt::invalid("Capture::replay: Enqueue.queue is not the capture's queue");
  s_->rec.replay(e.num_wait, e.wait, e.event);
}

int Capture::launches() const { return s_ ? int(s_->rec.size()) : 0; }
bool Capture::uses_command_buffer() const { return s_ && s_->rec.uses_command_buffer(); }
std::string Capture::fallback_reason() const { return s_ ? s_->rec.fallback_reason() : std::string(); }

void capture_kernel(cl_command_queue queue, cl_kernel kernel, cl_uint work_dim, const size_t* global_size,
                    const size_t* local_size) {
  rt::Recording* r = queue ? rt::recording_for(queue) : nullptr;
  if (!r) rt::invalid("capture_kernel: no capture is active on this queue on this thread");
  if (!kernel) rt::invalid("capture_kernel: kernel is null");
  if (work_dim < 1 || work_dim > 3) rt::invalid("capture_kernel: work_dim = " + std::to_string(work_dim) + ", must be 1..3");
  if (!global_size) rt::invalid("capture_kernel: global_size is null");
  cl_int err = CL_SUCCESS;
  cl_kernel k = clCloneKernel(kernel, &err);  // a copy with the arguments as they are now
  if (err != CL_SUCCESS || !k) {
    rt::check_cl(clRetainKernel(kernel), "clRetainKernel", "capture_kernel");
    k = kernel;
  }
  r->add(k, work_dim, global_size, local_size);
}

bool is_capturing(cl_command_queue queue) { return queue && rt::recording_for(queue) != nullptr; }

std::string command_buffer_version(const Context& ctx) { return rt::command_buffer_version(rt::impl(ctx).device); }

}  // namespace clattn

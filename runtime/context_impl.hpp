// The object behind clattn::Context: OpenCL handles, the profile, the program cache.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <mutex>
#include <vector>

#include "clattn/context.hpp"
#include "runtime/program_cache.hpp"

namespace clattn::detail {

class ContextImpl {
 public:
  // Takes one reference on each handle (created or retained by the caller of this ctor).
  // `options` adjust the queried profile (ContextOptions::variants).
  ContextImpl(cl_platform_id platform, cl_context ctx, cl_device_id dev, cl_command_queue q, bool adopted,
              const ContextOptions& options = {});
  ~ContextImpl();
  ContextImpl(const ContextImpl&) = delete;
  ContextImpl& operator=(const ContextImpl&) = delete;

  cl_platform_id platform = nullptr;
  cl_context ctx = nullptr;
  cl_device_id device = nullptr;
  cl_command_queue queue = nullptr;
  bool adopted = false;
  bool profiling = false;
  DeviceProfile profile;
  rt::ProgramCache programs;
  // One int32 of DeviceFault bits that bounds-checking kernels OR into (atomically, from
  // any queue) when they skip an index outside its pool; zero at creation.
  cl_mem faults = nullptr;
  // Serialises self-validation checks (backends/dispatch/self_validation.cpp): each program's
  // check runs once per context, whichever thread plans first.
  std::mutex self_validation_mu;

  // Runs `hook` when the context goes away, before its OpenCL objects are released, once
  // however often it is added (no allocation after the first: callers add it on run paths).
  // For libraries that keep programs of this cl_context in a process-wide cache (CLBlast):
  // they drop them while the context lives, instead of at process exit, after the context
  // (and, in some runtimes, the driver) is gone.
  void on_release(void (*hook)());

  // What upper layers remember per context (backends/dispatch: the variant each candidate list
  // settled on), type-erased so the runtime knows nothing of them; under memo_mu.
  std::mutex memo_mu;
  std::map<std::string, std::shared_ptr<const void>> memo;

 private:
  std::mutex release_mu;
  std::vector<void (*)()> release_hooks;


  void release();  // drops every handle (destructor, failed constructor)
};

}  // namespace clattn::detail

namespace clattn::rt {
// clCreateBuffer that counts into device_allocation_count() (every library allocation);
// `host` for CL_MEM_COPY_HOST_PTR / USE_HOST_PTR.
cl_mem create_buffer(cl_context ctx, cl_mem_flags flags, std::size_t bytes, cl_int* err, void* host = nullptr);
// Shorthand used by ops: the impl of a public Context.
inline detail::ContextImpl& impl(const Context& c) { return *c.impl(); }
}  // namespace clattn::rt

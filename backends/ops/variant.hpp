// Kernel variants as data, and the one function that picks and builds one.
//
// Each op lists its candidates best first (the generic kernel last): what the variant is
// (name, source file, entry point, build options from the op's parameters), whether it
// applies to this device and shape (`why_not` empty) and how it launches (work-items per
// group, the host's estimate of its local memory). select_and_build() builds them in order
// and checks the driver's figures for the compiled kernel against the launch and the device:
// the work-group size it allows (CL_KERNEL_WORK_GROUP_SIZE) and the local memory it uses
// (CL_KERNEL_LOCAL_MEM_SIZE). A candidate that does not apply, fails to build (logged with its
// build log) or does not fit is skipped for the next; the estimates only pre-filter
// parameter choices, the driver decides. A variant that has never run on hardware of its
// kind (params::needs_self_validation) must also pass the op's self-validation check on the
// device (ops/self_validation.hpp) before it is handed out.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backends/ops/self_validation.hpp"
#include "runtime/context_impl.hpp"
#include "runtime/program_cache.hpp"

namespace clattn::ops {

struct Variant {
  std::string name;         // "generic", "nv_ptx_shfl", "nv_mma_sync", "nv_wgmma" (params/variants.hpp)
  std::string file;         // cl_kernels/<file>
  std::string kernel;       // entry point
  std::string options;      // build options (rt::make_options)
  std::string why_not;      // non-empty: the variant does not apply here (capability, shape, parameters)
  size_t wg = 0;            // work-items per group at launch
  uint64_t local_bytes = 0; // the host's estimate of the kernel's __local bytes (0: not estimated)
  // false where the driver's work-group limit is for another register budget than the one
  // the build pins (a PTX .maxnreg cap): the limit is not checked.
  bool check_wg = true;
};

struct BuiltVariant {
  Variant variant;
  std::shared_ptr<rt::Program> program;
  rt::Kernel* kernel = nullptr;
  uint64_t driver_local_bytes = 0;  // CL_KERNEL_LOCAL_MEM_SIZE of the compiled kernel
};

// The first candidate that applies, builds, fits and, where listed, passes self-validation
// (`check`: the op's, none = such a variant is not used); throws the last reason
// (BuildFailed, Unsupported) when none does. `op` names the op in logs and messages.
BuiltVariant select_and_build(detail::ContextImpl& c, const std::string& op, const std::vector<Variant>& cands,
                              const SelfCheck& check = {});

// The last choices of select_and_build in this process (newest last, at most 64): the op,
// the variant, the host's local-memory estimate and the driver's figure. Lets tests hold
// the estimates to the driver.
struct BuildRecord {
  std::string op, variant;
  uint64_t estimate = 0, driver = 0;
};
std::vector<BuildRecord> recent_builds();

}  // namespace clattn::ops

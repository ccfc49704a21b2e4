// The merge program (cl_kernels/merge_state.cl), shared by the public merge ops and the
// split-K pass of paged decode: one build per context, work-group size from the "merge"
// parameter rows.
#pragma once
#include <memory>

#include "runtime/context_impl.hpp"
#include "runtime/program_cache.hpp"

namespace clattn::ops {

struct MergeProgram {
  std::shared_ptr<rt::Program> program;
  size_t wg = 64;
};
// Builds (or fetches) the merge program for this context.
MergeProgram merge_program(detail::ContextImpl& c);

}  // namespace clattn::ops

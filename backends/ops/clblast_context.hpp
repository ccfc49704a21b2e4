// CLBlast keeps the programs it compiles in a process-wide cache keyed by cl_context. A
// clattn context that ran CLBlast asks for that cache to be cleared when it goes away, while
// its cl_context still lives, so no CLBlast program outlives it (at process exit the cache's
// destructor would otherwise release programs of contexts long gone, which some runtimes,
// Oclgrind among them, do not survive). CLBlast can only clear all of it: another live
// context rebuilds its GEMM programs on its next call.
#pragma once
#ifdef CLATTN_HAVE_CLBLAST
#include <clblast.h>

#include "runtime/context_impl.hpp"

namespace clattn::ops {

inline void clblast_clear_cache() { clblast::ClearCache(); }

inline void clblast_programs_follow(const Context& ctx) { rt::impl(ctx).on_release(&clblast_clear_cache); }

}  // namespace clattn::ops
#endif

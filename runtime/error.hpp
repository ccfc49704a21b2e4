// OpenCL error names and the checks that turn a failed call into clattn::Error.
#pragma once
#include <string>

#include "clattn/context.hpp"
#include "clattn/types.hpp"

namespace clattn::rt {

const char* cl_error_name(cl_int err) noexcept;

[[noreturn]] void throw_cl(cl_int err, const char* call, const std::string& context = {});

inline void check_cl(cl_int err, const char* call, const std::string& context = {}) {
  if (err != CL_SUCCESS) throw_cl(err, call, context);
}

[[noreturn]] inline void fail(Status s, const std::string& msg) { throw Error(s, msg); }
[[noreturn]] inline void invalid(const std::string& msg) { throw Error(Status::InvalidArgument, msg); }

}  // namespace clattn::rt

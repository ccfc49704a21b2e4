// Buffers sized by the caller: a size check against the device's limits, and a first touch
// so that platforms which back memory lazily (PoCL) fail at creation, not at first use.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "clattn/context.hpp"

namespace clattn::rt {

// Throws OutOfMemory naming `what` when `bytes` is more than the device takes in one buffer
// (CL_DEVICE_MAX_MEM_ALLOC_SIZE); drivers may accept such a size and fail only at first use.
void check_alloc_size(const DeviceProfile& p, std::size_t bytes, const std::string& what);

// A buffer to zero at creation.
struct NewBuffer {
  cl_mem mem;
  std::size_t bytes;
  std::string what;
};

// Zero-fills `bufs` on `q` and waits for these fills only (no clFinish). A platform that
// cannot back one fails here with OutOfMemory naming it; new buffers start with zeros.
void zero_fill(cl_command_queue q, const std::vector<NewBuffer>& bufs);

}  // namespace clattn::rt

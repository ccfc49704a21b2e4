// The OpenCL sources: embedded at build time (cl_kernels/), or read from CLATTN_KERNEL_DIR.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace clattn::rt {

struct EmbeddedKernel {
  const char* name;
  const char* text;
};
extern const EmbeddedKernel kEmbeddedKernels[];
extern const std::size_t kEmbeddedKernelCount;

// Full source of a kernel file with its `#include "x.clh"` lines expanded (each header
// once), so the compiler never needs a file system. Throws InvalidArgument if missing.
std::string kernel_source(const std::string& file);

// Names of the embedded .cl files (not headers).
std::vector<std::string> embedded_kernel_files();

}  // namespace clattn::rt

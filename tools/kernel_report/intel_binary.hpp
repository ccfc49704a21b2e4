// The per-kernel figures of an ocloc program binary (patch-token format).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace clattn::kreport {

struct IntelKernel {
  std::string name;
  int simd = -1, grf = -1;
  long scratch = 0;         // scratch space per thread (spills), both slots
  long private_bytes = 0;   // stateless private memory per thread
  long slm = 0;             // shared local memory the kernel declares
  std::vector<unsigned char> isa;  // the kernel heap (for iga64 -d)
};

// The kernels of an ocloc .bin file; empty with *error set when it cannot be read.
std::vector<IntelKernel> parse_intel_binary(const std::vector<unsigned char>& file, std::string* error);

}  // namespace clattn::kreport

// Benchmark input data (bench.hpp fill_pattern): device-side fills, no host staging.
#include <random>

#include "bench/bench.hpp"

namespace clattn::bench {

void fill_pattern(const Context& ctx, cl_mem m, size_t bytes, uint32_t seed) {
  std::mt19937 rng(seed);
  // Small finite values in any dtype: bytes in 0x30..0x3b are positive normal numbers
  // for fp8 and the high bytes of bf16/f16/f32 values of moderate size.
  unsigned char pat[64];
  for (auto& b : pat) b = (unsigned char)(0x30 + rng() % 12);
  size_t n = bytes / 64 * 64;
  if (n) clEnqueueFillBuffer(ctx.cl_queue(), m, pat, 64, 0, n, 0, nullptr, nullptr);
  if (bytes > n) clEnqueueFillBuffer(ctx.cl_queue(), m, pat, 1, n, bytes - n, 0, nullptr, nullptr);
}

}  // namespace clattn::bench

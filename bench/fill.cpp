// Benchmark inputs (bench.hpp): device-side fills, no host staging; shuffled paged metadata.
#include <algorithm>
#include <numeric>
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

PagedCsr shuffled_csr(int B, int S, int P, unsigned seed) {
  const int pages_per = (S + P - 1) / P;
  PagedCsr csr;
  csr.page_size = P;
  csr.kv_indices.resize(size_t(B) * size_t(pages_per));
  std::iota(csr.kv_indices.begin(), csr.kv_indices.end(), 0);
  std::shuffle(csr.kv_indices.begin(), csr.kv_indices.end(), std::mt19937(seed));
  for (int i = 0; i <= B; ++i) csr.kv_indptr.push_back(i * pages_per);
  csr.kv_last_page_len.assign(size_t(B), S - (pages_per - 1) * P);
  return csr;
}

}  // namespace clattn::bench

// Checked integer arithmetic for every size, offset and count derived from caller input.
// A result that does not fit throws InvalidArgument naming what was being computed, so a
// hostile shape or stride is rejected instead of wrapping into a small, "valid" size.
// The fast path is one overflow-flag branch; the message is built only on failure.
#pragma once
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

namespace clattn::rt {

// Throws InvalidArgument: "<what>: <why>".
[[noreturn]] void overflow(const char* what, const char* why = "overflows int64");

namespace checked {

inline int64_t mul(int64_t a, int64_t b, const char* what) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) overflow(what);
  return r;
}
inline int64_t add(int64_t a, int64_t b, const char* what) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) overflow(what);
  return r;
}
inline int64_t sub(int64_t a, int64_t b, const char* what) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) overflow(what);
  return r;
}
// a * b + c
inline int64_t mul_add(int64_t a, int64_t b, int64_t c, const char* what) { return add(mul(a, b, what), c, what); }

// Product of every factor (sizes of a shape, then the element size).
inline int64_t product(std::initializer_list<int64_t> f, const char* what) {
  int64_t r = 1;
  for (int64_t x : f) r = mul(r, x, what);
  return r;
}

// ceil(a / b) for a >= 0, b > 0, without forming a + b - 1.
inline int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0); }

// Narrowing that must be exact: int32 counts (metadata arrays are int32), size_t byte
// counts (non-negative), int for kernel arguments.
inline int32_t to_i32(int64_t v, const char* what) {
  if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
    overflow(what, "does not fit int32");
  return int32_t(v);
}
inline std::size_t to_size(int64_t v, const char* what) {
  if (v < 0) overflow(what, "negative size");
  if (uint64_t(v) > uint64_t(std::numeric_limits<std::size_t>::max())) overflow(what, "does not fit size_t");
  return std::size_t(v);
}

// Smallest power of two >= x, for 1 <= x <= 2^30 (int); larger x throws.
inline int pow2_ceil(int64_t x, const char* what) {
  if (x > (int64_t(1) << 30)) overflow(what, "exceeds 2^30");
  int p = 1;
  while (p < x) p <<= 1;
  return p;
}

}  // namespace checked
}  // namespace clattn::rt

// Helpers shared by the test suites: the device context, a replayable RNG, dtype packing
// through the reference's bit-exact conversions, and comparisons that say where they fail.
#pragma once
#include <gtest/gtest.h>

#include <clattn/clattn.hpp>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "reference/reference.hpp"

namespace clattn::test {

// One context per test process, on $CLATTN_DEVICE or the default device.
Context& ctx();

// A PageTable of requests' page lists (row i: pages[i], padded with -1) and KV lengths.
PageTable page_table(const std::vector<std::vector<int32_t>>& pages, int page_size, std::vector<int32_t> seq_lens);

// Seed: $CLATTN_TEST_SEED, else a fixed default. Printed with every failure via SeedTrace.
uint64_t seed();
struct Rng {
  std::mt19937_64 gen;
  explicit Rng(uint64_t salt = 0) : gen(seed() * 0x9E3779B97F4A7C15ull + salt) {}
  int uniform_int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen); }  // inclusive
  double uniform(double lo = -1.0, double hi = 1.0) { return std::uniform_real_distribution<double>(lo, hi)(gen); }
  std::vector<double> vec(size_t n, double lo = -1.0, double hi = 1.0);
};
// Forced vendor rows (CLATTN_FORCE_VENDOR) rerun a suite for those rows' choices; long case
// lists run every third case there, shifted per vendor, so the rows together cover them all
// and the native run covers each. Runs with CLATTN_EMULATE (the emulated variants' only runs
// on PoCL) take every case.
bool row_runs_case(int i);

#define CLATTN_SEED_TRACE() SCOPED_TRACE("replay with CLATTN_TEST_SEED=" + std::to_string(::clattn::test::seed()))

// Stored bytes of `vals` in dtype `dt` (value / scale, rounded as the device stores it).
std::vector<uint8_t> pack(const std::vector<double>& vals, DType dt, double scale = 1.0);
// Values as a kernel reads them back (stored * scale), in double.
std::vector<double> unpack(const std::vector<uint8_t>& bytes, DType dt, double scale = 1.0);
// pack + unpack: the exact values the device computes with.
std::vector<double> quantize(const std::vector<double>& vals, DType dt, double scale = 1.0);

template <class T>
DeviceBuffer upload(const std::vector<T>& v) {
  DeviceBuffer b(ctx(), v.size() * sizeof(T));
  if (!v.empty()) b.write(ctx(), v.data(), v.size() * sizeof(T));
  return b;
}
template <class T>
std::vector<T> download(const DeviceBuffer& b, size_t n) {
  std::vector<T> v(n);
  if (n) b.read(ctx(), v.data(), n * sizeof(T));
  return v;
}

// A paged cache's geometry (num_pages left 0); head_pad > 0 pads each head row, each page
// and, for HND, the token rows by that many elements (strides that are not the contiguous
// layout's, so the kernels' stride arithmetic is exercised).
PagedKV cache_geometry(int page_size, int num_kv_heads, int head_dim, KVLayout layout, DType dtype, int head_pad);

// Max |got - want| <= atol + rtol * |want| elementwise; reports the first few violations.
::testing::AssertionResult all_close(const std::vector<double>& got, const std::vector<double>& want, double atol,
                                     double rtol, const std::string& what = "");

// Expects `fn` to throw clattn::Error with `status` and a message containing `needle`.
template <class F>
::testing::AssertionResult throws_error(F&& fn, Status status, const std::string& needle) {
  try {
    fn();
  } catch (const Error& e) {
    if (e.status() != status)
      return ::testing::AssertionFailure() << "status " << status_name(e.status()) << " (wanted "
                                           << status_name(status) << "): " << e.what();
    if (std::string(e.what()).find(needle) == std::string::npos)
      return ::testing::AssertionFailure() << "message lacks '" << needle << "': " << e.what();
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "no clattn::Error thrown (wanted one mentioning '" << needle << "')";
}

}  // namespace clattn::test

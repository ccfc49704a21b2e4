#include "support/test_support.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <sstream>

#include <gtest/gtest.h>

#include "clattn/diagnostics.hpp"

namespace clattn::test {

namespace {
std::optional<Context>& shared_context() {
  static std::optional<Context> c;
  return c;
}

// The shared context is released when the tests are done, before the process exits: its
// programs and buffers do not wait for static destruction, when some runtimes (Oclgrind)
// have already torn down their own state.
struct ReleaseSharedContext : ::testing::Environment {
  void TearDown() override { shared_context().reset(); }
};
[[maybe_unused]] ::testing::Environment* const kRelease =
    ::testing::AddGlobalTestEnvironment(new ReleaseSharedContext);

// A forced row (CLATTN_FORCE_VENDOR) naming the device's own vendor, on a device without rows
// of its architecture or name, is the native run again (PoCL's CPU device under the cpu rows):
// its tests are skipped rather than repeated.
struct SkipTheNativeRowsAgain : ::testing::Environment {
  void SetUp() override {
    const char* f = std::getenv("CLATTN_FORCE_VENDOR");
    if (!f || !*f) return;
    DeviceProfile native = ctx().profile();
    if (native.vendor != native.vendor_forced) return;
    native.vendor_forced.clear();
    for (const auto& op : parameter_ops()) {
      const std::string level = parameters(native, op).level;
      if (level != "vendor" && level != "generic") return;
    }
    GTEST_SKIP() << "CLATTN_FORCE_VENDOR=" << f << " names this device's own vendor: the native run's rows";
  }
};
[[maybe_unused]] ::testing::Environment* const kSkipNative =
    ::testing::AddGlobalTestEnvironment(new SkipTheNativeRowsAgain);
}  // namespace

Context& ctx() {
  static std::mutex mu;  // first use may come from several test threads
  std::lock_guard<std::mutex> lock(mu);
  auto& c = shared_context();
  if (!c) c.emplace(Context::create());
  return *c;
}

PageTable page_table(const std::vector<std::vector<int32_t>>& pages, int page_size, std::vector<int32_t> seq_lens) {
  PageTable t;
  t.page_size = page_size;
  t.max_pages = 1;
  for (auto& p : pages) t.max_pages = std::max(t.max_pages, int(p.size()));
  t.page_table.assign(pages.size() * size_t(t.max_pages), -1);
  for (size_t i = 0; i < pages.size(); ++i)
    std::copy(pages[i].begin(), pages[i].end(), t.page_table.begin() + ptrdiff_t(i) * t.max_pages);
  t.seq_lens = std::move(seq_lens);
  return t;
}

bool row_runs_case(int i) {
  static const int shift = [] {
    const char* f = std::getenv("CLATTN_FORCE_VENDOR");
    const char* emulated = std::getenv("CLATTN_EMULATE");
    if (!f || !*f || (emulated && *emulated)) return -1;
    const std::string v = f;
    return v == "amd" || v == "generic" || v == "apple" ? 1 : v == "intel" || v == "arm" ? 2 : 0;
  }();
  return shift < 0 || (i + shift) % 3 == 0;
}

uint64_t seed() {
  static uint64_t s = [] {
    const char* e = std::getenv("CLATTN_TEST_SEED");
    return e ? std::strtoull(e, nullptr, 10) : 20261122ull;
  }();
  return s;
}

std::vector<double> Rng::vec(size_t n, double lo, double hi) {
  std::vector<double> v(n);
  for (auto& x : v) x = uniform(lo, hi);
  return v;
}

std::vector<uint8_t> pack(const std::vector<double>& vals, DType dt, double scale) {
  const size_t es = dtype_size(dt);
  std::vector<uint8_t> out(vals.size() * es);
  for (size_t i = 0; i < vals.size(); ++i)
    if (!ref::store_elem(float(vals[i] / scale), int(dt), &out[i * es]))
      throw std::runtime_error("pack: not a floating dtype");
  return out;
}

std::vector<double> unpack(const std::vector<uint8_t>& bytes, DType dt, double scale) {
  const size_t es = dtype_size(dt);
  std::vector<double> out(bytes.size() / es);
  for (size_t i = 0; i < out.size(); ++i) {
    float f = 0;
    if (!ref::load_elem(&bytes[i * es], int(dt), &f)) throw std::runtime_error("unpack: not a floating dtype");
    out[i] = double(f) * scale;
  }
  return out;
}

std::vector<double> quantize(const std::vector<double>& vals, DType dt, double scale) {
  return unpack(pack(vals, dt, scale), dt, scale);
}

::testing::AssertionResult all_close(const std::vector<double>& got, const std::vector<double>& want, double atol,
                                     double rtol, const std::string& what) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << what << ": size " << got.size() << " != " << want.size();
  std::ostringstream bad;
  size_t nbad = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double err = std::fabs(got[i] - want[i]);
    bool ok = err <= atol + rtol * std::fabs(want[i]) || (std::isinf(want[i]) && got[i] == want[i]);
    if (!ok || std::isnan(got[i])) {
      if (nbad < 5) bad << "\n  [" << i << "] got " << got[i] << " want " << want[i] << " (err " << err << ")";
      ++nbad;
      worst = std::max(worst, err);
    }
  }
  if (nbad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << nbad << " of " << got.size()
                                       << " elements outside atol=" << atol << " rtol=" << rtol
                                       << " (worst err " << worst << ")" << bad.str();
}

PagedKV cache_geometry(int page_size, int num_kv_heads, int head_dim, KVLayout layout, DType dtype, int head_pad) {
  PagedKV k;
  k.page_size = page_size, k.num_kv_heads = num_kv_heads, k.head_dim = head_dim, k.layout = layout, k.dtype = dtype;
  if (head_pad > 0) {
    k.stride_head = head_dim + head_pad;
    if (layout == KVLayout::NHD) {
      k.stride_token = int64_t(num_kv_heads) * k.stride_head;
      k.stride_page = int64_t(page_size) * k.stride_token + head_pad;
    } else {
      k.stride_token = head_dim + head_pad;
      k.stride_head = int64_t(page_size) * k.stride_token;
      k.stride_page = int64_t(num_kv_heads) * k.stride_head + head_pad;
    }
  }
  return k;
}

}  // namespace clattn::test

// append_kv: every source dtype into every cache dtype (bit-exact against the reference's
// conversions, fp8 saturating), NHD and HND, int32 and int64 slots, negative slots skipped,
// strided sources, and rejected calls that leave the cache untouched.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "backends/params/database.hpp"
#include "support/test_support.hpp"

using namespace clattn;
using test::ctx;

namespace {

constexpr uint8_t kSentinel = 0x33;

struct AppendCase {
  PagedKV cache;
  int N = 0;
  int64_t src_st = 0;  // source token stride (elements)
  std::vector<int64_t> slots;
  std::vector<double> k, v;  // source values, already representable in the source dtype
};

// Element offset of (slot, h, d) in the cache.
int64_t cache_offset(const PagedKV& c, int64_t slot, int h, int d) {
  return (slot / c.page_size) * c.page_stride() + (slot % c.page_size) * c.token_stride() + h * c.head_stride() + d;
}

// Expected cache bytes: sentinel everywhere, the converted rows at their slots.
std::vector<uint8_t> expected(const AppendCase& s, const std::vector<double>& src, DType src_dt, double scale) {
  const PagedKV& c = s.cache;
  const size_t es = dtype_size(c.dtype);
  std::vector<uint8_t> out(size_t(c.required_bytes()), kSentinel);
  for (int t = 0; t < s.N; ++t) {
    if (s.slots[size_t(t)] < 0) continue;
    for (int h = 0; h < c.num_kv_heads; ++h)
      for (int d = 0; d < c.head_dim; ++d) {
        double x = src[size_t(t * s.src_st + h * c.head_dim + d)];
        auto b = test::pack({x}, c.dtype, scale);
        std::memcpy(&out[size_t(cache_offset(c, s.slots[size_t(t)], h, d)) * es], b.data(), es);
      }
  }
  return out;
}

AppendCase make_setup(test::Rng& rng, DType kv_dt, DType src_dt, KVLayout layout, int N, int64_t src_st_mult = 1,
                      int head_dim = 64) {
  AppendCase s;
  s.cache.num_pages = 6, s.cache.page_size = 8, s.cache.num_kv_heads = 2, s.cache.head_dim = head_dim;
  s.cache.layout = layout, s.cache.dtype = kv_dt;
  s.N = N;
  const int row = s.cache.num_kv_heads * s.cache.head_dim;
  s.src_st = int64_t(row) * src_st_mult;
  std::vector<int64_t> all(size_t(s.cache.num_pages) * s.cache.page_size);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng.gen);
  for (int t = 0; t < N; ++t) s.slots.push_back(rng.uniform_int(0, 4) == 0 ? -1 : all[size_t(t)]);
  const size_t n = size_t(N) * size_t(s.src_st);
  s.k = rng.vec(n, -3, 3), s.v = rng.vec(n, -3, 3);
  // Saturation: values beyond the fp8 ranges (448 / 57344) in a few places.
  s.k[0] = 1000.0, s.k[1] = -1000.0, s.v[2] = 60000.0, s.v[3] = -60000.0;
  s.k = test::quantize(s.k, src_dt), s.v = test::quantize(s.v, src_dt);
  return s;
}

void run_append(const AppendCase& s, DType src_dt, DType slot_dt, double k_scale, double v_scale, DeviceBuffer& kc,
                DeviceBuffer& vc, bool host_slots) {
  auto dk = test::upload(test::pack(s.k, src_dt)), dv = test::upload(test::pack(s.v, src_dt));
  std::vector<int32_t> s32(s.slots.begin(), s.slots.end());
  DeviceBuffer ds = slot_dt == DType::I64 ? test::upload(s.slots) : test::upload(s32);
  AppendKVArgs a;
  a.k = dk.get(), a.v = dv.get(), a.src_dtype = src_dt, a.src_stride_token = s.src_st;
  a.slot_mapping = ds.get(), a.slot_dtype = slot_dt, a.num_tokens = s.N;
  if (host_slots) a.slot_mapping_host = slot_dt == DType::I64 ? (const void*)s.slots.data() : (const void*)s32.data();
  a.k_cache = kc.get(), a.v_cache = vc.get(), a.cache = s.cache;
  a.k_scale = float(k_scale), a.v_scale = float(v_scale);
  append_kv(ctx(), a);
  ctx().finish();
}

}  // namespace

// Both kernel forms on this device: one element per work-item (the GPU rows) and a run of
// APPEND_ITEMS elements with the dtype switch hoisted (the CPU rows; lowered to a divisor
// of D, so D = 80 takes 80 for 256 and 16 for 16).
TEST(AppendKV, EveryDtypeLayoutAndSlotType) {
  CLATTN_SEED_TRACE();
  struct Form {
    int wg, items, head_dim;
  };
  const Form forms[] = {{64, 1, 64}, {1, 256, 64}, {1, 256, 80}, {2, 16, 80}};
  for (const Form& f : forms) {
    params::set_override("append_kv", {{"APPEND_WG", f.wg}, {"APPEND_ITEMS", f.items}});
    test::Rng rng(21);
    const DType kvs[] = {DType::F32, DType::F16, DType::BF16, DType::FP8_E4M3, DType::FP8_E5M2};
    const DType srcs[] = {DType::F32, DType::F16, DType::BF16};
    int i = 0;
    for (DType kv : kvs)
      for (DType src : srcs) {
        ++i;
        KVLayout layout = (i % 2) ? KVLayout::NHD : KVLayout::HND;
        DType slot_dt = (i % 3) ? DType::I64 : DType::I32;
        // Power-of-two scales keep value / scale exact, so the stored bits are exact too.
        double ks = kv == DType::FP8_E4M3 || kv == DType::FP8_E5M2 ? 0.5 : 1.0, vs = ks == 1.0 ? 1.0 : 2.0;
        AppendCase s = make_setup(rng, kv, src, layout, 12, 1, f.head_dim);
        DeviceBuffer kc(ctx(), size_t(s.cache.required_bytes())), vc(ctx(), size_t(s.cache.required_bytes()));
        kc.fill_bytes(ctx(), kSentinel);
        vc.fill_bytes(ctx(), kSentinel);
        run_append(s, src, slot_dt, ks, vs, kc, vc, i % 2 == 0);
        SCOPED_TRACE(std::string(dtype_name(src)) + " -> " + dtype_name(kv) + (layout == KVLayout::NHD ? " NHD" : " HND") +
                     " WG " + std::to_string(f.wg) + " items " + std::to_string(f.items) + " D " +
                     std::to_string(f.head_dim));
        EXPECT_EQ(test::download<uint8_t>(kc, kc.bytes()), expected(s, s.k, src, ks));
        EXPECT_EQ(test::download<uint8_t>(vc, vc.bytes()), expected(s, s.v, src, vs));
      }
  }
  params::clear_overrides();
}

TEST(AppendKV, Fp8SaturatesAndStridedSourceAndCustomStrides) {
  CLATTN_SEED_TRACE();
  test::Rng rng(22);
  AppendCase s = make_setup(rng, DType::FP8_E4M3, DType::F32, KVLayout::NHD, 5, /*src_st_mult=*/3);  // k/v slices of qkv
  s.slots = {3, -7, 40, 0, 47};
  s.cache.stride_head = 80;                 // padded heads: custom strides
  s.cache.stride_token = 2 * 80;
  s.cache.stride_page = 8 * 2 * 80 + 16;
  DeviceBuffer kc(ctx(), size_t(s.cache.required_bytes())), vc(ctx(), size_t(s.cache.required_bytes()));
  kc.fill_bytes(ctx(), kSentinel);
  vc.fill_bytes(ctx(), kSentinel);
  run_append(s, DType::F32, DType::I64, 1.0, 1.0, kc, vc, true);
  auto kb = test::download<uint8_t>(kc, kc.bytes());
  EXPECT_EQ(kb, expected(s, s.k, DType::F32, 1.0));
  // slot 3, head 0, d 0 holds k[0] = 1000 -> saturated to +448 (0x7e); d 1 holds -448 (0xfe).
  EXPECT_EQ(kb[size_t(cache_offset(s.cache, 3, 0, 0))], 0x7e);
  EXPECT_EQ(kb[size_t(cache_offset(s.cache, 3, 0, 1))], 0xfe);
}

TEST(AppendKV, NonPowerOfTwoScaleRoundsLikeTheReference) {
  CLATTN_SEED_TRACE();
  test::Rng rng(23);
  AppendCase s = make_setup(rng, DType::FP8_E4M3, DType::BF16, KVLayout::HND, 8);
  DeviceBuffer kc(ctx(), size_t(s.cache.required_bytes())), vc(ctx(), size_t(s.cache.required_bytes()));
  kc.fill_bytes(ctx(), kSentinel);
  vc.fill_bytes(ctx(), kSentinel);
  run_append(s, DType::BF16, DType::I32, 0.37, 0.011, kc, vc, false);
  // value / scale in f32 may differ from the reference's double division by an ulp, which
  // can move a tie by one fp8 step: compare decoded values within one e4m3 step (2^-3 rel).
  auto got = test::unpack(test::download<uint8_t>(kc, kc.bytes()), DType::FP8_E4M3, 0.37);
  auto want = test::unpack(expected(s, s.k, DType::BF16, 0.37), DType::FP8_E4M3, 0.37);
  for (size_t i = 0; i < got.size(); ++i)
    if (!std::isnan(want[i])) ASSERT_NEAR(got[i], want[i], std::fabs(want[i]) * 0.13 + 1e-6) << "element " << i;
}

TEST(AppendKV, RejectedCallsLeaveTheCacheUntouched) {
  test::Rng rng(24);
  AppendCase s = make_setup(rng, DType::BF16, DType::F16, KVLayout::NHD, 4);
  s.slots = {1, 2, int64_t(s.cache.num_pages) * s.cache.page_size, 3};  // third slot out of range
  DeviceBuffer kc(ctx(), size_t(s.cache.required_bytes())), vc(ctx(), size_t(s.cache.required_bytes()));
  kc.fill_bytes(ctx(), kSentinel);
  vc.fill_bytes(ctx(), kSentinel);
  auto dk = test::upload(test::pack(s.k, DType::F16)), dv = test::upload(test::pack(s.v, DType::F16));
  auto ds = test::upload(s.slots);
  AppendKVArgs a;
  a.k = dk.get(), a.v = dv.get(), a.src_dtype = DType::F16;
  a.slot_mapping = ds.get(), a.slot_dtype = DType::I64, a.num_tokens = s.N, a.slot_mapping_host = s.slots.data();
  a.k_cache = kc.get(), a.v_cache = vc.get(), a.cache = s.cache;
  EXPECT_TRUE(test::throws_error([&] { append_kv(ctx(), a); }, Status::InvalidArgument, "2"));
  auto b = a;
  b.slot_dtype = DType::F32;
  EXPECT_TRUE(test::throws_error([&] { append_kv(ctx(), b); }, Status::InvalidArgument, "slot_mapping"));
  b = a;
  b.src_dtype = DType::FP8_E4M3;
  EXPECT_TRUE(test::throws_error([&] { append_kv(ctx(), b); }, Status::Unsupported, "src_dtype"));
  b = a;
  b.num_tokens = 100;  // more tokens than k holds
  b.slot_mapping_host = nullptr;
  EXPECT_TRUE(test::throws_error([&] { append_kv(ctx(), b); }, Status::InvalidArgument, "k:"));
  b = a;
  b.cache.num_kv_heads = 4;  // cache buffers too small for the claimed shape
  b.slot_mapping_host = nullptr;
  EXPECT_TRUE(test::throws_error([&] { append_kv(ctx(), b); }, Status::InvalidArgument, "k"));
  b = a;
  b.cache.dtype = DType::I32;
  EXPECT_TRUE(test::throws_error([&] { append_kv(ctx(), b); }, Status::Unsupported, "dtype"));
  ctx().finish();
  for (auto x : test::download<uint8_t>(kc, kc.bytes())) ASSERT_EQ(x, kSentinel);
  for (auto x : test::download<uint8_t>(vc, vc.bytes())) ASSERT_EQ(x, kSentinel);

  // Without a host copy the kernel skips the out-of-range slot and writes the rest.
  a.slot_mapping_host = nullptr;
  append_kv(ctx(), a);
  ctx().finish();
  AppendCase in_range = s;
  in_range.slots[2] = -1;
  EXPECT_EQ(test::download<uint8_t>(kc, kc.bytes()), expected(in_range, s.k, DType::F16, 1.0));
}

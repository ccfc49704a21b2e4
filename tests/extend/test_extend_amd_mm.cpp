// The AMD matrix-instruction extend kernels (amd_wmma: extend_wmma_amd.cl, amd_mfma:
// extend_mfma_amd.cl) against ref::attention, run through the real op with the variant
// forced and asserted (a broken kernel cannot hide behind a fallback). The ctests run them
// under CLATTN_FORCE_VENDOR=amd with CLATTN_EMULATE=amd_wmma / amd_mfma: on devices without
// the instructions (PoCL in CI) the kernels include their emulation headers
// (amd_wmma_emul.clh, amd_mfma_emul.clh), which implement the documented operand layouts.
// Which variant a process tests: CLATTN_EMULATE's feature (the device's own otherwise).
//
// Cases: f16 and bf16 KV, paged (page sizes 1 and 16) and ragged, causal and not, GQA group
// > 1, head dims 64, 80 and 128, cached prefixes + new tokens, soft cap, window, sinks, a
// custom mask, lse; the wave split (WSPLIT) and tile keys varied.
//
// Tolerances as for nv_mma_sync (tests/extend/test_extend.cpp): q and P are rounded to the
// MMA type, so bf16: o 3e-2, lse 3e-2; f16: o 6e-3, lse 6e-3.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>

#include "support/test_support.hpp"

using namespace clattn;
using test::ctx;

namespace {

struct Case {
  std::vector<int> qo, prefix;
  int Hkv = 2, G = 2, D = 64, P = 16;
  DType kv = DType::BF16, qd = DType::BF16, od = DType::F32;
  bool ragged = false, causal = true, sinks = false, mask = false;
  double cap = 0.0;
  int window = -1;
  std::map<std::string, int> params;
  std::string describe() const {
    std::string s = "(qo,prefix)={";
    for (size_t i = 0; i < qo.size(); ++i) s += (i ? " " : "") + std::to_string(qo[i]) + "," + std::to_string(prefix[i]);
    s += "} Hkv=" + std::to_string(Hkv) + " G=" + std::to_string(G) + " D=" + std::to_string(D) +
         " P=" + std::to_string(P) + " kv=" + dtype_name(kv) + " ragged=" + std::to_string(ragged) +
         " causal=" + std::to_string(causal) + " cap=" + std::to_string(cap) + " window=" + std::to_string(window) +
         " sinks=" + std::to_string(sinks) + " mask=" + std::to_string(mask);
    for (auto& [k, v] : params) s += " " + k + "=" + std::to_string(v);
    return s;
  }
};

// The variant this process tests: the emulated feature, else what the device has.
std::string variant_under_test() {
  const char* e = std::getenv("CLATTN_EMULATE");
  const std::string em = e ? e : "";
  if (em.find("amd_mfma") != std::string::npos) return "amd_mfma";
  if (em.find("amd_wmma") != std::string::npos) return "amd_wmma";
  for (const char* v : {"amd_wmma", "amd_mfma"})
    for (const auto& x : clattn::variants(ctx().profile()))
      if (x.name == v && x.available) return v;
  return "";
}

void run_case(const Case& c, uint64_t salt) {
  SCOPED_TRACE(c.describe());
  const std::string variant = variant_under_test();
  test::Rng rng(salt);
  const int B = int(c.qo.size()), Hq = c.Hkv * c.G, D = c.D;
  std::vector<int32_t> qo_indptr{0}, kv_indptr{0};
  for (int i = 0; i < B; ++i) {
    qo_indptr.push_back(qo_indptr.back() + c.qo[size_t(i)]);
    kv_indptr.push_back(kv_indptr.back() + c.qo[size_t(i)] + c.prefix[size_t(i)]);
  }
  const int T = qo_indptr.back();
  std::vector<std::vector<double>> kk{size_t(B)}, vv{size_t(B)};
  for (int i = 0; i < B; ++i) {
    const size_t n = size_t(kv_indptr[size_t(i) + 1] - kv_indptr[size_t(i)]) * c.Hkv * D;
    kk[size_t(i)] = test::quantize(rng.vec(n, -1, 1), c.kv), vv[size_t(i)] = test::quantize(rng.vec(n, -1, 1), c.kv);
  }
  const std::vector<double> q = test::quantize(rng.vec(size_t(T) * Hq * D, -2, 2), c.qd);
  std::vector<double> sinks(static_cast<size_t>(Hq));
  for (auto& s : sinks) s = double(float(rng.uniform(-2, 3)));

  // Masks: random bits per request, packed (FlashInfer segment_packbits layout).
  std::vector<std::vector<uint8_t>> packed{size_t(B)};
  std::vector<uint8_t> mask_bytes;
  std::vector<int32_t> mask_indptr;
  if (c.mask) {
    mask_indptr = {0};
    for (int i = 0; i < B; ++i) {
      const size_t bits = size_t(c.qo[size_t(i)]) * (kv_indptr[size_t(i) + 1] - kv_indptr[size_t(i)]);
      packed[size_t(i)].assign((bits + 7) / 8, 0);
      for (size_t j = 0; j < bits; ++j) packed[size_t(i)][j / 8] |= uint8_t((rng.uniform_int(0, 3) != 0) << (j % 8));
      mask_bytes.insert(mask_bytes.end(), packed[size_t(i)].begin(), packed[size_t(i)].end());
      mask_indptr.push_back(int32_t(mask_bytes.size()));
    }
  }

  // KV: paged (shuffled pages, unused slots NaN) or ragged rows.
  const double nan = std::nan("");
  std::vector<double> kbuf, vbuf;
  PagedKV cache;
  PagedCsr csr;
  RaggedKV rag;
  if (c.ragged) {
    rag.num_tokens = kv_indptr.back(), rag.num_kv_heads = c.Hkv, rag.head_dim = D, rag.dtype = c.kv;
    for (int i = 0; i < B; ++i) kbuf.insert(kbuf.end(), kk[size_t(i)].begin(), kk[size_t(i)].end());
    for (int i = 0; i < B; ++i) vbuf.insert(vbuf.end(), vv[size_t(i)].begin(), vv[size_t(i)].end());
  } else {
    cache = test::cache_geometry(c.P, c.Hkv, D, KVLayout::NHD, c.kv, 0);
    int pages = 0;
    for (int i = 0; i < B; ++i) pages += (kv_indptr[size_t(i) + 1] - kv_indptr[size_t(i)] + c.P - 1) / c.P;
    cache.num_pages = pages + 3;
    std::vector<int32_t> ids(size_t(cache.num_pages));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng.gen);
    const size_t elems = size_t(cache.required_bytes()) / dtype_size(c.kv);
    kbuf.assign(elems, nan), vbuf.assign(elems, nan);
    csr.page_size = c.P, csr.kv_indptr = {0}, csr.qo_indptr = qo_indptr;
    size_t next = 0;
    for (int i = 0; i < B; ++i) {
      const int L = kv_indptr[size_t(i) + 1] - kv_indptr[size_t(i)], np = (L + c.P - 1) / c.P;
      for (int p = 0; p < np; ++p) csr.kv_indices.push_back(ids[next++]);
      csr.kv_indptr.push_back(int32_t(csr.kv_indices.size()));
      csr.kv_last_page_len.push_back(L == 0 ? 0 : L - (np - 1) * c.P);
      for (int t = 0; t < L; ++t)
        for (int h = 0; h < c.Hkv; ++h)
          for (int d = 0; d < D; ++d) {
            const int page = csr.kv_indices[size_t(csr.kv_indptr[size_t(i)] + t / c.P)];
            const size_t o = size_t(page * cache.page_stride() + (t % c.P) * cache.token_stride() +
                                    h * cache.head_stride() + d);
            kbuf[o] = kk[size_t(i)][(size_t(t) * c.Hkv + h) * D + d];
            vbuf[o] = vv[size_t(i)][(size_t(t) * c.Hkv + h) * D + d];
          }
    }
  }

  // Reference.
  std::vector<double> o_ref(static_cast<size_t>(T) * Hq * D), lse_ref(static_cast<size_t>(T) * Hq);
  ref::AttnOptions ro;
  ro.sm_scale = 1.0 / std::sqrt(double(D));
  ro.logits_soft_cap = c.cap, ro.window_left = c.window, ro.causal = c.causal;
  ro.sinks = c.sinks ? sinks.data() : nullptr;
  for (int i = 0; i < B; ++i) {
    ro.custom_mask = c.mask ? packed[size_t(i)].data() : nullptr;
    const size_t q0 = size_t(qo_indptr[size_t(i)]);
    ref::attention(q.data() + q0 * Hq * D, kk[size_t(i)].data(), vv[size_t(i)].data(), c.qo[size_t(i)],
                   kv_indptr[size_t(i) + 1] - kv_indptr[size_t(i)], Hq, c.Hkv, D, D, ro, o_ref.data() + q0 * Hq * D,
                   lse_ref.data() + q0 * Hq);
  }

  ExtendOptions opt;
  opt.num_qo_heads = Hq, opt.q_dtype = c.qd, opt.o_dtype = c.od;
  opt.logits_soft_cap = float(c.cap), opt.window_left = c.window, opt.causal = c.causal;
  opt.mask_indptr = mask_indptr;
  opt.variant = variant;
  opt.params = c.params;
  DeviceBuffer kd = test::upload(test::pack(kbuf, c.kv)), vd = test::upload(test::pack(vbuf, c.kv));
  DeviceBuffer ids = test::upload(csr.kv_indices.empty() ? std::vector<int32_t>{0} : csr.kv_indices);
  DeviceBuffer qb = test::upload(test::pack(q, c.qd));
  std::vector<float> sf(sinks.begin(), sinks.end());
  DeviceBuffer sb = test::upload(sf);
  DeviceBuffer mb = test::upload(mask_bytes.empty() ? std::vector<uint8_t>{0} : mask_bytes);
  DeviceBuffer ob(ctx(), size_t(T) * Hq * D * dtype_size(c.od)), lb(ctx(), size_t(T) * Hq * 4);
  ExtendPlan plan = c.ragged ? prefill_plan(ctx(), qo_indptr, kv_indptr, rag, opt) : extend_plan(ctx(), csr, cache, opt);
  ASSERT_EQ(plan.variant, variant) << "the variant fell back; options " << plan.kernel_options;
  ExtendBuffers eb;
  eb.q = qb.get(), eb.k = kd.get(), eb.v = vd.get(), eb.page_ids = c.ragged ? nullptr : ids.get();
  eb.o = ob.get(), eb.lse = lb.get(), eb.sinks = c.sinks ? sb.get() : nullptr;
  eb.custom_mask = c.mask ? mb.get() : nullptr;
  extend_run(ctx(), plan, eb);
  ctx().finish();
  const std::vector<double> o = test::unpack(test::download<uint8_t>(ob, size_t(T) * Hq * D * dtype_size(c.od)), c.od);
  const std::vector<float> lf = test::download<float>(lb, size_t(T) * Hq);
  const double tol = c.kv == DType::BF16 ? 3e-2 : 6e-3;
  EXPECT_TRUE(test::all_close(o, o_ref, tol, tol, "o")) << "options " << plan.kernel_options;
  EXPECT_TRUE(test::all_close(std::vector<double>(lf.begin(), lf.end()), lse_ref, tol, 2e-5, "lse"));
}

#define REQUIRE_VARIANT()                                                                             \
  if (variant_under_test().empty()) GTEST_SKIP() << "no AMD matrix instructions (set CLATTN_EMULATE)"

}  // namespace

TEST(ExtendAmdMm, PagedAndRaggedBothDtypes) {
  CLATTN_SEED_TRACE();
  REQUIRE_VARIANT();
  int salt = 0;
  for (DType kv : {DType::BF16, DType::F16}) {
    for (int form = 0; form < 3; ++form) {  // paged P=16, paged P=1, ragged
      Case c;
      c.kv = kv, c.qd = kv, c.od = form == 1 ? DType::F32 : kv;
      c.qo = {5, 20, 1}, c.prefix = {0, 13, 30};
      c.P = form == 1 ? 1 : 16, c.ragged = form == 2;
      c.causal = form != 1;
      c.D = kv == DType::BF16 ? 128 : 64;
      run_case(c, 100 + salt++);
    }
  }
}

TEST(ExtendAmdMm, CapWindowSinksMaskGqa) {
  CLATTN_SEED_TRACE();
  REQUIRE_VARIANT();
  Case c;
  c.qo = {9, 17}, c.prefix = {24, 3};
  c.G = 4, c.Hkv = 1, c.D = 128, c.kv = DType::F16, c.qd = DType::F32;
  c.cap = 20.0, c.window = 11, c.sinks = true;
  run_case(c, 200);
  Case m = c;
  m.kv = DType::BF16, m.window = -1, m.cap = 0.0, m.mask = true, m.D = 64, m.ragged = true;
  run_case(m, 201);
}

TEST(ExtendAmdMm, TileShapes) {
  CLATTN_SEED_TRACE();
  REQUIRE_VARIANT();
  const std::string pre = variant_under_test() == "amd_mfma" ? "MFMA" : "WMMA";
  // (waves, wave split, keys); head dim 80 lowers the split to a divisor of its 5 tiles.
  const int shapes[][3] = {{2, 1, 16}, {4, 2, 64}, {4, 4, 32}};
  int salt = 0;
  for (const auto& s : shapes) {
    Case c;
    c.qo = {12, 3}, c.prefix = {40, 7};
    c.G = 3, c.Hkv = 1, c.D = salt == 2 ? 80 : 64, c.kv = salt % 2 ? DType::F16 : DType::BF16, c.qd = DType::F16;
    c.params = {{pre + "_WAVES", s[0]}, {pre + "_WSPLIT", s[1]}, {pre + "_KEYS", s[2]}};
    run_case(c, 300 + salt++);
  }
}

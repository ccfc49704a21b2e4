// int8 MLA latent caches (MlaCache dtype I8, a (ckv, kpe) scale pair per token in a scale cache;
// docs/kv_formats.md "int8 MLA latent"). append_latent stores the bytes and scales of
// ref::int8_quantize_latent bit for bit (f32 and f16 scales, split and 576-wide buffers, padded
// scale strides, int32 and int64 slots, a skipped slot, an all-zero ckv part, exact ties, a kpe
// part far larger than the ckv part); MLA decode / extend / sparse decode over the stored cache
// match ref::mla_attention / ref::mla_sparse_decode over the dequantised rows: pages 1 / 16 / 64,
// split-K on and off, q f32 / bf16, CSR and page table, each portable kernel named and asserted
// (cpu, tiled, generic) and the vendor rows' choice; rejected calls name the argument and
// write nothing. The tensor-core kernel does not read int8: asking for it (MMA=1) falls back.
//
// Tolerances: the kernels read exactly the dequantised values the reference reads, so the
// differences are f32 arithmetic (o 1e-4 f32, 1e-2 bf16; lse 2e-4), as in test_mla.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>

#include "reference/kv_formats_reference.hpp"
#include "reference/mla_int8_reference.hpp"
#include "reference/sparse_reference.hpp"
#include "support/paged_cache.hpp"
#include "support/test_support.hpp"

using namespace clattn;
using test::ctx;

namespace {

constexpr int Dc = kMlaCkvDim, Dr = kMlaKpeDim;

struct Case {
  int P = 16;
  bool split = false, single = false, table = false, extend = false, sparse = false;
  DType qd = DType::F32, od = DType::F32, scale_dt = DType::F32;
  bool pad_scales = false, slots32 = false;
  const char* variant = "";  // "cpu", "tiled", "generic" (named and asserted) or "" (the vendor rows')
  std::string describe() const {
    return std::string(extend ? "extend" : sparse ? "sparse decode" : "decode") + " P=" + std::to_string(P) +
           (split ? " split" : "") + (single ? " single576" : "") + (table ? " page_table" : " csr") + " q " +
           dtype_name(qd) + " o " + dtype_name(od) + " scales " + dtype_name(scale_dt) +
           (pad_scales ? " padded" : "") + " variant " + (*variant ? variant : "(rows)");
  }
};

double o_tol(DType t) { return t == DType::F32 ? 1e-4 : 1e-2; }

MlaOptions options_for(const Case& c, int H) {
  MlaOptions o;
  o.num_heads = H, o.q_dtype = c.qd, o.o_dtype = c.od, o.sm_scale = float(1.0 / std::sqrt(192.0));
  const std::string v = c.variant;
  if (v == "cpu") o.params = {{"CPU_KERNEL", 1}, {"MMA", 0}};
  if (v == "tiled") o.params = {{"CPU_KERNEL", 0}, {"MMA", 0}, {"TILED", 1}};
  if (v == "generic") o.params = {{"CPU_KERNEL", 0}, {"MMA", 0}, {"TILED", 0}};
  if (c.split) o.params["MIN_CHUNK"] = 16, o.params["WGS_PER_CU"] = 4096;
  else if (!c.extend) o.max_splits = 1;
  return o;
}

// The variant the vendor rows choose on this device for an int8 latent (never the tensor
// cores): the cpu kernel under the cpu rows, the tiled kernel under the others.
std::string rows_variant() { return ctx().profile().param_vendor() == "cpu" ? "cpu" : "tiled"; }

void run_case(const Case& c, test::Rng& rng) {
  SCOPED_TRACE(c.describe());
  const int H = 16, P = c.P;
  // Requests: decode one row each (the first long enough to split), extend 1-6 rows.
  std::vector<int> kv = {c.split ? 300 : rng.uniform_int(20, 90), rng.uniform_int(1, 70), P};
  std::vector<int> qo(kv.size(), 1);
  if (c.extend)
    for (size_t i = 0; i < kv.size(); ++i) qo[i] = std::min(kv[i], rng.uniform_int(1, 6));
  const int B = int(kv.size());
  test::ShuffledPages sp = test::shuffled_pages(kv, P, 2, rng);

  MlaCache cache;
  cache.num_pages = sp.num_pages, cache.page_size = P, cache.dtype = DType::I8, cache.single_buffer = c.single;
  cache.scale_dtype = c.scale_dt;
  if (c.pad_scales) cache.scale_stride_token = 3, cache.scale_stride_page = int64_t(3) * P + 5;
  PagedCsr& csr = sp.csr;
  PageTable tab = test::page_table(sp.pages, P, std::vector<int32_t>(kv.begin(), kv.end()));
  tab.cu_seqlens_k = {0};
  for (int k : kv) tab.cu_seqlens_k.push_back(tab.cu_seqlens_k.back() + k);
  std::vector<int64_t>& slots = sp.slots;
  if (c.extend) {
    csr.qo_indptr = {0}, tab.cu_seqlens_q = {0};
    for (int b = 0; b < B; ++b) csr.qo_indptr.push_back(csr.qo_indptr.back() + qo[b]);
    tab.cu_seqlens_q = csr.qo_indptr;
  }
  slots.push_back(-1);  // a padding token: skipped
  const int N = int(slots.size());

  // Source rows (f32): ckv in [-1, 1], kpe 30x larger; token 0's ckv part all zero; token 1's
  // ckv part holds exact ties (with f16 scales: (k + 1/2) * scale is exact) under a max of 2.
  std::vector<float> src_c(size_t(N) * Dc), src_k(size_t(N) * Dr);
  for (float& x : src_c) x = float(rng.uniform(-1, 1));
  for (float& x : src_k) x = float(rng.uniform(-30, 30));
  std::fill_n(src_c.begin(), Dc, 0.0f);
  {
    const float s = c.scale_dt == DType::F16 ? ref::round_to_f16(2.0f * (1.0f / 127.0f)) : 2.0f * (1.0f / 127.0f);
    float* r = &src_c[Dc];
    r[0] = 2.0f;
    for (int d = 1; d < Dc; ++d) r[d] = (float((d % 120) - 60) + 0.5f) * s;
  }
  auto dsc = test::upload(src_c), dsk = test::upload(src_k);
  std::vector<int32_t> slots32(slots.begin(), slots.end());
  auto dslots = c.slots32 ? test::upload(slots32) : test::upload(slots);
  const size_t cb = size_t(cache.ckv_required_bytes()), kb = size_t(cache.kpe_required_bytes());
  const size_t sb = size_t(cache.scale_required_bytes());
  auto ckv = test::upload(std::vector<uint8_t>(cb, 0x55));
  auto kpe = test::upload(std::vector<uint8_t>(std::max<size_t>(kb, 1), 0x55));
  auto scales = test::upload(std::vector<uint8_t>(sb, 0x7f));
  AppendLatentArgs a;
  a.ckv = dsc.get(), a.kpe = dsk.get(), a.src_dtype = DType::F32, a.slot_mapping = dslots.get();
  a.slot_dtype = c.slots32 ? DType::I32 : DType::I64, a.num_tokens = N, a.ckv_cache = ckv.get();
  a.kpe_cache = c.single ? nullptr : kpe.get(), a.cache = cache, a.scale_cache = scales.get();
  append_latent(ctx(), a);
  ctx().finish();

  // Stored bytes and scales against the reference; the dequantised rows per request.
  const auto cbytes = test::download<uint8_t>(ckv, cb), kbytes = test::download<uint8_t>(kpe, std::max<size_t>(kb, 1));
  const auto sbytes = test::download<uint8_t>(scales, sb);
  const size_t ses = dtype_size(c.scale_dt);
  auto scale_at = [&](int64_t i) {
    return float(test::unpack(std::vector<uint8_t>(sbytes.begin() + i * ses, sbytes.begin() + (i + 1) * ses),
                              c.scale_dt)[0]);
  };
  std::vector<std::vector<double>> rc(static_cast<size_t>(B)), rk(static_cast<size_t>(B));
  int bad = 0;
  for (int b = 0, t0 = 0; b < B; t0 += kv[b], ++b) {
    rc[b].resize(size_t(kv[b]) * Dc), rk[b].resize(size_t(kv[b]) * Dr);
    for (int t = 0; t < kv[b]; ++t) {
      const int n = t0 + t;
      const int64_t page = slots[size_t(n)] / P, off = slots[size_t(n)] % P;
      std::vector<int8_t> qc(Dc), qk(Dr);
      float want[2];
      ref::int8_quantize_latent(&src_c[size_t(n) * Dc], &src_k[size_t(n) * Dr], c.scale_dt == DType::F16, qc.data(),
                                qk.data(), want);
      const int64_t si = page * cache.scale_page_stride() + off * cache.scale_token_stride();
      const float got[2] = {scale_at(si), scale_at(si + 1)};
      const uint8_t* gc = &cbytes[size_t(page * cache.ckv_page_stride() + off * cache.ckv_token_stride())];
      const uint8_t* gk = c.single ? &cbytes[size_t(cache.kpe_base() + page * cache.kpe_page_stride() +
                                                    off * cache.kpe_token_stride())]
                                   : &kbytes[size_t(page * cache.kpe_page_stride() + off * cache.kpe_token_stride())];
      if (got[0] != want[0] || got[1] != want[1] || std::memcmp(gc, qc.data(), Dc) || std::memcmp(gk, qk.data(), Dr))
        ++bad;
      ref::int8_dequantize_latent(reinterpret_cast<const int8_t*>(gc), reinterpret_cast<const int8_t*>(gk), got,
                                  &rc[b][size_t(t) * Dc], &rk[b][size_t(t) * Dr]);
    }
  }
  EXPECT_EQ(bad, 0) << "tokens whose stored bytes or scales differ from ref::int8_quantize_latent";
  if (bad) return;

  // Attention over the stored cache.
  const int T = c.extend ? csr.qo_indptr.back() : B;
  const auto qn = test::quantize(rng.vec(size_t(T) * H * Dc), c.qd), qp = test::quantize(rng.vec(size_t(T) * H * Dr), c.qd);
  auto dqn = test::upload(test::pack(qn, c.qd)), dqp = test::upload(test::pack(qp, c.qd));
  const MlaOptions opt = options_for(c, H);
  const int topk = 40;
  std::vector<int32_t> idx;
  for (int b = 0; b < B && c.sparse; ++b)
    for (int j = 0; j < topk; ++j) idx.push_back(j % 9 == 8 ? -1 : rng.uniform_int(0, kv[b] - 1));
  MlaPlan plan = c.sparse ? (c.table ? mla_sparse_decode_plan(ctx(), tab, cache, opt, topk)
                                     : mla_sparse_decode_plan(ctx(), csr, cache, opt, topk))
                 : c.extend ? (c.table ? mla_extend_plan(ctx(), tab, cache, opt) : mla_extend_plan(ctx(), csr, cache, opt))
                            : (c.table ? mla_decode_plan(ctx(), tab, cache, opt) : mla_decode_plan(ctx(), csr, cache, opt));
  EXPECT_EQ(plan.variant, *c.variant ? std::string(c.variant) : rows_variant());
  if (c.split) EXPECT_GT(plan.num_merges, 0);
  auto ids = test::upload(c.table ? tab.page_table : csr.kv_indices);
  auto o = test::upload(std::vector<uint8_t>(size_t(T) * H * Dc * dtype_size(c.od), 0xff));
  auto lse = test::upload(std::vector<float>(size_t(T) * H, 0.0f));
  DeviceBuffer ws(ctx(), size_t(std::max<int64_t>(plan.workspace_bytes, 4)));
  MlaBuffers mb;
  mb.q_nope = dqn.get(), mb.q_pe = dqp.get(), mb.ckv = ckv.get(), mb.kpe = c.single ? nullptr : kpe.get();
  mb.page_ids = ids.get(), mb.o = o.get(), mb.lse = lse.get(), mb.workspace = ws.get(), mb.scale_cache = scales.get();
  auto didx = test::upload(idx.empty() ? std::vector<int32_t>{0} : idx);
  if (c.sparse) mla_sparse_run(ctx(), plan, mb, didx.get());
  else mla_run(ctx(), plan, mb);
  ctx().finish();
  const auto got = test::unpack(test::download<uint8_t>(o, size_t(T) * H * Dc * dtype_size(c.od)), c.od);
  const auto glse = test::download<float>(lse, size_t(T) * H);
  std::vector<double> want(size_t(T) * H * Dc), wlse(size_t(T) * H);
  for (int b = 0, r0 = 0; b < B; r0 += qo[b], ++b) {
    const size_t q0 = size_t(r0) * H;
    if (c.sparse)
      ref::mla_sparse_decode(&qn[q0 * Dc], &qp[q0 * Dr], rc[b].data(), rk[b].data(), kv[b], H, Dc, Dr,
                             &idx[size_t(b) * topk], topk, opt.sm_scale, &want[q0 * Dc], &wlse[q0]);
    else
      ref::mla_attention(&qn[q0 * Dc], &qp[q0 * Dr], rc[b].data(), rk[b].data(), qo[b], kv[b], H, Dc, Dr, opt.sm_scale,
                         c.extend, &want[q0 * Dc], &wlse[q0]);
  }
  EXPECT_TRUE(test::all_close(got, want, o_tol(c.od), o_tol(c.od), "o")) << plan.variant << ", " << plan.num_merges
                                                                         << " merges";
  for (size_t r = 0; r < wlse.size(); ++r) {
    if (std::isinf(wlse[r])) EXPECT_TRUE(std::isinf(glse[r]) && glse[r] < 0) << "lse row " << r;
    else EXPECT_NEAR(glse[r], wlse[r], 2e-4 * (1 + std::fabs(wlse[r]))) << "lse row " << r;
    if (::testing::Test::HasFailure()) break;
  }
}

}  // namespace

TEST(MlaInt8, AppendAndAttentionMatchTheReference) {
  CLATTN_SEED_TRACE();
  test::Rng rng(2812);
  Case cs[7];
  cs[0].P = 16, cs[0].split = true, cs[0].qd = DType::BF16, cs[0].od = DType::BF16;  // the rows' variant
  cs[1].P = 1, cs[1].table = true, cs[1].single = true, cs[1].scale_dt = DType::F16, cs[1].pad_scales = true;
  cs[1].variant = "tiled";
  cs[2].P = 64, cs[2].split = true, cs[2].slots32 = true, cs[2].variant = "generic";
  cs[3].P = 16, cs[3].qd = DType::BF16, cs[3].scale_dt = DType::F16, cs[3].variant = "cpu";
  cs[4].P = 64, cs[4].split = true, cs[4].table = true, cs[4].variant = "cpu";
  cs[5].P = 16, cs[5].extend = true;  // causal extend, the rows' variant
  cs[6].P = 16, cs[6].sparse = true, cs[6].scale_dt = DType::F16;  // sparse decode, the rows' variant
  for (const Case& c : cs) {
    run_case(c, rng);
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(MlaInt8, RejectsBadScaleArgumentsBeforeEnqueue) {
  MlaCache cache;
  cache.num_pages = 2, cache.page_size = 4, cache.dtype = DType::I8;
  PagedCsr csr;
  csr.page_size = 4, csr.kv_indptr = {0, 1}, csr.kv_indices = {1}, csr.kv_last_page_len = {3};
  MlaOptions opt;
  opt.num_heads = 2, opt.q_dtype = opt.o_dtype = DType::F32, opt.sm_scale = 0.1f;
  // Descriptor: scale dtype and pair stride.
  MlaCache bad = cache;
  bad.scale_dtype = DType::BF16;
  EXPECT_TRUE(test::throws_error([&] { mla_decode_plan(ctx(), csr, bad, opt); }, Status::Unsupported, "scale_dtype"));
  bad = cache, bad.scale_stride_token = 1;
  EXPECT_TRUE(test::throws_error([&] { mla_decode_plan(ctx(), csr, bad, opt); }, Status::InvalidArgument,
                                 "scale_stride_token"));
  // The tensor cores do not read int8: asking for them falls back to a portable kernel.
  MlaOptions mo = opt;
  mo.params = {{"MMA", 1}};
  EXPECT_NE(mla_decode_plan(ctx(), csr, cache, mo).variant, "nv_mma_sync");

  const MlaPlan plan = mla_decode_plan(ctx(), csr, cache, opt);
  auto q = test::upload(std::vector<float>(size_t(2) * Dc, 0.5f)), qp = test::upload(std::vector<float>(2 * Dr, 0.5f));
  auto o = test::upload(std::vector<float>(size_t(2) * Dc, 7.0f));
  auto ckv = test::upload(std::vector<uint8_t>(size_t(cache.ckv_required_bytes()), 1));
  auto kpe = test::upload(std::vector<uint8_t>(size_t(cache.kpe_required_bytes()), 1));
  auto sc = test::upload(std::vector<float>(size_t(cache.scale_required_bytes()) / 4, 1.0f));
  auto short_sc = test::upload(std::vector<float>(3, 1.0f));
  auto ids = test::upload(csr.kv_indices);
  MlaBuffers b;
  b.q_nope = q.get(), b.q_pe = qp.get(), b.ckv = ckv.get(), b.kpe = kpe.get(), b.page_ids = ids.get(), b.o = o.get();
  EXPECT_TRUE(test::throws_error([&] { mla_run(ctx(), plan, b); }, Status::InvalidArgument, "scale_cache"));
  b.scale_cache = short_sc.get();
  EXPECT_TRUE(test::throws_error([&] { mla_run(ctx(), plan, b); }, Status::InvalidArgument, "scale_cache"));
  b.scale_cache = sc.get(), b.kv_scale = 2.0f;
  EXPECT_TRUE(test::throws_error([&] { mla_run(ctx(), plan, b); }, Status::InvalidArgument, "kv_scale must be 1"));
  // append_latent.
  auto src_c = test::upload(std::vector<float>(Dc, 1.0f)), src_k = test::upload(std::vector<float>(Dr, 1.0f));
  auto slots = test::upload(std::vector<int64_t>{5});
  AppendLatentArgs a;
  a.ckv = src_c.get(), a.kpe = src_k.get(), a.src_dtype = DType::F32, a.slot_mapping = slots.get(), a.num_tokens = 1;
  a.ckv_cache = ckv.get(), a.kpe_cache = kpe.get(), a.cache = cache;
  EXPECT_TRUE(test::throws_error([&] { append_latent(ctx(), a); }, Status::InvalidArgument, "scale_cache"));
  a.scale_cache = sc.get(), a.scale = 0.5f;
  EXPECT_TRUE(test::throws_error([&] { append_latent(ctx(), a); }, Status::InvalidArgument, "scale must be 1"));
  a.scale = 1.0f, a.cache.scale_dtype = DType::BF16;
  EXPECT_TRUE(test::throws_error([&] { append_latent(ctx(), a); }, Status::Unsupported, "scale_dtype"));
  ctx().finish();
  for (float x : test::download<float>(o, size_t(2) * Dc)) ASSERT_EQ(x, 7.0f);
  for (uint8_t x : test::download<uint8_t>(ckv, size_t(cache.ckv_required_bytes()))) ASSERT_EQ(x, 1);
  for (float x : test::download<float>(sc, size_t(cache.scale_required_bytes()) / 4)) ASSERT_EQ(x, 1.0f);
}

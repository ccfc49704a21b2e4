// The extend test harness shared by test_extend.cpp and test_extend_dpas.cpp: a Case (batch
// shape, dtypes, options, metadata form), its inputs and the double-precision reference
// (ref::attention over each request's logical sequence), a run of the op, and the check.
//
// Tolerances. Generic kernel: the kernel reads exactly the values the reference reads
// (inputs quantised first, fp8 included), so differences are f32 arithmetic and the final
// rounding of o: f32 5e-5, f16 2e-3, bf16 1e-2 (abs + rel), lse 2e-4.
// Matrix-unit kernels (nv_mma_sync / nv_wgmma on NVIDIA devices, intel_dpas on Intel ones or
// emulated): q is rounded to the MMA type (bf16 when KV is bf16, else f16; fp8 converts
// exactly) and the probabilities P are rounded to it before P V. With |v| <= 1 and sum(p)/l = 1, rounding
// each p by a relative u moves o by at most u (u = 2^-8 bf16, 2^-11 f16), so o gains
// <= u * 1 on top of its own rounding; q rounding moves a score by <= u * |q|.|k| * scale,
// which for these inputs (|q| <= 2, |k| <= 1, scale 1/sqrt(D)) is <= 2u sqrt(D) in the
// worst case and ~u in practice, moving lse by the same and o by a relative amount of that
// order. Hence bf16: o 3e-2, lse 3e-2; f16: o 6e-3, lse 6e-3.
//
// Unused cache slots hold NaN, so any read outside a request's keys shows.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "support/test_support.hpp"

using namespace clattn;
using test::ctx;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

enum class Meta { Csr, WindowedCsr, PageTable, Ragged };
enum class Mask { None, Tree, Random };
// Page ids: a shuffled cache, one run of consecutive ids per request (a fresh cache), or such
// runs with one break (a skipped id) halfway through each request.
enum class PageOrder { Shuffled, Runs, BrokenRuns };

struct Case {
  std::vector<int> qo, prefix;  // per request: query rows, cached keys before them
  int Hkv = 2, G = 4, D = 128, P = 16;
  DType kv = DType::BF16, qd = DType::BF16, od = DType::BF16;
  KVLayout layout = KVLayout::NHD;
  bool lse = true, sinks = false, causal = true;
  double cap = 0.0, sm_scale = 0.0;
  int window = -1;
  Mask mask = Mask::None;
  Meta meta = Meta::Csr;
  PageOrder page_order = PageOrder::Shuffled;
  double k_scale = 1.0, v_scale = 1.0;
  int64_t head_pad = 0;
  std::string variant;  // ExtendOptions::variant
  std::map<std::string, int> params;  // ExtendOptions::params
  std::string describe() const {
    std::string s = "B=" + std::to_string(qo.size()) + " (qo,prefix)={";
    for (size_t i = 0; i < qo.size(); ++i)
      s += (i ? " " : "") + std::to_string(qo[i]) + "," + std::to_string(prefix[i]);
    s += "} Hkv=" + std::to_string(Hkv) + " G=" + std::to_string(G) + " D=" + std::to_string(D) +
         " P=" + std::to_string(P) + " kv=" + dtype_name(kv) + " q=" + dtype_name(qd) + " o=" + dtype_name(od) +
         (layout == KVLayout::NHD ? " NHD" : " HND") + " causal=" + std::to_string(causal) +
         " lse=" + std::to_string(lse) + " sinks=" + std::to_string(sinks) + " cap=" + std::to_string(cap) +
         " window=" + std::to_string(window) + " mask=" + std::to_string(int(mask)) +
         " meta=" + std::to_string(int(meta)) + " pages=" + std::to_string(int(page_order)) + " pad=" + std::to_string(head_pad) +
         " kscale=" + std::to_string(k_scale) + " vscale=" + std::to_string(v_scale);
    return s;
  }
};

// 1..max_batch random requests: a fifth of them one query row, the rest 1..max_qo; a third
// with no cached prefix, the rest 0..max_prefix keys before their rows.
void random_requests(test::Rng& rng, Case& c, int max_batch, int max_qo, int max_prefix) {
  const int B = rng.uniform_int(1, max_batch);
  for (int i = 0; i < B; ++i) {
    c.qo.push_back(rng.uniform_int(0, 4) == 0 ? 1 : rng.uniform_int(1, max_qo));
    c.prefix.push_back(rng.uniform_int(0, 2) == 0 ? 0 : rng.uniform_int(0, max_prefix));
  }
}

struct Batch {
  Case c;
  PagedKV cache;
  RaggedKV ragged;
  std::vector<std::vector<int32_t>> pages;
  std::vector<double> kval, vval;      // paged: per physical element; NaN where unused
  std::vector<double> rk, rv;          // ragged: [kv_tokens, Hkv, D]
  std::vector<int32_t> qo_indptr, kv_indptr;
  std::vector<double> q, sinks;
  std::vector<uint8_t> mask;
  std::vector<int32_t> mask_indptr;
  PagedCsr csr;
  PageTable table;
  std::vector<double> o_ref, lse_ref;

  int B() const { return int(c.qo.size()); }
  int Hq() const { return c.Hkv * c.G; }
  int T() const { return qo_indptr.back(); }
  int kv_len(int i) const { return c.qo[size_t(i)] + c.prefix[size_t(i)]; }
};

// Tree verification mask for one request: every query row sees the whole prefix and its
// ancestors in a random tree over the new tokens (parent of node j is some node < j).
void tree_mask(test::Rng& rng, int qo, int prefix, std::vector<uint8_t>& bits) {
  std::vector<int> parent(size_t(qo), -1);
  for (int j = 1; j < qo; ++j) parent[size_t(j)] = rng.uniform_int(-1, j - 1);
  const int kv = qo + prefix;
  for (int j = 0; j < qo; ++j) {
    for (int k = 0; k < prefix; ++k) bits[size_t(j) * kv + k] = 1;
    for (int a = j; a >= 0; a = parent[size_t(a)]) bits[size_t(j) * kv + prefix + a] = 1;
  }
}

Batch build(const Case& c, uint64_t salt) {
  test::Rng rng(salt);
  Batch b;
  b.c = c;
  const int B = b.B(), P = c.P, D = c.D, Hq = b.Hq();
  b.qo_indptr = {0};
  b.kv_indptr = {0};
  for (int i = 0; i < B; ++i) {
    b.qo_indptr.push_back(b.qo_indptr.back() + c.qo[size_t(i)]);
    b.kv_indptr.push_back(b.kv_indptr.back() + b.kv_len(i));
  }
  // Logical K/V per request (quantised to the KV dtype), then placed in pages or rows.
  std::vector<std::vector<double>> kk(static_cast<size_t>(B)), vv(static_cast<size_t>(B));
  for (int i = 0; i < B; ++i) {
    const size_t n = size_t(b.kv_len(i)) * c.Hkv * D;
    kk[size_t(i)] = test::quantize(rng.vec(n, -1, 1), c.kv, c.k_scale);
    vv[size_t(i)] = test::quantize(rng.vec(n, -1, 1), c.kv, c.v_scale);
  }
  if (c.meta == Meta::Ragged) {
    RaggedKV& r = b.ragged;
    r.num_tokens = b.kv_indptr.back() + 2, r.num_kv_heads = c.Hkv, r.head_dim = D, r.dtype = c.kv;
    if (c.head_pad > 0) r.stride_head = D + c.head_pad, r.stride_token = c.Hkv * (D + c.head_pad);
    const int64_t st = r.stride_token ? r.stride_token : int64_t(c.Hkv) * D, sh = r.stride_head ? r.stride_head : D;
    const size_t elems = size_t((r.num_tokens - 1) * st + (c.Hkv - 1) * sh + D);
    b.rk.assign(elems, kNaN), b.rv.assign(elems, kNaN);
    for (int i = 0; i < B; ++i)
      for (int t = 0; t < b.kv_len(i); ++t)
        for (int h = 0; h < c.Hkv; ++h)
          for (int d = 0; d < D; ++d) {
            const size_t o = size_t((b.kv_indptr[size_t(i)] + t) * st + h * sh + d);
            b.rk[o] = kk[size_t(i)][(size_t(t) * c.Hkv + h) * D + d];
            b.rv[o] = vv[size_t(i)][(size_t(t) * c.Hkv + h) * D + d];
          }
  } else {
    PagedKV& k = b.cache;
    k = test::cache_geometry(P, c.Hkv, D, c.layout, c.kv, c.head_pad);
    int total = 0;
    for (int i = 0; i < B; ++i) total += (b.kv_len(i) + P - 1) / P;
    k.num_pages = total + 2 + 2 * B;
    std::vector<int32_t> ids(size_t(k.num_pages));
    std::iota(ids.begin(), ids.end(), 0);
    if (c.page_order == PageOrder::Shuffled) std::shuffle(ids.begin(), ids.end(), rng.gen);
    size_t next = 1;  // (runs start past id 0)
    b.pages.resize(size_t(B));
    for (int i = 0; i < B; ++i) {
      const int np = (b.kv_len(i) + P - 1) / P;
      for (int p = 0; p < np; ++p) {
        if (c.page_order == PageOrder::BrokenRuns && p == np / 2) ++next;
        b.pages[size_t(i)].push_back(ids[next++]);
      }
      ++next;
    }
    const size_t elems = size_t(k.required_bytes()) / dtype_size(k.dtype);
    b.kval.assign(elems, kNaN), b.vval.assign(elems, kNaN);
    for (int i = 0; i < B; ++i)
      for (int t = 0; t < b.kv_len(i); ++t)
        for (int h = 0; h < c.Hkv; ++h)
          for (int d = 0; d < D; ++d) {
            const size_t o = size_t(b.pages[size_t(i)][size_t(t / P)] * k.page_stride() +
                                    (t % P) * k.token_stride() + h * k.head_stride() + d);
            b.kval[o] = kk[size_t(i)][(size_t(t) * c.Hkv + h) * D + d];
            b.vval[o] = vv[size_t(i)][(size_t(t) * c.Hkv + h) * D + d];
          }
    // Metadata: CSR (optionally windowed: pages from the first key the first row sees).
    b.csr.page_size = P;
    b.csr.kv_indptr = {0};
    b.csr.qo_indptr = b.qo_indptr;
    for (int i = 0; i < B; ++i) {
      const int L = b.kv_len(i), np = (L + P - 1) / P;
      int first_page = 0, start = 0;
      if (c.meta == Meta::WindowedCsr && c.window >= 0 && L > 0) {
        const int first = std::max(0, c.prefix[size_t(i)] - c.window);
        first_page = first / P, start = first % P;
      }
      for (int p = first_page; p < np; ++p) b.csr.kv_indices.push_back(b.pages[size_t(i)][size_t(p)]);
      b.csr.kv_indptr.push_back(int32_t(b.csr.kv_indices.size()));
      b.csr.kv_last_page_len.push_back(L == 0 ? 0 : L - (np - 1) * P);
      if (c.meta == Meta::WindowedCsr) b.csr.kv_start_offset.push_back(start);
    }
    std::vector<int32_t> lens;
    for (int i = 0; i < B; ++i) lens.push_back(b.kv_len(i));
    b.table = test::page_table(b.pages, P, std::move(lens));
    b.table.cu_seqlens_q = b.qo_indptr;
    b.table.cu_seqlens_k = b.kv_indptr;
  }
  b.q = test::quantize(rng.vec(size_t(b.T()) * Hq * D, -2, 2), c.qd);
  if (c.sinks) {
    b.sinks = rng.vec(size_t(Hq), -2, 4);
    for (auto& s : b.sinks) s = double(float(s));
  }
  // Packed masks, one byte-aligned segment per request (FlashInfer segment_packbits).
  std::vector<std::vector<uint8_t>> packed(static_cast<size_t>(B));
  if (c.mask != Mask::None) {
    b.mask_indptr = {0};
    for (int i = 0; i < B; ++i) {
      const int qo = c.qo[size_t(i)], L = b.kv_len(i);
      std::vector<uint8_t> bits(size_t(qo) * L, 0);
      if (c.mask == Mask::Tree) tree_mask(rng, qo, c.prefix[size_t(i)], bits);
      else
        for (auto& x : bits) x = uint8_t(rng.uniform_int(0, 3) != 0);
      auto& pk = packed[size_t(i)];
      pk.assign((bits.size() + 7) / 8, 0);
      for (size_t j = 0; j < bits.size(); ++j) pk[j / 8] |= uint8_t(bits[j] << (j % 8));
      b.mask.insert(b.mask.end(), pk.begin(), pk.end());
      b.mask_indptr.push_back(int32_t(b.mask.size()));
    }
  }
  // Reference, request by request over the logical sequence.
  b.o_ref.assign(size_t(b.T()) * Hq * D, 0.0);
  b.lse_ref.assign(size_t(b.T()) * Hq, 0.0);
  ref::AttnOptions ro;
  ro.sm_scale = c.sm_scale != 0.0 ? double(float(c.sm_scale)) : 1.0 / std::sqrt(double(D));
  ro.logits_soft_cap = c.cap;
  ro.window_left = c.window;
  ro.causal = c.causal;
  ro.sinks = c.sinks ? b.sinks.data() : nullptr;
  for (int i = 0; i < B; ++i) {
    ro.custom_mask = c.mask != Mask::None ? packed[size_t(i)].data() : nullptr;
    const size_t q0 = size_t(b.qo_indptr[size_t(i)]);
    // data() + offset: with no query rows at all the vectors are empty and [] would be UB.
    ref::attention(b.q.data() + q0 * Hq * D, kk[size_t(i)].data(), vv[size_t(i)].data(), c.qo[size_t(i)], b.kv_len(i),
                   Hq, c.Hkv, D, D, ro, b.o_ref.data() + q0 * Hq * D, b.lse_ref.data() + q0 * Hq);
  }
  return b;
}

ExtendOptions options_of(const Batch& b) {
  ExtendOptions o;
  o.num_qo_heads = b.Hq();
  o.q_dtype = b.c.qd, o.o_dtype = b.c.od;
  o.sm_scale = float(b.c.sm_scale);
  o.logits_soft_cap = float(b.c.cap);
  o.window_left = b.c.window;
  o.causal = b.c.causal;
  o.mask_indptr = b.mask_indptr;
  o.variant = b.c.variant;
  o.params = b.c.params;
  return o;
}

ExtendPlan make_plan(const Batch& b, const ExtendOptions& o) {
  switch (b.c.meta) {
    case Meta::PageTable: return extend_plan(ctx(), b.table, b.cache, o);
    case Meta::Ragged: return prefill_plan(ctx(), b.qo_indptr, b.kv_indptr, b.ragged, o);
    default: return extend_plan(ctx(), b.csr, b.cache, o);
  }
}

struct DevRun {
  DeviceBuffer k, v, ids, q, o, lse, sinks, mask, ws;
  ExtendPlan plan;
  std::vector<uint8_t> o_bytes;
  std::vector<float> lse_out;
  std::vector<double> o_vals() const { return test::unpack(o_bytes, plan.o_dtype); }
};

template <class T>
DeviceBuffer upload_or_dummy(const std::vector<T>& v) {
  return v.empty() ? DeviceBuffer(ctx(), 16) : test::upload(v);
}

void upload_inputs(const Batch& b, DevRun& r) {
  const bool rag = b.c.meta == Meta::Ragged;
  r.k = upload_or_dummy(test::pack(rag ? b.rk : b.kval, b.c.kv, b.c.k_scale));
  r.v = upload_or_dummy(test::pack(rag ? b.rv : b.vval, b.c.kv, b.c.v_scale));
  r.ids = upload_or_dummy(b.c.meta == Meta::PageTable ? b.table.page_table : b.csr.kv_indices);
  r.q = upload_or_dummy(test::pack(b.q, b.c.qd));
  std::vector<float> s(b.sinks.begin(), b.sinks.end());
  r.sinks = upload_or_dummy(s);
  r.mask = upload_or_dummy(b.mask);
  const size_t rows = size_t(b.T()) * b.Hq();
  r.o = DeviceBuffer(ctx(), std::max<size_t>(16, rows * b.c.D * dtype_size(b.c.od)));
  r.lse = DeviceBuffer(ctx(), std::max<size_t>(16, rows * 4));
  r.o.fill_bytes(ctx(), 0x7b);
  r.lse.fill_bytes(ctx(), 0x7b);
}

ExtendBuffers buffers_of(const Batch& b, DevRun& r) {
  ExtendBuffers eb;
  eb.q = r.q.get(), eb.k = r.k.get(), eb.v = r.v.get();
  eb.page_ids = b.c.meta == Meta::Ragged ? nullptr : r.ids.get();
  eb.o = r.o.get(), eb.lse = b.c.lse ? r.lse.get() : nullptr;
  eb.sinks = b.c.sinks ? r.sinks.get() : nullptr;
  eb.custom_mask = b.c.mask != Mask::None ? r.mask.get() : nullptr;
  eb.k_scale = float(b.c.k_scale), eb.v_scale = float(b.c.v_scale);
  if (r.plan.workspace_bytes > 0) {
    r.ws = DeviceBuffer(ctx(), size_t(r.plan.workspace_bytes));
    eb.workspace = r.ws.get();
  }
  return eb;
}

void download(const Batch& b, DevRun& r) {
  ctx().finish();
  const size_t rows = size_t(b.T()) * b.Hq();
  r.o_bytes = test::download<uint8_t>(r.o, rows * b.c.D * dtype_size(b.c.od));
  r.lse_out = test::download<float>(r.lse, rows);
}

DevRun run(const Batch& b, const ExtendOptions& o) {
  DevRun r;
  upload_inputs(b, r);
  r.plan = make_plan(b, o);
  extend_run(ctx(), r.plan, buffers_of(b, r));
  download(b, r);
  return r;
}
DevRun run(const Batch& b) { return run(b, options_of(b)); }

struct Tol {
  double o, lse;
};
Tol tolerance(const ExtendPlan& p) {
  const DType od = p.o_dtype;
  Tol t{od == DType::F32 ? 5e-5 : od == DType::F16 ? 2e-3 : 1e-2, 2e-4};
  if (p.variant == "nv_mma_sync" || p.variant == "nv_wgmma" || p.variant == "intel_dpas") {  // see above
    const double m = p.kv_dtype == DType::BF16 ? 3e-2 : 6e-3;
    t.o = std::max(t.o, m), t.lse = m;
  }
  return t;
}

::testing::AssertionResult check(const Batch& b, const DevRun& r) {
  const Tol t = tolerance(r.plan);
  auto res = test::all_close(r.o_vals(), b.o_ref, t.o, t.o, "o");
  if (!res) return res;
  if (b.c.lse) {
    std::vector<double> l(r.lse_out.begin(), r.lse_out.end());
    res = test::all_close(l, b.lse_ref, t.lse, 2e-5, "lse");
  }
  return res;
}

#define EXPECT_EXTEND_OK(b, r)                                                                           \
  EXPECT_TRUE(check(b, r)) << (b).c.describe() << "\n  plan: variant=" << (r).plan.variant                  \
                           << " tiles=" << (r).plan.num_tiles << " opts=" << (r).plan.kernel_options

}  // namespace

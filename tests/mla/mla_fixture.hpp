// Shared by the MLA tests: a random paged latent cache (split or 576-wide single buffer,
// pages scattered and shuffled, unused slots NaN for float dtypes), its CSR / page-table
// metadata, random queries, and the per-request reference inputs (the values the device
// reads, i.e. quantised).
#pragma once
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "support/test_support.hpp"

namespace clattn::test::mla {

constexpr int Dc = kMlaCkvDim, Dr = kMlaKpeDim;

struct Batch {
  std::vector<int> qo, kv;  // per request (decode: qo all 1)
  int H = 16, P = 16;
  DType kvd = DType::BF16, qd = DType::BF16, od = DType::F32;
  bool single = false, table = false, extend = false, causal = true;
  double kv_scale = 1.0;
  double sm_scale = 1.0 / std::sqrt(192.0);
  int spare_pages = 3;

  std::string describe() const {
    std::string s = std::string(extend ? "extend" : "decode") + " B=" + std::to_string(kv.size()) + " (qo,kv)={";
    for (size_t i = 0; i < kv.size(); ++i) s += (i ? " " : "") + std::to_string(qo[i]) + "," + std::to_string(kv[i]);
    return s + "} H=" + std::to_string(H) + " P=" + std::to_string(P) + " latent=" + dtype_name(kvd) +
           " q=" + dtype_name(qd) + " o=" + dtype_name(od) + (single ? " single576" : " split") +
           (table ? " page_table" : " csr") + (causal ? " causal" : "") + " scale=" + std::to_string(kv_scale);
  }
};

// Host state of one generated batch.
struct Data {
  PagedCsr csr;
  PageTable tab;
  MlaCache cache;
  int T = 0;
  std::vector<int> qo_start;
  std::vector<std::vector<double>> ckv, kpe;  // per request [kv, Dc], [kv, Dr] as the device reads them
  std::vector<double> q_nope, q_pe;           // [T, H, Dc], [T, H, Dr] quantised
  std::vector<uint8_t> ckv_bytes, kpe_bytes, qn_bytes, qp_bytes;
  std::vector<int32_t> page_ids;              // kv_indices or page_table
};

inline Data make_data(const Batch& b, Rng& rng) {
  Data d;
  const int B = int(b.kv.size()), P = b.P;
  int total = b.spare_pages;
  for (int k : b.kv) total += (k + P - 1) / P;
  std::vector<int> perm(static_cast<size_t>(total));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng.gen);
  d.cache.num_pages = total, d.cache.page_size = P, d.cache.dtype = b.kvd, d.cache.single_buffer = b.single;
  const bool fp8 = b.kvd == DType::FP8_E4M3 || b.kvd == DType::FP8_E5M2;
  const double fill = fp8 ? 0.0 : std::numeric_limits<double>::quiet_NaN();
  const size_t slots = size_t(total) * P;
  std::vector<double> ckv_all(slots * Dc, fill), kpe_all(slots * Dr, fill);
  d.csr.page_size = P, d.csr.kv_indptr = {0};
  int maxp = 1;
  for (int k : b.kv) maxp = std::max(maxp, (k + P - 1) / P);
  d.tab.page_size = P, d.tab.max_pages = maxp, d.tab.page_table.assign(size_t(B) * maxp, -1);
  d.tab.cu_seqlens_k = {0};
  d.ckv.resize(size_t(B)), d.kpe.resize(size_t(B));
  int next = 0;
  for (int i = 0; i < B; ++i) {
    const int kv = b.kv[i], np = (kv + P - 1) / P;
    d.ckv[i] = quantize(rng.vec(size_t(kv) * Dc), b.kvd, b.kv_scale);
    d.kpe[i] = quantize(rng.vec(size_t(kv) * Dr), b.kvd, b.kv_scale);
    std::vector<int> pages(perm.begin() + next, perm.begin() + next + np);
    next += np;
    for (int p = 0; p < np; ++p) {
      d.csr.kv_indices.push_back(pages[p]);
      d.tab.page_table[size_t(i) * maxp + p] = pages[p];
    }
    d.csr.kv_indptr.push_back(int32_t(d.csr.kv_indices.size()));
    d.csr.kv_last_page_len.push_back(np ? kv - (np - 1) * P : 0);
    d.tab.seq_lens.push_back(kv);
    d.tab.cu_seqlens_k.push_back(d.tab.cu_seqlens_k.back() + kv);
    for (int t = 0; t < kv; ++t) {
      const size_t slot = size_t(pages[t / P]) * P + t % P;
      std::copy_n(&d.ckv[i][size_t(t) * Dc], Dc, &ckv_all[slot * Dc]);
      std::copy_n(&d.kpe[i][size_t(t) * Dr], Dr, &kpe_all[slot * Dr]);
    }
  }
  if (b.single) {
    std::vector<double> all(slots * (Dc + Dr));
    for (size_t s = 0; s < slots; ++s) {
      std::copy_n(&ckv_all[s * Dc], Dc, &all[s * (Dc + Dr)]);
      std::copy_n(&kpe_all[s * Dr], Dr, &all[s * (Dc + Dr) + Dc]);
    }
    d.ckv_bytes = pack(all, b.kvd, b.kv_scale);
  } else {
    d.ckv_bytes = pack(ckv_all, b.kvd, b.kv_scale);
    d.kpe_bytes = pack(kpe_all, b.kvd, b.kv_scale);
  }
  // Queries.
  d.qo_start.resize(size_t(B));
  if (b.extend) d.csr.qo_indptr = {0}, d.tab.cu_seqlens_q = {0};
  for (int i = 0; i < B; ++i) {
    d.qo_start[i] = d.T;
    d.T += b.qo[i];
    if (b.extend) d.csr.qo_indptr.push_back(d.T), d.tab.cu_seqlens_q.push_back(d.T);
  }
  d.q_nope = quantize(rng.vec(size_t(d.T) * b.H * Dc), b.qd);
  d.q_pe = quantize(rng.vec(size_t(d.T) * b.H * Dr), b.qd);
  d.qn_bytes = pack(d.q_nope, b.qd);
  d.qp_bytes = pack(d.q_pe, b.qd);
  d.page_ids = b.table ? d.tab.page_table : d.csr.kv_indices;
  if (d.page_ids.empty()) d.page_ids.push_back(0);
  return d;
}

// Reference o [T, H, Dc] and lse [T, H].
inline void reference(const Batch& b, const Data& d, std::vector<double>& o, std::vector<double>& lse) {
  const int H = b.H;
  o.assign(size_t(d.T) * H * Dc, 0.0), lse.assign(size_t(d.T) * H, 0.0);
  for (size_t i = 0; i < b.kv.size(); ++i) {
    const size_t r0 = size_t(d.qo_start[i]);
    ref::mla_attention(&d.q_nope[r0 * H * Dc], &d.q_pe[r0 * H * Dr], d.ckv[i].data(), d.kpe[i].data(), b.qo[i],
                       b.kv[i], H, Dc, Dr, b.sm_scale, b.extend && b.causal, &o[r0 * H * Dc], &lse[r0 * H]);
  }
}

// Device buffers of one batch.
struct Dev {
  DeviceBuffer ckv, kpe, qn, qp, ids, o, lse, ws;
};

inline Dev upload_data(const Data& d, const Batch& b) {
  Dev v;
  v.ckv = upload(d.ckv_bytes);
  if (!b.single) v.kpe = upload(d.kpe_bytes);
  v.qn = upload(d.qn_bytes), v.qp = upload(d.qp_bytes);
  v.ids = upload(d.page_ids);
  const size_t rows = std::max<size_t>(1, size_t(d.T) * b.H);
  v.o = DeviceBuffer(ctx(), rows * Dc * dtype_size(b.od));
  v.lse = DeviceBuffer(ctx(), rows * 4);
  v.o.fill_bytes(ctx(), 0xff);
  v.lse.fill_bytes(ctx(), 0xff);
  return v;
}

inline MlaPlan plan_for(const Batch& b, const Data& d, const MlaOptions& opt) {
  if (b.extend)
    return b.table ? mla_extend_plan(ctx(), d.tab, d.cache, opt) : mla_extend_plan(ctx(), d.csr, d.cache, opt);
  return b.table ? mla_decode_plan(ctx(), d.tab, d.cache, opt) : mla_decode_plan(ctx(), d.csr, d.cache, opt);
}

inline MlaBuffers buffers(Dev& v, const Batch& b) {
  MlaBuffers mb;
  mb.q_nope = v.qn.get(), mb.q_pe = v.qp.get(), mb.ckv = v.ckv.get(), mb.kpe = b.single ? nullptr : v.kpe.get();
  mb.page_ids = v.ids.get(), mb.o = v.o.get(), mb.lse = v.lse.get();
  mb.kv_scale = float(b.kv_scale);
  return mb;
}

}  // namespace clattn::test::mla

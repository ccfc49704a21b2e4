// Canary test: every op's device buffers (K, V, caches, outputs, workspaces, state pools,
// metadata outputs) are sub-buffers of larger allocations whose guard regions hold 0xFF
// bytes (NaN in every float dtype). Each op runs once with valid metadata and once with
// metadata pointing outside its pools (page ids, slots, state indices, token ranges),
// unvalidated, as device-built metadata would arrive. Afterwards: the guards are intact (no
// write outside a buffer), float outputs are finite (no guard byte was read into them),
// and the context's device fault word says exactly whether bad indices were met.
#include <gtest/gtest.h>

#include <clattn/clattn.hpp>
#include <climits>
#include <cmath>
#include <cstring>
#include <vector>

#include "support/test_support.hpp"

namespace clattn {
namespace {

using test::ctx;

size_t guard_bytes() {
  cl_uint bits = 0;
  clGetDeviceInfo(ctx().cl_device(), CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof bits, &bits, nullptr);
  return std::max<size_t>(4096, bits / 8);
}

// `bytes` bytes as a sub-buffer with guard regions on both sides.
class Guarded {
 public:
  explicit Guarded(size_t bytes) : g_(guard_bytes()), bytes_(std::max<size_t>(bytes, 4)) {
    parent_ = DeviceBuffer(ctx(), g_ + bytes_ + g_);
    parent_.fill_bytes(ctx(), 0xFF);
    cl_buffer_region r{g_, bytes_};
    cl_int err = CL_SUCCESS;
    sub_ = clCreateSubBuffer(parent_.get(), CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &r, &err);
    if (err != CL_SUCCESS) throw Error(Status::OpenCLError, "clCreateSubBuffer failed", err);
  }
  template <class T>
  Guarded(const std::vector<T>& v) : Guarded(v.size() * sizeof(T)) {
    write(v.data(), v.size() * sizeof(T));
  }
  ~Guarded() {
    if (sub_) clReleaseMemObject(sub_);
  }
  Guarded(const Guarded&) = delete;
  Guarded& operator=(const Guarded&) = delete;

  cl_mem get() const { return sub_; }
  size_t bytes() const { return bytes_; }
  void write(const void* src, size_t n) {
    if (n) rt_check(clEnqueueWriteBuffer(ctx().cl_queue(), sub_, CL_TRUE, 0, n, src, 0, nullptr, nullptr));
  }
  template <class T>
  std::vector<T> read(size_t n) const {
    std::vector<T> v(n);
    if (n) rt_check(clEnqueueReadBuffer(ctx().cl_queue(), sub_, CL_TRUE, 0, n * sizeof(T), v.data(), 0, nullptr, nullptr));
    return v;
  }
  ::testing::AssertionResult intact(const char* name) const {
    std::vector<uint8_t> all(g_ + bytes_ + g_);
    parent_.read(ctx(), all.data(), all.size());
    for (size_t i = 0; i < all.size(); ++i) {
      if (i >= g_ && i < g_ + bytes_) continue;
      if (all[i] != 0xFF)
        return ::testing::AssertionFailure() << name << ": guard byte " << (i < g_ ? "-" : "+")
                                             << (i < g_ ? g_ - i : i - g_ - bytes_) << " written";
    }
    return ::testing::AssertionSuccess();
  }

 private:
  static void rt_check(cl_int e) {
    if (e != CL_SUCCESS) throw Error(Status::OpenCLError, "canary buffer I/O failed", e);
  }
  size_t g_, bytes_;
  DeviceBuffer parent_;
  cl_mem sub_ = nullptr;
};

std::vector<uint16_t> bf16_values(size_t n, uint64_t salt) {
  test::Rng rng(salt);
  std::vector<uint16_t> v(n);
  for (auto& x : v) {
    const float f = float(rng.uniform());
    uint32_t u;
    std::memcpy(&u, &f, 4);
    x = uint16_t(u >> 16);
  }
  return v;
}
std::vector<float> f32_values(size_t n, uint64_t salt, double lo = -1.0, double hi = 1.0) {
  test::Rng rng(salt);
  std::vector<float> v(n);
  for (auto& x : v) x = float(rng.uniform(lo, hi));
  return v;
}

::testing::AssertionResult finite(const std::vector<float>& v, const char* name) {
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i])) return ::testing::AssertionFailure() << name << "[" << i << "] = " << v[i];
  return ::testing::AssertionSuccess();
}

// Faults recorded since the last call (finishes the context's queue first).
uint32_t faults() {
  ctx().finish();
  return ctx().device_faults(true);
}

// Page ids that lie outside a pool of n pages.
const int32_t kBadIds[] = {-1, INT_MIN, INT_MAX};
std::vector<int32_t> spoil(std::vector<int32_t> ids, int n) {
  for (size_t i = 0; i < ids.size(); i += 3) ids[i] = i % 2 ? n : kBadIds[(i / 3) % 3];
  return ids;
}

class Canary : public ::testing::Test {
 protected:
  void SetUp() override { faults(); }  // start from a clear fault word
};

// ------------------------------------------------------------------------------- paged KV
constexpr int kPages = 40, kP = 16, kHkv = 2, kHq = 4, kD = 64;

PagedKV small_cache() {
  PagedKV c;
  c.num_pages = kPages, c.page_size = kP, c.num_kv_heads = kHkv, c.head_dim = kD, c.dtype = DType::BF16;
  return c;
}

// Three requests over the pool: 40, 1 and 310 keys (pages 3, 1, 20), page ids shuffled;
// the long one splits under every vendor's decode tile.
const std::vector<std::vector<int32_t>> kReqPages = {
    {7, 2, 11}, {0}, {38, 5, 9, 1, 3, 10, 21, 30, 14, 17, 25, 33, 12, 8, 19, 27, 36, 4, 23, 39}};
const std::vector<int32_t> kLastLen = {8, 1, 6};

PagedCsr small_csr(bool extend) {
  PagedCsr c;
  c.page_size = kP;
  c.kv_indptr = {0};
  for (const auto& r : kReqPages) {
    c.kv_indices.insert(c.kv_indices.end(), r.begin(), r.end());
    c.kv_indptr.push_back(int32_t(c.kv_indices.size()));
  }
  c.kv_last_page_len = kLastLen;
  if (extend) c.qo_indptr = {0, 5, 6, 15};
  return c;
}

PageTable small_table(bool extend) {
  PageTable t;
  t.page_size = kP, t.max_pages = 20;
  for (size_t i = 0; i < kReqPages.size(); ++i) {
    std::vector<int32_t> row = kReqPages[i];
    row.resize(size_t(t.max_pages), -1);
    t.page_table.insert(t.page_table.end(), row.begin(), row.end());
    t.seq_lens.push_back(int32_t(kReqPages[i].size() - 1) * kP + kLastLen[i]);
  }
  if (extend) t.cu_seqlens_q = {0, 5, 6, 15};
  return t;
}

struct KV {
  Guarded k, v;
  KV() : k(bf16_values(size_t(small_cache().required_bytes()) / 2, 1)),
         v(bf16_values(size_t(small_cache().required_bytes()) / 2, 2)) {}
  ::testing::AssertionResult intact() const {
    auto a = k.intact("k_cache");
    return a ? v.intact("v_cache") : a;
  }
};

TEST_F(Canary, AppendKV) {
  KV kv;
  const int N = 6;
  Guarded src_k(bf16_values(size_t(N) * kHkv * kD, 3)), src_v(bf16_values(size_t(N) * kHkv * kD, 4));
  for (bool bad : {false, true}) {
    SCOPED_TRACE(bad ? "slots outside the cache" : "valid slots");
    std::vector<int64_t> slots = {0, 17, 191, 100, -1, 5};
    if (bad) slots = {int64_t(kPages) * kP, INT64_MAX, -5, int64_t(kPages) * kP + 1, 3, INT64_MIN};
    Guarded sm(slots);
    AppendKVArgs a;
    a.k = src_k.get(), a.v = src_v.get(), a.src_dtype = DType::BF16;
    a.slot_mapping = sm.get(), a.slot_dtype = DType::I64, a.num_tokens = N;
    a.k_cache = kv.k.get(), a.v_cache = kv.v.get(), a.cache = small_cache();
    append_kv(ctx(), a);
    EXPECT_EQ(faults(), bad ? uint32_t(FaultSlot) : 0u);
    EXPECT_TRUE(kv.intact());
    EXPECT_TRUE(sm.intact("slot_mapping"));
  }
}

// One decode run over guarded buffers; returns o.
void decode_case(const DecodePlan& plan, KV& kv, const std::vector<int32_t>& ids, bool bad) {
  Guarded q(f32_values(size_t(plan.batch_size) * kHq * kD, 5)), o(size_t(plan.batch_size) * kHq * kD * 4);
  Guarded lse(size_t(plan.batch_size) * kHq * 4), pid(ids), ws(size_t(plan.workspace_bytes));
  DecodeBuffers b;
  b.q = q.get(), b.k_cache = kv.k.get(), b.v_cache = kv.v.get(), b.page_ids = pid.get(), b.o = o.get();
  b.lse = lse.get(), b.workspace = plan.workspace_bytes ? ws.get() : nullptr;
  decode_run(ctx(), plan, b);
  EXPECT_EQ(faults(), bad ? uint32_t(FaultPageId) : 0u);
  EXPECT_TRUE(kv.intact());
  EXPECT_TRUE(o.intact("o"));
  EXPECT_TRUE(lse.intact("lse"));
  EXPECT_TRUE(ws.intact("workspace"));
  EXPECT_TRUE(finite(o.read<float>(size_t(plan.batch_size) * kHq * kD), "o"));
}

TEST_F(Canary, Decode) {
  KV kv;
  DecodeOptions o;
  o.num_qo_heads = kHq, o.q_dtype = o.o_dtype = DType::F32, o.validate = false;
  for (int split : {0, 16}) {  // 16: deterministic 16-key chunks, every request split and merged
    o.deterministic = split > 0, o.split_tokens = split;
    for (bool bad : {false, true}) {
      SCOPED_TRACE(std::string(split ? "split" : "unsplit") + (bad ? ", bad page ids" : ", valid page ids"));
      PagedCsr csr = small_csr(false);
      DecodePlan p = decode_plan(ctx(), csr, small_cache(), o);
      if (split) EXPECT_GT(p.num_merges, 0);
      decode_case(p, kv, bad ? spoil(csr.kv_indices, kPages) : csr.kv_indices, bad);
      PageTable t = small_table(false);
      DecodePlan pt = decode_plan(ctx(), t, small_cache(), o);
      decode_case(pt, kv, bad ? spoil(t.page_table, kPages) : t.page_table, bad);
    }
  }
}

void extend_case(const ExtendPlan& plan, KV& kv, const std::vector<int32_t>& ids, bool bad) {
  const size_t rows = size_t(plan.num_tokens) * kHq;
  Guarded q(f32_values(rows * kD, 6)), o(rows * kD * 4), lse(rows * 4), pid(ids), ws(size_t(plan.workspace_bytes));
  ExtendBuffers b;
  b.q = q.get(), b.k = kv.k.get(), b.v = kv.v.get(), b.page_ids = pid.get(), b.o = o.get(), b.lse = lse.get();
  b.workspace = plan.workspace_bytes ? ws.get() : nullptr;
  extend_run(ctx(), plan, b);
  EXPECT_EQ(faults(), bad ? uint32_t(FaultPageId) : 0u);
  EXPECT_TRUE(kv.intact());
  EXPECT_TRUE(o.intact("o"));
  EXPECT_TRUE(lse.intact("lse"));
  EXPECT_TRUE(finite(o.read<float>(rows * kD), "o"));
}

TEST_F(Canary, Extend) {
  KV kv;
  ExtendOptions o;
  o.num_qo_heads = kHq, o.q_dtype = o.o_dtype = DType::F32, o.validate = false;
  for (bool bad : {false, true}) {
    SCOPED_TRACE(bad ? "bad page ids" : "valid page ids");
    PagedCsr csr = small_csr(true);
    extend_case(extend_plan(ctx(), csr, small_cache(), o), kv, bad ? spoil(csr.kv_indices, kPages) : csr.kv_indices,
                bad);
    PageTable t = small_table(true);
    extend_case(extend_plan(ctx(), t, small_cache(), o), kv, bad ? spoil(t.page_table, kPages) : t.page_table, bad);
  }
}

TEST_F(Canary, RaggedPrefillAndCascade) {
  ExtendOptions o;
  o.num_qo_heads = kHq, o.q_dtype = o.o_dtype = DType::F32;
  RaggedKV r;
  r.num_tokens = 30, r.num_kv_heads = kHkv, r.head_dim = kD, r.dtype = DType::BF16;
  ExtendPlan p = prefill_plan(ctx(), {0, 4, 10}, {0, 12, 30}, r, o);
  Guarded k(bf16_values(size_t(30) * kHkv * kD, 7)), v(bf16_values(size_t(30) * kHkv * kD, 8));
  Guarded q(f32_values(size_t(10) * kHq * kD, 9)), out(size_t(10) * kHq * kD * 4), ws(size_t(p.workspace_bytes));
  ExtendBuffers b;
  b.q = q.get(), b.k = k.get(), b.v = v.get(), b.o = out.get(), b.workspace = ws.get();
  extend_run(ctx(), p, b);
  EXPECT_EQ(faults(), 0u);
  EXPECT_TRUE(k.intact("k") && v.intact("v") && out.intact("o"));
  EXPECT_TRUE(finite(out.read<float>(size_t(10) * kHq * kD), "o"));

  // Cascade: a 2-page shared prefix, then each request's own pages.
  KV kv;
  for (bool bad : {false, true}) {
    SCOPED_TRACE(bad ? "bad page ids" : "valid page ids");
    PagedCsr shared;
    shared.page_size = kP, shared.kv_indptr = {0, 2}, shared.kv_indices = {4, 6}, shared.kv_last_page_len = {16};
    PagedCsr unique = small_csr(true);
    CascadePlan cp = cascade_plan(ctx(), shared, unique, small_cache(), [&] {
      ExtendOptions c = o;
      c.validate = false;
      return c;
    }());
    const size_t rows = size_t(cp.num_tokens) * kHq;
    Guarded cq(f32_values(rows * kD, 10)), co(rows * kD * 4), lse(rows * 4);
    Guarded to(size_t(cp.tmp_o_bytes)), tl(size_t(cp.tmp_lse_bytes)), cws(size_t(cp.workspace_bytes));
    Guarded sid(bad ? spoil(shared.kv_indices, kPages) : shared.kv_indices);
    Guarded uid(bad ? spoil(unique.kv_indices, kPages) : unique.kv_indices);
    CascadeBuffers cb;
    cb.q = cq.get(), cb.k_cache = kv.k.get(), cb.v_cache = kv.v.get(), cb.shared_page_ids = sid.get();
    cb.unique_page_ids = uid.get(), cb.o = co.get(), cb.lse = lse.get(), cb.tmp_o = to.get();
    cb.tmp_lse_shared = tl.get(), cb.workspace = cp.workspace_bytes ? cws.get() : nullptr;
    cascade_run(ctx(), cp, cb);
    EXPECT_EQ(faults(), bad ? uint32_t(FaultPageId) : 0u);
    EXPECT_TRUE(kv.intact());
    EXPECT_TRUE(co.intact("o") && lse.intact("lse") && to.intact("tmp_o") && tl.intact("tmp_lse_shared"));
    EXPECT_TRUE(finite(co.read<float>(rows * kD), "o"));
  }
}

// ------------------------------------------------------------------------------------ MLA
MlaCache mla_cache() {
  MlaCache c;
  c.num_pages = kPages, c.page_size = kP, c.dtype = DType::BF16;
  return c;
}

TEST_F(Canary, MlaAndAppendLatent) {
  const MlaCache cache = mla_cache();
  Guarded ckv(bf16_values(size_t(cache.ckv_required_bytes()) / 2, 11));
  Guarded kpe(bf16_values(size_t(cache.kpe_required_bytes()) / 2, 12));
  const int H = 8;
  MlaOptions o;
  o.num_heads = H, o.q_dtype = o.o_dtype = DType::F32, o.sm_scale = 0.125f, o.validate = false;
  for (int splits : {1, 4}) {
    for (bool extend : {false, true}) {
      if (extend && splits > 1) continue;
      for (bool bad : {false, true}) {
        SCOPED_TRACE(std::string(extend ? "extend" : "decode") + " max_splits " + std::to_string(splits) +
                     (bad ? ", bad page ids" : ", valid page ids"));
        o.max_splits = splits;
        PagedCsr csr = small_csr(extend);
        MlaPlan p = extend ? mla_extend_plan(ctx(), csr, cache, o) : mla_decode_plan(ctx(), csr, cache, o);
        const size_t rows = size_t(p.num_tokens) * H;
        Guarded qn(f32_values(rows * kMlaCkvDim, 13)), qp(f32_values(rows * kMlaKpeDim, 14));
        Guarded out(rows * kMlaCkvDim * 4), lse(rows * 4), ws(size_t(p.workspace_bytes));
        Guarded pid(bad ? spoil(csr.kv_indices, kPages) : csr.kv_indices);
        MlaBuffers b;
        b.q_nope = qn.get(), b.q_pe = qp.get(), b.ckv = ckv.get(), b.kpe = kpe.get(), b.page_ids = pid.get();
        b.o = out.get(), b.lse = lse.get(), b.workspace = p.workspace_bytes ? ws.get() : nullptr;
        mla_run(ctx(), p, b);
        EXPECT_EQ(faults(), bad ? uint32_t(FaultPageId) : 0u);
        EXPECT_TRUE(ckv.intact("ckv") && kpe.intact("kpe"));
        EXPECT_TRUE(out.intact("o") && lse.intact("lse") && ws.intact("workspace"));
        EXPECT_TRUE(finite(out.read<float>(rows * kMlaCkvDim), "o"));
      }
    }
  }
  const int N = 4;
  Guarded sc(bf16_values(size_t(N) * kMlaCkvDim, 15)), sk(bf16_values(size_t(N) * kMlaKpeDim, 16));
  for (bool bad : {false, true}) {
    SCOPED_TRACE(bad ? "slots outside the cache" : "valid slots");
    std::vector<int32_t> slots = bad ? std::vector<int32_t>{kPages * kP, INT_MAX, -3, 2}
                                     : std::vector<int32_t>{0, 33, kPages * kP - 1, -1};
    Guarded sm(slots);
    AppendLatentArgs a;
    a.ckv = sc.get(), a.kpe = sk.get(), a.src_dtype = DType::BF16, a.slot_mapping = sm.get();
    a.slot_dtype = DType::I32, a.num_tokens = N, a.ckv_cache = ckv.get(), a.kpe_cache = kpe.get(), a.cache = cache;
    append_latent(ctx(), a);
    EXPECT_EQ(faults(), bad ? uint32_t(FaultSlot) : 0u);
    EXPECT_TRUE(ckv.intact("ckv") && kpe.intact("kpe"));
  }
}

// -------------------------------------------------------------------------------- linear
TEST_F(Canary, LinearAttention) {
  LinearConfig cfg;
  cfg.num_qk_heads = 1, cfg.num_v_heads = 2, cfg.head_dim_k = 64, cfg.head_dim_v = 64, cfg.dtype = DType::F32;
  const int slots = 3, B = 2, T = 7;
  const size_t slot_floats = size_t(cfg.num_v_heads) * 64 * 64;
  Guarded state(f32_values(slots * slot_floats, 17, -0.1, 0.1));
  LinearStatePool pool{state.get(), slots, DType::F32};
  for (bool prefill : {false, true}) {
    const int rows = prefill ? T : B;
    Guarded q(f32_values(size_t(rows) * 64, 18)), k(f32_values(size_t(rows) * 64, 19));
    Guarded v(f32_values(size_t(rows) * 2 * 64, 20)), g(f32_values(size_t(rows) * 2, 21, -0.5, -0.01));
    Guarded beta(f32_values(size_t(rows) * 2, 22, 0.1, 0.9)), o(size_t(rows) * 2 * 64 * 4);
    LinearTensors t{q.get(), k.get(), v.get(), g.get(), beta.get(), o.get()};
    for (bool bad : {false, true}) {
      SCOPED_TRACE(std::string(prefill ? "prefill" : "decode") + (bad ? ", bad device indices" : ", valid"));
      const std::vector<int32_t> host_idx = {2, 0}, host_cu = {0, 3, T};
      Guarded idx(bad ? std::vector<int32_t>{slots, -7} : host_idx);
      Guarded cu(bad ? std::vector<int32_t>{0, 1 << 20, -4} : host_cu);
      LinearBatch b;
      b.batch_size = B, b.state_indices = host_idx.data(), b.state_indices_dev = idx.get();
      if (prefill) b.cu_seqlens = host_cu.data(), b.cu_seqlens_dev = cu.get(), b.num_tokens = T;
      if (prefill) gdn_prefill(ctx(), cfg, t, pool, b);
      else gdn_decode(ctx(), cfg, t, pool, b);
      const uint32_t want = bad ? (FaultStateIndex | (prefill ? uint32_t(FaultTokenRange) : 0u)) : 0u;
      EXPECT_EQ(faults(), want);
      EXPECT_TRUE(state.intact("state") && o.intact("o") && q.intact("q") && v.intact("v"));
      EXPECT_TRUE(finite(o.read<float>(size_t(rows) * 2 * 64), "o"));
      EXPECT_TRUE(finite(state.read<float>(slots * slot_floats), "state"));
    }
  }
}

// ----------------------------------------------------------------------------- merge
TEST_F(Canary, MergeStates) {
  const int T = 3, H = 2, D = 64, S = 3;
  Guarded va(f32_values(size_t(T) * H * D, 23)), sa(f32_values(size_t(T) * H, 24));
  Guarded vb(f32_values(size_t(T) * H * D, 25)), sb(f32_values(size_t(T) * H, 26));
  Guarded vo(size_t(T) * H * D * 4), so(size_t(T) * H * 4);
  MergeStateArgs m;
  m.v_a = va.get(), m.s_a = sa.get(), m.v_b = vb.get(), m.s_b = sb.get(), m.v_out = vo.get(), m.s_out = so.get();
  m.num_tokens = T, m.num_heads = H, m.head_dim = D, m.dtype = DType::F32;
  merge_state(ctx(), m);
  Guarded v(f32_values(size_t(T) * S * H * D, 27)), s(f32_values(size_t(T) * S * H, 28));
  Guarded v2(size_t(T) * H * D * 4), s2(size_t(T) * H * 4);
  MergeStatesArgs k;
  k.v = v.get(), k.s = s.get(), k.v_out = v2.get(), k.s_out = s2.get();
  k.num_tokens = T, k.num_states = S, k.num_heads = H, k.head_dim = D, k.dtype = DType::F32;
  merge_states(ctx(), k);
  EXPECT_EQ(faults(), 0u);
  EXPECT_TRUE(vo.intact("v_out") && so.intact("s_out") && v2.intact("v_out (k-way)") && s2.intact("s_out (k-way)"));
  EXPECT_TRUE(finite(vo.read<float>(size_t(T) * H * D), "v_out"));
  EXPECT_TRUE(finite(v2.read<float>(size_t(T) * H * D), "v_out (k-way)"));
}

// ------------------------------------------------------------------- device metadata
// Engine tables with pool indices and lengths outside their ranges: the device builders
// treat such requests as empty and never write past their outputs.
TEST_F(Canary, DeviceMetadataBuilders) {
  const int pool = 3, max_ctx = 64, B = 4;
  std::vector<int32_t> r2t(size_t(pool) * max_ctx);
  for (size_t i = 0; i < r2t.size(); ++i) r2t[i] = int32_t(i);
  Guarded req_to_token(r2t);
  for (bool bad : {false, true}) {
    SCOPED_TRACE(bad ? "bad pool indices and lengths" : "valid batch");
    Guarded rpi(bad ? std::vector<int32_t>{pool, -1, 2, INT_MAX} : std::vector<int32_t>{0, 1, 2, 1});
    Guarded sl(bad ? std::vector<int32_t>{5, 7, max_ctx + 1, -3} : std::vector<int32_t>{5, 7, 64, 3});
    DeviceEngineBatch b;
    b.req_to_token = req_to_token.get(), b.pool_size = pool, b.max_ctx = max_ctx;
    b.req_pool_indices = rpi.get(), b.seq_lens = sl.get(), b.batch_size = B;
    const int64_t cap = max_csr_pages(B, max_ctx, kP);
    Guarded indptr(size_t(B + 1) * 4), indices(size_t(cap) * 4), last(size_t(B) * 4);
    DeviceCsr out;
    out.kv_indptr = indptr.get(), out.kv_indices = indices.get(), out.kv_last_page_len = last.get();
    build_csr_device(ctx(), b, kP, -1, out);
    Guarded table(size_t(B) * 4 * 4), seq(size_t(B) * 4), cuk(size_t(B + 1) * 4);
    DevicePageTable pt;
    pt.page_table = table.get(), pt.seq_lens = seq.get(), pt.cu_seqlens_k = cuk.get();
    build_page_table_device(ctx(), b, kP, 4, pt);
    Guarded slots(size_t(B) * 4);
    build_slot_mapping_device(ctx(), b, slots.get());
    ctx().finish();
    EXPECT_TRUE(indptr.intact("kv_indptr") && indices.intact("kv_indices") && last.intact("kv_last_page_len"));
    EXPECT_TRUE(table.intact("page_table") && seq.intact("seq_lens") && cuk.intact("cu_seqlens_k"));
    EXPECT_TRUE(slots.intact("slot_mapping") && req_to_token.intact("req_to_token"));
  }
}

}  // namespace
}  // namespace clattn

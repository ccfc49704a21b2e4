// clattn-tune: the ops, their tunable axes and their representative shapes. Shapes follow
// clattn-bench's cases (bench/*_bench.cpp); --quick shapes are small enough for PoCL.
// Inputs are random (not the benchmark's constant fills) so that a wrong kernel shows.
#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>

#include "backends/params/database.hpp"
#include "backends/params/variants.hpp"
#include "tools/tune/tuner.hpp"

namespace clattn::tune {
namespace {

// ------------------------------------------------------------------ random data, read-back
uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);  // round to nearest even (inputs are finite)
  return uint16_t(u >> 16);
}
float from_bf16(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Fills `n` elements of f32 or bf16 with uniform values in [lo, hi]. Large buffers repeat
// a 4 Mi-element random block (the pages are shuffled anyway; it keeps start-up short).
void upload_random(const Context& ctx, DeviceBuffer& b, DType dt, size_t n, uint64_t seed, float lo = -1.f,
                   float hi = 1.f) {
  const size_t es = dt == DType::F32 ? 4 : 2;
  const size_t block = std::min<size_t>(n, size_t(1) << 22);
  std::vector<uint8_t> host(block * es);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> U(lo, hi);
  for (size_t i = 0; i < block; ++i) {
    float f = U(rng);
    if (dt == DType::F32) std::memcpy(&host[i * 4], &f, 4);
    else {
      uint16_t h = to_bf16(f);
      std::memcpy(&host[i * 2], &h, 2);
    }
  }
  for (size_t off = 0; off < n; off += block) {
    size_t cnt = std::min(block, n - off);
    b.write(ctx, host.data(), cnt * es, off * es);
  }
}

std::vector<float> download(const Context& ctx, const DeviceBuffer& b, DType dt, size_t n) {
  std::vector<float> out(n);
  if (dt == DType::F32) {
    b.read(ctx, out.data(), n * 4);
  } else {
    std::vector<uint16_t> h(n);
    b.read(ctx, h.data(), n * 2);
    for (size_t i = 0; i < n; ++i) out[i] = from_bf16(h[i]);
  }
  return out;
}

template <class T>
DeviceBuffer upload(const Context& ctx, const std::vector<T>& v) {
  DeviceBuffer b(ctx, std::max<size_t>(4, v.size() * sizeof(T)));
  if (!v.empty()) b.write(ctx, v.data(), v.size() * sizeof(T));
  return b;
}

void ensure(const Context& ctx, DeviceBuffer& ws, int64_t bytes) {
  if (size_t(std::max<int64_t>(bytes, 16)) > ws.bytes()) ws = DeviceBuffer(ctx, size_t(bytes));
}

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

// CSR of B requests of S tokens each over shuffled pages (as a long-running allocator).
PagedCsr make_csr(int B, const std::vector<int>& kv_lens, int P, int* num_pages, uint64_t seed) {
  PagedCsr csr;
  csr.page_size = P;
  csr.kv_indptr = {0};
  int total = 0;
  for (int i = 0; i < B; ++i) total += (kv_lens[size_t(i)] + P - 1) / P;
  std::vector<int32_t> ids(static_cast<size_t>(total));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(uint32_t(seed)));
  csr.kv_indices = ids;
  for (int i = 0; i < B; ++i) {
    int pages = (kv_lens[size_t(i)] + P - 1) / P;
    csr.kv_indptr.push_back(csr.kv_indptr.back() + pages);
    csr.kv_last_page_len.push_back(kv_lens[size_t(i)] - (pages - 1) * P);
  }
  *num_pages = std::max(1, total);
  return csr;
}

// ------------------------------------------------------------------------------ decode
struct DecodeInst : Instance {
  Context ctx;
  int B, S, Hq, Hkv, D, P;
  PagedKV cache;
  PagedCsr csr;
  DeviceBuffer k, v, q, o, lse, pid, ws;
  DecodePlan pl;
  DecodeInst(const Context& c, int B_, int S_, int Hq_, int Hkv_, int D_, int P_)
      : ctx(c), B(B_), S(S_), Hq(Hq_), Hkv(Hkv_), D(D_), P(P_) {
    csr = make_csr(B, std::vector<int>(size_t(B), S), P, &cache.num_pages, 7);
    cache.page_size = P, cache.num_kv_heads = Hkv, cache.head_dim = D, cache.dtype = DType::BF16;
    const size_t kvn = size_t(cache.required_bytes()) / 2, qn = size_t(B) * Hq * D;
    k = DeviceBuffer(ctx, kvn * 2), v = DeviceBuffer(ctx, kvn * 2);
    q = DeviceBuffer(ctx, qn * 2), o = DeviceBuffer(ctx, qn * 2), lse = DeviceBuffer(ctx, size_t(B) * Hq * 4);
    upload_random(ctx, k, DType::BF16, kvn, 1);
    upload_random(ctx, v, DType::BF16, kvn, 2);
    upload_random(ctx, q, DType::BF16, qn, 3);
    pid = upload(ctx, csr.kv_indices);
    ws = DeviceBuffer(ctx, 16);
    shape = fmt("B=%d S=%d Hq=%d Hkv=%d D=%d P=%d bf16", B, S, Hq, Hkv, D, P);
    bytes = 2.0 * B * double(S) * Hkv * D * 2 + 2.0 * double(qn) * 2;
    flops = 4.0 * B * double(S) * Hq * D;
  }
  void plan(const Params& p) override {
    DecodeOptions opt;
    opt.num_qo_heads = Hq, opt.q_dtype = opt.o_dtype = DType::BF16, opt.validate = false, opt.params = p;
    pl = decode_plan(ctx, csr, cache, opt);
    ensure(ctx, ws, pl.workspace_bytes);
  }
  void enqueue() override {
    DecodeBuffers b;
    b.q = q.get(), b.k_cache = k.get(), b.v_cache = v.get(), b.page_ids = pid.get(), b.o = o.get();
    b.lse = lse.get(), b.workspace = pl.workspace_bytes ? ws.get() : nullptr;
    decode_run(ctx, pl, b);
  }
  std::vector<float> output() override {
    ctx.finish();
    return download(ctx, o, DType::BF16, size_t(B) * Hq * D);
  }
};

// ------------------------------------------------------------------------------ extend
struct ExtendInst : Instance {
  Context ctx;
  int B, qo, kv, Hq, Hkv, D, P = 16;
  PagedKV cache;
  PagedCsr csr;
  DeviceBuffer k, v, q, o, lse, pid, ws;
  ExtendPlan pl;
  size_t T;
  ExtendInst(const Context& c, int B_, int qo_, int kv_, int Hq_, int Hkv_, int D_)
      : ctx(c), B(B_), qo(qo_), kv(kv_), Hq(Hq_), Hkv(Hkv_), D(D_) {
    csr = make_csr(B, std::vector<int>(size_t(B), kv), P, &cache.num_pages, 11);
    csr.qo_indptr = {0};
    for (int i = 0; i < B; ++i) csr.qo_indptr.push_back(csr.qo_indptr.back() + qo);
    cache.page_size = P, cache.num_kv_heads = Hkv, cache.head_dim = D, cache.dtype = DType::BF16;
    const size_t kvn = size_t(cache.required_bytes()) / 2;
    T = size_t(B) * qo;
    k = DeviceBuffer(ctx, kvn * 2), v = DeviceBuffer(ctx, kvn * 2);
    q = DeviceBuffer(ctx, T * Hq * D * 2), o = DeviceBuffer(ctx, T * Hq * D * 2), lse = DeviceBuffer(ctx, T * Hq * 4);
    upload_random(ctx, k, DType::BF16, kvn, 4);
    upload_random(ctx, v, DType::BF16, kvn, 5);
    upload_random(ctx, q, DType::BF16, T * Hq * D, 6);
    pid = upload(ctx, csr.kv_indices);
    shape = fmt("B=%d qo=%d kv=%d Hq=%d Hkv=%d D=%d bf16 causal", B, qo, kv, Hq, Hkv, D);
    double visible = 0;  // keys seen by each causal row: kv - qo + j + 1
    for (int j = 0; j < qo; ++j) visible += kv - qo + j + 1;
    flops = 4.0 * B * visible * Hq * D;
    bytes = 2.0 * B * double(kv) * Hkv * D * 2 + 2.0 * double(T) * Hq * D * 2;
  }
  void plan(const Params& p) override {
    ExtendOptions opt;
    opt.num_qo_heads = Hq, opt.q_dtype = opt.o_dtype = DType::BF16, opt.validate = false, opt.params = p;
    pl = extend_plan(ctx, csr, cache, opt);
    if (size_t(pl.workspace_bytes) > ws.bytes()) ws = DeviceBuffer(ctx, size_t(pl.workspace_bytes));
  }
  void enqueue() override {
    ExtendBuffers b;
    b.q = q.get(), b.k = k.get(), b.v = v.get(), b.page_ids = pid.get(), b.o = o.get(), b.lse = lse.get();
    b.workspace = ws.get();
    extend_run(ctx, pl, b);
  }
  std::vector<float> output() override {
    ctx.finish();
    return download(ctx, o, DType::BF16, T * Hq * D);
  }
};

// ------------------------------------------------------------------------------ MLA
struct MlaInst : Instance {
  Context ctx;
  bool ext;
  int B, qo, S, H, P;
  MlaCache cache;
  PagedCsr csr;
  DeviceBuffer ckv, kpe, qn, qp, o, lse, ids, ws;
  MlaPlan pl;
  size_t T;
  MlaInst(const Context& c, bool ext_, int B_, int qo_, int S_, int H_, int P_)
      : ctx(c), ext(ext_), B(B_), qo(ext_ ? qo_ : 1), S(S_), H(H_), P(P_) {
    csr = make_csr(B, std::vector<int>(size_t(B), S), P, &cache.num_pages, 13);
    if (ext) {
      csr.qo_indptr = {0};
      for (int i = 0; i < B; ++i) csr.qo_indptr.push_back(csr.qo_indptr.back() + qo);
    }
    cache.page_size = P, cache.dtype = DType::BF16;
    T = size_t(B) * qo;
    const size_t nckv = size_t(cache.ckv_required_bytes()) / 2, nkpe = size_t(cache.kpe_required_bytes()) / 2;
    ckv = DeviceBuffer(ctx, nckv * 2), kpe = DeviceBuffer(ctx, nkpe * 2);
    qn = DeviceBuffer(ctx, T * H * 512 * 2), qp = DeviceBuffer(ctx, T * H * 64 * 2);
    o = DeviceBuffer(ctx, T * H * 512 * 2), lse = DeviceBuffer(ctx, T * H * 4);
    upload_random(ctx, ckv, DType::BF16, nckv, 21);
    upload_random(ctx, kpe, DType::BF16, nkpe, 22);
    upload_random(ctx, qn, DType::BF16, T * H * 512, 23);
    upload_random(ctx, qp, DType::BF16, T * H * 64, 24);
    ids = upload(ctx, csr.kv_indices);
    ws = DeviceBuffer(ctx, 16);
    double visible = 0;
    for (int j = 0; j < qo; ++j) visible += ext ? S - qo + j + 1 : S;
    flops = 2.0 * H * B * visible * (576 + 512);
    bytes = double(B) * S * 576 * 2 + double(T) * H * (576 + 512) * 2;
    shape = ext ? fmt("B=%d qo=%d kv=%d H=%d P=%d bf16 causal", B, qo, S, H, P)
                : fmt("B=%d S=%d H=%d P=%d bf16", B, S, H, P);
  }
  void plan(const Params& p) override {
    MlaOptions opt;
    opt.num_heads = H, opt.q_dtype = opt.o_dtype = DType::BF16, opt.sm_scale = 0.0721688f, opt.validate = false;
    opt.params = p;
    pl = ext ? mla_extend_plan(ctx, csr, cache, opt) : mla_decode_plan(ctx, csr, cache, opt);
    ensure(ctx, ws, pl.workspace_bytes);
  }
  void enqueue() override {
    MlaBuffers mb;
    mb.q_nope = qn.get(), mb.q_pe = qp.get(), mb.ckv = ckv.get(), mb.kpe = kpe.get(), mb.page_ids = ids.get();
    mb.o = o.get(), mb.lse = lse.get(), mb.workspace = pl.workspace_bytes ? ws.get() : nullptr;
    mla_run(ctx, pl, mb);
  }
  std::vector<float> output() override {
    ctx.finish();
    return download(ctx, o, DType::BF16, T * H * 512);
  }
};

// The register-blocked MLA kernel's tile (mla_tiled.cl; rows_mla.cpp explains each): TILED
// first (it decides which kernel the other axes tune), combinations the kernel rejects are
// skipped by the tuner.
std::vector<Axis> mla_tiled_axes() {
  return {{"TILED", {1, 0}}, {"KT", {4, 8, 16, 32}}, {"MS", {1, 2, 4}},
          {"DS", {4, 8, 16}}, {"DSW", {4, 8, 16}}, {"MO", {1, 2, 4, 8}}};
}

// CPU devices: the cpu variant (mla_cpu.cl) against the GPU-shaped kernels first (it decides
// which kernel the other axes tune), then its vector width (0 = the device's preferred width),
// query vectors per work-item, key block, micro-tiles, S pass and touch-ahead distance
// (rows_mla.cpp).
void add_mla_cpu_axes(const DeviceProfile& p, bool quick, std::vector<Axis>& a) {
  if (!p.is_cpu) return;
  std::vector<Axis> c = {{"CPU_KERNEL", {1, 0}}, {"VW", {0, 8, 16}},  {"CPU_QB", {8, 16, 32}},
                         {"BK", {16, 32, 64}},   {"SK", {4, 8, 16}},  {"SD", {64, 192, 576}},
                         {"OH", {2, 4, 8}},      {"OD", {2, 4, 8}},   {"TOUCH_AHEAD", {0, 1, 2}}};
  if (quick) c = {{"CPU_KERNEL", {1, 0}}, {"BK", {16, 32}}, {"SK", {8, 16}}};
  a.insert(a.begin(), c.begin(), c.end());
}

// ------------------------------------------------------------------------------ linear
struct LinearInst : Instance {
  Context ctx;
  bool gdn, prefill;
  int B, L, H, Dk, Dv;
  size_t T;
  DeviceBuffer q, k, v, o, g, beta, state, idx_d, cu_d;
  std::vector<int32_t> idx, cu;
  LinearConfig cfg;
  LinearInst(const Context& c, bool gdn_, bool prefill_, int B_, int L_, int H_, int Dk_, int Dv_)
      : ctx(c), gdn(gdn_), prefill(prefill_), B(B_), L(prefill_ ? L_ : 1), H(H_), Dk(Dk_), Dv(Dv_) {
    T = size_t(B) * L;
    const size_t nqk = T * H * Dk, nv = T * H * Dv, ng = T * H, slot = size_t(H) * Dk * Dv;
    q = DeviceBuffer(ctx, nqk * 2), k = DeviceBuffer(ctx, nqk * 2), v = DeviceBuffer(ctx, nv * 2);
    o = DeviceBuffer(ctx, nv * 2), g = DeviceBuffer(ctx, ng * 4), beta = DeviceBuffer(ctx, ng * 4);
    state = DeviceBuffer(ctx, size_t(B) * slot * 4);
    upload_random(ctx, q, DType::BF16, nqk, 31);
    upload_random(ctx, k, DType::BF16, nqk, 32);
    upload_random(ctx, v, DType::BF16, nv, 33);
    upload_random(ctx, g, DType::F32, ng, 34, -0.1f, -0.01f);
    upload_random(ctx, beta, DType::F32, ng, 35, 0.1f, 0.9f);
    reset();
    idx.resize(size_t(B)), cu.resize(size_t(B) + 1);
    for (int i = 0; i < B; ++i) idx[size_t(i)] = i;
    for (int i = 0; i <= B; ++i) cu[size_t(i)] = i * L;
    idx_d = upload(ctx, idx), cu_d = upload(ctx, cu);
    cfg.num_qk_heads = cfg.num_v_heads = H, cfg.head_dim_k = Dk, cfg.head_dim_v = Dv, cfg.dtype = DType::BF16;
    cfg.l2norm_qk = gdn;
    f32_output = false;
    const double state_bytes = 2.0 * B * double(slot) * 4;  // read + write once per request
    bytes = state_bytes + double(nqk) * 2 * 2 + double(nv) * 2 * 2 + double(ng) * 4 * (gdn ? 2 : 1);
    // Chunked-form FLOPs per token and head (bench/linear_bench.cpp's count, C = 64).
    const double C = 64, m = gdn ? 2 : 1;
    flops = double(T) * H * (3 * 2.0 * Dk * Dv + m * C / 2 * 2 * Dk + m * C / 2 * 2 * Dv);
    shape = prefill ? fmt("%s B=%d L=%d H=%d Dk=%d Dv=%d bf16", gdn ? "gdn" : "gla", B, L, H, Dk, Dv)
                    : fmt("%s B=%d H=%d Dk=%d Dv=%d bf16, f32 state", gdn ? "gdn" : "gla", B, H, Dk, Dv);
  }
  void reset() override { upload_random(ctx, state, DType::F32, size_t(B) * H * Dk * Dv, 36, -0.5f, 0.5f); }
  void plan(const Params& p) override {
    cfg.params = p;  // linear ops have no plan: the first enqueue builds (the correctness run)
  }
  void enqueue() override {
    LinearTensors t{q.get(), k.get(), v.get(), g.get(), beta.get(), o.get()};
    LinearStatePool pool{state.get(), B, DType::F32};
    LinearBatch b;
    b.batch_size = B, b.state_indices = idx.data(), b.state_indices_dev = idx_d.get();
    if (prefill) b.cu_seqlens = cu.data(), b.cu_seqlens_dev = cu_d.get(), b.num_tokens = int(T);
    if (gdn) (prefill ? gdn_prefill : gdn_decode)(ctx, cfg, t, pool, b, nullptr);
    else (prefill ? gla_prefill : gla_decode)(ctx, cfg, t, pool, b, nullptr);
  }
  std::vector<float> output() override {
    ctx.finish();
    auto out = download(ctx, o, DType::BF16, T * H * Dv);
    auto st = download(ctx, state, DType::F32, size_t(B) * H * Dk * Dv);
    out.insert(out.end(), st.begin(), st.end());
    return out;
  }
};

// ------------------------------------------------------------------------------ merge
// merge_states has no per-call override: candidates go through params::set_override.
struct MergeInst : Instance {
  Context ctx;
  int T, S, H, D;
  DeviceBuffer v, s, vo, so;
  MergeInst(const Context& c, int T_, int S_, int H_, int D_) : ctx(c), T(T_), S(S_), H(H_), D(D_) {
    const size_t nv = size_t(T) * S * H * D, ns = size_t(T) * S * H;
    v = DeviceBuffer(ctx, nv * 4), s = DeviceBuffer(ctx, ns * 4);
    vo = DeviceBuffer(ctx, size_t(T) * H * D * 4), so = DeviceBuffer(ctx, size_t(T) * H * 4);
    upload_random(ctx, v, DType::F32, nv, 41);
    upload_random(ctx, s, DType::F32, ns, 42, -4.f, 4.f);
    f32_output = true;
    bytes = double(nv + ns) * 4 + double(T) * H * (D + 1) * 4;
    shape = fmt("T=%d states=%d H=%d D=%d f32", T, S, H, D);
  }
  void plan(const Params& p) override { params::set_override("merge", p); }
  void enqueue() override {
    MergeStatesArgs a;
    a.v = v.get(), a.s = s.get(), a.v_out = vo.get(), a.s_out = so.get();
    a.num_tokens = T, a.num_states = S, a.num_heads = H, a.head_dim = D, a.dtype = DType::F32;
    merge_states(ctx, a);
  }
  std::vector<float> output() override {
    ctx.finish();
    auto out = download(ctx, vo, DType::F32, size_t(T) * H * D);
    auto ls = download(ctx, so, DType::F32, size_t(T) * H);
    out.insert(out.end(), ls.begin(), ls.end());
    return out;
  }
  void done() override { params::set_override("merge", {}); }
};

// ------------------------------------------------------------------------------ metadata
// build_page_table_device (the builders share op "metadata"'s WG), through set_override.
struct MetadataInst : Instance {
  Context ctx;
  int B, max_ctx, P, max_pages;
  DeviceBuffer r2t, rpi, seq, table;
  MetadataInst(const Context& c, int B_, int max_ctx_, int P_) : ctx(c), B(B_), max_ctx(max_ctx_), P(P_) {
    max_pages = max_table_pages(max_ctx, P);
    std::vector<int32_t> r(static_cast<size_t>(B) * max_ctx), pool(static_cast<size_t>(B)), lens(static_cast<size_t>(B));
    std::mt19937 rng(51);
    std::vector<int32_t> pages(size_t(B) * max_pages);
    std::iota(pages.begin(), pages.end(), 0);
    std::shuffle(pages.begin(), pages.end(), rng);
    for (int i = 0; i < B; ++i) {
      pool[size_t(i)] = B - 1 - i;
      lens[size_t(i)] = 1 + int(rng() % uint32_t(max_ctx));
      for (int t = 0; t < max_ctx; ++t)
        r[size_t(B - 1 - i) * max_ctx + t] = pages[size_t(i) * max_pages + t / P] * P + t % P;
    }
    r2t = upload(ctx, r), rpi = upload(ctx, pool), seq = upload(ctx, lens);
    table = DeviceBuffer(ctx, size_t(B) * max_pages * 4);
    f32_output = true;
    double tokens = 0;
    for (int l : lens) tokens += l;
    bytes = tokens / P * 4 * 2;  // one slot read + one page id written per page
    shape = fmt("page_table B=%d max_ctx=%d P=%d", B, max_ctx, P);
  }
  void plan(const Params& p) override { params::set_override("metadata", p); }
  void enqueue() override {
    DeviceEngineBatch b;
    b.req_to_token = r2t.get(), b.pool_size = B, b.max_ctx = max_ctx, b.req_pool_indices = rpi.get();
    b.seq_lens = seq.get(), b.batch_size = B;
    DevicePageTable out;
    out.page_table = table.get();
    build_page_table_device(ctx, b, P, max_pages, out);
  }
  std::vector<float> output() override {
    ctx.finish();
    std::vector<int32_t> t(size_t(B) * max_pages);
    table.read(ctx, t.data(), t.size() * 4);
    std::vector<int32_t> lens(static_cast<size_t>(B));
    seq.read(ctx, lens.data(), lens.size() * 4);
    std::vector<float> out;
    for (int i = 0; i < B; ++i)  // entries past a request's pages are unspecified
      for (int p = 0; p < (lens[size_t(i)] + P - 1) / P; ++p) out.push_back(float(t[size_t(i) * max_pages + p]));
    return out;
  }
  void done() override { params::set_override("metadata", {}); }
};

template <class T, class... A>
void add(std::vector<std::unique_ptr<Instance>>& v, A&&... a) {
  v.push_back(std::make_unique<T>(std::forward<A>(a)...));
}

std::vector<OpSpec> build_specs() {
  std::vector<OpSpec> s;
  // decode: split-K knobs first (they need no rebuild and decide long-context B=1), then the tile.
  s.push_back({"decode", "bf16", false, "backends/params/rows_decode.cpp",
               [](const DeviceProfile& p, bool quick) {
                 std::vector<Axis> a = {{"MAX_SPLITS", {16, 32, 64, 128, 256}},
                                        {"WGS_PER_CU", {1, 2, 4, 8}},
                                        {"MIN_CHUNK", {64, 128, 256, 512, 1024}},
                                        {"FUSE_MERGE", {0, 1}},
                                        {"QREGS", {16, 32, 64, 128}},
                                        {"UNROLL", {1, 2, 4, 8}},
                                        {"WG", {64, 128, 256}},
                                        {"QREGS_MAX", {64, 128, 256}},
                                        {"LOAD_BYTES", {8, 16}}};
                 if (params::variant_available(p, "nv_ptx_shfl")) a.push_back({"PTX_SHFL", {0, 1}});
                 if (quick) a = {{"MAX_SPLITS", {4, 16}}, {"WG", {16, 64}}, {"UNROLL", {2, 8}}};
                 // CPU devices: the cpu variant against the GPU-shaped kernel, and its vector
                 // width (0 = the device's preferred width).
                 if (p.is_cpu) {
                   if (!quick) a.insert(a.begin(), {"PREFETCH_LOCALITY", {1, 3}});
                   if (!quick) a.insert(a.begin(), {"TOUCH_AHEAD", {2, 1, 4, 0}});
                   a.insert(a.begin(), {"VW", quick ? std::vector<int>{0, 8} : std::vector<int>{0, 4, 8, 16}});
                   a.insert(a.begin(), {"CPU_KERNEL", {1, 0}});
                 }
                 return a;
               },
               [](const Context& c, bool quick) {
                 std::vector<std::unique_ptr<Instance>> v;
                 if (quick) {
                   add<DecodeInst>(v, c, 1, 2048, 8, 2, 128, 16);
                   add<DecodeInst>(v, c, 4, 512, 8, 2, 128, 16);
                 } else {
                   add<DecodeInst>(v, c, 1, 32768, 32, 8, 128, 16);
                   add<DecodeInst>(v, c, 64, 4096, 32, 8, 128, 16);
                   add<DecodeInst>(v, c, 8, 16384, 32, 8, 128, 16);
                 }
                 return v;
               }});
  s.push_back({"extend", "d128", true, "backends/params/rows_extend.cpp",
               [](const DeviceProfile& p, bool quick) {
                 std::vector<Axis> a;
                 if (params::variant_available(p, "nv_mma_sync"))
                   a = {{"MMA", {1, 0}}, {"MMA_WARPS", {2, 4, 8}}, {"MMA_KEYS", {32, 64, 128}}, {"MMA_ASYNC", {1, 0}}};
                 if (params::variant_available(p, "nv_wgmma")) {  // Hopper: the warpgroup-MMA form
                   a.push_back({"MMA_WGMMA", {1, 0}});
                   a.push_back({"MMA_TMA", {1, 0}});       // TMA tensor copies (page sizes of 16k)
                   a.push_back({"MMA_PINGPONG", {1, 0}});  // warpgroups take turns (TMA form)
                   a[1].values.push_back(12);  // MMA_WARPS 12: three warpgroups (nv_wgmma only)
                 }
                 // The portable kernel's tile (a combination the kernel cannot take is rejected by
                 // the plan and skipped).
                 for (Axis x : std::vector<Axis>{{"ROWS", {32, 64, 128}},
                                                 {"WG", {64, 128, 256}},
                                                 {"KEYS", {32, 64}},
                                                 {"TM", {4, 8}},
                                                 {"DC", {16, 32, 64}},
                                                 {"VC", {8, 16, 32}},
                                                 {"QRES", {1, 0}}})
                   a.push_back(x);
                 if (quick) a = {{"ROWS", {32, 64}}, {"KEYS", {32, 64}}, {"TM", {4, 8}}};
                 // CPU devices: the cpu variant against the portable kernel, then its tile (row
                 // vectors, key block, micro-tile widths; 0 = by vector width) and vector width.
                 if (p.is_cpu) {
                   std::vector<Axis> cpu = {{"CPU_KERNEL", {1, 0}}, {"BK", {32, 16, 48, 64}}, {"RV", {2, 1, 3}},
                                            {"SK", {0, 4, 6, 16}}, {"PD", {0, 4, 16}}, {"VW", {0, 8}}};
                   if (quick) cpu = {{"CPU_KERNEL", {1, 0}}, {"BK", {32, 64}}};
                   a.insert(a.begin(), cpu.begin(), cpu.end());
                 }
                 return a;
               },
               [](const Context& c, bool quick) {
                 std::vector<std::unique_ptr<Instance>> v;
                 if (quick) {
                   add<ExtendInst>(v, c, 2, 32, 96, 4, 2, 64);
                 } else {
                   add<ExtendInst>(v, c, 4, 1024, 2048, 32, 8, 128);
                   add<ExtendInst>(v, c, 1, 4096, 4096, 32, 8, 128);
                 }
                 return v;
               }});
  s.push_back({"mla_decode", "*", false, "backends/params/rows_mla.cpp",
               [](const DeviceProfile& p, bool quick) {
                 std::vector<Axis> a = {{"MAX_SPLITS", {16, 32, 64, 128}}, {"WGS_PER_CU", {1, 2, 4}},
                                        {"MIN_CHUNK", {128, 256, 512}}};
                 if (params::variant_available(p, "nv_mma_sync"))
                   for (Axis x : std::vector<Axis>{{"MMA", {1, 0}}, {"MMA_WARPS", {2, 4}}, {"MMA_KEYS", {16, 32}},
                                                   {"FUSE_MERGE", {1, 0}}})
                     a.push_back(x);
                 for (Axis x : std::vector<Axis>{{"QB", {4, 8, 16, 32}}, {"LANES", {4, 8, 16}}, {"LOAD_BYTES", {8, 16}}})
                   a.push_back(x);
                 for (Axis x : mla_tiled_axes()) a.push_back(x);
                 if (quick) a = {{"MAX_SPLITS", {4, 16}}, {"LANES", {4, 16}}};
                 add_mla_cpu_axes(p, quick, a);
                 return a;
               },
               [](const Context& c, bool quick) {
                 std::vector<std::unique_ptr<Instance>> v;
                 if (quick) {
                   add<MlaInst>(v, c, false, 2, 1, 512, 8, 64);
                   add<MlaInst>(v, c, false, 1, 1, 1024, 4, 64);
                 } else {
                   add<MlaInst>(v, c, false, 64, 1, 4096, 16, 64);
                   add<MlaInst>(v, c, false, 1, 1, 32768, 16, 64);
                   add<MlaInst>(v, c, false, 64, 1, 4096, 128, 64);
                 }
                 return v;
               }});
  s.push_back({"mla_extend", "*", true, "backends/params/rows_mla.cpp",
               [](const DeviceProfile& p, bool quick) {
                 std::vector<Axis> a;
                 if (params::variant_available(p, "nv_mma_sync"))
                   a = {{"MMA", {1, 0}}, {"MMA_WARPS", {2, 4}}, {"MMA_KEYS", {16, 32}}};
                 for (Axis x : std::vector<Axis>{{"QB", {4, 8, 16, 32}}, {"LANES", {4, 8, 16}}, {"LOAD_BYTES", {8, 16}}})
                   a.push_back(x);
                 for (Axis x : mla_tiled_axes()) a.push_back(x);
                 if (quick) a = {{"QB", {4, 16}}};
                 add_mla_cpu_axes(p, quick, a);
                 return a;
               },
               [](const Context& c, bool quick) {
                 std::vector<std::unique_ptr<Instance>> v;
                 if (quick) add<MlaInst>(v, c, true, 1, 16, 64, 4, 64);
                 else add<MlaInst>(v, c, true, 4, 512, 2048, 16, 64);
                 return v;
               }});
  s.push_back({"linear_decode", "*", false, "backends/params/rows_linear.cpp",
               [](const DeviceProfile& p, bool quick) {
                 std::vector<Axis> a = {{"DEC_DVT", {16, 32, 64, 128}}, {"DEC_VEC", {1, 2, 4}}, {"DEC_ROWS", {1, 2, 4, 8, 16}}};
                 if (quick) a = {{"DEC_DVT", {16, 64}}, {"DEC_ROWS", {2, 8}}};
                 // CPU devices: the cpu variant (linear_cpu.clh) against the portable kernel, its
                 // vector width (0 = the device's preferred width) and state columns per work-item.
                 if (p.is_cpu) {
                   a.insert(a.begin(), {"DEC_CPU_DVT", quick ? std::vector<int>{64, 256} : std::vector<int>{32, 64, 128, 256}});
                   a.insert(a.begin(), {"VW", quick ? std::vector<int>{0, 8} : std::vector<int>{0, 4, 8, 16}});
                   a.insert(a.begin(), {"CPU_KERNEL", {1, 0}});
                 }
                 return a;
               },
               [](const Context& c, bool quick) {
                 std::vector<std::unique_ptr<Instance>> v;
                 if (quick) {
                   add<LinearInst>(v, c, true, false, 4, 1, 2, 64, 64);
                 } else {
                   add<LinearInst>(v, c, true, false, 256, 1, 16, 128, 128);
                   add<LinearInst>(v, c, false, false, 256, 1, 16, 128, 128);
                 }
                 return v;
               }});
  s.push_back({"linear_prefill", "*", true, "backends/params/rows_linear.cpp",
               [](const DeviceProfile& p, bool quick) {
                 std::vector<Axis> a = {{"PF_C", {16, 32, 64}}, {"PF_DVT", {8, 16, 32, 64}}, {"PF_WG", {64, 128, 256}},
                                        {"PF_DKT", {16, 32, 64}}};
                 if (quick) a = {{"PF_C", {16, 64}}, {"PF_WG", {16, 64}}};
                 // CPU devices: the cpu variant and its chunk, slice and register tile (PF_CPU_MR
                 // 0 = by vector width).
                 if (p.is_cpu) {
                   std::vector<Axis> c = {{"CPU_KERNEL", {1, 0}}, {"VW", {0, 8}}, {"PF_CPU_C", {16, 32}},
                                          {"PF_CPU_MR", {0, 4}}};
                   if (!quick)
                     c = {{"CPU_KERNEL", {1, 0}},          {"VW", {0, 4, 8, 16}},       {"PF_CPU_C", {16, 32, 64}},
                          {"PF_CPU_DVT", {32, 64, 128}}, {"PF_CPU_MR", {0, 2, 4, 8}}, {"PF_CPU_MV", {1, 2, 4}}};
                   a.insert(a.begin(), c.begin(), c.end());
                 }
                 return a;
               },
               [](const Context& c, bool quick) {
                 std::vector<std::unique_ptr<Instance>> v;
                 if (quick) {
                   add<LinearInst>(v, c, true, true, 2, 64, 2, 64, 64);
                 } else {
                   add<LinearInst>(v, c, true, true, 4, 2048, 16, 128, 128);
                   add<LinearInst>(v, c, false, true, 4, 2048, 16, 128, 128);
                 }
                 return v;
               }});
  s.push_back({"merge", "*", false, "backends/params/rows_merge.cpp",
               [](const DeviceProfile&, bool quick) {
                 std::vector<Axis> a = {{"MERGE_WG", {16, 32, 64, 128, 256}}};
                 if (quick) a = {{"MERGE_WG", {16, 64}}};
                 return a;
               },
               [](const Context& c, bool quick) {
                 std::vector<std::unique_ptr<Instance>> v;
                 if (quick) {
                   add<MergeInst>(v, c, 4, 4, 4, 64);
                 } else {
                   add<MergeInst>(v, c, 1, 128, 32, 128);    // split-K of one long request
                   add<MergeInst>(v, c, 256, 8, 32, 128);
                 }
                 return v;
               }});
  s.push_back({"metadata", "*", false, "backends/params/rows_metadata.cpp",
               [](const DeviceProfile&, bool quick) {
                 std::vector<Axis> a = {{"WG", {16, 32, 64, 128, 256}}};
                 if (quick) a = {{"WG", {16, 64}}};
                 return a;
               },
               [](const Context& c, bool quick) {
                 std::vector<std::unique_ptr<Instance>> v;
                 if (quick) add<MetadataInst>(v, c, 8, 512, 16);
                 else add<MetadataInst>(v, c, 256, 8192, 16);
                 return v;
               }});
  return s;
}

}  // namespace

const std::vector<OpSpec>& op_specs() {
  static const std::vector<OpSpec> s = build_specs();
  return s;
}

std::vector<std::string> op_names() {
  std::vector<std::string> n;
  for (auto& s : op_specs()) n.push_back(s.name);
  return n;
}

}  // namespace clattn::tune

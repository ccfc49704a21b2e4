// libFuzzer target for the C ABI (include/clattn/clattn.h). An input is a short program:
// each call is an opcode byte followed by the bytes its arguments are drawn from. Values
// are mostly small and coherent (batches and metadata built to be valid, so plans and runs
// are reached), and otherwise edge values: 0, -1, INT_MAX, INT_MIN, 2^30, page_size
// INT_MAX, huge strides. A failing status is fine; a crash, a hang, a sanitizer report or
// a broken contract (a rejected call that wrote to an output array, a builder whose output
// fails validation) is a bug, and the harness aborts on the latter.
//
// The harness keeps the ABI's memory contract and nothing else: every host array is as
// long as the values passed with it say (a call whose arrays would be larger than the
// harness allows is skipped) and a capacity never exceeds its array. Device buffers end
// at a PROT_NONE page (CL_MEM_USE_HOST_PTR, used in place by CPU devices such as PoCL),
// so a kernel that reads or writes past a buffer faults instead of passing silently.
//
// One context is created on the first device call and kept. Plans compile kernels once
// per variant; head dims, dtypes and head counts come from small fixed sets so that the
// number of variants (and compiles) stays bounded. CLATTN_FUZZ_HOST_ONLY=1 skips every
// device call (metadata builders, conversions and validators only).
#include <clattn/clattn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

constexpr int kMaxBatch = 12;              // requests in a generated batch
constexpr int64_t kMaxEntries = 1 << 14;   // int32 entries of any host array the harness builds
constexpr int64_t kMaxDevBytes = 1 << 20;  // bytes of any device buffer
constexpr int kMaxCalls = 8;               // calls per input
constexpr int32_t kSentinel = -31337;

const int32_t kEdges[] = {
    0,           1,       -1,      2,           3,    4,     7,       8,       16,      17,
    63,          64,      255,     256,         4096, 65535, 1 << 20, 1 << 26, 1 << 30, (1 << 30) + 1,
    INT_MAX - 1, INT_MAX, INT_MIN, INT_MIN + 1, -2,   -4096};
const int64_t kEdges64[] = {0,
                            1,
                            -1,
                            4,
                            64,
                            4096,
                            INT_MAX,
                            int64_t(INT_MAX) + 1,
                            INT64_MAX,
                            INT64_MIN,
                            int64_t(1) << 40,
                            int64_t(1) << 62,
                            -(int64_t(1) << 33)};

// The input as a stream of choices. Past its end every byte reads 0, and 0 always picks
// the plain option, so a truncated input still describes a valid call.
class Input {
 public:
  Input(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  bool done() const { return n_ == 0; }
  uint8_t byte() {
    if (n_ == 0) return 0;
    --n_;
    return *p_++;
  }
  uint32_t u32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v = v << 8 | byte();
    return v;
  }
  // True with probability about k/256 (false at the end of the input).
  bool rare(int k) { return byte() >= 256 - k; }
  int32_t edge() { return kEdges[byte() % (sizeof kEdges / sizeof kEdges[0])]; }
  int64_t edge64() { return kEdges64[byte() % (sizeof kEdges64 / sizeof kEdges64[0])]; }
  // Mostly 0..small, sometimes an edge value or any 32 bits.
  int32_t num(int small) {
    const uint8_t m = byte();
    if (m < 216) return m % (small + 1);
    if (m < 250) return edge();
    return int32_t(u32());
  }
  // One of the common values, or rarely an edge value.
  template <size_t N>
  int32_t one_of(const int32_t (&common)[N], int hostile = 12) {
    return rare(hostile) ? edge() : common[byte() % N];
  }
  float real() {
    static const float kReals[] = {0.f, 1.f, 0.125f, -1.f, 1e30f, -1e30f, INFINITY, NAN, 1e-30f, 30.f};
    return kReals[byte() % (sizeof kReals / sizeof kReals[0])];
  }

 private:
  const uint8_t* p_;
  size_t n_;
};

const int32_t kPageSizes[] = {1, 4, 16, 2, 8, 3, 64, 256};
const int32_t kHeadDims[] = {64, 64, 64, 128};
const int32_t kKvDtypes[] = {0, 1, 0, 1, 2, 3};  // f32 f16 bf16 fp8_e4m3
const int32_t kActDtypes[] = {0, 1, 2};          // f32 f16 bf16
const int32_t kKvHeads[] = {1, 2};
const int32_t kGroups[] = {1, 2, 4};

int64_t dtype_bytes(int dtype) {
  return dtype == 0 || dtype == 5 ? 4 : dtype == 6 ? 8 : dtype >= 3 && dtype <= 4 ? 1 : 2;
}

// Hostile entries: a few positions of v replaced by edge values.
void perturb(Input& in, std::vector<int32_t>& v, int k = 24) {
  if (v.empty() || !in.rare(k)) return;
  for (int n = 1 + in.byte() % 3; n > 0; --n) v[in.byte() % v.size()] = in.edge();
}

// An output array of `cap` entries, filled with a sentinel so a rejected call's writes show.
struct Out {
  std::vector<int32_t> v;
  explicit Out(int64_t cap) : v(size_t(std::max<int64_t>(cap, 0)), kSentinel) {}
  int32_t* ptr() { return v.empty() ? nullptr : v.data(); }
  bool untouched() const {
    return std::all_of(v.begin(), v.end(), [](int32_t x) { return x == kSentinel; });
  }
};

// CLATTN_FUZZ_TRACE=1: one line per plan or run call (arguments, status), for triage.
bool tracing() {
  static const bool on = [] {
    const char* e = std::getenv("CLATTN_FUZZ_TRACE");
    return e && *e == '1';
  }();
  return on;
}

std::string ints(const std::vector<int32_t>& v) {
  std::string s = "{";
  for (size_t i = 0; i < v.size() && i < 16; ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + (v.size() > 16 ? ",...}" : "}");
}

void trace(const std::string& line, clattn_status st) {
  if (tracing()) std::fprintf(stderr, "[fuzz] %s -> %d %s\n", line.c_str(), int(st), clattn_last_error());
}

[[noreturn]] void contract_broken(const char* what) {
  std::fprintf(stderr, "fuzz_c_api: contract broken: %s (last error: %s)\n", what, clattn_last_error());
  std::abort();
}

// A capacity for an output that needs `need` entries: usually exact, sometimes short or 0.
int64_t capacity_for(Input& in, int64_t need) {
  int64_t cap = need;
  switch (in.byte() % 8) {
    case 5:
      cap = need - 1;
      break;
    case 6:
      cap = 0;
      break;
    case 7:
      cap = need + in.byte() % 4;
      break;
    default:
      break;
  }
  return std::clamp<int64_t>(cap, 0, kMaxEntries);
}

// ---- engine batches ----------------------------------------------------------------------

struct Batch {
  std::vector<int32_t> table, rpi, seq, pre, ext;
  int pool = 0, ctx = 0, size = 0;
  bool extend = false, null_table = false, null_rpi = false, null_seq = false, null_pre = false;
  clattn_engine_batch view() const {
    clattn_engine_batch b{};
    b.req_to_token = null_table || table.empty() ? nullptr : table.data();
    b.pool_size = pool;
    b.max_ctx = ctx;
    b.req_pool_indices = null_rpi || rpi.empty() ? nullptr : rpi.data();
    b.seq_lens = null_seq || seq.empty() ? nullptr : seq.data();
    b.batch_size = size;
    if (extend) {
      b.prefix_lens = null_pre || pre.empty() ? nullptr : pre.data();
      b.extend_lens = ext.empty() ? nullptr : ext.data();
      if (!b.extend_lens) b.extend_lens = kEdges;  // an extend batch of size 0: any non-null pointer
    }
    return b;
  }
};

// A batch for page size P: rows of pool_size x max_ctx slots, request i in row i % pool,
// pages laid out whole (valid for any P that keeps the slots in int32), then perturbed.
Batch make_batch(Input& in, int P) {
  Batch b;
  b.size = std::min(in.num(6), kMaxBatch);
  b.pool = std::min(in.num(6), kMaxBatch);
  b.ctx = in.num(40);
  // Readable positions per row. A table that would be too large keeps one row, and the
  // lengths of requests that could read it stay inside that row.
  int64_t rows = b.pool > 0 && b.ctx > 0 ? b.pool : 0, row_len = b.ctx > 0 ? b.ctx : 0;
  if (rows * row_len > kMaxEntries) {
    rows = 1;
    b.pool = 1;
    row_len = std::min<int64_t>(row_len, kMaxEntries);
  }
  b.table.resize(size_t(rows * row_len));
  const int64_t pages_per_row = P > 0 ? (row_len + P - 1) / P : 1;
  const int64_t page_base = in.byte() % 4;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t t = 0; t < row_len; ++t) {
      const int64_t page = page_base + r * pages_per_row + (P > 0 ? t / P : 0);
      b.table[size_t(r * row_len + t)] = int32_t(uint32_t(page * std::max(P, 1) + (P > 0 ? t % P : 0)));
    }
  perturb(in, b.table);
  if (b.size < 0) return b;
  b.rpi.resize(size_t(b.size));
  b.seq.resize(size_t(b.size));
  for (int i = 0; i < b.size; ++i) {
    b.rpi[size_t(i)] = b.pool > 0 ? i % b.pool : 0;
    b.seq[size_t(i)] = int32_t(in.byte() % (row_len + 1));
  }
  perturb(in, b.rpi);
  perturb(in, b.seq);
  for (auto& s : b.seq)  // keep every readable request inside the harness's rows
    if (s >= 0 && s <= b.ctx && s > row_len) s = int32_t(row_len);
  b.extend = in.byte() % 2;
  if (b.extend) {
    b.pre.resize(size_t(b.size));
    b.ext.resize(size_t(b.size));
    for (int i = 0; i < b.size; ++i) {
      const int32_t s = std::max(b.seq[size_t(i)], 0);
      b.ext[size_t(i)] = s > 0 ? int32_t(in.byte() % (int64_t(s) + 1)) : 0;
      b.pre[size_t(i)] = s - b.ext[size_t(i)];
    }
    perturb(in, b.pre);
    perturb(in, b.ext);
  }
  if (in.rare(6)) b.null_table = true;
  if (in.rare(4)) b.null_rpi = true;
  if (in.rare(4)) b.null_seq = true;
  if (in.rare(4)) b.null_pre = true;
  return b;
}

// ---- CSR and page-table inputs ------------------------------------------------------------

struct Csr {
  int batch = 0, page_size = 1;
  std::vector<int32_t> indptr, indices, last, start, qo;
  bool windowed = false, with_qo = false;
  clattn_csr view() const {
    clattn_csr c{};
    c.batch_size = batch;
    c.page_size = page_size;
    c.kv_indptr = indptr.empty() ? nullptr : indptr.data();
    c.kv_indices = indices.empty() ? nullptr : indices.data();
    c.kv_last_page_len = last.empty() ? nullptr : last.data();
    c.kv_start_offset = windowed && !start.empty() ? start.data() : nullptr;
    c.qo_indptr = with_qo && !qo.empty() ? qo.data() : nullptr;
    return c;
  }
  // Keys of request i as the CSR states them (clamped: the values may be hostile).
  int64_t tokens(int i) const {
    const int64_t n = indptr[size_t(i) + 1] - int64_t(indptr[size_t(i)]);
    return n > 0 ? std::min<int64_t>(n - 1, INT_MAX) * page_size + last[size_t(i)] : 0;
  }
};

// Makes kv_indices as long as kv_indptr[B] says; false when that is too long to build.
bool fit_indices(Input& in, Csr& c) {
  if (c.batch < 0) return true;
  const int64_t need = c.indptr[size_t(c.batch)];
  if (need > kMaxEntries) return false;
  while (int64_t(c.indices.size()) < need) c.indices.push_back(in.byte() % 8);
  return true;
}

bool make_csr(Input& in, Csr& c, int P, bool qo_rows) {
  c.page_size = P;
  c.batch = std::min(in.num(6), kMaxBatch);
  if (c.batch < 0) return true;
  const int B = c.batch;
  c.indptr.assign(size_t(B) + 1, 0);
  c.last.assign(size_t(B), 0);
  for (int i = 0; i < B; ++i) {
    const int n = in.byte() % 4;
    c.indptr[size_t(i) + 1] = c.indptr[size_t(i)] + n;
    c.last[size_t(i)] = n > 0 ? 1 + in.byte() % std::max(1, std::min(P, 64)) : 0;
  }
  for (int k = 0; k < c.indptr[size_t(B)]; ++k) c.indices.push_back(in.byte() % 8);
  c.windowed = in.rare(24);
  if (c.windowed) {
    c.start.assign(size_t(B), 0);
    for (int i = 0; i < B; ++i)
      if (c.indptr[size_t(i) + 1] > c.indptr[size_t(i)])
        c.start[size_t(i)] = int32_t(in.byte() % std::max(1, std::min(P, 64)));
  }
  c.with_qo = qo_rows || in.rare(16);
  if (c.with_qo) {
    c.qo.assign(size_t(B) + 1, 0);
    for (int i = 0; i < B; ++i) {
      const int64_t kv = c.tokens(i) - (c.windowed ? c.start[size_t(i)] : 0);
      const int q = qo_rows ? int(in.byte() % (std::min<int64_t>(std::max<int64_t>(kv, 0), 8) + 1)) : 1;
      c.qo[size_t(i) + 1] = c.qo[size_t(i)] + q;
    }
  }
  perturb(in, c.indptr);
  perturb(in, c.indices);
  perturb(in, c.last);
  perturb(in, c.start);
  perturb(in, c.qo);
  return fit_indices(in, c);
}

struct Table {
  int batch = 0, page_size = 1, max_pages = 0;
  std::vector<int32_t> table, seq, cuq;
  bool with_q = false;
  clattn_page_table view() const {
    clattn_page_table t{};
    t.batch_size = batch;
    t.page_size = page_size;
    t.max_pages = max_pages;
    t.page_table = table.empty() ? nullptr : table.data();
    t.seq_lens = seq.empty() ? nullptr : seq.data();
    t.cu_seqlens_q = with_q && !cuq.empty() ? cuq.data() : nullptr;
    return t;
  }
};

bool make_table(Input& in, Table& t, int P, bool qo_rows) {
  t.page_size = P;
  t.batch = std::min(in.num(6), kMaxBatch);
  t.max_pages = in.num(4);
  if (t.batch < 0) return true;
  const int64_t entries = t.max_pages > 0 ? int64_t(t.batch) * t.max_pages : 0;
  if (entries > kMaxEntries) return false;
  const int B = t.batch;
  t.table.assign(size_t(entries), -1);
  t.seq.assign(size_t(B), 0);
  for (int i = 0; i < B; ++i) {
    const int64_t pages = t.max_pages > 0 ? in.byte() % (t.max_pages + 1) : 0;
    const int64_t Pl = std::max(P, 1);
    t.seq[size_t(i)] =
        pages > 0 ? int32_t(std::min<int64_t>((pages - 1) * Pl + 1 + in.byte() % std::min<int64_t>(Pl, 64), INT_MAX))
                  : 0;
    for (int64_t p = 0; p < pages; ++p) t.table[size_t(i * int64_t(t.max_pages) + p)] = in.byte() % 8;
  }
  t.with_q = qo_rows || in.rare(16);
  if (t.with_q) {
    t.cuq.assign(size_t(B) + 1, 0);
    for (int i = 0; i < B; ++i)
      t.cuq[size_t(i) + 1] = t.cuq[size_t(i)] + (qo_rows ? int(in.byte() % (std::min(t.seq[size_t(i)], 8) + 1)) : 1);
  }
  perturb(in, t.table);
  perturb(in, t.seq);
  perturb(in, t.cuq);
  return true;
}

// Metadata carried from a builder to later calls of the same input (plans and runs).
struct State {
  Csr csr;
  Table table;
  bool have_csr = false, have_table = false;
};

// ---- host calls ---------------------------------------------------------------------------

int page_size(Input& in) { return in.one_of(kPageSizes, 20); }
int window(Input& in) { return in.rare(48) ? (in.rare(64) ? in.edge() : in.byte() % 40) : -1; }

void call_sizes(Input& in) {
  const int P = page_size(in);
  Batch b = make_batch(in, P);
  clattn_engine_batch v = b.view();
  clattn_metadata_sizes s{};
  clattn_metadata_sizes_get(&v, P, window(in), &s);
  int64_t m = 0;
  int w = 0;
  clattn_max_csr_pages(in.num(8), in.num(64), page_size(in), &m);
  clattn_max_table_pages(in.num(64), page_size(in), &w);
}

// The CSR a successful build wrote, kept for later calls.
void keep_csr(State& st, const Batch& b, int P, int W, int64_t n, const Out& ip, const Out& ix, const Out& la,
              const Out* qo, const Out& so) {
  Csr& c = st.csr;
  c = Csr{};
  c.batch = b.size;
  c.page_size = P;
  c.indptr.assign(ip.v.begin(), ip.v.begin() + b.size + 1);
  c.indices.assign(ix.v.begin(), ix.v.begin() + n);
  c.last.assign(la.v.begin(), la.v.begin() + b.size);
  c.windowed = W >= 0;
  if (c.windowed) c.start.assign(so.v.begin(), so.v.begin() + b.size);
  c.with_qo = b.extend && qo;
  if (c.with_qo) c.qo.assign(qo->v.begin(), qo->v.begin() + b.size + 1);
  st.have_csr = true;
}

void call_build_csr(Input& in, State& st) {
  const int P = page_size(in), W = window(in);
  Batch b = make_batch(in, P);
  const clattn_engine_batch v = b.view();
  const int64_t B1 = b.size >= 0 ? b.size + 1 : 1;
  Out ip(B1), la(B1 - 1), qo(B1), so(B1 - 1);
  clattn_metadata_sizes s{};
  const bool sized = clattn_metadata_sizes_get(&v, P, W, &s) == CLATTN_SUCCESS;
  Out ix(capacity_for(in, sized ? s.csr_indices : in.num(16)));
  clattn_csr_out o{};
  o.kv_indptr = in.rare(4) ? nullptr : ip.ptr();
  o.kv_indices = ix.ptr();
  o.kv_indices_capacity = int64_t(ix.v.size());
  o.kv_last_page_len = la.ptr();
  o.qo_indptr = in.rare(32) ? nullptr : qo.ptr();
  o.kv_start_offset = W >= 0 || in.rare(32) ? so.ptr() : nullptr;
  int64_t n = -1;
  const clattn_status st_ = clattn_build_csr(&v, P, W, &o, &n);
  if (st_ != CLATTN_SUCCESS) {
    if (!ip.untouched() || !ix.untouched() || !la.untouched() || !qo.untouched() || !so.untouched())
      contract_broken("clattn_build_csr failed but wrote an output array");
    return;
  }
  if (sized && n != s.csr_indices) contract_broken("clattn_build_csr count differs from clattn_metadata_sizes_get");
  if (!o.kv_indptr) return;
  keep_csr(st, b, P, W, n, ip, ix, la, o.qo_indptr ? &qo : nullptr, so);
  // The builder's output passes validation (page ids of slot / P are < INT_MAX unless a
  // slot is INT_MAX at P = 1).
  clattn_csr c = st.csr.view();
  const bool max_id = std::find(st.csr.indices.begin(), st.csr.indices.end(), INT_MAX) != st.csr.indices.end();
  if (!max_id && clattn_validate_csr(&c, INT_MAX, W < 0 ? b.seq.data() : nullptr) != CLATTN_SUCCESS)
    contract_broken("clattn_build_csr output fails clattn_validate_csr");
}

void keep_table(State& st, const Batch& b, int P, int width, const Out& pt, const Out& cuq) {
  Table& t = st.table;
  t = Table{};
  t.batch = b.size;
  t.page_size = P;
  t.max_pages = width;
  t.table.assign(pt.v.begin(), pt.v.begin() + int64_t(b.size) * width);
  t.seq = b.seq;
  t.with_q = b.extend;
  if (b.extend) t.cuq.assign(cuq.v.begin(), cuq.v.begin() + b.size + 1);
  st.have_table = true;
}

void call_build_table(Input& in, State& st, bool block) {
  const int P = page_size(in);
  const int max_pages = in.rare(32) ? in.edge() : in.byte() % 3 == 0 ? in.byte() % 8 : 0;
  Batch b = make_batch(in, P);
  const clattn_engine_batch v = b.view();
  const int64_t B1 = b.size >= 0 ? b.size + 1 : 1;
  clattn_metadata_sizes s{};
  const bool sized = clattn_metadata_sizes_get(&v, P, -1, &s) == CLATTN_SUCCESS;
  const int64_t width = max_pages > 0 ? max_pages : sized ? s.table_width : in.num(8);
  Out pt(capacity_for(in, b.size > 0 ? int64_t(b.size) * width : 0)), cuq(B1), cuk(B1), sq(B1 - 1);
  int w = -1;
  clattn_status r;
  if (block) {
    r = clattn_build_block_table(&v, P, max_pages, pt.ptr(), int64_t(pt.v.size()), &w);
  } else {
    clattn_page_table_out o{pt.ptr(), int64_t(pt.v.size()), cuq.ptr(), cuk.ptr(), sq.ptr()};
    if (in.rare(32)) o.cu_seqlens_k = nullptr;
    r = clattn_build_page_table(&v, P, max_pages, &o, &w);
  }
  if (r != CLATTN_SUCCESS) {
    if (!pt.untouched() || !cuq.untouched() || !cuk.untouched() || !sq.untouched())
      contract_broken("clattn_build_page_table / block_table failed but wrote an output array");
    return;
  }
  if (block) return;
  keep_table(st, b, P, w, pt, cuq);
  clattn_page_table t = st.table.view();
  const bool max_id = std::find(st.table.table.begin(), st.table.table.end(), INT_MAX) != st.table.table.end();
  if (!max_id && clattn_validate_page_table(&t, INT_MAX) != CLATTN_SUCCESS)
    contract_broken("clattn_build_page_table output fails clattn_validate_page_table");
}

void call_build_slots(Input& in) {
  Batch b = make_batch(in, 1);
  const clattn_engine_batch v = b.view();
  clattn_metadata_sizes s{};
  const bool sized = clattn_metadata_sizes_get(&v, 1, -1, &s) == CLATTN_SUCCESS;
  Out sl(capacity_for(in, sized ? s.num_slots : in.num(16)));
  int64_t n = -1;
  if (clattn_build_slot_mapping(&v, in.rare(8) ? nullptr : sl.ptr(), int64_t(sl.v.size()), &n) != CLATTN_SUCCESS &&
      !sl.untouched())
    contract_broken("clattn_build_slot_mapping failed but wrote the slots");
}

// `kept` (the state's last CSR or page table) half of the time when it is `usable`, else
// a new one from make().
template <class T, class Make>
bool reuse_or(Input& in, bool usable, const T& kept, T& out, Make&& make) {
  if (usable && in.byte() % 2 == 0) {
    out = kept;
    return true;
  }
  return make();
}

void call_csr_to_table(Input& in, State& st) {
  Csr c;
  if (!reuse_or(in, st.have_csr, st.csr, c, [&] { return make_csr(in, c, page_size(in), false); })) return;
  const clattn_csr v = c.view();
  const int64_t B1 = c.batch >= 0 ? c.batch + 1 : 1;
  int64_t width = 1;
  for (int i = 0; c.batch > 0 && i < c.batch; ++i)
    width = std::max<int64_t>(width, int64_t(c.indptr[size_t(i) + 1]) - c.indptr[size_t(i)]);
  Out pt(capacity_for(in, c.batch > 0 ? c.batch * width : 0)), cuq(B1), cuk(B1), sq(B1 - 1);
  clattn_page_table_out o{pt.ptr(), int64_t(pt.v.size()), cuq.ptr(), cuk.ptr(), sq.ptr()};
  int w = -1;
  if (clattn_csr_to_page_table(&v, &o, &w) != CLATTN_SUCCESS &&
      (!pt.untouched() || !cuq.untouched() || !cuk.untouched() || !sq.untouched()))
    contract_broken("clattn_csr_to_page_table failed but wrote an output array");
}

void call_table_to_csr(Input& in, State& st) {
  Table t;
  if (!reuse_or(in, st.have_table, st.table, t, [&] { return make_table(in, t, page_size(in), false); })) return;
  const clattn_page_table v = t.view();
  const int64_t B1 = t.batch >= 0 ? t.batch + 1 : 1;
  int64_t need = 0;
  for (int32_t s : t.seq) need += s > 0 && t.page_size > 0 ? (int64_t(s) + t.page_size - 1) / t.page_size : 0;
  Out ip(B1), ix(capacity_for(in, need)), la(B1 - 1), qo(B1);
  clattn_csr_out o{ip.ptr(), ix.ptr(), int64_t(ix.v.size()), la.ptr(), qo.ptr(), nullptr};
  int64_t n = -1;
  if (clattn_page_table_to_csr(&v, &o, &n) != CLATTN_SUCCESS &&
      (!ip.untouched() || !ix.untouched() || !la.untouched() || !qo.untouched()))
    contract_broken("clattn_page_table_to_csr failed but wrote an output array");
}

void call_validate(Input& in, State& st) {
  switch (in.byte() % 4) {
    case 0: {
      Csr c;
      if (!reuse_or(in, st.have_csr, st.csr, c, [&] { return make_csr(in, c, page_size(in), in.byte() % 2); })) return;
      const clattn_csr v = c.view();
      std::vector<int32_t> seq(size_t(std::max(c.batch, 0)));
      for (int i = 0; i < c.batch; ++i) seq[size_t(i)] = int32_t(std::clamp<int64_t>(c.tokens(i), INT_MIN, INT_MAX));
      perturb(in, seq);
      clattn_validate_csr(&v, in.num(16), in.byte() % 2 ? seq.data() : nullptr);
      break;
    }
    case 1: {
      Table t;
      if (!reuse_or(in, st.have_table, st.table, t, [&] { return make_table(in, t, page_size(in), in.byte() % 2); })) return;
      const clattn_page_table v = t.view();
      clattn_validate_page_table(&v, in.num(16));
      break;
    }
    case 2: {
      const int64_t n = in.rare(16) ? in.edge64() : in.byte() % 16;
      if (n > kMaxEntries) return;
      const bool wide = in.byte() % 2;
      std::vector<int64_t> s64(size_t(std::max<int64_t>(n, 0)));
      std::vector<int32_t> s32(s64.size());
      for (size_t k = 0; k < s64.size(); ++k) s32[k] = int32_t(s64[k] = in.rare(32) ? in.edge64() : in.num(64));
      const int dt = in.rare(16) ? in.edge() : wide ? 6 : 5;
      clattn_validate_slot_mapping(n > 0 ? (wide ? static_cast<const void*>(s64.data()) : s32.data()) : nullptr, dt, n,
                                   in.num(16), page_size(in));
      break;
    }
    default: {
      const int P = page_size(in);
      Batch b = make_batch(in, P);
      const clattn_engine_batch v = b.view();
      clattn_validate_engine_batch(&v, in.num(64), P);
      break;
    }
  }
}

// Builder outputs agree with each other: CSR -> page table -> CSR is the identity, and the
// page table equals build_page_table's (a non-windowed batch).
void call_roundtrip(Input& in) {
  const int P = page_size(in);
  Batch b = make_batch(in, P);
  const clattn_engine_batch v = b.view();
  clattn_metadata_sizes s{};
  if (clattn_metadata_sizes_get(&v, P, -1, &s) != CLATTN_SUCCESS || s.csr_indices > kMaxEntries ||
      int64_t(b.size) * s.table_width > kMaxEntries)
    return;
  const int B = b.size;
  Out ip(B + 1), ix(s.csr_indices), la(B), qo(B + 1);
  clattn_csr_out co{ip.ptr(), ix.ptr(), s.csr_indices, la.ptr(), qo.ptr(), nullptr};
  int64_t n = 0;
  if (clattn_build_csr(&v, P, -1, &co, &n) != CLATTN_SUCCESS) return;
  Out pt(int64_t(B) * s.table_width), cuq(B + 1), cuk(B + 1), sq(B);
  clattn_page_table_out to{pt.ptr(), int64_t(pt.v.size()), cuq.ptr(), cuk.ptr(), sq.ptr()};
  int w = 0;
  if (clattn_build_page_table(&v, P, 0, &to, &w) != CLATTN_SUCCESS)
    contract_broken("build_csr ok, build_page_table not");
  clattn_csr c{B, P, ip.ptr(), ix.ptr(), la.ptr(), nullptr, b.extend ? qo.ptr() : nullptr};
  Out pt2(int64_t(pt.v.size())), cuq2(B + 1), cuk2(B + 1), sq2(B);
  clattn_page_table_out to2{pt2.ptr(), int64_t(pt2.v.size()), cuq2.ptr(), cuk2.ptr(), sq2.ptr()};
  int w2 = 0;
  if (clattn_csr_to_page_table(&c, &to2, &w2) != CLATTN_SUCCESS || w2 != w || pt2.v != pt.v || cuk2.v != cuk.v ||
      sq2.v != sq.v || (b.extend && cuq2.v != cuq.v))
    contract_broken("csr_to_page_table(build_csr) != build_page_table");
  clattn_page_table t{B, P, w, pt.ptr(), b.seq.empty() ? nullptr : b.seq.data(), b.extend ? cuq.ptr() : nullptr};
  Out ip3(B + 1), ix3(s.csr_indices), la3(B), qo3(B + 1);
  clattn_csr_out co3{ip3.ptr(), ix3.ptr(), s.csr_indices, la3.ptr(), qo3.ptr(), nullptr};
  if (clattn_page_table_to_csr(&t, &co3, &n) != CLATTN_SUCCESS || ip3.v != ip.v || ix3.v != ix.v || la3.v != la.v ||
      (b.extend && qo3.v != qo.v))
    contract_broken("page_table_to_csr(build_page_table) != build_csr");
}

// ---- device -------------------------------------------------------------------------------

std::string str(const Csr& c) {
  return "csr{B=" + std::to_string(c.batch) + " P=" + std::to_string(c.page_size) + " indptr=" + ints(c.indptr) +
         " indices=" + ints(c.indices) + " last=" + ints(c.last) + (c.windowed ? " start=" + ints(c.start) : "") +
         (c.with_qo ? " qo=" + ints(c.qo) : "") + "}";
}
std::string str(const Table& t) {
  return "table{B=" + std::to_string(t.batch) + " P=" + std::to_string(t.page_size) +
         " max_pages=" + std::to_string(t.max_pages) + " table=" + ints(t.table) + " seq=" + ints(t.seq) +
         (t.with_q ? " cuq=" + ints(t.cuq) : "") + "}";
}
std::string str(const clattn_paged_kv& k) {
  return "cache{pages=" + std::to_string(k.num_pages) + " P=" + std::to_string(k.page_size) +
         " Hkv=" + std::to_string(k.num_kv_heads) + " D=" + std::to_string(k.head_dim) +
         " layout=" + std::to_string(k.layout) + " dtype=" + std::to_string(k.dtype) +
         " strides=" + std::to_string(k.stride_page) + "," + std::to_string(k.stride_token) + "," +
         std::to_string(k.stride_head) + "}";
}


struct Device {
  clattn_context ctx = nullptr;
  cl_context cl = nullptr;
  cl_command_queue queue = nullptr;
};

Device* device() {
  static Device* d = []() -> Device* {
    const char* host_only = std::getenv("CLATTN_FUZZ_HOST_ONLY");
    if (host_only && *host_only == '1') return nullptr;
    auto* dv = new Device;
    if (clattn_context_create(nullptr, &dv->ctx) != CLATTN_SUCCESS) {
      std::fprintf(stderr, "fuzz_c_api: no device (%s): host calls only\n", clattn_last_error());
      delete dv;
      return nullptr;
    }
    clattn_context_queue(dv->ctx, &dv->queue);
    clGetCommandQueueInfo(dv->queue, CL_QUEUE_CONTEXT, sizeof dv->cl, &dv->cl, nullptr);
    return dv;
  }();
  return d;
}

// A device buffer over host memory that ends just before a PROT_NONE page. Its start is
// aligned like the device's own allocations (kernels may rely on that), and the few bytes
// between its end and the page hold a canary that must survive the call.
class DevBuf {
 public:
  static constexpr size_t kAlign = 128;  // CL_DEVICE_MEM_BASE_ADDR_ALIGN of CPU devices
  static constexpr uint8_t kCanary = 0xa5;

  DevBuf(cl_context c, int64_t bytes, Input& in) : bytes_(size_t(std::clamp<int64_t>(bytes, 1, kMaxDevBytes))) {
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    map_len_ = (bytes_ + kAlign + page - 1) / page * page + page;
    map_ = static_cast<char*>(mmap(nullptr, map_len_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (map_ == MAP_FAILED) std::abort();
    char* guard = map_ + map_len_ - page;
    mprotect(guard, page, PROT_NONE);
    host_ = map_ + (size_t(guard - map_) - bytes_) / kAlign * kAlign;
    std::memset(host_ + bytes_, kCanary, size_t(guard - host_) - bytes_);
    std::memset(host_, in.byte() & 0x3f, bytes_);  // small values: finite floats, small ints
    cl_int err = CL_SUCCESS;
    mem_ = clCreateBuffer(c, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, bytes_, host_, &err);
    if (err != CL_SUCCESS) std::abort();
  }
  // After the queue is finished.
  ~DevBuf() {
    clReleaseMemObject(mem_);
    const char* guard = map_ + map_len_ - size_t(sysconf(_SC_PAGESIZE));
    for (const char* p = host_ + bytes_; p < guard; ++p)
      if (uint8_t(*p) != kCanary) contract_broken("a kernel wrote past the end of a device buffer");
    munmap(map_, map_len_);
  }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  cl_mem get() const { return mem_; }
  void put(const void* src, size_t n) { std::memcpy(host_, src, std::min(n, bytes_)); }

 private:
  size_t bytes_, map_len_ = 0;
  char* map_ = nullptr;
  char* host_ = nullptr;
  cl_mem mem_ = nullptr;
};

// The buffers of one call; the queue is finished before they go.
class Buffers {
 public:
  explicit Buffers(Device& d) : d_(d) {}
  ~Buffers() { clFinish(d_.queue); }
  // `need` bytes, or (rarely) fewer: the call must reject a short buffer.
  cl_mem make(Input& in, int64_t need) {
    int64_t bytes = need;
    if (in.rare(20)) bytes = in.byte() % 2 ? need - 1 - in.byte() % 8 : need / 2;
    if (need > kMaxDevBytes) bytes = in.byte() % 4096 + 1;
    bufs_.push_back(std::make_unique<DevBuf>(d_.cl, bytes, in));
    return bufs_.back()->get();
  }
  cl_mem make_ints(Input& in, const std::vector<int32_t>& v) {
    cl_mem m = make(in, int64_t(v.size()) * 4);
    put_last(v.data(), v.size() * 4);
    return m;
  }
  // Contents of the last buffer made (cut to its size).
  void put_last(const void* src, size_t n) {
    if (n) bufs_.back()->put(src, n);
  }
  cl_mem maybe(Input& in, int64_t need) { return in.rare(48) ? nullptr : make(in, need); }

 private:
  Device& d_;
  std::vector<std::unique_ptr<DevBuf>> bufs_;  // destroyed after ~Buffers' clFinish
};

// Bytes of n elements, or -1 when that overflows (the harness then passes a small buffer).
int64_t bytes_of(std::initializer_list<int64_t> dims, int64_t elem) {
  int64_t r = elem;
  for (int64_t d : dims) {
    if (d < 0 || (d > 0 && r > INT64_MAX / d)) return INT64_MAX;
    r *= d;
  }
  return r;
}

clattn_paged_kv make_cache(Input& in, int P) {
  clattn_paged_kv k{};
  k.num_pages = in.rare(16) ? in.edge() : 1 + in.byte() % 12;
  k.page_size = P;
  k.num_kv_heads = in.one_of(kKvHeads, 8);
  k.head_dim = in.one_of(kHeadDims, 8);
  k.layout = in.rare(12) ? in.edge() : in.byte() % 2;
  k.dtype = in.one_of(kKvDtypes, 8);
  if (in.rare(24)) {
    k.stride_page = in.edge64();
    k.stride_token = in.rare(64) ? in.edge64() : 0;
    k.stride_head = in.rare(64) ? in.edge64() : 0;
  }
  return k;
}

// Query heads: a GQA group of the cache's KV heads, or an edge value.
int qo_heads(Input& in, const clattn_paged_kv& k) {
  if (in.rare(8)) return in.edge();
  return int(std::clamp<int64_t>(int64_t(k.num_kv_heads) * in.one_of(kGroups, 0), INT_MIN, INT_MAX));
}

int64_t cache_bytes(const clattn_paged_kv& k) {
  if (k.stride_page > 0) return bytes_of({k.num_pages, k.stride_page}, dtype_bytes(k.dtype));
  return bytes_of({k.num_pages, k.page_size, k.num_kv_heads, k.head_dim}, dtype_bytes(k.dtype));
}

// Page ids for a run: the CSR's kv_indices or the page table's entries.
void call_decode(Input& in, State& st, Device& d) {
  const bool table = in.byte() % 2;
  Csr c;
  Table t;
  int P;
  if (!table) {
    if (st.have_csr && in.byte() % 4 != 0)
      c = st.csr;
    else if (!make_csr(in, c, page_size(in), false))
      return;
    P = c.page_size;
  } else {
    if (st.have_table && in.byte() % 4 != 0)
      t = st.table;
    else if (!make_table(in, t, page_size(in), false))
      return;
    P = t.page_size;
  }
  clattn_paged_kv cache = make_cache(in, in.rare(16) ? page_size(in) : P);
  clattn_decode_options o;
  clattn_decode_options_init(&o);
  o.num_qo_heads = qo_heads(in, cache);
  o.q_dtype = in.one_of(kActDtypes, 6);
  o.o_dtype = in.one_of(kActDtypes, 6);
  if (in.rare(32)) o.sm_scale = in.real();
  if (in.rare(32)) o.logits_soft_cap = in.real();
  o.window_left = window(in);
  o.deterministic = in.byte() % 2;
  if (in.rare(32)) o.split_tokens = in.edge();
  if (in.rare(32)) o.max_splits = in.edge();
  clattn_decode_plan plan = nullptr;
  const clattn_csr cv = c.view();
  const clattn_page_table tv = t.view();
  const clattn_status s = table ? clattn_decode_plan_page_table(d.ctx, &tv, &cache, &o, &plan)
                                : clattn_decode_plan_csr(d.ctx, &cv, &cache, &o, &plan);
  if (tracing())
    trace("decode_plan " + (table ? str(t) : str(c)) + " " + str(cache) + " Hq=" + std::to_string(o.num_qo_heads) +
              " q/o dtype=" + std::to_string(o.q_dtype) + "/" + std::to_string(o.o_dtype) +
              " window=" + std::to_string(o.window_left) + " det=" + std::to_string(o.deterministic) +
              " split_tokens=" + std::to_string(o.split_tokens) + " max_splits=" + std::to_string(o.max_splits) +
              " scale=" + std::to_string(o.sm_scale) + " cap=" + std::to_string(o.logits_soft_cap),
          s);
  if (s != CLATTN_SUCCESS || !plan) return;
  int64_t ws = 0;
  clattn_decode_plan_workspace_bytes(plan, &ws);
  if (in.byte() % 4 != 3) {
    const int B = table ? t.batch : c.batch;
    Buffers bufs(d);
    clattn_decode_buffers b{};
    b.q = bufs.make(in, bytes_of({B, o.num_qo_heads, cache.head_dim}, dtype_bytes(o.q_dtype)));
    const int64_t cb = cache_bytes(cache);
    b.k_cache = bufs.make(in, cb);
    b.v_cache = bufs.make(in, cb);
    b.page_ids = bufs.make_ints(in, table ? t.table : c.indices);
    b.o = bufs.make(in, bytes_of({B, o.num_qo_heads, cache.head_dim}, dtype_bytes(o.o_dtype)));
    b.lse = bufs.maybe(in, bytes_of({B, o.num_qo_heads}, 4));
    b.workspace = ws > 0 || in.rare(32) ? bufs.make(in, ws) : nullptr;
    b.sinks = in.rare(32) ? bufs.make(in, bytes_of({o.num_qo_heads}, 4)) : nullptr;
    b.k_scale = in.rare(16) ? in.real() : 1.f;
    b.v_scale = 1.f;
    trace("decode_run ws=" + std::to_string(ws) + (b.lse ? " lse" : "") + (b.sinks ? " sinks" : "") +
              (b.workspace ? " workspace" : ""),
          clattn_decode_run(d.ctx, plan, &b, nullptr));
  }
  clattn_decode_plan_release(plan);
}

void call_append(Input& in, Device& d) {
  clattn_append_kv_args a{};
  a.cache = make_cache(in, page_size(in));
  a.src_dtype = in.one_of(kActDtypes, 6);
  a.num_tokens = in.rare(16) ? in.edge64() : in.byte() % 24;
  if (in.rare(24)) a.src_stride_token = in.edge64();
  if (in.rare(24)) a.src_stride_head = in.edge64();
  a.slot_dtype = in.rare(8) ? in.edge() : in.byte() % 2 ? 6 : 5;
  const bool wide = a.slot_dtype == 6;
  const int64_t n = std::clamp<int64_t>(a.num_tokens, 0, 64);
  std::vector<int64_t> s64(static_cast<size_t>(n));
  std::vector<int32_t> s32(static_cast<size_t>(n));
  const int64_t slots = std::max<int64_t>(
      1, std::min<int64_t>(int64_t(std::max(a.cache.num_pages, 0)) * std::max(a.cache.page_size, 1), 1 << 20));
  for (int64_t k = 0; k < n; ++k)
    s32[size_t(k)] = int32_t(s64[size_t(k)] = in.rare(24) ? in.edge64() : in.byte() % slots - 1);
  Buffers bufs(d);
  const int64_t src = bytes_of({a.num_tokens, a.cache.num_kv_heads, a.cache.head_dim}, dtype_bytes(a.src_dtype));
  a.k = bufs.make(in, src);
  a.v = bufs.make(in, src);
  a.slot_mapping = bufs.make(in, bytes_of({a.num_tokens}, wide ? 8 : 4));
  if (in.byte() % 4 != 3)
    bufs.put_last(wide ? static_cast<const void*>(s64.data()) : s32.data(), size_t(n) * (wide ? 8 : 4));
  if (n > 0 && in.byte() % 2) a.slot_mapping_host = wide ? static_cast<const void*>(s64.data()) : s32.data();
  if (a.num_tokens > n) a.slot_mapping_host = nullptr;  // the host copy must hold num_tokens entries
  const int64_t cb = cache_bytes(a.cache);
  a.k_cache = bufs.make(in, cb);
  a.v_cache = bufs.make(in, cb);
  a.k_scale = in.rare(16) ? in.real() : 1.f;
  a.v_scale = 1.f;
  const clattn_status s = clattn_append_kv(d.ctx, &a, nullptr);
  if (tracing())
    trace("append_kv " + str(a.cache) + " tokens=" + std::to_string(a.num_tokens) +
              " src_dtype=" + std::to_string(a.src_dtype) + " slot_dtype=" + std::to_string(a.slot_dtype) +
              " host=" + std::to_string(a.slot_mapping_host != nullptr) + " slots=" + ints(s32),
          s);
}

void call_extend(Input& in, State& st, Device& d) {
  clattn_extend_options o;
  clattn_extend_options_init(&o);
  const int kind = in.byte() % 3;  // CSR, page table, ragged
  clattn_paged_kv cache = make_cache(in, page_size(in));
  o.num_qo_heads = qo_heads(in, cache);
  o.q_dtype = in.one_of(kActDtypes, 6);
  o.o_dtype = in.one_of(kActDtypes, 6);
  if (in.rare(32)) o.sm_scale = in.real();
  if (in.rare(32)) o.logits_soft_cap = in.real();
  o.window_left = window(in);
  o.causal = in.byte() % 4 != 3;
  if (in.rare(16)) o.variant = "generic";
  clattn_extend_plan plan = nullptr;
  std::vector<int32_t> mask;
  auto with_mask = [&](int B) {
    if (B < 0 || !in.rare(32)) return;
    mask.assign(size_t(B) + 1, 0);
    for (int i = 0; i < B; ++i) mask[size_t(i) + 1] = mask[size_t(i)] + in.byte() % 16;
    perturb(in, mask);
    o.mask_indptr = mask.data();
  };
  clattn_status s = CLATTN_SUCCESS;
  std::string what;
  if (kind == 0) {
    Csr c;
    if (!reuse_or(in, st.have_csr && st.csr.with_qo, st.csr, c, [&] { return make_csr(in, c, cache.page_size, true); })) return;
    with_mask(c.batch);
    const clattn_csr v = c.view();
    s = clattn_extend_plan_csr(d.ctx, &v, &cache, &o, &plan);
    if (tracing()) what = "extend_plan " + str(c) + " " + str(cache);
  } else if (kind == 1) {
    Table t;
    if (!reuse_or(in, st.have_table && st.table.with_q, st.table, t, [&] { return make_table(in, t, cache.page_size, true); })) return;
    with_mask(t.batch);
    const clattn_page_table v = t.view();
    s = clattn_extend_plan_page_table(d.ctx, &v, &cache, &o, &plan);
    if (tracing()) what = "extend_plan " + str(t) + " " + str(cache);
  } else {
    const int B = std::min(in.num(6), kMaxBatch);
    std::vector<int32_t> qo(size_t(std::max(B, 0)) + 1, 0), kv(qo.size(), 0);
    for (int i = 0; i < B; ++i) {
      kv[size_t(i) + 1] = kv[size_t(i)] + in.byte() % 16;
      qo[size_t(i) + 1] = qo[size_t(i)] + in.byte() % (kv[size_t(i) + 1] - kv[size_t(i)] + 1);
    }
    perturb(in, qo);
    perturb(in, kv);
    clattn_ragged_kv r{};
    r.num_tokens = in.rare(16) ? in.edge64() : kv.back();
    r.num_kv_heads = cache.num_kv_heads;
    r.head_dim = cache.head_dim;
    r.dtype = in.one_of(kActDtypes, 6);
    if (in.rare(24)) r.stride_token = in.edge64();
    if (in.rare(24)) r.stride_head = in.edge64();
    with_mask(B);
    s = clattn_prefill_plan_ragged(d.ctx, B, B >= 0 ? qo.data() : nullptr, B >= 0 ? kv.data() : nullptr, &r, &o, &plan);
    if (tracing())
      what = "prefill_plan_ragged B=" + std::to_string(B) + " qo=" + ints(qo) + " kv=" + ints(kv) +
             " tokens=" + std::to_string(r.num_tokens) + " Hkv=" + std::to_string(r.num_kv_heads) +
             " D=" + std::to_string(r.head_dim) + " dtype=" + std::to_string(r.dtype) +
             " strides=" + std::to_string(r.stride_token) + "," + std::to_string(r.stride_head);
  }
  if (tracing())
    trace(what + " Hq=" + std::to_string(o.num_qo_heads) + " window=" + std::to_string(o.window_left) +
              " causal=" + std::to_string(o.causal) + " mask=" + (o.mask_indptr ? ints(mask) : "none"),
          s);
  if (!plan) return;
  clattn_extend_plan_info info{};
  clattn_extend_plan_info_get(plan, &info);
  clattn_extend_plan_release(plan);
}

void call_mla(Input& in, State& st, Device& d) {
  clattn_mla_cache cache{};
  cache.num_pages = in.rare(16) ? in.edge() : 1 + in.byte() % 8;
  cache.page_size = in.rare(8) ? page_size(in) : 64;
  const int32_t kMlaDtypes[] = {1, 2, 1};
  cache.dtype = in.one_of(kMlaDtypes, 8);
  cache.single_buffer = in.byte() % 2;
  if (in.rare(24)) {
    cache.stride_page = in.edge64();
    cache.stride_token = in.rare(64) ? in.edge64() : 0;
    cache.kpe_offset = in.rare(64) ? in.edge64() : 0;
  }
  int64_t ckv = 0, kpe = 0;
  clattn_mla_cache_bytes(&cache, &ckv, &kpe);
  clattn_mla_options o;
  clattn_mla_options_init(&o);
  const int32_t kHeads[] = {16, 16, 8};
  o.num_heads = in.one_of(kHeads, 8);
  o.q_dtype = o.o_dtype = cache.dtype == 2 ? 2 : 1;
  if (in.rare(24)) o.q_dtype = in.edge();
  o.sm_scale = in.rare(24) ? in.real() : 0.1f;
  o.causal = in.byte() % 4 != 3;
  const bool extend = in.byte() % 2;
  clattn_mla_plan plan = nullptr;
  clattn_status s;
  std::string what;
  if (in.byte() % 2 == 0) {
    Csr c;
    if (st.have_csr && st.csr.page_size == cache.page_size && in.byte() % 2)
      c = st.csr;
    else if (!make_csr(in, c, cache.page_size, extend))
      return;
    const clattn_csr v = c.view();
    s = extend ? clattn_mla_extend_plan_csr(d.ctx, &v, &cache, &o, &plan)
               : clattn_mla_decode_plan_csr(d.ctx, &v, &cache, &o, &plan);
    if (tracing()) what = str(c);
  } else {
    Table t;
    if (!make_table(in, t, cache.page_size, extend)) return;
    const clattn_page_table v = t.view();
    s = extend ? clattn_mla_extend_plan_page_table(d.ctx, &v, &cache, &o, &plan)
               : clattn_mla_decode_plan_page_table(d.ctx, &v, &cache, &o, &plan);
    if (tracing()) what = str(t);
  }
  if (tracing())
    trace(std::string(extend ? "mla_extend_plan " : "mla_decode_plan ") + what +
              " mla_cache{pages=" + std::to_string(cache.num_pages) + " P=" + std::to_string(cache.page_size) +
              " dtype=" + std::to_string(cache.dtype) + " single=" + std::to_string(cache.single_buffer) +
              " strides=" + std::to_string(cache.stride_page) + "," + std::to_string(cache.stride_token) +
              " kpe_offset=" + std::to_string(cache.kpe_offset) + "} H=" + std::to_string(o.num_heads),
          s);
  if (!plan) return;
  int64_t ws = 0;
  clattn_mla_plan_workspace_bytes(plan, &ws);
  clattn_mla_plan_release(plan);
}

void call_device_builders(Input& in, Device& d) {
  const int P = page_size(in);
  Batch b = make_batch(in, P);
  Buffers bufs(d);
  clattn_device_engine_batch db{};
  db.pool_size = b.pool;
  db.max_ctx = b.ctx;
  db.batch_size = b.size;
  // Device tables hold the batch's values; their sizes may be short (the host check must
  // catch that) and their contents are trusted only as far as the kernels clamp them.
  db.req_to_token = b.null_table ? nullptr : bufs.make_ints(in, b.table);
  db.req_pool_indices = b.null_rpi ? nullptr : bufs.make_ints(in, b.rpi);
  db.seq_lens = b.null_seq ? nullptr : bufs.make_ints(in, b.seq);
  if (b.extend) {
    db.prefix_lens = bufs.make_ints(in, b.pre);
    db.extend_lens = bufs.make_ints(in, b.ext);
  }
  const int B = std::max(b.size, 0);
  const int W = window(in);
  switch (in.byte() % 4) {
    case 0: {
      int64_t cap = 0;
      clattn_max_csr_pages(B, b.ctx, P, &cap);
      clattn_device_csr o{};
      o.kv_indptr = bufs.make(in, int64_t(B + 1) * 4);
      o.kv_indices = bufs.make(in, std::min<int64_t>(cap, kMaxDevBytes / 4) * 4);
      o.kv_last_page_len = bufs.make(in, int64_t(B) * 4);
      if (b.extend && in.byte() % 2) o.qo_indptr = bufs.make(in, int64_t(B + 1) * 4);
      if (W >= 0 || in.rare(16)) o.kv_start_offset = bufs.make(in, int64_t(B) * 4);
      clattn_build_csr_device(d.ctx, &db, P, W, &o, nullptr);
      break;
    }
    case 1: {
      int width = 1;
      clattn_max_table_pages(b.ctx, P, &width);
      if (in.rare(24)) width = in.edge();
      clattn_device_page_table o{};
      o.page_table = bufs.make(in, int64_t(B) * std::max(width, 0) * 4);
      if (in.byte() % 2) o.seq_lens = bufs.make(in, int64_t(B) * 4);
      if (b.extend && in.byte() % 2) o.cu_seqlens_q = bufs.make(in, int64_t(B + 1) * 4);
      if (in.byte() % 2) o.cu_seqlens_k = bufs.make(in, int64_t(B + 1) * 4);
      clattn_build_page_table_device(d.ctx, &db, P, width, &o, nullptr);
      break;
    }
    case 2: {
      int64_t n = B;
      if (b.extend)
        for (int32_t e : b.ext) n += std::max(e, 0);
      clattn_build_slot_mapping_device(d.ctx, &db, bufs.make(in, std::min<int64_t>(n, kMaxDevBytes / 4) * 4), nullptr);
      break;
    }
    default: {
      int width = 1;
      clattn_max_table_pages(b.ctx, P, &width);
      clattn_build_block_table_device(d.ctx, &db, P, width, bufs.make(in, int64_t(B) * std::max(width, 0) * 4),
                                      nullptr);
      break;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  State st;
  for (int call = 0; call < kMaxCalls && !in.done(); ++call) {
    const uint8_t op = in.byte();
    Device* d = op % 16 >= 10 ? device() : nullptr;
    switch (op % 16) {
      case 0:
        call_sizes(in);
        break;
      case 1:
        call_build_csr(in, st);
        break;
      case 2:
        call_build_table(in, st, false);
        break;
      case 3:
        call_build_table(in, st, true);
        break;
      case 4:
        call_build_slots(in);
        break;
      case 5:
        call_csr_to_table(in, st);
        break;
      case 6:
        call_table_to_csr(in, st);
        break;
      case 7:
        call_validate(in, st);
        break;
      case 8:
        call_roundtrip(in);
        break;
      case 9:
        call_build_csr(in, st);
        break;
      case 10:
        if (d) call_decode(in, st, *d);
        break;
      case 11:
        if (d) call_append(in, *d);
        break;
      case 12:
        if (d) call_extend(in, st, *d);
        break;
      case 13:
        if (d) call_mla(in, st, *d);
        break;
      case 14:
        if (d) call_device_builders(in, *d);
        break;
      default:
        if (d) call_decode(in, st, *d);
        break;
    }
  }
  return 0;
}

// Device metadata builders: argument and buffer-size checks on the host, then one launch
// of a cl_kernels/metadata.cl kernel (one work-group per request). Nothing blocks.
#include <algorithm>
#include <limits>
#include <memory>
#include <mutex>

#include "backends/metadata/checks.hpp"
#include "runtime/device_limits.hpp"
#include "backends/dispatch/catalog.hpp"
#include "backends/params/database.hpp"
#include "runtime/context_impl.hpp"
#include "runtime/error.hpp"

namespace clattn {

using meta::bad_field;
using meta::bad_value;

namespace {

std::string num(int64_t v) { return std::to_string(v); }

size_t mem_bytes(cl_mem m, const std::string& field) {
  size_t n = 0;
  rt::check_cl(clGetMemObjectInfo(m, CL_MEM_SIZE, sizeof n, &n, nullptr), "clGetMemObjectInfo", field);
  return n;
}

// A non-null buffer holding at least `elems` int32.
void need(cl_mem m, int64_t elems, const std::string& field) {
  if (!m) bad_field(field, "null buffer (needs " + num(elems) + " int32)");
  const int64_t bytes = rt::checked::mul(elems, 4, field.c_str());
  const size_t have = mem_bytes(m, field);
  if (uint64_t(have) < uint64_t(bytes))
    bad_field(field,
              "buffer has " + num(int64_t(have)) + " bytes, needs " + num(bytes) + " (" + num(elems) + " int32)");
}

// Capacity in int32 entries, clamped to int for the kernel.
int capacity(cl_mem m, const std::string& field) {
  if (!m) bad_field(field, "null buffer");
  return int(std::min<size_t>(mem_bytes(m, field) / 4, size_t(std::numeric_limits<int>::max())));
}

void check_device_batch(const DeviceEngineBatch& b, int page_size) {
  if (page_size < 1) bad_value("page_size", page_size, "must be >= 1");
  if (b.batch_size < 0) bad_value("batch_size", b.batch_size, "must be >= 0");
  if (b.pool_size < 0) bad_value("pool_size", b.pool_size, "must be >= 0");
  if (b.max_ctx < 0) bad_value("max_ctx", b.max_ctx, "must be >= 0");
  if (b.batch_size == 0) return;
  need(b.req_pool_indices, b.batch_size, "req_pool_indices");
  need(b.seq_lens, b.batch_size, "seq_lens");
  int64_t table = int64_t(b.pool_size) * b.max_ctx;
  if (table > 0) need(b.req_to_token, table, "req_to_token");
  if (b.extend_lens) need(b.extend_lens, b.batch_size, "extend_lens");
}

// The kernels compute ceil(seq / page_size) as (seq + page_size - 1) / page_size in int
// with seq <= max_ctx: that sum must not overflow.
void check_kernel_page_size(const DeviceEngineBatch& b, int page_size) {
  if (int64_t(std::max(b.max_ctx, 0)) + page_size - 1 > std::numeric_limits<int32_t>::max())
    bad_value("page_size", page_size,
              "with max_ctx = " + num(b.max_ctx) + ", max_ctx + page_size - 1 overflows int32 (device builders)");
}

// metadata.cl: no build parameters (the work-group size is a launch choice).
ops::Variant metadata_variant() {
  ops::Variant v;
  v.name = "generic", v.file = "metadata.cl", v.kernel = "build_csr";
  v.options = rt::make_options({});
  return v;
}

struct Launch {
  std::shared_ptr<rt::Program> prog;
  rt::Kernel& k;
  cl_command_queue q;
  size_t wg;
};

Launch prepare(const Context& ctx, cl_command_queue queue, const char* kernel) {
  detail::ContextImpl& c = rt::impl(ctx);
  const ops::Variant v = metadata_variant();
  auto prog = c.programs.get(v.file, v.options);  // memoised per (file, options)
  size_t wg = size_t(std::max(1, params::lookup(c.profile, "metadata").get("WG")));
  rt::Kernel& k = prog->kernel(kernel);
  wg = std::min(wg, rt::kernel_work_group_limit(c.profile, k.max_work_group_size(c.device)));
  size_t pow2 = 1;
  while (pow2 * 2 <= wg) pow2 *= 2;  // the kernels' tree sum needs a power of two
  return Launch{prog, k, queue ? queue : c.queue, pow2};
}

// Writes a 0 at element 0 of `m` (indptr of an empty batch).
void zero_first(cl_command_queue q, cl_mem m) {
  const cl_int zero = 0;
  rt::check_cl(clEnqueueFillBuffer(q, m, &zero, sizeof zero, 0, sizeof zero, 0, nullptr, nullptr),
               "clEnqueueFillBuffer", "metadata indptr[0]");
}

cl_mem or_dummy(cl_mem m, cl_mem dummy) { return m ? m : dummy; }

}  // namespace

int64_t max_csr_pages(int batch_size, int max_ctx, int page_size) {
  if (page_size < 1) bad_value("page_size", page_size, "must be >= 1");
  return int64_t(std::max(batch_size, 0)) * rt::checked::ceil_div(std::max(max_ctx, 0), page_size);
}

int max_table_pages(int max_ctx, int page_size) {
  if (page_size < 1) bad_value("page_size", page_size, "must be >= 1");
  return int(std::max<int64_t>(1, rt::checked::ceil_div(std::max(max_ctx, 0), page_size)));
}

void build_csr_device(const Context& ctx, const DeviceEngineBatch& b, int page_size, int window_left,
                      const DeviceCsr& out, cl_command_queue queue) {
  check_device_batch(b, page_size);
  check_kernel_page_size(b, page_size);
  if (window_left < -1) bad_value("window_left", window_left, "must be >= -1");
  const int B = b.batch_size;
  need(out.kv_indptr, int64_t(B) + 1, "kv_indptr");
  const bool want_qo = out.qo_indptr != nullptr;
  const bool want_off = window_left >= 0;
  if (want_qo && !b.extend_lens) bad_field("qo_indptr", "given for a decode batch (extend_lens is null)");
  if (want_qo) need(out.qo_indptr, int64_t(B) + 1, "qo_indptr");
  if (want_off && !out.kv_start_offset) bad_field("kv_start_offset", "null buffer while window_left >= 0");
  if (B == 0) {
    cl_command_queue q = queue ? queue : rt::impl(ctx).queue;
    zero_first(q, out.kv_indptr);
    if (want_qo) zero_first(q, out.qo_indptr);
    return;
  }
  need(out.kv_last_page_len, B, "kv_last_page_len");
  if (want_off) need(out.kv_start_offset, B, "kv_start_offset");
  const int cap = capacity(out.kv_indices, "kv_indices");

  Launch L = prepare(ctx, queue, "build_csr");
  size_t gws = size_t(B) * L.wg;
  const cl_int is_extend = b.extend_lens ? 1 : 0;
  L.k.launch(L.q, 1, &gws, &L.wg, 0, nullptr, nullptr, or_dummy(b.req_to_token, b.seq_lens), cl_int(b.pool_size),
             cl_int(b.max_ctx), b.req_pool_indices, b.seq_lens, or_dummy(b.extend_lens, b.seq_lens), is_extend,
             cl_int(page_size), cl_int(window_left), out.kv_indptr, out.kv_indices, cl_int(cap), out.kv_last_page_len,
             or_dummy(out.qo_indptr, out.kv_indptr), cl_int(want_qo),
             or_dummy(want_off ? out.kv_start_offset : nullptr, out.kv_indptr), cl_int(want_off),
             rt::LocalMem{L.wg * sizeof(cl_long)});
}

void build_page_table_device(const Context& ctx, const DeviceEngineBatch& b, int page_size, int max_pages,
                             const DevicePageTable& out, cl_command_queue queue) {
  check_device_batch(b, page_size);
  check_kernel_page_size(b, page_size);
  if (max_pages < 1) bad_value("max_pages", max_pages, "must be >= 1");
  const int B = b.batch_size;
  const bool want_seq = out.seq_lens != nullptr, want_q = out.cu_seqlens_q != nullptr,
             want_k = out.cu_seqlens_k != nullptr;
  if (want_q && !b.extend_lens) bad_field("cu_seqlens_q", "given for a decode batch (extend_lens is null)");
  if (want_q) need(out.cu_seqlens_q, int64_t(B) + 1, "cu_seqlens_q");
  if (want_k) need(out.cu_seqlens_k, int64_t(B) + 1, "cu_seqlens_k");
  if (B == 0) {
    cl_command_queue q = queue ? queue : rt::impl(ctx).queue;
    if (want_q) zero_first(q, out.cu_seqlens_q);
    if (want_k) zero_first(q, out.cu_seqlens_k);
    return;
  }
  meta::check_table_entries(B, max_pages, "page_table");
  need(out.page_table, int64_t(B) * max_pages, "page_table");
  if (want_seq) need(out.seq_lens, B, "seq_lens (output)");

  Launch L = prepare(ctx, queue, "build_page_table");
  size_t gws = size_t(B) * L.wg;
  const cl_int is_extend = b.extend_lens ? 1 : 0;
  cl_mem dummy = out.page_table;
  L.k.launch(L.q, 1, &gws, &L.wg, 0, nullptr, nullptr, or_dummy(b.req_to_token, b.seq_lens), cl_int(b.pool_size),
             cl_int(b.max_ctx), b.req_pool_indices, b.seq_lens, or_dummy(b.extend_lens, b.seq_lens), is_extend,
             cl_int(page_size), cl_int(max_pages), out.page_table, or_dummy(out.seq_lens, dummy), cl_int(want_seq),
             or_dummy(out.cu_seqlens_q, dummy), cl_int(want_q), or_dummy(out.cu_seqlens_k, dummy), cl_int(want_k),
             rt::LocalMem{L.wg * sizeof(cl_long)});
}

void build_block_table_device(const Context& ctx, const DeviceEngineBatch& b, int block_size, int max_blocks,
                              cl_mem block_table, cl_command_queue queue) {
  DevicePageTable out;
  out.page_table = block_table;
  build_page_table_device(ctx, b, block_size, max_blocks, out, queue);
}

void build_slot_mapping_device(const Context& ctx, const DeviceEngineBatch& b, cl_mem slot_mapping,
                               cl_command_queue queue) {
  check_device_batch(b, 1);
  const int B = b.batch_size;
  if (B == 0) return;
  const int cap = capacity(slot_mapping, "slot_mapping");
  Launch L = prepare(ctx, queue, "build_slot_mapping");
  const cl_int is_extend = b.extend_lens ? 1 : 0;
  // Decode writes one entry per request: one work-item per group is enough.
  size_t lws = is_extend ? L.wg : 1;
  size_t gws = size_t(B) * lws;
  L.k.launch(L.q, 1, &gws, &lws, 0, nullptr, nullptr, or_dummy(b.req_to_token, b.seq_lens), cl_int(b.pool_size),
             cl_int(b.max_ctx), b.req_pool_indices, b.seq_lens, or_dummy(b.extend_lens, b.seq_lens), is_extend,
             slot_mapping, cl_int(cap), rt::LocalMem{lws * sizeof(cl_long)});
}

// ---- debug paths (blocking) ----

namespace {

// The buffer's size is checked before the host copy is allocated.
std::vector<int32_t> read_ints(cl_command_queue q, cl_mem m, int64_t n, const std::string& field) {
  if (n <= 0) return {};
  need(m, n, field);
  std::vector<int32_t> v(static_cast<size_t>(n));
  rt::check_cl(clEnqueueReadBuffer(q, m, CL_TRUE, 0, size_t(n) * 4, v.data(), 0, nullptr, nullptr),
               "clEnqueueReadBuffer", field);
  return v;
}

}  // namespace

PagedCsr download_csr(const Context& ctx, const DeviceCsr& c, int batch_size, int page_size, cl_command_queue queue) {
  if (batch_size < 0) bad_value("batch_size", batch_size, "must be >= 0");
  cl_command_queue q = queue ? queue : rt::impl(ctx).queue;
  PagedCsr h;
  h.page_size = page_size;
  h.kv_indptr = read_ints(q, c.kv_indptr, int64_t(batch_size) + 1, "kv_indptr");
  h.kv_last_page_len = read_ints(q, c.kv_last_page_len, batch_size, "kv_last_page_len");
  if (c.qo_indptr) h.qo_indptr = read_ints(q, c.qo_indptr, int64_t(batch_size) + 1, "qo_indptr");
  if (c.kv_start_offset) h.kv_start_offset = read_ints(q, c.kv_start_offset, batch_size, "kv_start_offset");
  int64_t nnz = std::max<int32_t>(0, h.kv_indptr[size_t(batch_size)]);
  if (nnz > 0) nnz = std::min<int64_t>(nnz, capacity(c.kv_indices, "kv_indices"));
  h.kv_indices = read_ints(q, c.kv_indices, nnz, "kv_indices");
  return h;
}

void validate_device(const Context& ctx, const DeviceEngineBatch& b, int page_size, cl_command_queue queue) {
  check_device_batch(b, page_size);
  cl_command_queue q = queue ? queue : rt::impl(ctx).queue;
  const int B = b.batch_size;
  std::vector<int32_t> table = read_ints(q, b.req_to_token, int64_t(b.pool_size) * b.max_ctx, "req_to_token");
  std::vector<int32_t> rpi = read_ints(q, b.req_pool_indices, B, "req_pool_indices");
  std::vector<int32_t> seq = read_ints(q, b.seq_lens, B, "seq_lens");
  std::vector<int32_t> pre, ext;
  EngineBatch h;
  h.req_to_token = table.data();
  h.pool_size = b.pool_size;
  h.max_ctx = b.max_ctx;
  h.req_pool_indices = rpi.data();
  h.seq_lens = seq.data();
  h.batch_size = B;
  if (b.extend_lens) {
    if (!b.prefix_lens && B > 0) bad_field("prefix_lens", "null while extend_lens is given (extend batch)");
    pre = read_ints(q, b.prefix_lens, B, "prefix_lens");
    ext = read_ints(q, b.extend_lens, B, "extend_lens");
    h.prefix_lens = pre.data();
    h.extend_lens = ext.data();
  }
  validate(h, page_size);
}

namespace ops {
void catalog_metadata(const CatalogTarget&, std::vector<CatalogEntry>& out) {
  catalog_add(out, "metadata", "*", [] { return std::vector<Variant>{metadata_variant()}; });
}
}  // namespace ops

}  // namespace clattn

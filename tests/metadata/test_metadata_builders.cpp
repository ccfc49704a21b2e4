// Metadata builders: host builders against the per-position oracle, device builders
// against the host element for element, conversions, and the device-side safety nets.
#include <clattn/metadata.hpp>

#include "metadata/batch_gen.hpp"

namespace clattn::test {
namespace {

const int kPageSizes[] = {1, 16, 64, 128};

// Context lengths per page size: a few pages at most for P = 1 (tokens are pages) and
// up to ~10 pages for the large ones, so the whole suite stays fast on PoCL.
int max_ctx_for(int P) { return P == 1 ? 300 : P * 9 + 3; }

std::vector<int> windows_for(int P, int max_ctx) { return {-1, 0, 1, P - 1, P + 3, 3 * P, max_ctx + 10}; }

void expect_csr_eq(const PagedCsr& got, const PagedCsr& want, const std::string& what) {
  EXPECT_EQ(got.page_size, want.page_size) << what;
  EXPECT_EQ(got.kv_indptr, want.kv_indptr) << what << " kv_indptr";
  EXPECT_EQ(got.kv_indices, want.kv_indices) << what << " kv_indices";
  EXPECT_EQ(got.kv_last_page_len, want.kv_last_page_len) << what << " kv_last_page_len";
  EXPECT_EQ(got.qo_indptr, want.qo_indptr) << what << " qo_indptr";
  EXPECT_EQ(got.kv_start_offset, want.kv_start_offset) << what << " kv_start_offset";
}

void expect_table_eq(const PageTable& got, const PageTable& want, const std::string& what) {
  EXPECT_EQ(got.page_size, want.page_size) << what;
  EXPECT_EQ(got.max_pages, want.max_pages) << what;
  EXPECT_EQ(got.page_table, want.page_table) << what << " page_table";
  EXPECT_EQ(got.seq_lens, want.seq_lens) << what << " seq_lens";
  EXPECT_EQ(got.cu_seqlens_q, want.cu_seqlens_q) << what << " cu_seqlens_q";
  EXPECT_EQ(got.cu_seqlens_k, want.cu_seqlens_k) << what << " cu_seqlens_k";
}

std::string label(int P, bool extend, int W, int B) {
  return "P=" + std::to_string(P) + (extend ? " extend" : " decode") + " window_left=" + std::to_string(W) +
         " B=" + std::to_string(B);
}

TEST(MetadataHost, BuildersMatchPerPositionOracle) {
  CLATTN_SEED_TRACE();
  Rng rng(1);
  for (int P : kPageSizes) {
    for (bool extend : {false, true}) {
      for (int rep = 0; rep < 3; ++rep) {
        const int B = rng.uniform_int(1, 24);
        GenBatch g = random_batch(rng, P, B, max_ctx_for(P), extend);
        EngineBatch b = g.view();
        ASSERT_NO_THROW(validate(b, g.cache()));
        for (int W : windows_for(P, g.max_ctx)) {
          const std::string what = label(P, extend, W, B);
          PagedCsr c = build_csr(b, P, W);
          expect_csr_eq(c, oracle_csr(g, W), what);
          EXPECT_NO_THROW(validate(c, g.cache(), g.seq_lens.data())) << what;
          for (int i = 0; i < B && W < 0; ++i) {
            EXPECT_EQ(c.kv_len(i), g.seq_lens[size_t(i)]) << what << " request " << i;
          }
        }
        const std::string what = label(P, extend, -1, B);
        PageTable t = build_page_table(b, P);
        expect_table_eq(t, oracle_table(g, oracle_width(g)), what);
        EXPECT_NO_THROW(validate(t, g.cache())) << what;
        PageTable wide = build_page_table(b, P, oracle_width(g) + 5);
        expect_table_eq(wide, oracle_table(g, oracle_width(g) + 5), what + " padded");

        int max_blocks = 0;
        std::vector<int32_t> blocks = build_block_table(b, P, &max_blocks);
        EXPECT_EQ(max_blocks, oracle_width(g)) << what;
        EXPECT_EQ(blocks, oracle_table(g, max_blocks).page_table) << what;

        std::vector<int32_t> slots = build_slot_mapping(b);
        EXPECT_EQ(slots, oracle_slots(g)) << what;
        EXPECT_NO_THROW(validate_slot_mapping(slots.data(), int64_t(slots.size()), g.cache())) << what;
      }
    }
  }
}

// A window larger than the sequence keeps everything; W = 0 in decode keeps the last key.
TEST(MetadataHost, WindowEdgeCases) {
  CLATTN_SEED_TRACE();
  const int P = 16;
  GenBatch g;
  g.page_size = P;
  g.pool_size = 1;
  g.max_ctx = 64;
  g.num_pages = 8;
  g.req_pool_indices = {0};
  g.seq_lens = {40};
  g.req_to_token.resize(64, kUnused);
  const int phys[] = {5, 2, 7};
  for (int t = 0; t < 40; ++t) g.req_to_token[size_t(t)] = phys[t / P] * P + t % P;

  PagedCsr all = build_csr(g.view(), P, 1000);
  EXPECT_EQ(all.kv_indices, (std::vector<int32_t>{5, 2, 7}));
  EXPECT_EQ(all.kv_start_offset, (std::vector<int32_t>{0}));
  EXPECT_EQ(all.kv_len(0), 40);

  PagedCsr last = build_csr(g.view(), P, 0);  // only position 39
  EXPECT_EQ(last.kv_indices, (std::vector<int32_t>{7}));
  EXPECT_EQ(last.kv_start_offset, (std::vector<int32_t>{7}));
  EXPECT_EQ(last.kv_last_page_len, (std::vector<int32_t>{8}));
  EXPECT_EQ(last.kv_len(0), 1);

  PagedCsr w20 = build_csr(g.view(), P, 20);  // positions 19..39: pages 1, 2
  EXPECT_EQ(w20.kv_indices, (std::vector<int32_t>{2, 7}));
  EXPECT_EQ(w20.kv_start_offset, (std::vector<int32_t>{3}));
  EXPECT_EQ(w20.kv_len(0), 21);

  // Extend: prefix 32, 8 new tokens; the first query (position 32) sees 32 - W .. 32.
  g.extend = true;
  g.prefix_lens = {32};
  g.extend_lens = {8};
  PagedCsr e = build_csr(g.view(), P, 16);  // keys 16..39
  EXPECT_EQ(e.kv_indices, (std::vector<int32_t>{2, 7}));
  EXPECT_EQ(e.kv_start_offset, (std::vector<int32_t>{0}));
  EXPECT_EQ(e.qo_indptr, (std::vector<int32_t>{0, 8}));
  EXPECT_EQ(e.kv_len(0), 24);
  g.prefix_lens = {40};  // W = 0 and no new tokens: nothing kept
  g.extend_lens = {0};
  PagedCsr none = build_csr(g.view(), P, 0);
  EXPECT_EQ(none.kv_indptr, (std::vector<int32_t>{0, 0}));
  EXPECT_EQ(none.kv_last_page_len, (std::vector<int32_t>{0}));
  EXPECT_EQ(none.kv_start_offset, (std::vector<int32_t>{0}));
}

TEST(MetadataHost, EmptyBatchAndEmptyRequests) {
  EngineBatch empty;
  PagedCsr c = build_csr(empty, 16);
  EXPECT_EQ(c.kv_indptr, (std::vector<int32_t>{0}));
  EXPECT_TRUE(c.kv_indices.empty());
  EXPECT_NO_THROW(validate(c, CacheShape{0, 16}));
  PageTable t = build_page_table(empty, 16);
  EXPECT_EQ(t.cu_seqlens_k, (std::vector<int32_t>{0}));
  EXPECT_TRUE(build_slot_mapping(empty).empty());

  // Decode request with seq_len 0: no pages, last_page_len 0, slot -1 (skip).
  std::vector<int32_t> table(8, kUnused), rpi{0}, seq{0};
  EngineBatch b;
  b.req_to_token = table.data();
  b.pool_size = 1;
  b.max_ctx = 8;
  b.req_pool_indices = rpi.data();
  b.seq_lens = seq.data();
  b.batch_size = 1;
  PagedCsr e = build_csr(b, 4);
  EXPECT_EQ(e.kv_indptr, (std::vector<int32_t>{0, 0}));
  EXPECT_EQ(e.kv_last_page_len, (std::vector<int32_t>{0}));
  EXPECT_EQ(build_slot_mapping(b), (std::vector<int32_t>{-1}));
  PageTable et = build_page_table(b, 4);
  EXPECT_EQ(et.max_pages, 1);
  EXPECT_EQ(et.page_table, (std::vector<int32_t>{-1}));
}

TEST(MetadataHost, ConversionsRoundTrip) {
  CLATTN_SEED_TRACE();
  Rng rng(2);
  for (int P : kPageSizes) {
    for (bool extend : {false, true}) {
      GenBatch g = random_batch(rng, P, rng.uniform_int(1, 16), max_ctx_for(P), extend);
      const std::string what = label(P, extend, -1, g.batch_size());
      PagedCsr c = build_csr(g.view(), P);
      PageTable t = build_page_table(g.view(), P);
      PageTable t2 = csr_to_page_table(c);
      expect_table_eq(t2, t, what + " csr->table");
      expect_csr_eq(page_table_to_csr(t), c, what + " table->csr");
      EXPECT_TRUE(throws_error([&] { csr_to_page_table(build_csr(g.view(), P, 4)); }, Status::InvalidArgument,
                               "kv_start_offset"));
    }
  }
}

// The into-overloads reuse an output across batches of different kinds and give exactly
// the fresh result; a rejected build leaves the output empty.
TEST(MetadataHost, IntoOverloadsReuseOutputs) {
  CLATTN_SEED_TRACE();
  Rng rng(7);
  PagedCsr c;
  PageTable t;
  std::vector<int32_t> s;
  for (int round = 0; round < 6; ++round) {
    const int P = kPageSizes[round % 4];
    const bool extend = round % 2 == 0;
    const int W = round % 3 == 0 ? P + 1 : -1;
    GenBatch g = random_batch(rng, P, rng.uniform_int(1, 12), max_ctx_for(P), extend);
    const std::string what = label(P, extend, W, g.batch_size());
    build_csr(g.view(), P, W, c);
    expect_csr_eq(c, build_csr(g.view(), P, W), what);
    build_page_table(g.view(), P, 0, t);
    expect_table_eq(t, build_page_table(g.view(), P), what);
    build_slot_mapping(g.view(), s);
    EXPECT_EQ(s, build_slot_mapping(g.view())) << what;
  }
  GenBatch g = random_batch(rng, 16, 4, 100, false);
  g.seq_lens = {40, 40, 40, 40};
  for (int i = 0; i < 4; ++i)
    for (int pos = 0; pos < 40; ++pos)
      g.req_to_token[size_t(g.req_pool_indices[size_t(i)]) * 100 + pos] = (i * 3 + pos / 16) * 16 + pos % 16;
  g.req_to_token[size_t(g.req_pool_indices[3]) * 100 + 32] = 5;  // request 3's third page misaligned
  EXPECT_TRUE(
      throws_error([&] { build_csr(g.view(), 16, -1, c); }, Status::InvalidArgument, "(request 3, position 32)"));
  EXPECT_TRUE(c.kv_indptr.empty() && c.kv_indices.empty() && c.kv_last_page_len.empty());
  EXPECT_TRUE(throws_error([&] { build_page_table(g.view(), 16, 0, t); }, Status::InvalidArgument, "request 3"));
  EXPECT_TRUE(t.page_table.empty() && t.seq_lens.empty());
}

// ---- device builders ----

struct DeviceBatch {
  DeviceBuffer r2t, rpi, seq, pre, ext;
  DeviceEngineBatch view;
};

DeviceBatch upload_batch(const GenBatch& g) {
  DeviceBatch d;
  d.r2t = upload(g.req_to_token);
  d.rpi = upload(g.req_pool_indices);
  d.seq = upload(g.seq_lens);
  d.view.req_to_token = d.r2t.get();
  d.view.pool_size = g.pool_size;
  d.view.max_ctx = g.max_ctx;
  d.view.req_pool_indices = d.rpi.get();
  d.view.seq_lens = d.seq.get();
  d.view.batch_size = g.batch_size();
  if (g.extend) {
    d.pre = upload(g.prefix_lens);
    d.ext = upload(g.extend_lens);
    d.view.prefix_lens = d.pre.get();
    d.view.extend_lens = d.ext.get();
  }
  return d;
}

// Filled with a sentinel so an unwritten element shows up as a mismatch.
DeviceBuffer sentinel_buffer(size_t n) { return upload(std::vector<int32_t>(std::max<size_t>(n, 1), -31337)); }

PagedCsr run_csr_device(const GenBatch& g, const DeviceBatch& d, int W, int64_t cap_override = -1) {
  const int B = g.batch_size(), P = g.page_size;
  int64_t cap = cap_override >= 0 ? cap_override : max_csr_pages(B, g.max_ctx, P);
  DeviceBuffer indptr = sentinel_buffer(size_t(B) + 1), indices = sentinel_buffer(size_t(cap)),
               last = sentinel_buffer(size_t(B)), qo = sentinel_buffer(size_t(B) + 1), off = sentinel_buffer(size_t(B));
  DeviceCsr out;
  out.kv_indptr = indptr.get();
  out.kv_indices = indices.get();
  out.kv_last_page_len = last.get();
  if (g.extend) out.qo_indptr = qo.get();
  if (W >= 0) out.kv_start_offset = off.get();
  build_csr_device(ctx(), d.view, P, W, out);
  return download_csr(ctx(), out, B, P);
}

TEST(MetadataDevice, MatchesHostElementForElement) {
  CLATTN_SEED_TRACE();
  Rng rng(3);
  for (int P : kPageSizes) {
    for (bool extend : {false, true}) {
      for (int rep = 0; rep < 3; ++rep) {
        // The last batch is wider than any work-group so the prefix loops wrap.
        const bool wide = rep == 2;
        const int B = wide ? rng.uniform_int(130, 200) : rng.uniform_int(1, 12);
        const int max_ctx = wide ? std::min(max_ctx_for(P), 4 * P + 3) : max_ctx_for(P);
        GenBatch g = random_batch(rng, P, B, max_ctx, extend);
        DeviceBatch d = upload_batch(g);
        for (int W : windows_for(P, g.max_ctx)) {
          if (wide && W != -1 && W != P + 3) continue;
          const std::string what = label(P, extend, W, B) + " (device)";
          expect_csr_eq(run_csr_device(g, d, W), build_csr(g.view(), P, W), what);
        }
        const std::string what = label(P, extend, -1, B) + " (device)";
        // Page table at the width an engine sizes without host lengths.
        const int width = max_table_pages(g.max_ctx, P);
        DeviceBuffer pt = sentinel_buffer(size_t(B) * size_t(width)), sq = sentinel_buffer(size_t(B)),
                     cq = sentinel_buffer(size_t(B) + 1), ck = sentinel_buffer(size_t(B) + 1);
        DevicePageTable out{pt.get(), sq.get(), extend ? cq.get() : nullptr, ck.get()};
        build_page_table_device(ctx(), d.view, P, width, out);
        PageTable got;
        got.page_size = P;
        got.max_pages = width;
        got.page_table = download<int32_t>(pt, size_t(B) * size_t(width));
        got.seq_lens = download<int32_t>(sq, size_t(B));
        if (extend) got.cu_seqlens_q = download<int32_t>(cq, size_t(B) + 1);
        got.cu_seqlens_k = download<int32_t>(ck, size_t(B) + 1);
        expect_table_eq(got, build_page_table(g.view(), P, width), what);

        DeviceBuffer bt = sentinel_buffer(size_t(B) * size_t(width));
        build_block_table_device(ctx(), d.view, P, width, bt.get());
        EXPECT_EQ(download<int32_t>(bt, size_t(B) * size_t(width)), build_block_table(g.view(), P, nullptr, width))
            << what;

        std::vector<int32_t> want_slots = build_slot_mapping(g.view());
        DeviceBuffer sm = sentinel_buffer(want_slots.size());
        build_slot_mapping_device(ctx(), d.view, sm.get());
        EXPECT_EQ(download<int32_t>(sm, want_slots.size()), want_slots) << what;
      }
    }
  }
}

TEST(MetadataDevice, EmptyBatchWritesIndptrZero) {
  DeviceEngineBatch b;  // batch_size 0: no tables needed
  DeviceBuffer indptr = sentinel_buffer(1), qo = sentinel_buffer(1), indices = sentinel_buffer(1),
               last = sentinel_buffer(1);
  DeviceCsr out{indptr.get(), indices.get(), last.get(), nullptr, nullptr};
  build_csr_device(ctx(), b, 16, -1, out);
  EXPECT_EQ(download<int32_t>(indptr, 1), (std::vector<int32_t>{0}));
}

// kv_indices smaller than the real total: the kernel drops what does not fit instead of
// writing past the buffer, and validating the downloaded CSR reports it.
TEST(MetadataDevice, UndersizedIndicesAreNotOverrun) {
  CLATTN_SEED_TRACE();
  Rng rng(4);
  GenBatch g = random_batch(rng, 16, 8, 200, false);
  g.seq_lens.assign(8, 200);  // 13 pages each
  for (int i = 0; i < 8; ++i)
    for (int t = 0; t < 200; ++t)
      g.req_to_token[size_t(g.req_pool_indices[size_t(i)]) * 200 + t] = (i * 13 + t / 16) * 16 + t % 16;
  g.num_pages = 8 * 13;
  DeviceBatch d = upload_batch(g);
  // 20 int32 of room in a 40-int32 buffer whose tail must stay untouched: use a sub-buffer.
  DeviceBuffer big = sentinel_buffer(40);
  cl_buffer_region region{0, 20 * sizeof(int32_t)};
  cl_int err = CL_SUCCESS;
  cl_mem sub = clCreateSubBuffer(big.get(), CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &region, &err);
  ASSERT_EQ(err, CL_SUCCESS);
  DeviceBuffer indptr = sentinel_buffer(9), last = sentinel_buffer(8);
  DeviceCsr out{indptr.get(), sub, last.get(), nullptr, nullptr};
  build_csr_device(ctx(), d.view, 16, -1, out);
  PagedCsr got = download_csr(ctx(), out, 8, 16);
  clReleaseMemObject(sub);
  EXPECT_EQ(got.kv_indptr.back(), 8 * 13);
  EXPECT_EQ(got.kv_indices.size(), 20u);
  std::vector<int32_t> all = download<int32_t>(big, 40);
  for (int k = 20; k < 40; ++k) EXPECT_EQ(all[size_t(k)], -31337) << "kv_indices overrun at " << k;
  EXPECT_TRUE(throws_error([&] { validate(got, g.cache()); }, Status::InvalidArgument, "kv_indices"));
}

// Out-of-range pool indices / lengths make the request empty on the device (no
// out-of-bounds read); validate_device names the bad entry.
TEST(MetadataDevice, InvalidRequestsAreEmptyAndValidateDeviceNamesThem) {
  CLATTN_SEED_TRACE();
  Rng rng(5);
  GenBatch g = random_batch(rng, 16, 4, 100, false);
  g.seq_lens = {33, 50, 17, 64};
  for (int i = 0; i < 4; ++i)
    for (int t = 0; t < 100; ++t)
      g.req_to_token[size_t(g.req_pool_indices[size_t(i)]) * 100 + t] = (i * 7 + t / 16) * 16 + t % 16;
  g.req_pool_indices[1] = g.pool_size + 1000;
  g.seq_lens[2] = 100000;
  DeviceBatch d = upload_batch(g);
  PagedCsr got = run_csr_device(g, d, -1);
  EXPECT_EQ(got.kv_indptr, (std::vector<int32_t>{0, 3, 3, 3, 7}));
  EXPECT_EQ(got.kv_last_page_len, (std::vector<int32_t>{1, 0, 0, 16}));
  EXPECT_TRUE(throws_error([&] { validate_device(ctx(), d.view, 16); }, Status::InvalidArgument,
                           "req_pool_indices[1] = " + std::to_string(g.pool_size + 1000) + " (request 1)"));
  EXPECT_TRUE(throws_error([&] { build_csr(g.view(), 16); }, Status::InvalidArgument, "req_pool_indices[1]"));
}

TEST(MetadataDevice, ArgumentChecksNameTheBuffer) {
  Rng rng(6);
  GenBatch g = random_batch(rng, 16, 4, 100, true);
  DeviceBatch d = upload_batch(g);
  DeviceBuffer small = sentinel_buffer(2), ok = sentinel_buffer(1000);
  DeviceCsr out{small.get(), ok.get(), ok.get(), nullptr, nullptr};
  EXPECT_TRUE(throws_error([&] { build_csr_device(ctx(), d.view, 16, -1, out); }, Status::InvalidArgument,
                           "kv_indptr: buffer has 8 bytes, needs 20"));
  out.kv_indptr = ok.get();
  EXPECT_TRUE(
      throws_error([&] { build_csr_device(ctx(), d.view, 16, 8, out); }, Status::InvalidArgument, "kv_start_offset"));
  EXPECT_TRUE(throws_error([&] { build_csr_device(ctx(), d.view, 0, -1, out); }, Status::InvalidArgument, "page_size"));
  DeviceEngineBatch bad = d.view;
  bad.seq_lens = small.get();
  EXPECT_TRUE(throws_error([&] { build_csr_device(ctx(), bad, 16, -1, out); }, Status::InvalidArgument,
                           "seq_lens: buffer has 8 bytes"));
  DevicePageTable pt{small.get(), nullptr, nullptr, nullptr};
  EXPECT_TRUE(throws_error([&] { build_page_table_device(ctx(), d.view, 16, 7, pt); }, Status::InvalidArgument,
                           "page_table: buffer"));
  EXPECT_TRUE(
      throws_error([&] { build_page_table_device(ctx(), d.view, 16, 0, pt); }, Status::InvalidArgument, "max_pages"));
  DeviceEngineBatch decode = d.view;
  decode.extend_lens = nullptr;
  out.qo_indptr = ok.get();
  EXPECT_TRUE(throws_error([&] { build_csr_device(ctx(), decode, 16, -1, out); }, Status::InvalidArgument,
                           "qo_indptr: given for a decode batch"));
  DevicePageTable pq{ok.get(), nullptr, ok.get(), nullptr};
  EXPECT_TRUE(throws_error([&] { build_page_table_device(ctx(), decode, 16, 7, pq); }, Status::InvalidArgument,
                           "cu_seqlens_q: given for a decode batch"));
}

}  // namespace
}  // namespace clattn::test

// Sizes, offsets and counts from hostile shapes (docs/metadata.md, "Overflow rules"):
// page_size near INT_MAX, page counts times page_size past int32, slots near INT_MAX.
// Each case once computed a wrapped int and wrote, copied or accepted the wrong thing.
#include <clattn/metadata.hpp>
#include <limits>

#include "metadata/batch_gen.hpp"

namespace clattn::test {
namespace {

constexpr int kMax = std::numeric_limits<int32_t>::max();

#define EXPECT_REJECTS(expr, needle) EXPECT_TRUE(throws_error([&] { expr; }, Status::InvalidArgument, needle))

// Three decode requests of 2, 1 and 1 tokens at page_size INT_MAX: one page each, all of
// them physical page 0 (slots 0.. sit at offset 0.. of page 0). (seq + P - 1) / P once
// gave -1 pages for the first request: kv_indptr {0,-1,0,1} and a write at kv_indices[-1].
struct HugePage {
  static constexpr int P = kMax;
  std::vector<int32_t> table{0, 1, 2, 3}, rpi{0, 0, 0}, seq{2, 1, 1};
  EngineBatch view() const {
    EngineBatch b;
    b.req_to_token = table.data();
    b.pool_size = 1;
    b.max_ctx = 4;
    b.req_pool_indices = rpi.data();
    b.seq_lens = seq.data();
    b.batch_size = 3;
    return b;
  }
};

TEST(MetadataOverflow, HugePageSizeCsr) {
  HugePage h;
  PagedCsr c = build_csr(h.view(), HugePage::P);
  EXPECT_EQ(c.kv_indptr, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(c.kv_indices, (std::vector<int32_t>{0, 0, 0}));
  EXPECT_EQ(c.kv_last_page_len, (std::vector<int32_t>{2, 1, 1}));
  EXPECT_NO_THROW(validate(c, CacheShape{1, HugePage::P}, h.seq.data()));
  PagedCsr w = build_csr(h.view(), HugePage::P, 0);  // decode W = 0: the last key only
  EXPECT_EQ(w.kv_indptr, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(w.kv_start_offset, (std::vector<int32_t>{1, 0, 0}));
  EXPECT_NO_THROW(validate(w, CacheShape{1, HugePage::P}, h.seq.data()));
}

TEST(MetadataOverflow, HugePageSizeTableAndBlockTable) {
  HugePage h;
  PageTable t = build_page_table(h.view(), HugePage::P);
  EXPECT_EQ(t.max_pages, 1);
  EXPECT_EQ(t.page_table, (std::vector<int32_t>{0, 0, 0}));  // was {-1, 0, 0}
  EXPECT_EQ(t.cu_seqlens_k, (std::vector<int32_t>{0, 2, 3, 4}));
  EXPECT_NO_THROW(validate(t, CacheShape{1, HugePage::P}));
  int width = 0;
  EXPECT_EQ(build_block_table(h.view(), HugePage::P, &width), (std::vector<int32_t>{0, 0, 0}));
  EXPECT_EQ(width, 1);
}

// page_table_to_csr once copied (size_t)-4 bytes (a negative page count) and crashed.
TEST(MetadataOverflow, HugePageSizeConversions) {
  HugePage h;
  PageTable t = build_page_table(h.view(), HugePage::P);
  PagedCsr c = page_table_to_csr(t);
  EXPECT_EQ(c.kv_indptr, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(c.kv_indices, (std::vector<int32_t>{0, 0, 0}));
  EXPECT_EQ(c.kv_last_page_len, (std::vector<int32_t>{2, 1, 1}));
  PageTable back = csr_to_page_table(c);
  EXPECT_EQ(back.page_table, t.page_table);
  EXPECT_EQ(back.seq_lens, t.seq_lens);
  EXPECT_EQ(back.cu_seqlens_k, t.cu_seqlens_k);
}

// The page count of seq_len 2 at page_size INT_MAX is 1, so a -1 entry is a used one.
TEST(MetadataOverflow, ValidateTableCountsPagesOfHugePageSize) {
  PageTable t;
  t.page_size = kMax;
  t.max_pages = 1;
  t.page_table = {-1};
  t.seq_lens = {2};
  EXPECT_REJECTS(validate(t, CacheShape{4, kMax}), "page_table[0][0] = -1 (request 0, page 0): negative page id");
}

// (pages - 1) * page_size + kv_last_page_len beyond int32: PagedCsr::kv_len would wrap.
TEST(MetadataOverflow, ValidateCsrRejectsKeyCountsPastInt32) {
  const int P = 1 << 30;
  PagedCsr c;
  c.page_size = P;
  c.kv_indptr = {0, 3};
  c.kv_indices = {0, 1, 2};
  c.kv_last_page_len = {P};
  EXPECT_REJECTS(validate(c, CacheShape{3, P}), "kv_indptr[1] = 3 (request 0): (pages - 1) * page_size");
  EXPECT_REJECTS(validate(c, CacheShape{3, P}, std::vector<int32_t>{kMax}.data()), "does not fit int32");
  EXPECT_REJECTS(csr_to_page_table(c), "kv_indptr[1]");
  c.kv_indptr = {0, 2};  // 2^30 + 2^30 - 1 = INT_MAX tokens: the largest that fits
  c.kv_last_page_len = {P - 1};
  EXPECT_NO_THROW(validate(c, CacheShape{3, P}, std::vector<int32_t>{kMax}.data()));
  EXPECT_EQ(c.kv_len(0), kMax);
}

TEST(MetadataOverflow, BoundsForHugeContexts) {
  EXPECT_EQ(max_table_pages(kMax, 16), 134217728);  // was 1
  EXPECT_EQ(max_table_pages(kMax, kMax), 1);
  EXPECT_EQ(max_table_pages(kMax, 1), kMax);
  EXPECT_EQ(max_csr_pages(kMax, kMax, 1), int64_t(kMax) * kMax);
  EXPECT_EQ(max_csr_pages(3, kMax, 16), 3 * int64_t(134217728));
}

// P = 3: slot 2147483646 starts a page; position 2 needs slot 2^31, which does not exist.
// base + k in int wrapped to INT_MIN, so a negative slot passed as "the next one".
TEST(MetadataOverflow, EngineBatchSlotsNearIntMax) {
  std::vector<int32_t> table{kMax - 1, kMax, std::numeric_limits<int32_t>::min()}, rpi{0}, seq{3};
  EngineBatch b;
  b.req_to_token = table.data();
  b.pool_size = 1;
  b.max_ctx = 3;
  b.req_pool_indices = rpi.data();
  b.seq_lens = seq.data();
  b.batch_size = 1;
  EXPECT_REJECTS(validate(b, 3), "req_to_token[0][2] = -2147483648 (request 0, position 2): negative slot");
}

// Slot INT_MAX at page_size 1 is page id INT_MAX: the builders list it, so the structure
// checks of the conversions accept it (no cache to compare with); no cache of int pages
// holds it, so validation against one rejects it.
TEST(MetadataOverflow, PageIdIntMaxConverts) {
  std::vector<int32_t> table{kMax}, rpi{0}, seq{1};
  EngineBatch b;
  b.req_to_token = table.data();
  b.pool_size = 1;
  b.max_ctx = 1;
  b.req_pool_indices = rpi.data();
  b.seq_lens = seq.data();
  b.batch_size = 1;
  PagedCsr c = build_csr(b, 1);
  EXPECT_EQ(c.kv_indices, (std::vector<int32_t>{kMax}));
  PageTable t = csr_to_page_table(c);  // was "outside the cache (num_pages = 2147483647)"
  EXPECT_EQ(t.page_table, (std::vector<int32_t>{kMax}));
  EXPECT_EQ(page_table_to_csr(t).kv_indices, c.kv_indices);
  EXPECT_REJECTS(validate(c, CacheShape{kMax, 1}), "kv_indices[0] = 2147483647");
}

// A page table's entry count must fit int32 like a CSR's kv_indptr[B]: rejected before
// the 12 GiB table would be allocated.
TEST(MetadataOverflow, PageTableEntriesPastInt32) {
  HugePage h;
  PageTable t;
  EXPECT_REJECTS(build_page_table(h.view(), 16, 1 << 30, t), "page_table: batch_size * max_pages = 3 * 1073741824");
  EXPECT_TRUE(t.page_table.empty());
  PageTable v;
  v.page_size = 16;
  v.max_pages = 1 << 30;
  v.seq_lens = {0, 0, 0};
  EXPECT_REJECTS(validate(v, CacheShape{1, 16}), "does not fit int32");
}

// The device kernels compute ceil(seq / page_size) in int with seq <= max_ctx.
TEST(MetadataOverflow, DeviceBuildersRejectPageSizeThatOverflowsKernels) {
  HugePage h;
  std::vector<int32_t> rpi = h.rpi, seq = h.seq;
  DeviceBuffer r2t = upload(h.table), drpi = upload(rpi), dseq = upload(seq);
  DeviceBuffer out = upload(std::vector<int32_t>(16, -77)), ip = upload(std::vector<int32_t>(4, -77)),
               ix = upload(std::vector<int32_t>(3, -77)), la = upload(std::vector<int32_t>(3, -77));
  DeviceEngineBatch d;
  d.req_to_token = r2t.get();
  d.pool_size = 1;
  d.max_ctx = 4;
  d.req_pool_indices = drpi.get();
  d.seq_lens = dseq.get();
  d.batch_size = 3;
  DeviceCsr c{ip.get(), ix.get(), la.get(), nullptr, nullptr};
  EXPECT_REJECTS(build_csr_device(ctx(), d, kMax, -1, c), "page_size = 2147483647: with max_ctx = 4");
  DevicePageTable pt{out.get(), nullptr, nullptr, nullptr};
  EXPECT_REJECTS(build_page_table_device(ctx(), d, kMax, 1, pt), "page_size = 2147483647");
  EXPECT_EQ(download<int32_t>(out, 16), std::vector<int32_t>(16, -77));
  EXPECT_EQ(download<int32_t>(ip, 4), std::vector<int32_t>(4, -77));
  // max_ctx + page_size - 1 == INT_MAX is the largest accepted.
  EXPECT_NO_THROW(build_csr_device(ctx(), d, kMax - 3, -1, c));
  EXPECT_EQ(download_csr(ctx(), c, 3, kMax - 3).kv_indptr, (std::vector<int32_t>{0, 1, 2, 3}));
}

}  // namespace
}  // namespace clattn::test

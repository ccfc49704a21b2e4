// Every validation rule gets an input that breaks exactly it; the message must name the
// field, the index (request, page or token) and the bad value.
#include <clattn/metadata.hpp>
#include <functional>

#include "metadata/batch_gen.hpp"

namespace clattn::test {
namespace {

#define EXPECT_REJECTS(expr, needle) EXPECT_TRUE(throws_error([&] { expr; }, Status::InvalidArgument, needle))

// Three requests at P = 4: lengths 6 (pages 3, 8), 4 (page 5), 0 (no pages).
struct Fixture {
  static constexpr int P = 4;
  std::vector<int32_t> table, rpi{2, 0, 1}, seq{6, 4, 0}, pre{2, 0, 0}, ext{4, 4, 0};
  Fixture() : table(3 * 8, kUnused) {
    int32_t* r0 = table.data() + 2 * 8;  // request 0 lives in pool row 2
    for (int t = 0; t < 6; ++t) r0[t] = (t < 4 ? 3 : 8) * P + t % P;
    int32_t* r1 = table.data() + 0 * 8;
    for (int t = 0; t < 4; ++t) r1[t] = 5 * P + t;
  }
  EngineBatch decode() const {
    EngineBatch b;
    b.req_to_token = table.data();
    b.pool_size = 3;
    b.max_ctx = 8;
    b.req_pool_indices = rpi.data();
    b.seq_lens = seq.data();
    b.batch_size = 3;
    return b;
  }
  EngineBatch extend() const {
    EngineBatch b = decode();
    b.prefix_lens = pre.data();
    b.extend_lens = ext.data();
    return b;
  }
  CacheShape cache() const { return CacheShape{10, P}; }
};

TEST(MetadataValidate, GoodInputsPass) {
  Fixture f;
  EXPECT_NO_THROW(validate(f.decode(), f.cache()));
  EXPECT_NO_THROW(validate(f.extend(), f.cache()));
  PagedCsr c = build_csr(f.extend(), Fixture::P);
  EXPECT_EQ(c.kv_indices, (std::vector<int32_t>{3, 8, 5}));
  EXPECT_EQ(c.kv_last_page_len, (std::vector<int32_t>{2, 4, 0}));
  EXPECT_NO_THROW(validate(c, f.cache(), f.seq.data()));
  EXPECT_NO_THROW(validate(build_page_table(f.extend(), Fixture::P), f.cache()));
  EXPECT_NO_THROW(validate(build_csr(f.decode(), Fixture::P, 1), f.cache(), f.seq.data()));
}

// ---- EngineBatch ----

TEST(MetadataValidate, EngineBatchRules) {
  Fixture f;
  const int P = Fixture::P;
  {
    EngineBatch b = f.decode();
    EXPECT_REJECTS(validate(b, 0), "page_size = 0");
    b.batch_size = -1;
    EXPECT_REJECTS(validate(b, P), "batch_size = -1");
  }
  {
    Fixture g;
    g.rpi[1] = 3;
    EXPECT_REJECTS(validate(g.decode(), P), "req_pool_indices[1] = 3 (request 1): outside the pool [0, 3)");
    EXPECT_REJECTS(build_csr(g.decode(), P), "req_pool_indices[1] = 3 (request 1)");
    g.rpi[1] = -1;
    EXPECT_REJECTS(build_page_table(g.decode(), P), "req_pool_indices[1] = -1 (request 1)");
  }
  {
    Fixture g;
    g.seq[2] = 9;
    EXPECT_REJECTS(validate(g.decode(), P), "seq_lens[2] = 9 (request 2): exceeds max_ctx = 8");
    g.seq[2] = -2;
    EXPECT_REJECTS(build_slot_mapping(g.decode()), "seq_lens[2] = -2 (request 2): negative");
  }
  {
    Fixture g;
    g.pre[0] = 1;  // 1 + 4 != 6
    EXPECT_REJECTS(validate(g.extend(), P),
                   "prefix_lens[0] = 1 (request 0): prefix_lens + extend_lens = 5 != seq_lens = 6");
    EXPECT_REJECTS(build_csr(g.extend(), P), "prefix_lens[0] = 1 (request 0)");
  }
  {
    Fixture g;
    g.ext[1] = 5;  // extend_len > seq_len
    EXPECT_REJECTS(validate(g.extend(), P), "extend_lens[1] = 5 (request 1): exceeds seq_lens[1] = 4");
    g.ext[1] = -1;
    EXPECT_REJECTS(validate(g.extend(), P), "extend_lens[1] = -1 (request 1): negative");
    Fixture h;
    h.pre[2] = -1;
    EXPECT_REJECTS(validate(h.extend(), P), "prefix_lens[2] = -1 (request 2): negative");
  }
  {
    EngineBatch b = f.extend();
    b.prefix_lens = nullptr;
    EXPECT_REJECTS(validate(b, P), "prefix_lens: null");
    b = f.decode();
    b.seq_lens = nullptr;
    EXPECT_REJECTS(build_csr(b, P), "seq_lens: null");
  }
  {
    Fixture g;
    g.table[2 * 8 + 5] = -1;  // request 0, position 5
    EXPECT_REJECTS(validate(g.decode(), P), "req_to_token[2][5] = -1 (request 0, position 5): negative slot");
    EXPECT_REJECTS(build_slot_mapping(g.decode()), "req_to_token[2][5] = -1 (request 0, position 5)");
  }
  {
    Fixture g;
    g.table[2 * 8 + 4] = 7 * P;  // request 0, page 1 starts in page 7 but position 5 is in page 8
    EXPECT_REJECTS(validate(g.decode(), P),
                   "req_to_token[2][5] = 33 (request 0, position 5): is in page 8 but position 4");
  }
  {
    Fixture g;
    g.table[0 * 8 + 2] = 5 * P + 3;  // request 1, position 2 at offset 3
    EXPECT_REJECTS(validate(g.decode(), P), "req_to_token[0][2] = 23 (request 1, position 2): sits at offset 3");
  }
  {
    Fixture g;
    for (int t = 0; t < 4; ++t) g.table[size_t(t)] = 5 * P + 1 + t;  // request 1 shifted by one slot
    EXPECT_REJECTS(build_csr(g.decode(), P), "req_to_token[0][0] = 21 (request 1, position 0): the first position");
    EXPECT_REJECTS(build_page_table(g.decode(), P), "req_to_token[0][0] = 21 (request 1, position 0)");
  }
  {
    EXPECT_REJECTS(validate(f.decode(), CacheShape{8, P}),
                   "req_to_token[2][4] = 32 (request 0, position 4): outside the cache (num_pages * page_size = 32)");
  }
  {
    EXPECT_REJECTS(build_csr(f.decode(), P, -2), "window_left = -2");
    EXPECT_REJECTS(build_page_table(f.decode(), P, 1), "seq_lens[0] = 6 (request 0): needs 2 pages but max_pages = 1");
  }
}

// ---- CSR ----

TEST(MetadataValidate, CsrRules) {
  Fixture f;
  const int P = Fixture::P;
  const PagedCsr good = build_csr(f.extend(), P);  // indptr 0 2 3 3, indices 3 8 5, last 2 4 0
  const CacheShape cache = f.cache();
  auto with = [&](const std::function<void(PagedCsr&)>& edit) {
    PagedCsr c = good;
    edit(c);
    return c;
  };
  EXPECT_REJECTS(validate(with([](PagedCsr& c) { c.page_size = 0; }), cache), "page_size = 0");
  EXPECT_REJECTS(validate(good, CacheShape{10, 8}), "page_size = 4: does not match the cache's page_size = 8");
  EXPECT_REJECTS(validate(with([](PagedCsr& c) { c.kv_indptr.pop_back(); }), cache),
                 "kv_indptr: has 3 entries, must be batch_size + 1 = 4");
  EXPECT_REJECTS(validate(with([](PagedCsr& c) { c.kv_indptr[0] = 1; }), cache), "kv_indptr[0] = 1: must start at 0");
  EXPECT_REJECTS(validate(with([](PagedCsr& c) { c.kv_indptr[2] = 1; }), cache),
                 "kv_indptr[2] = 1 (request 1): decreases from kv_indptr[1] = 2");
  EXPECT_REJECTS(validate(with([](PagedCsr& c) { c.kv_indices.pop_back(); }), cache),
                 "kv_indices: has 2 entries, kv_indptr[3] = 3");
  EXPECT_REJECTS(validate(with([](PagedCsr& c) { c.kv_last_page_len[1] = 0; }), cache),
                 "kv_last_page_len[1] = 0 (request 1): must be in 1..4");
  EXPECT_REJECTS(validate(with([](PagedCsr& c) { c.kv_last_page_len[0] = 5; }), cache),
                 "kv_last_page_len[0] = 5 (request 0): must be in 1..4");
  EXPECT_REJECTS(validate(with([](PagedCsr& c) { c.kv_last_page_len[2] = 1; }), cache),
                 "kv_last_page_len[2] = 1 (request 2): must be 0 for a request with no pages");
  EXPECT_REJECTS(validate(with([](PagedCsr& c) { c.kv_indices[1] = -4; }), cache),
                 "kv_indices[1] = -4 (request 0, page 1): negative page id");
  EXPECT_REJECTS(validate(with([](PagedCsr& c) { c.kv_indices[2] = 10; }), cache),
                 "kv_indices[2] = 10 (request 1, page 0): outside the cache (num_pages = 10)");
  EXPECT_REJECTS(validate(with([](PagedCsr& c) { c.qo_indptr.push_back(9); }), cache),
                 "qo_indptr: has 5 entries, must be batch_size + 1 = 4");
  EXPECT_REJECTS(validate(with([](PagedCsr& c) { c.qo_indptr[0] = 2; }), cache), "qo_indptr[0] = 2: must start at 0");
  EXPECT_REJECTS(validate(with([](PagedCsr& c) { c.qo_indptr[3] = 7; }), cache),
                 "qo_indptr[3] = 7 (request 2): decreases from qo_indptr[2] = 8");
  EXPECT_REJECTS(validate(with([](PagedCsr& c) {
                            c.qo_indptr = {0, 7, 8, 8};
                          }),
                          cache),
                 "qo_indptr[1] = 7 (request 0): qo_len = 7 exceeds kv_len = 6");
  std::vector<int32_t> seq = f.seq;
  seq[1] = 3;
  EXPECT_REJECTS(validate(good, cache, seq.data()), "seq_lens[1] = 3 (request 1): the CSR covers 4 tokens");
  seq[1] = -1;
  EXPECT_REJECTS(validate(good, cache, seq.data()), "seq_lens[1] = -1 (request 1): negative");
  EXPECT_NO_THROW(validate(good, cache, f.seq.data()));
}

TEST(MetadataValidate, WindowedCsrRules) {
  Fixture f;
  const int P = Fixture::P;
  const PagedCsr good = build_csr(f.decode(), P, 1);  // request 0 keeps 4..5: page 8, offset 0
  const CacheShape cache = f.cache();
  ASSERT_NO_THROW(validate(good, cache, f.seq.data()));
  auto with = [&](const std::function<void(PagedCsr&)>& edit) {
    PagedCsr c = good;
    edit(c);
    return c;
  };
  EXPECT_REJECTS(validate(with([](PagedCsr& c) { c.kv_start_offset.pop_back(); }), cache),
                 "kv_start_offset: has 2 entries, must be batch_size = 3");
  EXPECT_REJECTS(validate(with([](PagedCsr& c) { c.kv_start_offset[1] = 4; }), cache),
                 "kv_start_offset[1] = 4 (request 1): must be in 0..3");
  EXPECT_REJECTS(validate(with([](PagedCsr& c) { c.kv_start_offset[2] = 1; }), cache),
                 "kv_start_offset[2] = 1 (request 2): must be 0 for a request with no pages");
  EXPECT_REJECTS(validate(with([](PagedCsr& c) { c.kv_start_offset[0] = 2; }), cache),
                 "kv_start_offset[0] = 2 (request 0): leaves no keys");
  std::vector<int32_t> seq = f.seq;
  seq[0] = 1;
  EXPECT_REJECTS(validate(good, cache, seq.data()), "seq_lens[0] = 1 (request 0): the windowed CSR covers more: 2");
  seq[0] = 7;
  EXPECT_REJECTS(validate(good, cache, seq.data()),
                 "kv_last_page_len[0] = 2 (request 0): the last page must end at seq_lens = 7");
}

// ---- page table ----

TEST(MetadataValidate, PageTableRules) {
  Fixture f;
  const int P = Fixture::P;
  const PageTable good = build_page_table(f.extend(), P);  // width 2: [3 8] [5 -1] [-1 -1]
  const CacheShape cache = f.cache();
  auto with = [&](const std::function<void(PageTable&)>& edit) {
    PageTable t = good;
    edit(t);
    return t;
  };
  EXPECT_REJECTS(validate(good, CacheShape{10, 2}), "page_size = 4: does not match");
  EXPECT_REJECTS(validate(with([](PageTable& t) { t.max_pages = -1; }), cache), "max_pages = -1");
  EXPECT_REJECTS(validate(with([](PageTable& t) { t.page_table.pop_back(); }), cache),
                 "page_table: has 5 entries, must be batch_size * max_pages = 6");
  EXPECT_REJECTS(validate(with([](PageTable& t) {
                            t.seq_lens[2] = -3;
                            t.cu_seqlens_k.clear();
                          }),
                          cache),
                 "seq_lens[2] = -3 (request 2): negative");
  EXPECT_REJECTS(validate(with([](PageTable& t) {
                            t.seq_lens[1] = 9;
                            t.cu_seqlens_k.clear();
                          }),
                          cache),
                 "seq_lens[1] = 9 (request 1): needs 3 pages but max_pages = 2");
  EXPECT_REJECTS(validate(with([](PageTable& t) { t.page_table[1] = -1; }), cache),
                 "page_table[0][1] = -1 (request 0, page 1): negative page id");
  EXPECT_REJECTS(validate(with([](PageTable& t) { t.page_table[2] = 12; }), cache),
                 "page_table[1][0] = 12 (request 1, page 0): outside the cache (num_pages = 10)");
  EXPECT_NO_THROW(validate(with([](PageTable& t) { t.page_table[3] = 99; }), cache));  // unused entry: ignored
  EXPECT_REJECTS(validate(with([](PageTable& t) { t.cu_seqlens_k[2] = 9; }), cache),
                 "cu_seqlens_k[2] = 9 (request 1): cu_seqlens_k[2] - cu_seqlens_k[1] must equal seq_lens[1] = 4");
  EXPECT_REJECTS(validate(with([](PageTable& t) { t.cu_seqlens_k[0] = 1; }), cache),
                 "cu_seqlens_k[0] = 1: must start at 0");
  EXPECT_REJECTS(validate(with([](PageTable& t) { t.cu_seqlens_k.pop_back(); }), cache), "cu_seqlens_k: has 3 entries");
  EXPECT_REJECTS(validate(with([](PageTable& t) {
                            t.cu_seqlens_q = {0, 4, 9, 9};
                          }),
                          cache),
                 "cu_seqlens_q[2] = 9 (request 1): qo_len = 5 exceeds seq_lens = 4");
  EXPECT_REJECTS(validate(with([](PageTable& t) {
                            t.cu_seqlens_q = {0, 4, 3, 3};
                          }),
                          cache),
                 "cu_seqlens_q[2] = 3 (request 1): decreases from cu_seqlens_q[1] = 4");
  EXPECT_NO_THROW(validate(with([](PageTable& t) {
                             t.cu_seqlens_q.clear();
                             t.cu_seqlens_k.clear();
                           }),
                           cache));
  // The conversions reject the same inputs.
  EXPECT_REJECTS(page_table_to_csr(with([](PageTable& t) { t.page_table[1] = -1; })), "page_table[0][1] = -1");
  PagedCsr c = build_csr(f.decode(), P);
  c.kv_last_page_len[0] = 0;
  EXPECT_REJECTS(csr_to_page_table(c), "kv_last_page_len[0] = 0 (request 0)");
}

// ---- slot mapping ----

TEST(MetadataValidate, SlotMappingRules) {
  const CacheShape cache{10, 4};  // 40 slots
  std::vector<int32_t> s32{0, 39, -1, 40};
  std::vector<int64_t> s64{0, -5, 1ll << 40};
  EXPECT_NO_THROW(validate_slot_mapping(s32.data(), 3, cache));  // negative = padding, skipped
  EXPECT_REJECTS(validate_slot_mapping(s32.data(), 4, cache),
                 "slot_mapping[3] = 40 (token 3): outside the cache (num_pages * page_size = 40");
  EXPECT_NO_THROW(validate_slot_mapping(s64.data(), 2, cache));
  EXPECT_REJECTS(validate_slot_mapping(s64.data(), 3, cache), "slot_mapping[2] = 1099511627776 (token 2)");
  EXPECT_REJECTS(validate_slot_mapping(static_cast<const int32_t*>(nullptr), 2, cache), "slot_mapping: null");
  EXPECT_REJECTS(validate_slot_mapping(s32.data(), -1, cache), "slot_mapping: length -1");
  EXPECT_REJECTS(validate_slot_mapping(s32.data(), 1, CacheShape{10, 0}), "page_size = 0");
}

}  // namespace
}  // namespace clattn::test

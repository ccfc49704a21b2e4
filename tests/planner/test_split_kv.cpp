// Split-K planner properties over random batches: the work list tiles every request's
// range exactly, partial rows and merge items agree, big batches never split, small
// batches with long contexts fill the device, and deterministic mode chunks a request the
// same way whatever its batch mates.
#include <algorithm>
#include <numeric>

#include "backends/planner/split_kv.hpp"
#include "support/test_support.hpp"

using namespace clattn;
using planner::SplitKVConfig;
using planner::SplitKVPlan;

namespace {

struct Ranges {
  std::vector<int32_t> begin, end;
  int size() const { return int(end.size()); }
};

Ranges make(const std::vector<int>& lens, const std::vector<int>& begins = {}) {
  Ranges r;
  for (size_t i = 0; i < lens.size(); ++i) {
    int b = begins.empty() ? 0 : begins[i];
    r.begin.push_back(b);
    r.end.push_back(b + lens[i]);
  }
  return r;
}

SplitKVPlan plan(const Ranges& r, const SplitKVConfig& c) {
  return planner::plan_split_kv(r.begin.data(), r.end.data(), r.size(), c);
}

// Structural invariants every plan must satisfy.
::testing::AssertionResult well_formed(const Ranges& r, const SplitKVPlan& p, const SplitKVConfig& c) {
  std::vector<std::vector<planner::WorkItem>> per(size_t(r.size()));
  for (auto& w : p.work) {
    if (w.req < 0 || w.req >= r.size()) return ::testing::AssertionFailure() << "work item req " << w.req;
    per[size_t(w.req)].push_back(w);
  }
  std::vector<int> part_seen(size_t(p.num_partials), 0);
  for (int i = 0; i < r.size(); ++i) {
    auto& items = per[size_t(i)];
    if (items.empty()) return ::testing::AssertionFailure() << "request " << i << " has no work item";
    int32_t at = r.begin[size_t(i)];
    for (auto& w : items) {
      if (w.begin != at) return ::testing::AssertionFailure() << "request " << i << ": gap/overlap at " << at;
      if (w.end < w.begin) return ::testing::AssertionFailure() << "request " << i << ": empty range reversed";
      at = w.end;
    }
    if (at != r.end[size_t(i)]) return ::testing::AssertionFailure() << "request " << i << " not covered to its end";
    if (items.size() == 1) {
      if (items[0].part != -1) return ::testing::AssertionFailure() << "single item of request " << i << " has a part";
    } else {
      if (int(items.size()) > std::max(1, c.max_splits))
        return ::testing::AssertionFailure() << "request " << i << " split " << items.size() << " > max_splits";
      for (auto& w : items) {
        if (w.part < 0 || w.part >= p.num_partials) return ::testing::AssertionFailure() << "bad part " << w.part;
        if (w.end == w.begin) return ::testing::AssertionFailure() << "empty chunk in a split request " << i;
        part_seen[size_t(w.part)]++;
      }
      auto m = std::find_if(p.merges.begin(), p.merges.end(), [&](auto& x) { return x.req == i; });
      if (m == p.merges.end()) return ::testing::AssertionFailure() << "split request " << i << " has no merge";
      if (m->count != int(items.size()) || m->first != items[0].part)
        return ::testing::AssertionFailure() << "merge item of request " << i << " disagrees with its parts";
      for (size_t j = 0; j < items.size(); ++j)
        if (items[j].part != m->first + int(j)) return ::testing::AssertionFailure() << "parts not consecutive";
    }
  }
  for (int s : part_seen)
    if (s != 1) return ::testing::AssertionFailure() << "a partial row is used " << s << " times";
  return ::testing::AssertionSuccess();
}

SplitKVConfig device(int64_t units, int64_t concurrent) {
  SplitKVConfig c;
  c.units_per_item = units;
  c.max_concurrent = concurrent;
  c.min_chunk = 256;
  c.max_splits = 128;
  c.align = 64;
  return c;
}

}  // namespace

TEST(SplitKV, LargeBatchesAreNotSplit) {
  // B=64 x 8 KV heads = 512 groups vs 132 CUs x 4 = 528: one wave already, no split.
  Ranges r = make(std::vector<int>(64, 4096));
  auto c = device(8, 528);
  auto p = plan(r, c);
  EXPECT_TRUE(well_formed(r, p, c));
  EXPECT_EQ(p.num_partials, 0);
  EXPECT_TRUE(p.merges.empty());
  EXPECT_EQ(p.work.size(), 64u);
  EXPECT_EQ(p.chunk, 0);
  r = make(std::vector<int>(256, 1024));
  p = plan(r, c);
  EXPECT_EQ(p.num_partials, 0);
}

TEST(SplitKV, SmallBatchLongContextFillsTheDevice) {
  Ranges r = make({32768});
  auto c = device(8, 528);
  auto p = plan(r, c);
  EXPECT_TRUE(well_formed(r, p, c));
  int64_t groups = int64_t(p.work.size()) * c.units_per_item;
  EXPECT_LE(groups, c.max_concurrent);
  EXPECT_GE(groups, c.max_concurrent / 2) << "too few work items to fill the device";
  EXPECT_EQ(p.chunk % c.align, 0);
  EXPECT_EQ(p.merges.size(), 1u);
  // Smallest fitting chunk: one align step smaller would not fit.
  EXPECT_GT(planner::count_work_items(r.begin.data(), r.end.data(), 1, p.chunk - c.align) * c.units_per_item,
            c.max_concurrent);
}

TEST(SplitKV, NeverBelowMinChunkNorAboveMaxSplits) {
  auto c = device(1, 1000);
  c.min_chunk = 300;
  Ranges r = make({1000, 50, 0, 299});
  auto p = plan(r, c);
  EXPECT_TRUE(well_formed(r, p, c));
  for (auto& w : p.work)
    if (w.part >= 0 && w.end != r.end[size_t(w.req)]) EXPECT_GE(w.end - w.begin, 300);
  c.max_splits = 3;
  c.min_chunk = 1;
  p = plan(make({100000}), c);
  EXPECT_EQ(p.work.size(), 3u);
  c.max_splits = 1;  // never split
  p = plan(make({100000, 5}), c);
  EXPECT_EQ(p.work.size(), 2u);
  EXPECT_EQ(p.num_partials, 0);
}

TEST(SplitKV, EmptyAndWindowedRequests) {
  auto c = device(2, 64);
  c.min_chunk = 16;
  c.align = 16;
  Ranges r = make({0, 1, 5000, 17}, {0, 0, 3000, 100});  // begin > 0: windowed ranges
  auto p = plan(r, c);
  EXPECT_TRUE(well_formed(r, p, c));
  EXPECT_EQ(p.work[0].begin, 0);
  EXPECT_EQ(p.work[0].end, 0);
  EXPECT_EQ(p.work[0].part, -1);
  auto empty = plan(make({}), c);
  EXPECT_TRUE(empty.work.empty());
}

TEST(SplitKV, DeterministicChunkIgnoresBatchMates) {
  CLATTN_SEED_TRACE();
  test::Rng rng(11);
  auto c = device(8, 528);
  c.deterministic = true;
  c.fixed_chunk = 512;
  const int target = 3000;
  auto chunks_of = [&](const Ranges& r, const SplitKVPlan& p, int req) {
    std::vector<std::pair<int, int>> v;
    for (auto& w : p.work)
      if (w.req == req) v.push_back({w.begin - r.begin[size_t(req)], w.end - r.begin[size_t(req)]});
    return v;
  };
  Ranges alone = make({target});
  auto ref = chunks_of(alone, plan(alone, c), 0);
  EXPECT_EQ(ref.size(), 6u);
  for (int trial = 0; trial < 20; ++trial) {
    int B = rng.uniform_int(1, 300), pos = rng.uniform_int(0, B - 1);
    std::vector<int> lens(static_cast<size_t>(B));
    for (auto& l : lens) l = rng.uniform_int(0, 20000);
    lens[size_t(pos)] = target;
    Ranges r = make(lens);
    auto p = plan(r, c);
    EXPECT_TRUE(well_formed(r, p, c));
    EXPECT_EQ(chunks_of(r, p, pos), ref) << "B=" << B;
  }
}

TEST(SplitKV, RandomBatchesAreWellFormed) {
  CLATTN_SEED_TRACE();
  test::Rng rng(12);
  for (int trial = 0; trial < 200; ++trial) {
    SplitKVConfig c;
    c.units_per_item = rng.uniform_int(1, 32);
    c.max_concurrent = rng.uniform_int(1, 2000);
    c.min_chunk = rng.uniform_int(1, 512);
    c.max_splits = rng.uniform_int(0, 200);
    c.align = 1 << rng.uniform_int(0, 7);
    c.deterministic = rng.uniform_int(0, 3) == 0;
    c.fixed_chunk = rng.uniform_int(1, 4096);
    int B = rng.uniform_int(0, 64);
    std::vector<int> lens(static_cast<size_t>(B)), begins(static_cast<size_t>(B));
    for (int i = 0; i < B; ++i) {
      lens[size_t(i)] = rng.uniform_int(0, 3) == 0 ? rng.uniform_int(0, 3) : rng.uniform_int(0, 70000);
      begins[size_t(i)] = rng.uniform_int(0, 1000);
    }
    Ranges r = make(lens, begins);
    auto p = plan(r, c);
    ASSERT_TRUE(well_formed(r, p, c)) << "trial " << trial;
    if (!c.deterministic && B * c.units_per_item >= c.max_concurrent) EXPECT_EQ(p.num_partials, 0);
  }
}

TEST(SplitKV, WorkspaceLayout) {
  auto w = planner::workspace_layout(0, 32, 128);
  EXPECT_EQ(w.bytes, 0);
  w = planner::workspace_layout(3, 5, 80);
  EXPECT_EQ(w.lse_offset_bytes % 256, 0);
  EXPECT_GE(w.lse_offset_bytes, 3 * 5 * 80 * 4);
  EXPECT_EQ(w.bytes, w.lse_offset_bytes + 3 * 5 * 4);
}

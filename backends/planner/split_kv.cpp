#include "backends/planner/split_kv.hpp"

#include "runtime/checked.hpp"

#include <algorithm>

namespace clattn::planner {

namespace {
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }
}  // namespace

int64_t deterministic_chunk(const SplitKVConfig& cfg) {
  return round_up(std::max(1, cfg.fixed_chunk), std::max(1, cfg.align));
}

int64_t bounded_chunk(int64_t max_keys, int align) {
  int64_t a = std::max(1, align);
  while (a > max_keys && a > 1) a /= 2;
  return std::max(a, max_keys / a * a);
}

int64_t count_work_items(const int32_t* begin, const int32_t* end, int batch, int chunk) {
  int64_t n = 0;
  for (int i = 0; i < batch; ++i) n += std::max<int64_t>(1, ceil_div(int64_t(end[i]) - begin[i], chunk));
  return n;
}

SplitKVPlan plan_split_kv(const int32_t* begin, const int32_t* end, int batch, const SplitKVConfig& cfg) {
  SplitKVPlan p;
  const int64_t align = std::max(1, cfg.align);
  int64_t max_len = 0;
  for (int i = 0; i < batch; ++i) max_len = std::max<int64_t>(max_len, int64_t(end[i]) - begin[i]);

  // Chunk per request: 0 = the whole request in one item.
  int64_t chunk = 0;
  if (cfg.max_splits > 1 && max_len > 0) {
    if (cfg.deterministic) {
      chunk = deterministic_chunk(cfg);
    } else if (int64_t(batch) * cfg.units_per_item < cfg.max_concurrent && max_len > cfg.min_chunk) {
      // Smallest chunk whose work list fits one wave: the item count is non-increasing
      // in the chunk size, so bisect on multiples of align.
      const int64_t budget = std::max<int64_t>(1, cfg.max_concurrent / std::max<int64_t>(1, cfg.units_per_item));
      int64_t lo = round_up(std::max<int64_t>({1, cfg.min_chunk, ceil_div(max_len, cfg.max_splits)}), align);
      int64_t hi = round_up(max_len, align);
      if (lo < hi) {
        if (count_work_items(begin, end, batch, int(lo)) <= budget) {
          hi = lo;
        } else {
          while (hi - lo > align) {  // invariant: count(lo) > budget, count(hi) <= budget
            int64_t mid = round_up(lo + (hi - lo) / 2, align);
            if (mid >= hi) mid = hi - align;
            if (mid <= lo) break;
            if (count_work_items(begin, end, batch, int(mid)) <= budget) hi = mid;
            else lo = mid;
          }
        }
        chunk = hi < max_len ? hi : 0;
      }
    }
  }

  p.chunk = int(chunk);
  p.work.reserve(size_t(batch));
  for (int i = 0; i < batch; ++i) {
    const int64_t len = int64_t(end[i]) - begin[i];
    int64_t c = chunk;
    // At most max_splits pieces; in deterministic mode this depends on len alone.
    if (c > 0 && ceil_div(len, c) > cfg.max_splits) c = round_up(ceil_div(len, cfg.max_splits), align);
    if (cfg.max_chunk > 0 && (c > 0 ? c : len) > cfg.max_chunk) c = std::max(align, cfg.max_chunk / align * align);
    const int64_t n = c > 0 ? std::max<int64_t>(1, ceil_div(len, c)) : 1;
    if (n == 1) {
      p.work.push_back({i, begin[i], end[i], -1});
      continue;
    }
    p.merges.push_back({i, p.num_partials, int32_t(n)});
    for (int64_t j = 0; j < n; ++j) {
      int32_t b = int32_t(begin[i] + j * c), e = int32_t(std::min<int64_t>(end[i], begin[i] + (j + 1) * c));
      p.work.push_back({i, b, e, p.num_partials++});
    }
  }
  if (p.merges.empty()) {
    p.chunk = 0;
  } else if (cfg.max_chunk > 0) {
    const int64_t mc = std::max(align, cfg.max_chunk / align * align);
    p.chunk = int(p.chunk > 0 ? std::min<int64_t>(p.chunk, mc) : mc);
  }
  return p;
}

WorkspaceLayout workspace_layout(int num_partials, int num_qo_heads, int head_dim) {
  namespace ck = rt::checked;
  WorkspaceLayout w;
  if (num_partials <= 0) return w;
  const char* what = "split-K workspace (partials x num_qo_heads x head_dim f32)";
  const int64_t rows = ck::mul(num_partials, num_qo_heads, what);
  w.lse_offset_bytes = round_up(ck::product({rows, head_dim, 4}, what), 256);
  w.bytes = ck::add(w.lse_offset_bytes, ck::mul(rows, 4, what), what);
  return w;
}

}  // namespace clattn::planner

#include <algorithm>
#include <mutex>
#include <sstream>

#include "backends/dispatch/variant.hpp"
#include "backends/params/variants.hpp"
#include "runtime/device_limits.hpp"
#include "runtime/error.hpp"
#include "runtime/log.hpp"

namespace clattn::ops {

namespace {

std::mutex g_records_mu;
std::vector<BuildRecord> g_records;

void record(const std::string& op, const BuiltVariant& b) {
  std::lock_guard<std::mutex> lock(g_records_mu);
  if (g_records.size() >= 64) g_records.erase(g_records.begin());
  g_records.push_back({op, b.variant.name, tile_text(b.variant.tile), b.variant.local_bytes, b.driver_local_bytes,
                       b.shrinks});
}

// Drivers count their own per-group reservation in the kernel's local-memory figure (NVIDIA:
// 4 to 16 bytes on the H100, whose kernels still launch with the 48 KiB it reports all in use),
// so only a kernel past the device's figure by more than such a reservation is refused.
constexpr uint64_t kReservation = 1024;

std::string str(uint64_t n) { return std::to_string(n); }

// Keys a work item should reach under a loop-trip bound: a tile whose bound stops short of it
// shrinks where it can (a soft misfit); one that cannot cover a single key does not fit.
constexpr int64_t kFewKeys = 64;
int64_t trips_of_a_few_keys(const Variant& v) { return v.trips_fixed + kFewKeys * v.trips_per_key; }
// The part of a loop-trip limit plans use: a quarter is kept for the loops a bound does not count.
int64_t usable_trips(const DeviceProfile& p) { return p.loop_trip_limit - p.loop_trip_limit / 4; }

// The host's figures for `v` against the device's, before any build.
Misfit estimate_misfit(const DeviceProfile& p, const Variant& v) {
  if (p.max_work_group_size && v.wg > p.max_work_group_size)
    return {Misfit::Limit::WorkGroup, v.wg, p.max_work_group_size,
            "the tile needs " + str(v.wg) + " work-items per group, the device allows " + str(p.max_work_group_size)};
  if (v.local_bytes && p.local_mem_bytes && v.local_bytes > p.local_mem_bytes)
    return {Misfit::Limit::LocalMem, v.local_bytes, p.local_mem_bytes,
            "the tile needs " + str(v.local_bytes) + " bytes of local memory, the device has " +
                str(p.local_mem_bytes)};
  if (p.loop_trip_limit > 0 && v.trips_per_key > 0 && trips_of_a_few_keys(v) > usable_trips(p)) {
    const bool some = v.trips_fixed + v.trips_per_key <= usable_trips(p);
    return {Misfit::Limit::LoopTrips, uint64_t(trips_of_a_few_keys(v)), uint64_t(usable_trips(p)),
            "the tile's work-items loop " + str(uint64_t(some ? trips_of_a_few_keys(v) : v.trips_fixed + v.trips_per_key)) +
                " times over " + std::to_string(some ? kFewKeys : 1) + " key" + (some ? "s" : "") +
                ", the device runs " + str(uint64_t(p.loop_trip_limit)) + " iterations at most (" +
                (p.quirks.empty() ? std::string("CLATTN_DEVICE_LIMITS") : p.quirks.front()) + ")",
            some};
  }
  return {};
}

// The tile note (dispatch's ".tile" beside the first tile's binary): the limits it was chosen
// under, then the tile. A note written under other limits or quirks does not apply.
std::string note_header(const DeviceProfile& p) {
  std::string q;
  for (const auto& x : p.quirks) q += x + ";";
  return "limits=" + p.device_limits + " quirks=" + q;
}

// The tile this variant settled on before under the same limits (a shrunk one), realized;
// `v` itself when there is none or it no longer applies.
Variant remembered(detail::ContextImpl& c, const Variant& v) {
  if (!v.realize || v.shrink.empty() || v.options.empty()) return v;
  const auto text = c.programs.note(v.file, v.options, ".tile");
  if (!text) return v;
  const size_t nl = text->find('\n');
  if (nl == std::string::npos || text->substr(0, nl) != note_header(c.profile)) return v;
  const auto t = parse_tile(text->substr(nl + 1));
  if (!t) return v;
  Variant r = realize_like(v, *t);
  return r.why_not.empty() ? r : v;
}

}  // namespace

Variant shrinkable(const Tile& tile, std::function<Variant(const Tile&)> realize,
                   std::vector<std::pair<std::string, int>> order) {
  Variant v = realize(tile);
  if (v.tile.empty()) v.tile = tile;  // (realize may add what it derives, such as WG)
  v.realize = std::move(realize);
  v.shrink = std::move(order);
  return v;
}

Variant wg_variant(const std::string& name, const std::string& file, const std::string& kernel,
                   const std::string& define, int wg, int floor, std::function<std::string(int)> options,
                   std::function<uint64_t(int)> local_bytes) {
  return shrinkable({{define, wg}}, [=](const Tile& t) {
    Variant v;
    v.name = name, v.file = file, v.kernel = kernel;
    const int w = knob(t, define);
    if (w < std::max(1, floor)) v.why_not = define + " below " + std::to_string(floor);
    v.wg = size_t(std::max(1, w));
    v.options = options(w);
    if (local_bytes) v.local_bytes = local_bytes(int(v.wg));
    return v;
  }, {{define, std::max(1, floor)}});
}

Variant realize_like(const Variant& v, const Tile& t) {
  Variant r = v.realize(t);
  if (r.tile.empty()) r.tile = t;
  r.realize = v.realize;
  r.shrink = v.shrink;
  return r;
}

Misfit misfit(const detail::ContextImpl& c, const Variant& v, rt::Kernel& k) {
  const DeviceProfile& p = c.profile;
  if (v.check_wg) {
    const size_t limit = rt::kernel_work_group_limit(p, k.max_work_group_size(c.device));
    if (limit < v.wg)
      return {Misfit::Limit::WorkGroup, v.wg, limit,
              "the compiled kernel allows " + str(limit) + " work-items per group, the tile needs " + str(v.wg)};
  }
  const uint64_t local = k.local_mem_size(c.device) / std::max(1u, p.kernel_local_mem_overcount);
  if (p.local_mem_bytes && local > p.local_mem_bytes + kReservation)
    return {Misfit::Limit::LocalMem, local, p.local_mem_bytes,
            "the compiled kernel uses " + str(local) + " bytes of local memory, the device has " +
                str(p.local_mem_bytes)};
  if (p.private_mem_cap) {
    const uint64_t priv = k.private_mem_size(c.device);
    if (priv > p.private_mem_cap)
      return {Misfit::Limit::PrivateMem, priv, p.private_mem_cap,
              "the compiled kernel uses " + str(priv) + " bytes of private memory per work-item, the limit is " +
                  str(p.private_mem_cap)};
  }
  return {};
}

Variant shrink_for(const Variant& v, const Misfit& m) {
  Variant none;
  none.why_not = "no smaller tile";
  if (!v.realize) return none;
  for (const auto& [knob, floor] : v.shrink) {
    const auto it = v.tile.find(knob);
    if (it == v.tile.end() || it->second / 2 < floor) continue;
    Tile t = v.tile;
    t[knob] = it->second / 2;
    Variant s = realize_like(v, t);
    if (!s.why_not.empty()) continue;
    if (m.limit == Misfit::Limit::WorkGroup && s.wg >= v.wg) continue;
    if (m.limit == Misfit::Limit::LocalMem && v.local_bytes && s.local_bytes >= v.local_bytes) continue;
    if (m.limit == Misfit::Limit::LoopTrips && trips_of_a_few_keys(s) >= trips_of_a_few_keys(v)) continue;
    return s;
  }
  return none;
}

void bound_trips(Variant& v, int64_t rows, int64_t dim_qk, int64_t dim_v, int64_t wg, int64_t vec) {
  const int64_t work = (4 * rows * (dim_qk + dim_v) + wg * vec - 1) / std::max<int64_t>(1, wg * vec);
  v.trips_per_key = work + 16;
  v.trips_fixed = work + 1024;
}

int64_t max_keys_per_item(const DeviceProfile& p, int64_t trips_fixed, int64_t trips_per_key, const std::string& what) {
  if (p.loop_trip_limit <= 0 || trips_per_key <= 0) return 0;
  const int64_t budget = usable_trips(p) - trips_fixed;
  if (budget < trips_per_key)
    throw Error(Status::Unsupported, what + " needs " + std::to_string(trips_fixed + trips_per_key) +
                                         " loop iterations per work-item for one key; the device runs at most " +
                                         std::to_string(p.loop_trip_limit) + " (" +
                                         (p.quirks.empty() ? std::string("CLATTN_DEVICE_LIMITS") : p.quirks.front()) +
                                         ", docs/portability.md)");
  return budget / trips_per_key;
}

namespace {
BuiltVariant select_uncached(detail::ContextImpl& c, const std::string& op, const std::vector<Variant>& cands,
                             const SelfCheck& check);

// The key of a candidate list in the context's memo: the op and each candidate's build (or why
// it does not apply).
std::string memo_key(const std::string& op, const std::vector<Variant>& cands) {
  std::string k = "select\n" + op;
  for (const Variant& v : cands)
    k += "\n" + v.name + "\n" + (v.why_not.empty() ? v.file + " " + v.kernel + " " + v.options : "-");
  return k;
}
}  // namespace

BuiltVariant select_and_build(detail::ContextImpl& c, const std::string& op, const std::vector<Variant>& cands,
                              const SelfCheck& check) {
  // A list this context has settled before gets the same build (ops without a plan choose on
  // every call); self-validation's pinned plans choose afresh.
  if (in_self_check()) return select_uncached(c, op, cands, check);
  const std::string key = memo_key(op, cands);
  std::shared_ptr<const void> hit;
  {
    std::lock_guard<std::mutex> lock(c.memo_mu);
    auto it = c.memo.find(key);
    if (it != c.memo.end()) hit = it->second;
  }
  if (hit) {
    BuiltVariant b = *static_cast<const BuiltVariant*>(hit.get());
    // The verdict a self-validated variant earned is looked up again (from memory), so the
    // caller's verdict log sees it.
    if (check && params::needs_self_validation(b.variant.name)) validate(c, op, b.variant, check);
    record(op, b);
    return b;
  }
  BuiltVariant b = select_uncached(c, op, cands, check);
  std::lock_guard<std::mutex> lock(c.memo_mu);
  c.memo[key] = std::make_shared<const BuiltVariant>(b);
  return b;
}

namespace {
BuiltVariant select_uncached(detail::ContextImpl& c, const std::string& op, const std::vector<Variant>& cands,
                             const SelfCheck& check) {
  Error last(Status::Unsupported, op + ": no kernel variant applies");
  for (size_t i = 0; i < cands.size(); ++i) {
    const Variant& first = cands[i];
    const char* next = i + 1 < cands.size() ? cands[i + 1].name.c_str() : "nothing";
    if (!first.why_not.empty()) {
      rt::log().debug("{}: {} not used ({}); trying {}", op, first.name, first.why_not, next);
      last = Error(Status::Unsupported, op + ": " + first.name + ": " + first.why_not);
      continue;
    }
    Variant v = remembered(c, first);
    // A self-validation check takes one variant, with its pin exactly that build (reached
    // through the pinned tile where the checked build had shrunk).
    if (const CheckScope* pin = pinned_scope(op)) {
      if (v.name != pin->variant()) {
        last = Error(Status::Unsupported, op + ": " + v.name + ": not the build under self-validation");
        continue;
      }
      if (!pin->options().empty() && v.options != pin->options()) {
        v = first.realize ? realize_like(first, pin->tile()) : first;
        if (v.options != pin->options() || !v.why_not.empty()) {
          last = Error(Status::Unsupported, op + ": " + first.name + ": not the build under self-validation");
          continue;
        }
      }
    }
    int shrinks = 0;
    for (;;) {
      Misfit m = estimate_misfit(c.profile, v);
      if (m.soft) {
        // A loop-trip bound that still covers some keys: a smaller tile where there is one,
        // else this one (its plans split finer).
        const Variant s = shrink_for(v, m);
        if (s.why_not.empty()) {
          rt::log().info("{}: variant {}: {}; shrinking {} -> {}", op, v.name, m.why, tile_text(v.tile),
                         tile_text(s.tile));
          v = s;
          ++shrinks;
          continue;
        }
        m = {};
      }
      BuiltVariant b;
      if (m.why.empty()) {
        try {
          b.variant = v;
          b.program = c.programs.get(v.file, v.options);
          b.kernel = &b.program->kernel(v.kernel);
          b.driver_local_bytes = b.kernel->local_mem_size(c.device) / std::max(1u, c.profile.kernel_local_mem_overcount);
          m = misfit(c, v, *b.kernel);
        } catch (const Error& e) {
          if (e.status() != Status::BuildFailed) throw;
          last = e;
          rt::log().warn("{}: variant {} failed to build, trying {}: {}", op, v.name, next, e.what());
          break;
        }
      }
      if (m.why.empty()) {
        if (!in_self_check() && params::needs_self_validation(v.name) && !validate(c, op, v, check).pass) {
          last = Error(Status::Unsupported, op + ": " + v.name + ": failed self-validation on this device");
          break;  // (validate logged it)
        }
        if (v.local_bytes && v.local_bytes != b.driver_local_bytes)
          rt::log().debug("{}: {} estimated {} bytes of local memory, the driver reports {}", op, v.name,
                          v.local_bytes, b.driver_local_bytes);
        if (shrinks && first.realize && !first.options.empty())
          c.programs.set_note(first.file, first.options, ".tile", note_header(c.profile) + "\n" + tile_text(v.tile));
        b.shrinks = shrinks;
        record(op, b);
        return b;
      }
      const Variant s = shrink_for(v, m);
      if (!s.why_not.empty()) {
        last = Error(Status::Unsupported, op + ": " + v.name + ": " + m.why +
                                              (v.realize ? " (no smaller tile: " + tile_text(v.tile) + ")" : ""));
        rt::log().warn("{}: variant {} not used: {}; trying {}", op, v.name, m.why, next);
        break;
      }
      rt::log().info("{}: variant {}: {}; shrinking {} -> {}", op, v.name, m.why, tile_text(v.tile),
                     tile_text(s.tile));
      v = s;
      ++shrinks;
    }
  }
  throw last;
}
}  // namespace

Variant fit_estimate(const DeviceProfile& p, const Variant& v) {
  Variant cur = v;
  for (;;) {
    const Misfit m = estimate_misfit(p, cur);
    if (m.why.empty()) return cur;
    const Variant s = shrink_for(cur, m);
    if (!s.why_not.empty()) return cur;
    cur = s;
  }
}

std::vector<BuildRecord> recent_builds() {
  std::lock_guard<std::mutex> lock(g_records_mu);
  return g_records;
}

}  // namespace clattn::ops

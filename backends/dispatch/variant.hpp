// Kernel variants as data, and the one function that picks, builds and fits one.
//
// Each op lists its candidates best first (the generic kernel last). A candidate is a tile —
// the values of its kernel's tunables — and what the op makes of a tile (`realize`: source
// file, entry point, build options, work-items per group, the host's estimate of its local
// memory, or why the tile is illegal), plus the order in which the tile may shrink.
// select_and_build() builds the candidates in order and holds the driver's figures for the
// compiled kernel against the launch and the device (CL_KERNEL_WORK_GROUP_SIZE,
// CL_KERNEL_LOCAL_MEM_SIZE, CL_KERNEL_PRIVATE_MEM_SIZE, lowered by the profile's caps). A
// kernel that does not fit is shrunk along the variant's declared order and rebuilt before
// the next variant is tried; a candidate that does not apply or fails to build is skipped.
// The tile a shrunk build settles on is kept beside the first tile's binary (a ".tile" note,
// per device, driver and limits) so later processes start from it. A variant that has never
// run on hardware of its kind (params::needs_self_validation) must also pass the op's
// self-validation check on the device (dispatch/self_validation.hpp) before it is handed out.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/dispatch/self_validation.hpp"
#include "backends/dispatch/tile.hpp"
#include "runtime/context_impl.hpp"
#include "runtime/program_cache.hpp"

namespace clattn::ops {

// What a compiled kernel (or, before the build, the host's estimate) did not fit.
struct Misfit {
  enum class Limit { WorkGroup, LocalMem, PrivateMem, LoopTrips };
  Limit limit = Limit::WorkGroup;
  uint64_t need = 0, have = 0;
  std::string why;  // for logs and the error when nothing fits
  // A soft misfit (a loop-trip bound that still covers some keys): the tile shrinks where it
  // can and is used as it is where it cannot.
  bool soft = false;
};

struct Variant {
  std::string name;         // "generic", "cpu", "nv_mma_sync", ... (params/variants.hpp)
  std::string file;         // cl_kernels/<file>
  std::string kernel;       // entry point
  std::string options;      // build options (rt::make_options)
  std::string why_not;      // non-empty: the variant (or this tile) does not apply here
  size_t wg = 0;            // work-items per group at launch
  uint64_t local_bytes = 0; // the host's estimate of the kernel's __local bytes (0: not estimated)
  // false where the driver's work-group limit is for another register budget than the one
  // the build pins (a PTX .maxnreg cap): the limit is not checked.
  bool check_wg = true;
  Tile tile;                // the values this build was made from (and what realize derives from them)
  // An upper bound of one work-item's loop iterations: trips_fixed + trips_per_key x the keys
  // its work item covers. Plans keep it under DeviceProfile::loop_trip_limit (a driver quirk,
  // docs/portability.md); 0 / 0 where the op never gives one work-item unbounded loops.
  int64_t trips_fixed = 0, trips_per_key = 0;
  // The op's build of another tile of this variant (same name; why_not set where the tile is
  // illegal). Empty: the variant has one tile and does not shrink.
  std::function<Variant(const Tile&)> realize;
  // The shrink order: knobs halved in turn (each down to its floor) when the kernel does not
  // fit; a step is taken only when it lowers what did not fit (work-items, local memory, the
  // loop-trip bound of a few keys).
  std::vector<std::pair<std::string, int>> shrink;
};

// Sets v.realize and v.shrink and returns realize(tile) (with both set): how an op declares
// a shrinkable variant. `realize` may refer to the op's arguments: it runs only while the op
// plans.
Variant shrinkable(const Tile& tile, std::function<Variant(const Tile&)> realize,
                   std::vector<std::pair<std::string, int>> order);
// A variant whose one knob is its work-group size (the kernel's `define`, a power of two it
// steps by), built from `options(wg)` (with `local_bytes(wg)` its local-memory estimate where
// given): shrinks by halving it down to `floor`.
Variant wg_variant(const std::string& name, const std::string& file, const std::string& kernel,
                   const std::string& define, int wg, int floor, std::function<std::string(int)> options,
                   std::function<uint64_t(int)> local_bytes = {});

// v's variant at tile t (realize, tile, shrink order carried over).
Variant realize_like(const Variant& v, const Tile& t);

struct BuiltVariant {
  Variant variant;
  std::shared_ptr<rt::Program> program;
  rt::Kernel* kernel = nullptr;
  uint64_t driver_local_bytes = 0;  // CL_KERNEL_LOCAL_MEM_SIZE of the compiled kernel
  int shrinks = 0;                  // tiles refused before this one
};

// The first candidate that applies, builds, fits (after shrinking) and, where listed, passes
// self-validation (`check`: the op's, none = such a variant is not used); throws the last
// reason (BuildFailed, Unsupported naming the limit) when none does. `op` names the op in
// logs and messages.
BuiltVariant select_and_build(detail::ContextImpl& c, const std::string& op, const std::vector<Variant>& cands,
                              const SelfCheck& check = {});

// Why the compiled kernel of `v` cannot launch on this context (Misfit::why empty when it can).
Misfit misfit(const detail::ContextImpl& c, const Variant& v, rt::Kernel& k);

// `v` shrunk, in its declared order, until the host's figures (work-items, local memory, loop
// trips) fit `p`: the tile select_and_build would build first (the offline catalog's choice).
Variant fit_estimate(const DeviceProfile& p, const Variant& v);

// The next tile of `v` after `m`, in its declared order; nullopt-like (why_not "no smaller
// tile") when none is left.
Variant shrink_for(const Variant& v, const Misfit& m);

// A loop-trip bound for a kernel whose work-items share the products of `rows` query rows with
// each key (dim_qk + dim_v multiply-adds a row), `vec` elements a loop iteration: per key four
// times that many iterations (the S and P.V loops, their staging and the softmax, with 2x to
// spare), and as much again plus a constant for the fixed work (q rows, the final store).
void bound_trips(Variant& v, int64_t rows, int64_t dim_qk, int64_t dim_v, int64_t wg, int64_t vec);

// Keys one work item may cover under the profile's loop-trip limit, for a kernel whose
// work-items loop trips_fixed + trips_per_key x keys times at most (a quarter of the limit kept
// as margin); 0 = no bound. Throws Unsupported naming the limit when not even one key fits.
// `what` names the op and variant in the message.
int64_t max_keys_per_item(const DeviceProfile& p, int64_t trips_fixed, int64_t trips_per_key, const std::string& what);

// The last choices of select_and_build in this process (newest last, at most 64): the op,
// the variant, its tile, the host's local-memory estimate and the driver's figure. Lets tests
// hold the estimates to the driver and the probe print what was chosen.
struct BuildRecord {
  std::string op, variant, tile;
  uint64_t estimate = 0, driver = 0;
  int shrinks = 0;
};
std::vector<BuildRecord> recent_builds();

}  // namespace clattn::ops

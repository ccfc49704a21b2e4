// The linear-attention op's shared pieces (backends/ops/linear/): argument checks (checks.cpp),
// the kernels' candidates (variants.cpp) and the runs (run.cpp).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "backends/dispatch/catalog.hpp"
#include "backends/dispatch/variant.hpp"
#include "backends/ops/op_util.hpp"
#include "backends/params/database.hpp"
#include "backends/params/param_names.hpp"
#include "backends/params/variants.hpp"
#include "clattn/linear.hpp"
#include "runtime/context_impl.hpp"
#include "runtime/error.hpp"
#include "runtime/log.hpp"

namespace clattn::ops::linear {

enum Flags { kL2Norm = 1, kBetaLogits = 2 };  // cl_kernels/linear_common.clh LIN_*

std::string num(int64_t v);
[[noreturn]] void bad(const std::string& op, const std::string& what);
// Throws InvalidArgument naming `field` unless m holds `bytes`.
void need(const std::string& op, cl_mem m, int64_t bytes, const std::string& field);
void check_config(const std::string& op, const LinearConfig& c, const LinearStatePool& p, bool gdn);
int64_t slot_bytes(const LinearConfig& c, const LinearStatePool& p);
void check_indices(const std::string& op, const LinearBatch& b, const LinearStatePool& p);
int check_cu_seqlens(const std::string& op, const LinearBatch& b);  // returns num_tokens
void check_tensors(const std::string& op, const LinearConfig& c, const LinearTensors& t, const LinearStatePool& p,
                   int64_t T, bool gdn);
int dt_code(DType d);
int pow2_floor(int x);

// The kernels of one call, best first (variants.cpp): prefill the tensor-core kernel, the cpu
// kernel and the portable one; decode the cpu kernel and the portable one. Each tile names
// what the launch reads back: prefill DVT (state columns per work-group) and WG; decode DVT
// and WG, the portable kernel also VEC and ROWS (its 2-D work-group: DVT / VEC x ROWS). Their
// loop-trip bounds are per token (trips_per_key).
std::vector<ops::Variant> candidates(const DeviceProfile& prof, int preferred_width, const LinearConfig& cfg,
                                     const LinearStatePool& pool, bool gdn, bool prefill, int64_t batch,
                                     const char* op);

}  // namespace clattn::ops::linear

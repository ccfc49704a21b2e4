// HSA in clattn-serve-sim: the run's settings (--hsa-* over the preset's) and their checks,
// the bytes an HSA decode reads, and the double-precision reference of one HSA decode.
#pragma once
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "sim.hpp"

namespace clattn::sim {

struct HsaSetup {
  bool on = false;
  HsaBackendConfig cfg;       // layers: the resolved list
  std::set<int> layers;
  std::string backend;        // the registry backend that runs the model ("hsa" or "hybrid")
  std::string describe() const;  // "topk 64 pages, group, window 512, fused"
};

// The HSA settings of a run over model `m` (the preset of c.model at c.num_layers), or the
// option that makes them impossible and why.
std::optional<ConfigProblem> resolve_hsa(const Config& c, const Model& m, HsaSetup& out);

// Bytes the decode of one HSA layer reads for a request of L keys: the candidates' landmark
// K rows, the selected pages' K and V (per selection list) and the window's K and V.
double hsa_decode_bytes(const HsaSetup& h, const LayerSpec& l, int L, int P, DType kv);

// The HSA decode of one request (one query token) in double precision: q [Hq, D], k and v
// [L, Hkv, D] (as cached), pages [ceil(L / P)] its physical page ids, sinks [Hq] or null.
// want [Hq, D]. Selection in f32 can order two nearly equal landmark scores differently:
// alt [Hq, D] is the output with each such list's last selected page swapped for the next
// one (empty when no list is that close to a tie).
void hsa_reference(const HsaSetup& h, const LayerSpec& l, int L, int P, int num_pages, const double* q,
                   const double* k, const double* v, const int32_t* pages, const double* sinks,
                   std::vector<double>& want, std::vector<double>& alt);

}  // namespace clattn::sim

// HSA settings, decode bytes and reference for clattn-serve-sim (see sim_hsa.hpp).
#include "sim_hsa.hpp"

#include <algorithm>
#include <cmath>

#include "reference/sparse_reference.hpp"

namespace clattn::sim {

namespace {

bool full_attention(const LayerSpec& l) { return l.kind == LayerKind::MHA && l.window_left < 0; }

std::optional<ConfigProblem> off_only(const Config& c, const std::string& model) {
  const std::string why = "needs --hsa-topk (model " + model + " runs no HSA)";
  if (c.hsa_window >= 0) return ConfigProblem{"--hsa-window", why};
  if (!c.hsa_strategy.empty()) return ConfigProblem{"--hsa-strategy", why};
  if (c.hsa_no_fuse) return ConfigProblem{"--hsa-no-fuse", why};
  if (!c.hsa_layers.empty()) return ConfigProblem{"--hsa-layers", why};
  if (c.backend == "hsa") return ConfigProblem{"--backend", "hsa " + why};
  if (c.decode_backend == "hsa") return ConfigProblem{"--decode-backend", "hsa " + why};
  return std::nullopt;
}

}  // namespace

std::string HsaSetup::describe() const {
  if (!on) return "";
  return "topk " + std::to_string(cfg.topk) + " page(s), " + (cfg.strategy == HsaStrategy::Head ? "head" : "group") +
         ", window " + (cfg.window_size > 0 ? std::to_string(cfg.window_size) : "none") +
         (cfg.window_size > 0 ? (cfg.fuse_window ? ", fused" : ", merged") : "");
}

std::optional<ConfigProblem> resolve_hsa(const Config& c, const Model& m, HsaSetup& out) {
  out = HsaSetup{};
  if (c.hsa_topk < 0) return ConfigProblem{"--hsa-topk", "must be at least 1, got " + std::to_string(c.hsa_topk)};
  if (c.hsa_window < -1) return ConfigProblem{"--hsa-window", "must be at least 0, got " + std::to_string(c.hsa_window)};
  if (!c.hsa_strategy.empty() && c.hsa_strategy != "group" && c.hsa_strategy != "head")
    return ConfigProblem{"--hsa-strategy", "'" + c.hsa_strategy + "' is not group or head"};
  if (c.prefill_backend == "hsa")
    return ConfigProblem{"--prefill-backend", "is hsa: HSA runs in decode steps only (extend steps are dense)"};
  const int topk = c.hsa_topk > 0 ? c.hsa_topk : m.hsa.topk;
  if (topk == 0) return off_only(c, m.name);

  const int P = c.page_size > 0 ? c.page_size : m.page_size;
  if (P < 2)
    return ConfigProblem{"--page-size", "is " + std::to_string(P) + ": HSA needs at least 2 (a page's last slot is its landmark)"};
  out.backend = m.backend == "hybrid" ? "hybrid" : "hsa";
  if (!c.backend.empty() && c.backend != out.backend)
    return ConfigProblem{"--backend", "is " + c.backend + ": with HSA, model " + m.name + " runs on " + out.backend};
  if (out.backend == "hybrid" && c.decode_backend != "paged" && c.decode_backend != "hsa")
    return ConfigProblem{"--decode-backend", "is " + c.decode_backend + ": with HSA the full-attention layers decode on hsa"};
  if (c.hsa_layers.empty()) {
    for (const auto& l : m.layers)
      if (full_attention(l)) out.layers.insert(l.layer_id);
    if (out.layers.empty())
      return ConfigProblem{"--hsa-topk", "model " + m.name + " has no full-attention MHA layer (HSA serves those)"};
  }
  for (int id : c.hsa_layers) {
    if (id < 0 || id >= int(m.layers.size()))
      return ConfigProblem{"--hsa-layers", std::to_string(id) + " is not a layer of model " + m.name + " (layers 0.." +
                                               std::to_string(int(m.layers.size()) - 1) + ")"};
    const LayerSpec& l = m.layers[size_t(id)];
    if (l.kind != LayerKind::MHA)
      return ConfigProblem{"--hsa-layers", "layer " + std::to_string(id) + " of " + m.name + " is a " +
                                               layer_kind_name(l.kind) + " layer (HSA serves full-attention MHA layers)"};
    if (l.window_left >= 0)
      return ConfigProblem{"--hsa-layers", "layer " + std::to_string(id) + " of " + m.name +
                                               " is a sliding-window layer (it stays dense)"};
    if (!out.layers.insert(id).second)
      return ConfigProblem{"--hsa-layers", "lists layer " + std::to_string(id) + " twice"};
  }
  out.on = true;
  out.cfg.topk = topk;
  out.cfg.window_size = c.hsa_window >= 0 ? c.hsa_window : m.hsa.window_size;
  out.cfg.strategy = c.hsa_strategy == "head" ? HsaStrategy::Head : HsaStrategy::Group;
  out.cfg.fuse_window = !c.hsa_no_fuse;
  out.cfg.layers.assign(out.layers.begin(), out.layers.end());
  return std::nullopt;
}

double hsa_decode_bytes(const HsaSetup& h, const LayerSpec& l, int L, int P, DType kv) {
  const double row = double(l.head_dim) * double(dtype_size(kv));  // one head's K or V row
  const int W = h.cfg.window_size;
  const int C = ref::hsa_num_candidates(L, P, W);
  const int lists = h.cfg.strategy == HsaStrategy::Head ? l.num_qo_heads : l.num_kv_heads;
  const double landmarks = double(C) * l.num_kv_heads * row;
  const double pages = double(lists) * std::min(h.cfg.topk, C) * P * 2.0 * row;
  const double window = double(W > 0 ? std::min(L, W) : 0) * l.num_kv_heads * 2.0 * row;
  return landmarks + pages + window;
}

namespace {

// Attention of one request over the selection `sel` [H_sel, topk] (candidate indices).
void decode_over(const HsaSetup& h, const LayerSpec& l, int L, int P, int num_pages, const double* q, const double* k,
                 const double* v, const int32_t* pages, const double* sinks, const std::vector<int32_t>& sel,
                 std::vector<double>& o) {
  const int Hq = l.num_qo_heads, Hkv = l.num_kv_heads, D = l.head_dim;
  const int nsel = h.cfg.strategy == HsaStrategy::Head ? Hq : Hkv;
  std::vector<int32_t> ids(sel.size());
  for (size_t j = 0; j < sel.size(); ++j) ids[j] = sel[j] < 0 ? -1 : pages[sel[j]];
  std::vector<uint8_t> masks(size_t(Hq) * size_t(std::max(L, 1)));
  // The window merged by LSE (not fused) attends the same keys as the fused call.
  ref::hsa_decode_masks(L, P, h.cfg.window_size, true, pages, ids.data(), nsel, h.cfg.topk, Hq, num_pages, masks.data());
  const double scale = l.sm_scale > 0 ? l.sm_scale : 1.0 / std::sqrt(double(D));
  o.assign(size_t(Hq) * D, 0.0);
  ref::sparse_decode(q, k, v, L, Hq, Hkv, D, masks.data(), scale, l.logits_soft_cap, sinks, o.data(), nullptr);
}

}  // namespace

void hsa_reference(const HsaSetup& h, const LayerSpec& l, int L, int P, int num_pages, const double* q,
                   const double* k, const double* v, const int32_t* pages, const double* sinks,
                   std::vector<double>& want, std::vector<double>& alt) {
  const int Hq = l.num_qo_heads, Hkv = l.num_kv_heads, D = l.head_dim, K = h.cfg.topk;
  const bool head = h.cfg.strategy == HsaStrategy::Head;
  const int nsel = head ? Hq : Hkv;
  const double scale = l.sm_scale > 0 ? l.sm_scale : 1.0 / std::sqrt(double(D));
  const int C = ref::hsa_num_candidates(L, P, h.cfg.window_size);
  std::vector<double> lmk(size_t(C) * Hkv * D);  // landmark = K row of a page's last slot
  for (int c = 0; c < C; ++c)
    std::copy_n(k + (size_t(c + 1) * P - 1) * Hkv * D, size_t(Hkv) * D, lmk.begin() + std::ptrdiff_t(size_t(c) * Hkv * D));
  std::vector<int32_t> sel(size_t(nsel) * K);
  ref::hsa_select(q, lmk.data(), nullptr, C, Hq, Hkv, D, K, head, scale, sel.data(), nullptr);
  decode_over(h, l, L, P, num_pages, q, k, v, pages, sinks, sel, want);
  alt.clear();
  if (C <= K) return;  // every candidate selected: no boundary to be near
  // The best K + 1: its lowest score is the first page left out, its second lowest the last one kept.
  std::vector<int32_t> sel1(size_t(nsel) * (K + 1));
  std::vector<double> sc1(sel1.size());
  ref::hsa_select(q, lmk.data(), nullptr, C, Hq, Hkv, D, K + 1, head, scale, sel1.data(), sc1.data());
  std::vector<int32_t> swapped = sel;
  bool near_tie = false;
  for (int s = 0; s < nsel; ++s) {
    const double* sc = &sc1[size_t(s) * (K + 1)];
    int lo = 0;
    for (int j = 1; j <= K; ++j)
      if (sc[j] < sc[lo]) lo = j;
    int lo2 = lo == 0 ? 1 : 0;
    for (int j = 0; j <= K; ++j)
      if (j != lo && sc[j] < sc[lo2]) lo2 = j;
    if (sc[lo2] - sc[lo] > 1e-4 * (1.0 + std::fabs(sc[lo2]))) continue;
    near_tie = true;
    int n = 0;
    for (int j = 0; j <= K; ++j)
      if (j != lo2) swapped[size_t(s) * K + size_t(n++)] = sel1[size_t(s) * (K + 1) + size_t(j)];
  }
  if (near_tie) decode_over(h, l, L, P, num_pages, q, k, v, pages, sinks, swapped, alt);
}

}  // namespace clattn::sim

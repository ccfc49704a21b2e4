// Native HSA (hierarchical sparse attention) plan and select / decode / run. Thin: the
// Python wrapper (clattn/sparse.py) shapes the API, allocates outputs and checks shapes;
// the library checks the rest.
#include "binding.hpp"
#include "clattn/sparse.hpp"

namespace clattn_py {

namespace {

clattn::HsaStrategy parse_strategy(const std::string& s) {
  if (s == "group") return clattn::HsaStrategy::Group;
  if (s == "head") return clattn::HsaStrategy::Head;
  invalid("selection_strategy = '" + s + "', expected 'group' or 'head'");
}

}  // namespace

void init_sparse(py::module_& m) {
  py::class_<clattn::HsaPlan>(m, "HsaPlan", "A planned HSA decode batch (opaque; see HsaDecodeWrapper).")
      .def_readonly("batch_size", &clattn::HsaPlan::batch_size)
      .def_readonly("num_qo_heads", &clattn::HsaPlan::num_qo_heads)
      .def_readonly("num_kv_heads", &clattn::HsaPlan::num_kv_heads)
      .def_readonly("head_dim", &clattn::HsaPlan::head_dim)
      .def_readonly("page_size", &clattn::HsaPlan::page_size)
      .def_readonly("topk", &clattn::HsaPlan::topk)
      .def_readonly("num_sel_heads", &clattn::HsaPlan::num_sel_heads)
      .def_property_readonly("selection_strategy",
                             [](const clattn::HsaPlan& p) { return p.strategy == clattn::HsaStrategy::Head ? "head" : "group"; })
      .def_readonly("window_size", &clattn::HsaPlan::window_size)
      .def_readonly("fuse_window", &clattn::HsaPlan::fuse_window)
      .def_readonly("page_table", &clattn::HsaPlan::page_table)
      .def_readonly("page_ids_needed", &clattn::HsaPlan::page_ids_needed)
      .def_readonly("max_candidates", &clattn::HsaPlan::max_candidates)
      .def_readonly("num_candidates", &clattn::HsaPlan::num_candidates)
      .def_readonly("num_work", &clattn::HsaPlan::num_work)
      .def_readonly("num_partials", &clattn::HsaPlan::num_partials)
      .def_readonly("num_merges", &clattn::HsaPlan::num_merges)
      .def_readonly("workspace_bytes", &clattn::HsaPlan::workspace_bytes)
      .def_readonly("select_variant", &clattn::HsaPlan::select_variant)
      .def_readonly("decode_variant", &clattn::HsaPlan::decode_variant)
      .def_readonly("decode_options", &clattn::HsaPlan::decode_options);

  // CSR or page table: plan_from (binding.hpp).
  m.def("_hsa_plan", [](const clattn::Context& ctx, py::object indptr, py::object indices, py::object last,
                        py::object page_table, py::object seq_lens, int max_pages, int page_size, int num_pages,
                        int num_kv_heads, int head_dim, const std::string& layout, const std::string& kv_dtype,
                        int num_qo_heads, int topk, const std::string& strategy, int window_size, bool fuse_window,
                        int num_candidates, const std::string& q_dtype, const std::string& o_dtype, float sm_scale,
                        float soft_cap, int max_splits, bool validate) {
    clattn::PagedKV cache;
    cache.num_pages = num_pages;
    cache.page_size = page_size;
    cache.num_kv_heads = num_kv_heads;
    cache.head_dim = head_dim;
    cache.layout = parse_layout(layout);
    cache.dtype = to_lib(parse_dtype(kv_dtype, "kv_data_type"), "kv_data_type");
    clattn::HsaOptions o;
    o.num_qo_heads = num_qo_heads;
    o.topk = topk;
    o.strategy = parse_strategy(strategy);
    o.window_size = window_size;
    o.fuse_window = fuse_window;
    o.num_candidates = num_candidates;
    o.q_dtype = to_lib(parse_dtype(q_dtype, "q_data_type"), "q_data_type");
    o.o_dtype = to_lib(parse_dtype(o_dtype, "o_data_type"), "o_data_type");
    o.sm_scale = sm_scale;
    o.logits_soft_cap = soft_cap;
    o.max_splits = max_splits;
    o.validate = validate;
    return plan_from(indptr, indices, last, page_table, seq_lens, max_pages, page_size,
                     [&](const auto& meta) { return clattn::hsa_plan(ctx, meta, cache, o); });
  });

  // mode: "select", "decode" or "run" (clattn::hsa_select / hsa_decode / hsa_run).
  m.def("_hsa_call", [](const std::string& mode, const clattn::Context& ctx, const clattn::HsaPlan& plan,
                        py::handle q_, py::handle k_, py::handle v_, py::handle page_ids_, py::handle sel_,
                        py::handle scores_, py::handle cand_, py::handle mask_, py::handle o_, py::handle lse_,
                        py::handle sinks_, py::handle workspace_, float k_scale, float v_scale) {
    const TensorPtr q = tensor_arg(q_, "q"), k = tensor_arg(k_, "k_cache"), v = tensor_arg(v_, "v_cache");
    const TensorPtr page_ids = tensor_arg(page_ids_, "kv_indices"), sel = tensor_arg(sel_, "selected_page_ids");
    const TensorPtr scores = tensor_arg(scores_, "selected_scores"), cand = tensor_arg(cand_, "candidates");
    const TensorPtr mask = tensor_arg(mask_, "candidate_mask"), o = tensor_arg(o_, "out");
    const TensorPtr lse = tensor_arg(lse_, "lse"), sinks = tensor_arg(sinks_, "sinks");
    const TensorPtr workspace = tensor_arg(workspace_, "workspace");
    clattn::HsaBuffers b;
    b.q = mem_of(ctx, q, "q");
    b.k_cache = mem_of(ctx, k, "k_cache");
    b.v_cache = mem_of(ctx, v, "v_cache");
    b.page_ids = page_ids ? check_tensor(ctx, page_ids, "kv_indices", {PDType::I32}) : nullptr;
    b.selected_page_ids = sel ? check_tensor(ctx, sel, "selected_page_ids", {PDType::I32}) : nullptr;
    b.selected_scores = scores ? check_tensor(ctx, scores, "selected_scores", {PDType::F32}) : nullptr;
    b.candidates = cand ? check_tensor(ctx, cand, "candidates", {PDType::I32}) : nullptr;
    b.candidate_mask = mask ? check_tensor(ctx, mask, "candidate_mask", {PDType::U8}) : nullptr;
    b.o = mem_of(ctx, o, "out");
    b.lse = mem_of(ctx, lse, "lse");
    b.sinks = sinks ? check_tensor(ctx, sinks, "sinks", {PDType::F32}) : nullptr;
    b.workspace = mem_of(ctx, workspace, "workspace");
    b.k_scale = k_scale;
    b.v_scale = v_scale;
    if (mode == "select") clattn::hsa_select(ctx, plan, b);
    else if (mode == "decode") clattn::hsa_decode(ctx, plan, b);
    else if (mode == "run") clattn::hsa_run(ctx, plan, b);
    else invalid("_hsa_call: mode '" + mode + "', expected select, decode or run");
  });
}

}  // namespace clattn_py

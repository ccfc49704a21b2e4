// Native DSA (DeepSeek sparse attention) plans and runs: the indexer (dsa_index_plan /
// dsa_index_run) and sparse MLA decode (mla_sparse_decode_plan / mla_sparse_run). Thin: the
// Python wrappers (clattn/dsa.py) shape the API, allocate outputs and check shapes; the
// library checks the rest.
#include "binding.hpp"
#include "clattn/sparse.hpp"

namespace clattn_py {

void init_dsa(py::module_& m) {
  py::class_<clattn::DsaIndexPlan>(m, "DsaIndexPlan", "A planned DSA indexer batch (opaque; see DsaIndexer).")
      .def_readonly("batch_size", &clattn::DsaIndexPlan::batch_size)
      .def_readonly("num_index_heads", &clattn::DsaIndexPlan::num_index_heads)
      .def_readonly("index_dim", &clattn::DsaIndexPlan::index_dim)
      .def_readonly("page_size", &clattn::DsaIndexPlan::page_size)
      .def_readonly("topk", &clattn::DsaIndexPlan::topk)
      .def_readonly("page_table", &clattn::DsaIndexPlan::page_table)
      .def_readonly("page_ids_needed", &clattn::DsaIndexPlan::page_ids_needed)
      .def_readonly("max_kv_len", &clattn::DsaIndexPlan::max_kv_len)
      .def_readonly("workspace_bytes", &clattn::DsaIndexPlan::workspace_bytes)
      .def_readonly("variant", &clattn::DsaIndexPlan::variant);

  m.def("_dsa_index_plan", [](const clattn::Context& ctx, py::object indptr, py::object indices, py::object last,
                              py::object page_table, py::object seq_lens, int max_pages, int page_size,
                              int num_pages, int index_dim, const std::string& kv_dtype, int num_index_heads,
                              int topk, const std::string& q_dtype, bool validate) {
    clattn::PagedKV cache;  // one head: NHD and HND are the same rows
    cache.num_pages = num_pages;
    cache.page_size = page_size;
    cache.num_kv_heads = 1;
    cache.head_dim = index_dim;
    cache.dtype = to_lib(parse_dtype(kv_dtype, "kv_data_type"), "kv_data_type");
    clattn::DsaIndexOptions o;
    o.num_index_heads = num_index_heads;
    o.topk = topk;
    o.q_dtype = to_lib(parse_dtype(q_dtype, "q_data_type"), "q_data_type");
    o.validate = validate;
    return plan_from(indptr, indices, last, page_table, seq_lens, max_pages, page_size,
                     [&](const auto& meta) { return clattn::dsa_index_plan(ctx, meta, cache, o); });
  });

  m.def("_dsa_index_run", [](const clattn::Context& ctx, const clattn::DsaIndexPlan& plan, py::handle q_,
                             py::handle weights_, py::handle k_, py::handle page_ids_, py::handle indices_,
                             py::handle scores_, py::handle workspace_, float k_scale) {
    const TensorPtr q = tensor_arg(q_, "q"), w = tensor_arg(weights_, "weights");
    const TensorPtr k = tensor_arg(k_, "k_index_cache"), page_ids = tensor_arg(page_ids_, "kv_indices");
    const TensorPtr idx = tensor_arg(indices_, "out_indices"), sc = tensor_arg(scores_, "out_scores");
    const TensorPtr workspace = tensor_arg(workspace_, "workspace");
    clattn::DsaIndexBuffers b;
    b.q = mem_of(ctx, q, "q");
    b.weights = w ? check_tensor(ctx, w, "weights", {PDType::F32}) : nullptr;
    b.k_cache = mem_of(ctx, k, "k_index_cache");
    b.page_ids = page_ids ? check_tensor(ctx, page_ids, "kv_indices", {PDType::I32}) : nullptr;
    b.indices = idx ? check_tensor(ctx, idx, "out_indices", {PDType::I32}) : nullptr;
    b.scores = sc ? check_tensor(ctx, sc, "out_scores", {PDType::F32}) : nullptr;
    b.workspace = mem_of(ctx, workspace, "workspace");
    b.k_scale = k_scale;
    clattn::dsa_index_run(ctx, plan, b);
  });

  m.def("_mla_sparse_plan", [](const clattn::Context& ctx, py::object indptr, py::object indices, py::object last,
                               py::object page_table, py::object seq_lens, int max_pages, int page_size,
                               int num_pages, const std::string& kv_dtype, int num_heads, const std::string& q_dtype,
                               const std::string& o_dtype, float sm_scale, int topk, int max_splits, bool validate,
                               const std::string& scale_dtype) {
    clattn::MlaCache cache;
    cache.num_pages = num_pages;
    cache.page_size = page_size;
    cache.dtype = to_lib(parse_dtype(kv_dtype, "kv_data_type"), "kv_data_type");
    cache.scale_dtype = to_lib(parse_dtype(scale_dtype, "kv_scale_data_type"), "kv_scale_data_type");
    clattn::MlaOptions o;
    o.num_heads = num_heads;
    o.q_dtype = to_lib(parse_dtype(q_dtype, "q_data_type"), "q_data_type");
    o.o_dtype = to_lib(parse_dtype(o_dtype, "o_data_type"), "o_data_type");
    o.sm_scale = sm_scale;
    o.max_splits = max_splits;
    o.validate = validate;
    return plan_from(indptr, indices, last, page_table, seq_lens, max_pages, page_size,
                     [&](const auto& meta) { return clattn::mla_sparse_decode_plan(ctx, meta, cache, o, topk); });
  }, py::arg("ctx"), py::arg("indptr"), py::arg("indices"), py::arg("last"), py::arg("page_table"), py::arg("seq_lens"),
     py::arg("max_pages"), py::arg("page_size"), py::arg("num_pages"), py::arg("kv_dtype"), py::arg("num_heads"),
     py::arg("q_dtype"), py::arg("o_dtype"), py::arg("sm_scale"), py::arg("topk"), py::arg("max_splits"),
     py::arg("validate"), py::arg("scale_dtype") = "f32");

  m.def("_mla_sparse_run", [](const clattn::Context& ctx, const clattn::MlaPlan& plan, py::handle q_nope_,
                              py::handle q_pe_, py::handle ckv_, py::handle kpe_, py::handle page_ids_,
                              py::handle indices_, py::handle o_, py::handle lse_, py::handle workspace_,
                              float kv_scale, py::handle scale_cache_) {
    const TensorPtr q_nope = tensor_arg(q_nope_, "q_nope"), q_pe = tensor_arg(q_pe_, "q_pe");
    const TensorPtr ckv = tensor_arg(ckv_, "ckv_cache"), kpe = tensor_arg(kpe_, "kpe_cache");
    const TensorPtr page_ids = tensor_arg(page_ids_, "kv_indices"), idx = tensor_arg(indices_, "indices");
    const TensorPtr o = tensor_arg(o_, "out"), lse = tensor_arg(lse_, "lse");
    const TensorPtr workspace = tensor_arg(workspace_, "workspace");
    const TensorPtr scales = tensor_arg(scale_cache_, "scale_cache");
    clattn::MlaBuffers b;
    b.q_nope = mem_of(ctx, q_nope, "q_nope");
    b.q_pe = mem_of(ctx, q_pe, "q_pe");
    b.ckv = mem_of(ctx, ckv, "ckv_cache");
    b.kpe = mem_of(ctx, kpe, "kpe_cache");
    b.page_ids = check_tensor(ctx, page_ids, "kv_indices", {PDType::I32});
    b.o = mem_of(ctx, o, "out");
    b.lse = mem_of(ctx, lse, "lse");
    b.workspace = mem_of(ctx, workspace, "workspace");
    b.kv_scale = kv_scale;
    b.scale_cache = latent_scale_cache(ctx, scales);
    cl_mem indices = idx ? check_tensor(ctx, idx, "indices", {PDType::I32}) : nullptr;
    clattn::mla_sparse_run(ctx, plan, b, indices);
  }, py::arg("ctx"), py::arg("plan"), py::arg("q_nope"), py::arg("q_pe"), py::arg("ckv"), py::arg("kpe"),
     py::arg("page_ids"), py::arg("indices"), py::arg("o"), py::arg("lse"), py::arg("workspace"), py::arg("kv_scale"),
     py::arg("scale_cache") = py::none());
}

}  // namespace clattn_py

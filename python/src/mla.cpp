// Native MLA (DeepSeek absorbed form) plan/run on a paged latent cache.
#include "binding.hpp"

namespace clattn_py {

cl_mem latent_scale_cache(const clattn::Context& ctx, const TensorPtr& t) {
  return t ? check_tensor(ctx, t, "scale_cache", {PDType::F32, PDType::F16}) : nullptr;
}

void init_mla(py::module_& m) {
  py::class_<clattn::MlaPlan>(m, "MlaPlan", "A planned MLA batch (opaque; see BatchMLAPagedAttentionWrapper).")
      .def_readonly("extend", &clattn::MlaPlan::extend)
      .def_readonly("batch_size", &clattn::MlaPlan::batch_size)
      .def_readonly("num_heads", &clattn::MlaPlan::num_heads)
      .def_readonly("num_tokens", &clattn::MlaPlan::num_tokens)
      .def_readonly("workspace_bytes", &clattn::MlaPlan::workspace_bytes)
      .def_readonly("num_work", &clattn::MlaPlan::num_work)
      .def_readonly("topk", &clattn::MlaPlan::topk)
      .def_readonly("variant", &clattn::MlaPlan::variant)
      .def_readonly("kernel_options", &clattn::MlaPlan::kernel_options);

  m.def("_mla_plan", [](const clattn::Context& ctx, py::object qo_indptr, py::object indptr, py::object indices,
                        py::object last, int page_size, int num_pages, const std::string& kv_dtype, int num_heads,
                        const std::string& q_dtype, const std::string& o_dtype, float sm_scale, bool causal,
                        bool extend, bool validate, const std::string& scale_dtype) {
    clattn::PagedCsr csr;
    csr.page_size = page_size;
    if (!qo_indptr.is_none()) csr.qo_indptr = to_i32(qo_indptr, "qo_indptr");
    csr.kv_indptr = to_i32(indptr, "kv_indptr");
    csr.kv_indices = to_i32(indices, "kv_indices");
    csr.kv_last_page_len = to_i32(last, "kv_len_arr");
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
    o.causal = causal;
    o.validate = validate;
    py::gil_scoped_release nogil;
    return extend ? clattn::mla_extend_plan(ctx, csr, cache, o) : clattn::mla_decode_plan(ctx, csr, cache, o);
  }, py::arg("ctx"), py::arg("qo_indptr"), py::arg("indptr"), py::arg("indices"), py::arg("last"), py::arg("page_size"),
     py::arg("num_pages"), py::arg("kv_dtype"), py::arg("num_heads"), py::arg("q_dtype"), py::arg("o_dtype"),
     py::arg("sm_scale"), py::arg("causal"), py::arg("extend"), py::arg("validate"), py::arg("scale_dtype") = "f32");

  m.def("_mla_run", [](const clattn::Context& ctx, const clattn::MlaPlan& plan, py::handle q_nope_, py::handle q_pe_,
                       py::handle ckv_, py::handle kpe_, py::handle page_ids_, py::handle o_, py::handle lse_,
                       py::handle workspace_, float kv_scale, py::handle scale_cache_) {
    const TensorPtr q_nope = tensor_arg(q_nope_, "q_nope"), q_pe = tensor_arg(q_pe_, "q_pe");
    const TensorPtr ckv = tensor_arg(ckv_, "ckv_cache"), kpe = tensor_arg(kpe_, "kpe_cache");
    const TensorPtr page_ids = tensor_arg(page_ids_, "kv_indices"), o = tensor_arg(o_, "out");
    const TensorPtr lse = tensor_arg(lse_, "lse"), workspace = tensor_arg(workspace_, "workspace");
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
    clattn::mla_run(ctx, plan, b);
  }, py::arg("ctx"), py::arg("plan"), py::arg("q_nope"), py::arg("q_pe"), py::arg("ckv"), py::arg("kpe"),
     py::arg("page_ids"), py::arg("o"), py::arg("lse"), py::arg("workspace"), py::arg("kv_scale"),
     py::arg("scale_cache") = py::none());
}

}  // namespace clattn_py

// Native ops on device tensors: KV append, merge_state(s), paged decode, paged extend and
// ragged prefill (plan/run). Thin: the Python wrappers (clattn/attention.py) shape the
// FlashInfer-style API, allocate outputs and check shapes; the library checks the rest.
#include "binding.hpp"

namespace clattn_py {

namespace {

// A quantised cache's scale dtype (int8: f32 or f16; the library ignores it for other formats).
clattn::DType scale_dtype(const std::string& s) {
  const PDType d = parse_dtype(s, "scale dtype");
  if (d != PDType::F32 && d != PDType::F16) invalid(std::string("scale dtype: ") + dtype_str(d) + ", expected f32 or f16");
  return to_lib(d, "scale dtype");
}

// A cache of dtype `dtype`: a tensor dtype name, or "i4" (int4: the tensors are u8 bytes, two
// nibbles each, and quant_group head-dim elements share a [scale, zero] pair).
clattn::PagedKV paged_kv(int num_pages, int page_size, int num_kv_heads, int head_dim, const std::string& layout,
                         const std::string& dtype, const std::string& scales = "f32", int quant_group = 0) {
  clattn::PagedKV c;
  c.num_pages = num_pages;
  c.page_size = page_size;
  c.num_kv_heads = num_kv_heads;
  c.head_dim = head_dim;
  c.layout = parse_layout(layout);
  c.dtype = dtype == "i4" ? clattn::DType::I4 : to_lib(parse_dtype(dtype, "kv_data_type"), "kv_data_type");
  c.scale_dtype = scale_dtype(scales);
  if (c.dtype == clattn::DType::I4) c.quant_group = quant_group;
  return c;
}

std::vector<int32_t> opt_i32(const py::object& o, const char* name) {
  if (o.is_none()) return {};
  return to_i32(o, name);
}

}  // namespace

KVScales kv_scales(const clattn::Context& ctx, py::handle k_scale_cache, py::handle v_scale_cache,
                   py::handle k_head_scales, py::handle v_head_scales) {
  KVScales r;
  const TensorPtr kc = tensor_arg(k_scale_cache, "k_scale_cache"), vc = tensor_arg(v_scale_cache, "v_scale_cache");
  const TensorPtr kh = tensor_arg(k_head_scales, "k_scale"), vh = tensor_arg(v_head_scales, "v_scale");
  r.hold = {kc, vc, kh, vh};
  if (kc) r.k_cache = check_tensor(ctx, kc, "k_scale_cache", {PDType::F32, PDType::F16});
  if (vc) check_tensor(ctx, vc, "v_scale_cache", {PDType::F32, PDType::F16});
  if (vc) r.v_cache = check_tensor(ctx, vc, "v_scale_cache", {kc ? kc->dtype : vc->dtype});
  if (kh) r.k_head = check_tensor(ctx, kh, "k_scale", {PDType::F32});
  if (vh) r.v_head = check_tensor(ctx, vh, "v_scale", {PDType::F32});
  return r;
}

AppendKV append_kv_args(const clattn::Context& ctx, py::handle k_, py::handle v_, py::handle slots_,
                        py::handle k_cache_, py::handle v_cache_, const std::string& layout, float k_scale,
                        float v_scale, py::object slots_host, const KVScales& sc, const std::string& kv_dtype,
                        int quant_group) {
  AppendKV r;
  const TensorPtr k = tensor_arg(k_, "append_key"), v = tensor_arg(v_, "append_value");
  const TensorPtr slots = tensor_arg(slots_, "slot_mapping");
  const TensorPtr k_cache = tensor_arg(k_cache_, "k_cache"), v_cache = tensor_arg(v_cache_, "v_cache");
  r.hold = {k, v, slots, k_cache, v_cache};
  const std::initializer_list<PDType> src = {PDType::F32, PDType::F16, PDType::BF16};
  const std::initializer_list<PDType> kv = {PDType::F32, PDType::F16, PDType::BF16, PDType::FP8_E4M3, PDType::FP8_E5M2,
                                            PDType::I8};
  clattn::AppendKVArgs& a = r.args;
  a.k = check_tensor(ctx, k, "append_key", src);
  if (k->shape.size() != 3) invalid("append_key: shape " + shape_str(k->shape) + ", expected [num_tokens, num_kv_heads, head_dim]");
  a.v = check_tensor(ctx, v, "append_value", {k->dtype}, k->shape);
  a.src_dtype = to_lib(k->dtype, "append_key");
  a.num_tokens = k->shape[0];
  a.slot_mapping = check_tensor(ctx, slots, "slot_mapping", {PDType::I32, PDType::I64}, {a.num_tokens});
  a.slot_dtype = to_lib(slots->dtype, "slot_mapping");
  const bool i4 = kv_dtype == "i4";  // u8 tensors of nibble pairs, [..., head_dim / 2]
  a.k_cache = i4 ? check_tensor(ctx, k_cache, "k_cache", {PDType::U8}) : check_tensor(ctx, k_cache, "k_cache", kv);
  if (k_cache->shape.size() != 4) invalid("k_cache: shape " + shape_str(k_cache->shape) + ", expected 4 dimensions");
  a.v_cache = check_tensor(ctx, v_cache, "v_cache", {k_cache->dtype}, k_cache->shape);
  bool nhd = parse_layout(layout) == clattn::KVLayout::NHD;
  const auto& cs = k_cache->shape;
  const char* scales = !sc.hold.empty() && sc.hold[0] ? dtype_str(sc.hold[0]->dtype) : "f32";
  a.cache = paged_kv(int(cs[0]), int(nhd ? cs[1] : cs[2]), int(nhd ? cs[2] : cs[1]), int(cs[3]) * (i4 ? 2 : 1), layout,
                     i4 ? "i4" : dtype_str(k_cache->dtype), scales, quant_group);
  if (k->shape[1] != a.cache.num_kv_heads || k->shape[2] != a.cache.head_dim)
    invalid("append_key: shape " + shape_str(k->shape) + " does not match the cache's heads/head_dim " + shape_str(cs));
  a.k_scale = k_scale;
  a.v_scale = v_scale;
  a.k_scale_cache = sc.k_cache, a.v_scale_cache = sc.v_cache;
  a.k_head_scales = sc.k_head, a.v_head_scales = sc.v_head;
  r.hold.insert(r.hold.end(), sc.hold.begin(), sc.hold.end());
  if (!slots_host.is_none()) {
    auto arr = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(slots_host);
    if (!arr || arr.size() != a.num_tokens) invalid("slot_mapping host copy: expected " + std::to_string(a.num_tokens) + " integers");
    clattn::validate_slot_mapping(arr.data(), int64_t(arr.size()), clattn::CacheShape{a.cache.num_pages, a.cache.page_size});
  }
  return r;
}

void init_ops(py::module_& m) {
  // ---------------------------------------------------------------- append
  m.def("_append_kv", [](const clattn::Context& ctx, py::handle k_, py::handle v_, py::handle slots_,
                         py::handle k_cache_, py::handle v_cache_, const std::string& layout,
                         float k_scale, float v_scale, py::object slots_host, py::handle k_scale_cache,
                         py::handle v_scale_cache, py::handle k_head_scales, py::handle v_head_scales,
                         const std::string& kv_dtype, int quant_group) {
    const KVScales sc = kv_scales(ctx, k_scale_cache, v_scale_cache, k_head_scales, v_head_scales);
    const AppendKV a = append_kv_args(ctx, k_, v_, slots_, k_cache_, v_cache_, layout, k_scale, v_scale, slots_host, sc,
                                      kv_dtype, quant_group);
    clattn::append_kv(ctx, a.args);
  }, py::arg("ctx"), py::arg("k"), py::arg("v"), py::arg("slot_mapping"), py::arg("k_cache"), py::arg("v_cache"),
     py::arg("kv_layout"), py::arg("k_scale"), py::arg("v_scale"), py::arg("slot_mapping_host") = py::none(),
     py::arg("k_scale_cache") = py::none(), py::arg("v_scale_cache") = py::none(),
     py::arg("k_head_scales") = py::none(), py::arg("v_head_scales") = py::none(), py::arg("kv_dtype") = "",
     py::arg("quant_group") = 0);

  // ---------------------------------------------------------------- merge
  m.def("_merge_state", [](const clattn::Context& ctx, py::handle va_, py::handle sa_, py::handle vb_,
                           py::handle sb_, py::handle vo_, py::handle so_) {
    const TensorPtr va = tensor_arg(va_, "v_a"), sa = tensor_arg(sa_, "s_a"), vb = tensor_arg(vb_, "v_b");
    const TensorPtr sb = tensor_arg(sb_, "s_b"), vo = tensor_arg(vo_, "v_merged"), so = tensor_arg(so_, "s_merged");
    clattn::MergeStateArgs a;
    a.v_a = check_tensor(ctx, va, "v_a", {PDType::F32, PDType::F16, PDType::BF16});
    if (va->shape.size() != 3) invalid("v_a: shape " + shape_str(va->shape) + ", expected [seq_len, num_heads, head_dim]");
    a.num_tokens = int(va->shape[0]), a.num_heads = int(va->shape[1]), a.head_dim = int(va->shape[2]);
    a.s_a = check_tensor(ctx, sa, "s_a", {PDType::F32}, {va->shape[0], va->shape[1]});
    a.v_b = check_tensor(ctx, vb, "v_b", {va->dtype}, va->shape);
    a.s_b = check_tensor(ctx, sb, "s_b", {PDType::F32}, {va->shape[0], va->shape[1]});
    a.v_out = check_tensor(ctx, vo, "v_merged", {va->dtype}, va->shape);
    a.s_out = so ? check_tensor(ctx, so, "s_merged", {PDType::F32}, {va->shape[0], va->shape[1]}) : nullptr;
    a.dtype = to_lib(va->dtype, "v_a");
    clattn::merge_state(ctx, a);
  });
  m.def("_merge_states", [](const clattn::Context& ctx, py::handle v_, py::handle s_, py::handle vo_,
                            py::handle so_) {
    const TensorPtr v = tensor_arg(v_, "v"), s = tensor_arg(s_, "s");
    const TensorPtr vo = tensor_arg(vo_, "v_merged"), so = tensor_arg(so_, "s_merged");
    clattn::MergeStatesArgs a;
    a.v = check_tensor(ctx, v, "v", {PDType::F32, PDType::F16, PDType::BF16});
    if (v->shape.size() != 4) invalid("v: shape " + shape_str(v->shape) + ", expected [seq_len, num_states, num_heads, head_dim]");
    const auto& sh = v->shape;
    a.num_tokens = int(sh[0]), a.num_states = int(sh[1]), a.num_heads = int(sh[2]), a.head_dim = int(sh[3]);
    a.s = check_tensor(ctx, s, "s", {PDType::F32}, {sh[0], sh[1], sh[2]});
    a.v_out = check_tensor(ctx, vo, "v_merged", {v->dtype}, {sh[0], sh[2], sh[3]});
    a.s_out = so ? check_tensor(ctx, so, "s_merged", {PDType::F32}, {sh[0], sh[2]}) : nullptr;
    a.dtype = to_lib(v->dtype, "v");
    clattn::merge_states(ctx, a);
  });

  // ---------------------------------------------------------------- decode
  py::class_<clattn::DecodePlan>(m, "DecodePlan", "A planned decode batch (opaque; see BatchDecodeWithPagedKVCacheWrapper).")
      .def_readonly("batch_size", &clattn::DecodePlan::batch_size)
      .def_readonly("num_qo_heads", &clattn::DecodePlan::num_qo_heads)
      .def_readonly("num_kv_heads", &clattn::DecodePlan::num_kv_heads)
      .def_readonly("head_dim", &clattn::DecodePlan::head_dim)
      .def_readonly("page_size", &clattn::DecodePlan::page_size)
      .def_readonly("num_work", &clattn::DecodePlan::num_work)
      .def_readonly("num_partials", &clattn::DecodePlan::num_partials)
      .def_readonly("chunk_tokens", &clattn::DecodePlan::chunk_tokens)
      .def_readonly("workspace_bytes", &clattn::DecodePlan::workspace_bytes)
      .def_readonly("variant", &clattn::DecodePlan::variant)
      .def_readonly("kernel_options", &clattn::DecodePlan::kernel_options)
      .def("to_vector", &clattn::DecodePlan::to_vector, "The plan as a flat int64 list (FlashInfer's plan_info idea).");

  m.def("_decode_plan", [](const clattn::Context& ctx, py::object indptr, py::object indices, py::object last,
                           int page_size, int num_pages, int num_kv_heads, int head_dim, const std::string& layout,
                           const std::string& kv_dtype, int num_qo_heads, const std::string& q_dtype,
                           const std::string& o_dtype, float sm_scale, float soft_cap, int window_left,
                           bool deterministic, int max_splits, bool validate, const std::string& scales,
                           int quant_group) {
    clattn::PagedCsr csr;
    csr.page_size = page_size;
    csr.kv_indptr = to_i32(indptr, "indptr");
    csr.kv_indices = to_i32(indices, "indices");
    csr.kv_last_page_len = to_i32(last, "last_page_len");
    clattn::DecodeOptions o;
    o.num_qo_heads = num_qo_heads;
    o.q_dtype = to_lib(parse_dtype(q_dtype, "q_data_type"), "q_data_type");
    o.o_dtype = to_lib(parse_dtype(o_dtype, "o_data_type"), "o_data_type");
    o.sm_scale = sm_scale;
    o.logits_soft_cap = soft_cap;
    o.window_left = window_left;
    o.deterministic = deterministic;
    o.max_splits = max_splits;
    o.validate = validate;
    auto cache = paged_kv(num_pages, page_size, num_kv_heads, head_dim, layout, kv_dtype, scales, quant_group);
    py::gil_scoped_release nogil;
    return clattn::decode_plan(ctx, csr, cache, o);
  });

  m.def("_decode_run", [](const clattn::Context& ctx, const clattn::DecodePlan& plan, py::handle q_, py::handle k_,
                          py::handle v_, py::handle page_ids_, py::handle o_, py::handle lse_, py::handle workspace_,
                          py::handle sinks_, float k_scale, float v_scale, py::handle k_scale_cache,
                          py::handle v_scale_cache, py::handle k_head_scales, py::handle v_head_scales) {
    const KVScales sc = kv_scales(ctx, k_scale_cache, v_scale_cache, k_head_scales, v_head_scales);
    const TensorPtr q = tensor_arg(q_, "q"), k = tensor_arg(k_, "k_cache"), v = tensor_arg(v_, "v_cache");
    const TensorPtr page_ids = tensor_arg(page_ids_, "indices"), o = tensor_arg(o_, "out"), lse = tensor_arg(lse_, "lse");
    const TensorPtr workspace = tensor_arg(workspace_, "workspace"), sinks = tensor_arg(sinks_, "sinks");
    clattn::DecodeBuffers b;
    b.q = mem_of(ctx, q, "q");
    b.k_cache = mem_of(ctx, k, "k_cache");
    b.v_cache = mem_of(ctx, v, "v_cache");
    b.page_ids = check_tensor(ctx, page_ids, "indices", {PDType::I32});
    b.o = mem_of(ctx, o, "out");
    b.lse = mem_of(ctx, lse, "lse");
    b.workspace = mem_of(ctx, workspace, "workspace");
    b.sinks = sinks ? check_tensor(ctx, sinks, "sinks", {PDType::F32}) : nullptr;
    b.k_scale = k_scale;
    b.v_scale = v_scale;
    b.k_scale_cache = sc.k_cache, b.v_scale_cache = sc.v_cache;
    b.k_head_scales = sc.k_head, b.v_head_scales = sc.v_head;
    clattn::decode_run(ctx, plan, b);
  }, py::arg("ctx"), py::arg("plan"), py::arg("q"), py::arg("k_cache"), py::arg("v_cache"), py::arg("indices"),
     py::arg("out"), py::arg("lse"), py::arg("workspace"), py::arg("sinks"), py::arg("k_scale"), py::arg("v_scale"),
     py::arg("k_scale_cache") = py::none(), py::arg("v_scale_cache") = py::none(),
     py::arg("k_head_scales") = py::none(), py::arg("v_head_scales") = py::none());

  // ---------------------------------------------------------------- extend / prefill
  py::class_<clattn::ExtendPlan>(m, "ExtendPlan", "A planned extend/prefill batch (opaque).")
      .def_readonly("batch_size", &clattn::ExtendPlan::batch_size)
      .def_readonly("num_qo_heads", &clattn::ExtendPlan::num_qo_heads)
      .def_readonly("num_kv_heads", &clattn::ExtendPlan::num_kv_heads)
      .def_readonly("head_dim", &clattn::ExtendPlan::head_dim)
      .def_readonly("num_tokens", &clattn::ExtendPlan::num_tokens)
      .def_readonly("mask_bytes_needed", &clattn::ExtendPlan::mask_bytes_needed)
      .def_readonly("has_mask", &clattn::ExtendPlan::has_mask)
      .def_readonly("num_tiles", &clattn::ExtendPlan::num_tiles)
      .def_readonly("workspace_bytes", &clattn::ExtendPlan::workspace_bytes)
      .def_readonly("variant", &clattn::ExtendPlan::variant)
      .def_readonly("kernel_options", &clattn::ExtendPlan::kernel_options);

  auto ext_opts = [](int num_qo_heads, const std::string& q_dtype, const std::string& o_dtype, float sm_scale,
                     float soft_cap, int window_left, bool causal, py::object mask_indptr, bool validate) {
    clattn::ExtendOptions o;
    o.num_qo_heads = num_qo_heads;
    o.q_dtype = to_lib(parse_dtype(q_dtype, "q_data_type"), "q_data_type");
    o.o_dtype = to_lib(parse_dtype(o_dtype, "o_data_type"), "o_data_type");
    o.sm_scale = sm_scale;
    o.logits_soft_cap = soft_cap;
    o.window_left = window_left;
    o.causal = causal;
    o.mask_indptr = opt_i32(mask_indptr, "mask_indptr");
    o.validate = validate;
    return o;
  };

  m.def("_extend_plan", [ext_opts](const clattn::Context& ctx, py::object qo_indptr, py::object indptr, py::object indices,
                                   py::object last, int page_size, int num_pages, int num_kv_heads, int head_dim,
                                   const std::string& layout, const std::string& kv_dtype, int num_qo_heads,
                                   const std::string& q_dtype, const std::string& o_dtype, float sm_scale,
                                   float soft_cap, int window_left, bool causal, py::object mask_indptr, bool validate,
                                   const std::string& scales, int quant_group) {
    clattn::PagedCsr csr;
    csr.page_size = page_size;
    csr.qo_indptr = to_i32(qo_indptr, "qo_indptr");
    csr.kv_indptr = to_i32(indptr, "paged_kv_indptr");
    csr.kv_indices = to_i32(indices, "paged_kv_indices");
    csr.kv_last_page_len = to_i32(last, "paged_kv_last_page_len");
    auto o = ext_opts(num_qo_heads, q_dtype, o_dtype, sm_scale, soft_cap, window_left, causal, mask_indptr, validate);
    auto cache = paged_kv(num_pages, page_size, num_kv_heads, head_dim, layout, kv_dtype, scales, quant_group);
    py::gil_scoped_release nogil;
    return clattn::extend_plan(ctx, csr, cache, o);
  });

  m.def("_prefill_plan", [ext_opts](const clattn::Context& ctx, py::object qo_indptr, py::object kv_indptr,
                                    int64_t kv_tokens, int num_kv_heads, int head_dim, const std::string& kv_dtype,
                                    int num_qo_heads, const std::string& q_dtype, const std::string& o_dtype,
                                    float sm_scale, float soft_cap, int window_left, bool causal, py::object mask_indptr,
                                    bool validate) {
    auto qi = to_i32(qo_indptr, "qo_indptr");
    auto ki = to_i32(kv_indptr, "kv_indptr");
    clattn::RaggedKV kv;
    kv.num_tokens = kv_tokens;
    kv.num_kv_heads = num_kv_heads;
    kv.head_dim = head_dim;
    kv.dtype = to_lib(parse_dtype(kv_dtype, "kv_data_type"), "kv_data_type");
    auto o = ext_opts(num_qo_heads, q_dtype, o_dtype, sm_scale, soft_cap, window_left, causal, mask_indptr, validate);
    py::gil_scoped_release nogil;
    return clattn::prefill_plan(ctx, qi, ki, kv, o);
  });

  m.def("_extend_run", [](const clattn::Context& ctx, const clattn::ExtendPlan& plan, py::handle q_, py::handle k_,
                          py::handle v_, py::handle page_ids_, py::handle o_, py::handle lse_, py::handle sinks_,
                          py::handle mask_, float k_scale, float v_scale, py::handle workspace_,
                          py::handle k_scale_cache, py::handle v_scale_cache, py::handle k_head_scales,
                          py::handle v_head_scales) {
    const KVScales sc = kv_scales(ctx, k_scale_cache, v_scale_cache, k_head_scales, v_head_scales);
    const TensorPtr q = tensor_arg(q_, "q"), k = tensor_arg(k_, "k"), v = tensor_arg(v_, "v");
    const TensorPtr page_ids = tensor_arg(page_ids_, "paged_kv_indices"), o = tensor_arg(o_, "out");
    const TensorPtr lse = tensor_arg(lse_, "lse"), sinks = tensor_arg(sinks_, "sinks");
    const TensorPtr mask = tensor_arg(mask_, "packed_custom_mask"), workspace = tensor_arg(workspace_, "workspace");
    clattn::ExtendBuffers b;
    b.q = mem_of(ctx, q, "q");
    b.k = mem_of(ctx, k, "k");
    b.v = mem_of(ctx, v, "v");
    b.page_ids = page_ids ? check_tensor(ctx, page_ids, "paged_kv_indices", {PDType::I32}) : nullptr;
    b.o = mem_of(ctx, o, "out");
    b.lse = mem_of(ctx, lse, "lse");
    b.sinks = sinks ? check_tensor(ctx, sinks, "sinks", {PDType::F32}) : nullptr;
    b.custom_mask = mask ? check_tensor(ctx, mask, "packed_custom_mask", {PDType::U8}) : nullptr;
    b.k_scale = k_scale;
    b.v_scale = v_scale;
    b.workspace = mem_of(ctx, workspace, "workspace");
    b.k_scale_cache = sc.k_cache, b.v_scale_cache = sc.v_cache;
    b.k_head_scales = sc.k_head, b.v_head_scales = sc.v_head;
    clattn::extend_run(ctx, plan, b);
  }, py::arg("ctx"), py::arg("plan"), py::arg("q"), py::arg("k"), py::arg("v"), py::arg("page_ids"), py::arg("out"),
     py::arg("lse"), py::arg("sinks"), py::arg("mask"), py::arg("k_scale"), py::arg("v_scale"),
     py::arg("workspace") = py::none(), py::arg("k_scale_cache") = py::none(), py::arg("v_scale_cache") = py::none(),
     py::arg("k_head_scales") = py::none(), py::arg("v_head_scales") = py::none());
}

}  // namespace clattn_py

// Native linear attention (Gated DeltaNet, simple GLA) on a pooled state.
#include "binding.hpp"

namespace clattn_py {

void init_linear(py::module_& m) {
  m.def("_linear_run", [](const clattn::Context& ctx, const std::string& kind, bool decode, int num_qk_heads,
                          int num_v_heads, int head_dim_k, int head_dim_v, const std::string& dtype, float scale,
                          bool l2norm_qk, bool beta_is_logits, bool constant_decay, py::handle q_, py::handle k_,
                          py::handle v_, py::handle g_, py::handle beta_, py::handle o_, py::handle pool_,
                          py::object state_indices, py::handle state_indices_dev_, py::object cu_seqlens,
                          py::handle cu_seqlens_dev_) {
    const TensorPtr q = tensor_arg(q_, "q"), k = tensor_arg(k_, "k"), v = tensor_arg(v_, "v");
    const TensorPtr g = tensor_arg(g_, "g"), beta = tensor_arg(beta_, "beta"), o = tensor_arg(o_, "out");
    const TensorPtr pool = tensor_arg(pool_, "state pool");
    const TensorPtr state_indices_dev = tensor_arg(state_indices_dev_, "state_indices");
    const TensorPtr cu_seqlens_dev = tensor_arg(cu_seqlens_dev_, "cu_seqlens");
    clattn::LinearConfig c;
    c.num_qk_heads = num_qk_heads;
    c.num_v_heads = num_v_heads;
    c.head_dim_k = head_dim_k;
    c.head_dim_v = head_dim_v;
    c.dtype = to_lib(parse_dtype(dtype, "dtype"), "dtype");
    c.scale = scale;
    c.l2norm_qk = l2norm_qk;
    c.beta_is_logits = beta_is_logits;
    c.constant_decay = constant_decay;
    clattn::LinearTensors t;
    t.q = mem_of(ctx, q, "q");
    t.k = mem_of(ctx, k, "k");
    t.v = mem_of(ctx, v, "v");
    t.g = mem_of(ctx, g, "g");
    t.beta = mem_of(ctx, beta, "beta");
    t.o = mem_of(ctx, o, "out");
    clattn::LinearStatePool p;
    p.state = check_tensor(ctx, pool, "state pool", {PDType::F32, PDType::F16, PDType::BF16});
    if (pool->shape.size() != 4) invalid("state pool: shape " + shape_str(pool->shape) + ", expected [num_slots, Hv, Dk, Dv]");
    p.num_slots = int(pool->shape[0]);
    p.dtype = to_lib(pool->dtype, "state pool");
    auto idx = to_i32(state_indices, "state_indices");
    std::vector<int32_t> cu;
    clattn::LinearBatch b;
    b.batch_size = int(idx.size());
    b.state_indices = idx.data();
    b.state_indices_dev = check_tensor(ctx, state_indices_dev, "state_indices", {PDType::I32});
    if (!decode) {
      cu = to_i32(cu_seqlens, "cu_seqlens");
      if (cu.size() != idx.size() + 1)
        invalid("cu_seqlens: " + std::to_string(cu.size()) + " entries for " + std::to_string(idx.size()) + " requests");
      b.cu_seqlens = cu.data();
      b.cu_seqlens_dev = check_tensor(ctx, cu_seqlens_dev, "cu_seqlens", {PDType::I32});
      b.num_tokens = cu.back();
    }
    bool gdn = kind == "gdn";
    if (!gdn && kind != "gla") invalid("kind must be 'gdn' or 'gla'");
    if (gdn) {
      if (decode) clattn::gdn_decode(ctx, c, t, p, b);
      else clattn::gdn_prefill(ctx, c, t, p, b);
    } else {
      if (decode) clattn::gla_decode(ctx, c, t, p, b);
      else clattn::gla_prefill(ctx, c, t, p, b);
    }
  });
}

}  // namespace clattn_py

// Native rotary position embedding: apply_rope and rope_append_kv on device tensors. Thin:
// the Python wrappers (clattn/rope.py) shape the FlashInfer-style API and allocate outputs;
// the library checks the values (rotary dim, theta, positions, slots).
#include "binding.hpp"
#include "clattn/rope.hpp"

namespace clattn_py {

namespace {

const std::initializer_list<PDType> kIo = {PDType::F32, PDType::F16, PDType::BF16};

// The RoPE config; with a cos_sin_cache [max_positions, R] f32, R is its width.
clattn::RopeConfig rope_config(const clattn::Context& ctx, const TensorPtr& cache, int rotary_dim, bool interleave,
                               float theta, float scale) {
  clattn::RopeConfig r;
  r.style = interleave ? clattn::RopeStyle::GptJ : clattn::RopeStyle::NeoX;
  r.rotary_dim = rotary_dim;
  r.theta = theta;
  r.scale = scale;
  if (cache) {
    r.cos_sin_cache = check_tensor(ctx, cache, "cos_sin_cache", {PDType::F32});
    if (cache->shape.size() != 2)
      invalid("cos_sin_cache: shape " + shape_str(cache->shape) + ", expected [max_positions, rotary_dim]");
    if (rotary_dim != 0 && cache->shape[1] != rotary_dim)
      invalid("cos_sin_cache: shape " + shape_str(cache->shape) + ", its width is not rotary_dim = " +
              std::to_string(rotary_dim));
    r.rotary_dim = int(cache->shape[1]);
    r.cache_positions = cache->shape[0];
  }
  return r;
}

// Positions [T] i32/i64; `host` (None or integers) becomes the host copy the library checks.
struct Positions {
  clattn::RopePositions pos;
  std::vector<int32_t> h32;
  std::vector<int64_t> h64;
};

void positions(const clattn::Context& ctx, const TensorPtr& p, int64_t T, const py::object& host, Positions& out) {
  out.pos.positions = check_tensor(ctx, p, "pos_ids", {PDType::I32, PDType::I64}, {T});
  out.pos.dtype = to_lib(p->dtype, "pos_ids");
  if (host.is_none()) return;
  auto arr = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(host);
  if (!arr || arr.size() != T) invalid("pos_ids host copy: expected " + std::to_string(T) + " integers");
  if (out.pos.dtype == clattn::DType::I64) {
    out.h64.assign(arr.data(), arr.data() + arr.size());
    out.pos.positions_host = out.h64.data();
  } else {
    out.h32.assign(arr.data(), arr.data() + arr.size());  // the device copy is int32: so are its values
    out.pos.positions_host = out.h32.data();
  }
}

// Rows [T, H, D] of a q or k argument.
void check_rows(const TensorPtr& t, const char* name) {
  if (t->shape.size() != 3) invalid(std::string(name) + ": shape " + shape_str(t->shape) + ", expected [num_tokens, num_heads, head_dim]");
}

}  // namespace

void init_rope(py::module_& m) {
  m.def("_apply_rope", [](const clattn::Context& ctx, py::handle q_, py::handle q_out_, py::handle k_,
                          py::handle k_out_, py::handle pos_, py::object pos_host, int rotary_dim, bool interleave,
                          float theta, float scale, py::handle cache_) {
    const TensorPtr q = tensor_arg(q_, "q"), qo = tensor_arg(q_out_, "q_out"), k = tensor_arg(k_, "k");
    const TensorPtr ko = tensor_arg(k_out_, "k_out"), pos = tensor_arg(pos_, "pos_ids");
    const TensorPtr cache = tensor_arg(cache_, "cos_sin_cache");
    if (!q && !k) invalid("apply_rope: q and k are both None");
    const TensorPtr& first = q ? q : k;
    check_rows(first, q ? "q" : "k");
    clattn::RopeArgs a;
    a.dtype = to_lib(first->dtype, q ? "q" : "k");
    a.num_tokens = first->shape[0];
    a.head_dim = int(first->shape[2]);
    if (q) {
      a.q = check_tensor(ctx, q, "q", kIo);
      a.q_out = check_tensor(ctx, qo, "q_out", {q->dtype}, q->shape);
      a.num_qo_heads = int(q->shape[1]);
    }
    if (k) {
      a.k = check_tensor(ctx, k, "k", {first->dtype});
      check_rows(k, "k");
      if (k->shape[0] != a.num_tokens || k->shape[2] != a.head_dim)
        invalid("k: shape " + shape_str(k->shape) + " does not match q's tokens/head_dim " + shape_str(first->shape));
      a.k_out = check_tensor(ctx, ko, "k_out", {k->dtype}, k->shape);
      a.num_kv_heads = int(k->shape[1]);
    }
    Positions p;
    positions(ctx, pos, a.num_tokens, pos_host, p);
    a.pos = p.pos;
    a.rope = rope_config(ctx, cache, rotary_dim, interleave, theta, scale);
    clattn::apply_rope(ctx, a);
  }, py::arg("ctx"), py::arg("q"), py::arg("q_out"), py::arg("k"), py::arg("k_out"), py::arg("pos_ids"),
     py::arg("pos_ids_host"), py::arg("rotary_dim"), py::arg("interleave"), py::arg("rope_theta"),
     py::arg("rope_scale"), py::arg("cos_sin_cache"));

  m.def("_rope_append_kv", [](const clattn::Context& ctx, py::handle q_, py::handle q_out_, py::handle k_,
                              py::handle v_, py::handle slots_, py::handle k_cache_, py::handle v_cache_,
                              const std::string& layout, float k_scale, float v_scale, py::object slots_host,
                              py::handle pos_, py::object pos_host, int rotary_dim, bool interleave, float theta,
                              float scale, py::handle cache_, py::handle k_scale_cache, py::handle v_scale_cache,
                              py::handle k_head_scales, py::handle v_head_scales, const std::string& kv_dtype,
                              int quant_group) {
    const KVScales sc = kv_scales(ctx, k_scale_cache, v_scale_cache, k_head_scales, v_head_scales);
    const AppendKV ap = append_kv_args(ctx, k_, v_, slots_, k_cache_, v_cache_, layout, k_scale, v_scale, slots_host,
                                       sc, kv_dtype, quant_group);
    const TensorPtr q = tensor_arg(q_, "q"), qo = tensor_arg(q_out_, "q_out"), pos = tensor_arg(pos_, "pos_ids");
    const TensorPtr cache = tensor_arg(cache_, "cos_sin_cache");
    clattn::RopeAppendKVArgs a;
    a.append = ap.args;
    const int64_t T = a.append.num_tokens;
    if (q) {
      check_rows(q, "q");
      a.q = check_tensor(ctx, q, "q", {ap.hold[0]->dtype});  // the append rows' dtype (src_dtype)
      if (q->shape[0] != T || q->shape[2] != a.append.cache.head_dim)
        invalid("q: shape " + shape_str(q->shape) + ", expected [" + std::to_string(T) + ", num_qo_heads, " +
                std::to_string(a.append.cache.head_dim) + "] (the append rows' tokens and head_dim)");
      a.num_qo_heads = int(q->shape[1]);
      a.q_out = check_tensor(ctx, qo, "q_out", kIo, q->shape);
      a.q_out_dtype = to_lib(qo->dtype, "q_out");
    }
    Positions p;
    positions(ctx, pos, T, pos_host, p);
    a.pos = p.pos;
    a.rope = rope_config(ctx, cache, rotary_dim, interleave, theta, scale);
    clattn::rope_append_kv(ctx, a);
  }, py::arg("ctx"), py::arg("q"), py::arg("q_out"), py::arg("k"), py::arg("v"), py::arg("slot_mapping"),
     py::arg("k_cache"), py::arg("v_cache"), py::arg("kv_layout"), py::arg("k_scale"), py::arg("v_scale"),
     py::arg("slot_mapping_host"), py::arg("pos_ids"), py::arg("pos_ids_host"), py::arg("rotary_dim"),
     py::arg("interleave"), py::arg("rope_theta"), py::arg("rope_scale"), py::arg("cos_sin_cache"),
     py::arg("k_scale_cache") = py::none(), py::arg("v_scale_cache") = py::none(),
     py::arg("k_head_scales") = py::none(), py::arg("v_head_scales") = py::none(), py::arg("kv_dtype") = "",
     py::arg("quant_group") = 0);
}

}  // namespace clattn_py

// Linear attention's argument checks (before anything is enqueued): the configuration, the
// state indices, cu_seqlens and the tensors' sizes.
#include <cmath>

#include "backends/ops/linear/linear_impl.hpp"

namespace clattn::ops::linear {


std::string num(int64_t v) { return std::to_string(v); }

void bad(const std::string& op, const std::string& what) { rt::invalid(op + ": " + what); }

bool io_dtype_ok(DType d) { return d == DType::F32 || d == DType::F16 || d == DType::BF16; }
bool head_dim_ok(int d) { return d == 64 || d == 128 || d == 256; }

size_t mem_bytes(cl_mem m, const std::string& what) {
  size_t n = 0;
  rt::check_cl(clGetMemObjectInfo(m, CL_MEM_SIZE, sizeof n, &n, nullptr), "clGetMemObjectInfo", what);
  return n;
}

void need(const std::string& op, cl_mem m, int64_t bytes, const std::string& field) {
  if (!m) bad(op, field + ": null buffer");
  int64_t have = int64_t(mem_bytes(m, op + " " + field));
  if (have < bytes) bad(op, field + ": buffer has " + num(have) + " bytes, needs " + num(bytes));
}

void check_config(const std::string& op, const LinearConfig& c, const LinearStatePool& p, bool gdn) {
  if (!c.params.empty())  // (the ops have no plan: this runs on every call, and builds strings only here)
    params::check_param_names({"linear_decode", "linear_prefill"}, c.params, op + ": LinearConfig::params");
  if (c.num_qk_heads < 1) bad(op, "num_qk_heads = " + num(c.num_qk_heads) + ", must be >= 1");
  if (c.num_v_heads < 1 || c.num_v_heads % c.num_qk_heads != 0)
    bad(op, "num_v_heads = " + num(c.num_v_heads) + ", must be a positive multiple of num_qk_heads = " +
                num(c.num_qk_heads));
  if (!head_dim_ok(c.head_dim_k)) bad(op, "head_dim_k = " + num(c.head_dim_k) + " unsupported (64, 128, 256)");
  if (!head_dim_ok(c.head_dim_v)) bad(op, "head_dim_v = " + num(c.head_dim_v) + " unsupported (64, 128, 256)");
  if (!io_dtype_ok(c.dtype)) bad(op, std::string("dtype = ") + dtype_name(c.dtype) + " unsupported (f32, f16, bf16)");
  if (!io_dtype_ok(p.dtype))
    bad(op, std::string("state pool dtype = ") + dtype_name(p.dtype) + " unsupported (f32, f16, bf16)");
  if (!std::isfinite(c.scale) || c.scale < 0.f) bad(op, "scale = " + std::to_string(c.scale) + ", must be >= 0");
  if (p.num_slots < 0) bad(op, "num_slots = " + num(p.num_slots) + ", must be >= 0");
  if (!gdn && c.l2norm_qk) bad(op, "l2norm_qk is a Gated DeltaNet option");
  if (!gdn && c.beta_is_logits) bad(op, "beta_is_logits is a Gated DeltaNet option");
}

int64_t slot_bytes(const LinearConfig& c, const LinearStatePool& p) {
  return rt::checked::product({c.num_v_heads, c.head_dim_k, c.head_dim_v, int64_t(dtype_size(p.dtype))},
                              "state slot bytes");
}

void check_indices(const std::string& op, const LinearBatch& b, const LinearStatePool& p) {
  if (b.batch_size < 0) bad(op, "batch_size = " + num(b.batch_size) + ", must be >= 0");
  if (b.batch_size == 0) return;
  if (!b.state_indices) bad(op, "state_indices: null host array");
  std::vector<int> owner(size_t(std::max(p.num_slots, 0)), -1);
  for (int i = 0; i < b.batch_size; ++i) {
    int s = b.state_indices[i];
    if (s == -1) continue;
    if (s < 0 || s >= p.num_slots)
      bad(op, "state_indices[" + num(i) + "] = " + num(s) + " out of range [0, num_slots = " + num(p.num_slots) +
                  ") (-1 = no state)");
    if (owner[size_t(s)] >= 0)
      bad(op, "state_indices[" + num(i) + "] = " + num(s) + " duplicates state_indices[" + num(owner[size_t(s)]) +
                  "]");
    owner[size_t(s)] = i;
  }
  need(op, b.state_indices_dev, int64_t(b.batch_size) * 4, "state_indices_dev");
}

int check_cu_seqlens(const std::string& op, const LinearBatch& b) {
  if (!b.cu_seqlens) bad(op, "cu_seqlens: null host array");
  if (b.cu_seqlens[0] != 0) bad(op, "cu_seqlens[0] = " + num(b.cu_seqlens[0]) + ", must be 0");
  for (int i = 0; i < b.batch_size; ++i)
    if (b.cu_seqlens[i + 1] < b.cu_seqlens[i])
      bad(op, "cu_seqlens[" + num(i + 1) + "] = " + num(b.cu_seqlens[i + 1]) + " < cu_seqlens[" + num(i) +
                  "] = " + num(b.cu_seqlens[i]) + " (request " + num(i) + " has a negative length)");
  if (b.cu_seqlens[b.batch_size] != b.num_tokens)
    bad(op, "cu_seqlens[" + num(b.batch_size) + "] = " + num(b.cu_seqlens[b.batch_size]) + " != num_tokens = " +
                num(b.num_tokens));
  need(op, b.cu_seqlens_dev, (int64_t(b.batch_size) + 1) * 4, "cu_seqlens_dev");
  return b.num_tokens;
}

void check_tensors(const std::string& op, const LinearConfig& c, const LinearTensors& t, const LinearStatePool& p,
                   int64_t T, bool gdn) {
  namespace ck = rt::checked;
  const int64_t es = int64_t(dtype_size(c.dtype));
  const int64_t qk = ck::product({T, c.num_qk_heads, c.head_dim_k, es}, "q/k bytes");
  const int64_t vo = ck::product({T, c.num_v_heads, c.head_dim_v, es}, "v/o bytes");
  need(op, t.q, qk, "q");
  need(op, t.k, qk, "k");
  need(op, t.v, vo, "v");
  need(op, t.o, vo, "o");
  need(op, t.g, ck::product({c.constant_decay ? 1 : T, c.num_v_heads, 4}, "g bytes"),
       c.constant_decay ? "g (constant, [Hv])" : "g");
  if (gdn) need(op, t.beta, ck::product({T, c.num_v_heads, 4}, "beta bytes"), "beta");
  if (p.num_slots > 0) need(op, p.state, ck::mul(p.num_slots, slot_bytes(c, p), "state pool bytes"), "state");
}


int dt_code(DType d) { return d == DType::F16 ? 1 : d == DType::BF16 ? 2 : 0; }

int pow2_floor(int x) {
  int p = 1;
  while (p * 2 <= x) p *= 2;
  return p;
}

}  // namespace clattn::ops::linear

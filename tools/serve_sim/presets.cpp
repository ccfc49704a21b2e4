// Head configurations of the models clattn-serve-sim plays (public model cards; layer
// counts are the full models', --layers trims them).
#include <cmath>
#include <stdexcept>

#include "sim.hpp"

namespace clattn::sim {

namespace {

LayerSpec mha(int id, int hq, int hkv, int d) {
  LayerSpec l;
  l.layer_id = id;
  l.kind = LayerKind::MHA;
  l.num_qo_heads = hq, l.num_kv_heads = hkv, l.head_dim = d;
  return l;
}

LayerSpec gdn(int id, int hqk, int hv, int dk, int dv) {
  LayerSpec l;
  l.layer_id = id;
  l.kind = LayerKind::Linear;
  l.linear_kind = LinearKind::GDN;
  l.linear.num_qk_heads = hqk, l.linear.num_v_heads = hv, l.linear.head_dim_k = dk, l.linear.head_dim_v = dv;
  l.linear.l2norm_qk = true;  // Qwen3-Next normalises q and k inside the kernel
  return l;
}

}  // namespace

std::vector<std::string> preset_names() {
  return {"llama-8b", "llama-8b-hsa", "qwen3-next", "deepseek-v3-tp8", "gpt-oss", "tiny"};
}

Model preset(const std::string& name, int num_layers) {
  Model m;
  m.name = name;
  int n = 0;
  if (name == "llama-8b") {  // Llama-3.1-8B: 32 layers, GQA 32/8, head 128
    n = num_layers ? num_layers : 32;
    for (int i = 0; i < n; ++i) m.layers.push_back(mha(i, 32, 8, 128));
    m.backend = "paged";
    m.page_size = 16;
  } else if (name == "llama-8b-hsa") {  // the same heads with HSA in every layer's decode (SGLang's hsa backend)
    n = num_layers ? num_layers : 32;
    for (int i = 0; i < n; ++i) m.layers.push_back(mha(i, 32, 8, 128));
    m.backend = "hsa";
    m.page_size = 64;  // page = HSA chunk; its last slot is the landmark
    m.hsa.topk = 64, m.hsa.window_size = 512;
  } else if (name == "qwen3-next") {  // Qwen3-Next-80B-A3B: 48 layers, 3 Gated DeltaNet : 1 gated full attention
    n = num_layers ? num_layers : 48;
    for (int i = 0; i < n; ++i)
      m.layers.push_back(i % 4 == 3 ? mha(i, 16, 2, 256) : gdn(i, 16, 32, 128, 128));
    m.backend = "hybrid";
    m.page_size = 16;
  } else if (name == "deepseek-v3-tp8") {  // DeepSeek-V3: 61 layers, 128 MLA heads / 8 ranks
    n = num_layers ? num_layers : 61;
    for (int i = 0; i < n; ++i) {
      LayerSpec l;
      l.layer_id = i;
      l.kind = LayerKind::MLA;
      l.num_qo_heads = 16;
      l.sm_scale = float(1.0 / std::sqrt(192.0));  // (qk_nope 128 + rope 64), mscale 1
      m.layers.push_back(l);
    }
    m.backend = "mla";
    m.page_size = 64;
  } else if (name == "gpt-oss") {  // gpt-oss-20b: 24 layers, sliding 128 / full alternating, sinks, GQA 64/8, head 64
    n = num_layers ? num_layers : 24;
    for (int i = 0; i < n; ++i) {
      LayerSpec l = mha(i, 64, 8, 64);
      if (i % 2 == 0) l.window_left = 127;
      m.layers.push_back(l);  // sinks: allocated by the simulator (needs a device buffer)
    }
    m.backend = "paged";
    m.page_size = 16;
  } else if (name == "tiny") {  // test model: two small GQA layers, one windowed with a soft cap
    n = num_layers ? num_layers : 2;
    for (int i = 0; i < n; ++i) {
      LayerSpec l = mha(i, 4, 2, 64);
      if (i % 2 == 1) l.window_left = 9, l.logits_soft_cap = 30.0f;
      m.layers.push_back(l);
    }
    m.backend = "paged";
    m.page_size = 4;
  } else {
    std::string known;
    for (const auto& p : preset_names()) known += " " + p;
    throw Error(Status::InvalidArgument, "unknown model preset '" + name + "' (known:" + known + ")");
  }
  return m;
}

}  // namespace clattn::sim

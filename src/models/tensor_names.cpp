#include "models/tensor_names.h"

#include <fmt/format.h>

#include "core/error.h"

namespace refit {

std::vector<TensorSpec> model_tensor_specs(const ModelConfig& c) {
  std::vector<TensorSpec> specs;
  const bool permute = c.arch == Architecture::llama || c.arch == Architecture::mistral;
  specs.push_back({"model.embed_tokens.weight", "token_embd.weight", {c.vocab_size, c.dim},
                   TensorRole::embedding});
  for (int64_t l = 0; l < c.n_layers; ++l) {
    auto hf = [&](const char* s) { return fmt::format("model.layers.{}.{}", l, s); };
    auto gg = [&](const char* s) { return fmt::format("blk.{}.{}", l, s); };
    specs.push_back({hf("input_layernorm.weight"), gg("attn_norm.weight"), {c.dim}, TensorRole::norm, l});
    specs.push_back({hf("self_attn.q_proj.weight"), gg("attn_q.weight"), {c.q_dim(), c.dim},
                     TensorRole::matmul, l, permute ? c.n_heads : 0});
    specs.push_back({hf("self_attn.k_proj.weight"), gg("attn_k.weight"), {c.kv_dim(), c.dim},
                     TensorRole::matmul, l, permute ? c.n_kv_heads : 0});
    specs.push_back({hf("self_attn.v_proj.weight"), gg("attn_v.weight"), {c.kv_dim(), c.dim},
                     TensorRole::matmul, l});
    if (c.qkv_bias) {
      specs.push_back({hf("self_attn.q_proj.bias"), gg("attn_q.bias"), {c.q_dim()}, TensorRole::bias,
                       l, permute ? c.n_heads : 0});
      specs.push_back({hf("self_attn.k_proj.bias"), gg("attn_k.bias"), {c.kv_dim()}, TensorRole::bias,
                       l, permute ? c.n_kv_heads : 0});
      specs.push_back({hf("self_attn.v_proj.bias"), gg("attn_v.bias"), {c.kv_dim()}, TensorRole::bias, l});
    }
    if (c.qk_norm) {
      specs.push_back({hf("self_attn.q_norm.weight"), gg("attn_q_norm.weight"), {c.head_dim},
                       TensorRole::norm, l});
      specs.push_back({hf("self_attn.k_norm.weight"), gg("attn_k_norm.weight"), {c.head_dim},
                       TensorRole::norm, l});
    }
    specs.push_back({hf("self_attn.o_proj.weight"), gg("attn_output.weight"), {c.dim, c.q_dim()},
                     TensorRole::matmul, l});
    specs.push_back({hf("post_attention_layernorm.weight"), gg("ffn_norm.weight"), {c.dim},
                     TensorRole::norm, l});
    specs.push_back({hf("mlp.gate_proj.weight"), gg("ffn_gate.weight"), {c.ffn_dim, c.dim},
                     TensorRole::matmul, l});
    specs.push_back({hf("mlp.up_proj.weight"), gg("ffn_up.weight"), {c.ffn_dim, c.dim},
                     TensorRole::matmul, l});
    specs.push_back({hf("mlp.down_proj.weight"), gg("ffn_down.weight"), {c.dim, c.ffn_dim},
                     TensorRole::matmul, l});
  }
  specs.push_back({"model.norm.weight", "output_norm.weight", {c.dim}, TensorRole::norm});
  if (!c.tied_embeddings)
    specs.push_back({"lm_head.weight", "output.weight", {c.vocab_size, c.dim}, TensorRole::matmul});
  return specs;
}

Tensor permute_rows_for_gguf_rope(const Tensor& w, int64_t n_heads, bool inverse) {
  const int64_t rows = w.size(0);
  if (n_heads <= 0 || rows % (2 * n_heads) != 0)
    fail("rope row permutation: {} rows do not split into {} heads of even size", rows, n_heads);
  const int64_t half = rows / n_heads / 2;
  Shape split = w.shape();
  split[0] = half;
  split.insert(split.begin(), 2);
  split.insert(split.begin(), n_heads);  // [heads, 2, half, ...]
  Tensor c = w.contiguous();
  Tensor v = inverse ? c.view([&] {  // GGUF order is [heads, half, 2, ...]
                         Shape s = split;
                         std::swap(s[1], s[2]);
                         return s;
                       }())
                     : c.view(split);
  Tensor out = v.transpose(1, 2).contiguous();
  return out.view(w.shape());
}

}  // namespace refit

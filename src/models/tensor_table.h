// The tensors of a decoder-only transformer, named by what they are (a TensorSlot), and
// each architecture's table from slot to its Hugging Face and GGUF names. The table
// drives everything that needs tensor names or shapes: the parameters a model creates
// (and so what a trainer may send), fusion (q/k/v, gate/up), tensor-parallel sharding,
// checkpoint lookup in every format, quantization eligibility, synthetic checkpoints and
// parameter counts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace refit {

struct ModelConfig;

enum class TensorSlot : uint8_t {
  token_embd,        // [vocab, dim]
  attn_norm,         // [dim]     before attention
  attn_q,            // [q_dim, dim]
  attn_k,            // [kv_dim, dim]
  attn_v,            // [kv_dim, dim]
  attn_qkv,          // [q_dim + 2 kv_dim, dim]: q, k, v rows fused in the checkpoint (Phi-3)
  attn_q_bias,       // [q_dim]
  attn_k_bias,       // [kv_dim]
  attn_v_bias,       // [kv_dim]
  attn_q_norm,       // [head_dim]
  attn_k_norm,       // [head_dim]
  attn_output,       // [dim, q_dim]
  attn_output_bias,  // [dim]  (attention_bias in Llama, Mistral, Qwen3)
  post_attn_norm,    // [dim]     on the attention output (sandwich norms)
  ffn_norm,          // [dim]     before the FFN
  ffn_gate,          // [ffn, dim]
  ffn_up,            // [ffn, dim]
  ffn_gate_up,       // [2 ffn, dim]: gate rows then up rows, fused in the checkpoint (Phi-3)
  ffn_down,          // [dim, ffn]
  ffn_gate_bias,     // [ffn]   (Llama's mlp_bias)
  ffn_up_bias,       // [ffn]
  ffn_down_bias,     // [dim]
  post_ffn_norm,     // [dim]     on the FFN output (sandwich norms)
  output_norm,       // [dim]
  output,            // [vocab, dim] (absent when tied to token_embd)
  attn_sinks,        // [n_heads] f32: a learned softmax sink logit per head (gpt-oss)
  // Mixture of experts (layers whose ffn is moe; the dense ffn_* slots are absent there).
  // The per-expert slots are one tensor per expert: the HF name has a second "{}", the
  // expert; GGUF stacks all experts in one 3-D tensor (ggml ne [in, out, E]).
  ffn_router,          // [E, dim]  (HF mlp.gate, GGUF ffn_gate_inp)
  ffn_router_bias,     // [E]
  ffn_gate_exps,       // per expert [I, dim]   (I = expert_ffn_dim)
  ffn_up_exps,         // per expert [I, dim]
  ffn_down_exps,       // per expert [dim, I]
  ffn_gate_exps_bias,  // per expert [I]
  ffn_up_exps_bias,    // per expert [I]
  ffn_down_exps_bias,  // per expert [dim]
};
const char* slot_name(TensorSlot slot);

enum class TensorRole : uint8_t {
  embedding,  // [vocab, dim]
  matmul,     // [out, in]: quantizable, kernel layouts apply
  norm,       // [dim] or [head_dim]
  bias,       // [out]
  router,     // [E, dim]: a matmul kept in f32, never quantized
};

// How llama.cpp's converter changed a tensor on its way into GGUF; the loader undoes it
// so parameters always hold the Hugging Face values (what a trainer sends).
enum class GgufChange : uint8_t {
  none,
  rope_permute,  // llama/mistral q/k rows permuted for adjacent-pair rope
  plus_one,      // Gemma norm weights stored as (1 + w)
};

// Which rows (outputs) of a stacked expert tensor are one slot's (gpt-oss interleaves gate
// and up: gate = even, up = odd).
enum class StackedRows : uint8_t { all, even, odd };

// One row of an architecture's table. "{}" in a name is the layer index.
struct TensorName {
  TensorSlot slot;
  const char* hf;
  const char* gguf;
  GgufChange gguf_change = GgufChange::none;
  // Per-expert slots: the tensor a Hugging Face checkpoint may stack all experts' in
  // instead ("model.layers.{}.mlp.experts.gate_up_proj", weights/checkpoint_alias.h), the
  // rows of it that are this slot's, and whether a weight is stored [in, out] there (for
  // x @ W, as transformers' GptOssExperts keeps it); null when there is no such form.
  const char* hf_stacked = nullptr;
  StackedRows stacked_rows = StackedRows::all;
  bool stacked_in_major = false;
};

// One tensor of one model: the table row resolved for a layer, with its shape.
struct TensorSpec {
  std::string hf_name;    // "model.layers.0.self_attn.q_proj.weight"
  std::string gguf_name;  // "blk.0.attn_q.weight"
  Shape shape;
  TensorRole role;
  int64_t layer = -1;  // -1 for global tensors
  TensorSlot slot = TensorSlot::token_embd;
  // rope_permute: the head count to permute rows with (0 when not permuted).
  int64_t gguf_rope_permute_heads = 0;
  float gguf_offset = 0.0f;  // plus_one: GGUF holds value + offset
  // Per-expert slots: the expert, which the GGUF name's stacked tensor holds at index
  // `expert` of its outermost dim (-1 otherwise).
  int64_t expert = -1;
  // The stacked Hugging Face form of a per-expert slot, resolved (TensorName::hf_stacked).
  std::string hf_stacked;
  StackedRows stacked_rows = StackedRows::all;
  bool stacked_in_major = false;
};

// Every tensor `config` has, in checkpoint order, from its architecture's table (slots a
// config does not use, such as biases without qkv_bias, are left out).
std::vector<TensorSpec> model_tensor_specs(const ModelConfig& config);
// The Hugging Face name of `slot` in layer `layer` (-1: global) for config's architecture;
// throws when the architecture has no such slot.
std::string hf_tensor_name(const ModelConfig& config, TensorSlot slot, int64_t layer = -1);
bool has_slot(const ModelConfig& config, TensorSlot slot);
// The Hugging Face name of a per-expert slot for expert `expert` of layer `layer`.
std::string hf_expert_tensor_name(const ModelConfig& config, TensorSlot slot, int64_t layer,
                                  int64_t expert);
bool is_expert_slot(TensorSlot slot);
// The first layer's first matmul weight (q_proj, or qkv_proj where q/k/v are stored fused):
// its dtype or GGUF type is the checkpoint's weight format.
TensorSpec first_block_matmul(const ModelConfig& config);

// HF row order -> llama.cpp GGUF row order for a q/k weight or bias of `n_heads` heads:
// view rows as [n_heads, 2, head_dim/2], swap the last two, i.e. rows
// (h, half, i) -> (h, i, half). `inverse` goes from GGUF back to HF.
Tensor permute_rows_for_gguf_rope(const Tensor& w, int64_t n_heads, bool inverse = false);

}  // namespace refit

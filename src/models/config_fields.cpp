#include "models/config_fields.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/architecture.h"

namespace refit {
namespace {

using json = nlohmann::json;

// Fields config_from_hf_json reads for every architecture.
constexpr const char* kCommonHonoured[] = {
    "architectures",
    "model_type",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
    "max_position_embeddings",
    "rms_norm_eps",
    "rope_theta",
    "rope_scaling",
    "rope_parameters",
    "original_max_position_embeddings",  // longrope and yarn read it
    "tie_word_embeddings",
    "hidden_act",
    "torch_dtype",
    "dtype",
    "text_config",  // multimodal wrappers: the text model's fields are read from it
};

struct Harmless {
  const char* name;
  const char* why;
};

// Fields that do not change the logits refit computes.
constexpr Harmless kHarmless[] = {
    {"_name_or_path", "bookkeeping"},
    {"_commit_hash", "bookkeeping"},
    {"transformers_version", "bookkeeping"},
    {"auto_map", "remote-code class names"},
    {"id2label", "classification heads only"},
    {"label2id", "classification heads only"},
    {"finetuning_task", "bookkeeping"},
    {"problem_type", "classification heads only"},
    {"tokenizer_class", "read with the tokenizer"},
    {"prefix", "bookkeeping"},
    {"task_specific_params", "pipelines only"},
    {"initializer_range", "training-time initialisation"},
    {"use_cache", "transformers' KV cache switch; refit always caches"},
    {"cache_implementation", "transformers' cache class"},
    {"attn_implementation", "transformers' kernel choice, same maths"},
    {"_attn_implementation", "transformers' kernel choice, same maths"},
    {"_attn_implementation_autoset", "transformers' kernel choice, same maths"},
    {"attention_dropout", "dropout: training only"},
    {"hidden_dropout", "dropout: training only"},
    {"dropout", "dropout: training only"},
    {"resid_pdrop", "dropout: training only"},
    {"embd_pdrop", "dropout: training only"},
    {"attention_probs_dropout_prob", "dropout: training only"},
    {"hidden_dropout_prob", "dropout: training only"},
    // transformers < 4.45 split o_proj/down_proj (and q/k/v, gate/up) into pretraining_tp
    // slices and summed them: the same products; 4.45+ no longer reads it in forward.
    {"pretraining_tp", "the same matmuls, split in slices (transformers ignores it since 4.45)"},
    {"chunk_size_feed_forward", "the same FFN, computed in chunks"},
    {"use_bfloat16", "storage dtype hint"},
    {"torchscript", "export switch"},
    {"return_dict", "output container"},
    {"output_attentions", "output container"},
    {"output_hidden_states", "output container"},
    {"tie_encoder_decoder", "encoder-decoder only"},
    {"is_decoder", "encoder-decoder only"},
    {"add_cross_attention", "encoder-decoder only"},
    {"cross_attention_hidden_size", "encoder-decoder only"},
    {"tf_legacy_loss", "training only"},
    // Special token ids: the tokenizer and generation config handling reads them.
    {"pad_token_id", "special token id, read with the tokenizer"},
    {"bos_token_id", "special token id, read with the tokenizer"},
    {"eos_token_id", "special token id, read with the generation config"},
    {"sep_token_id", "special token id"},
    {"decoder_start_token_id", "encoder-decoder only"},
    {"quantization_config", "read by quantized-checkpoint loading"},
    {"generation_config", "generation defaults, read with the generation config"},
    // Generation defaults PretrainedConfig still writes: sampling, not the forward pass.
    {"max_length", "generation default"},
    {"min_length", "generation default"},
    {"do_sample", "generation default"},
    {"early_stopping", "generation default"},
    {"num_beams", "generation default"},
    {"num_beam_groups", "generation default"},
    {"diversity_penalty", "generation default"},
    {"temperature", "generation default"},
    {"top_k", "generation default"},
    {"top_p", "generation default"},
    {"typical_p", "generation default"},
    {"repetition_penalty", "generation default"},
    {"length_penalty", "generation default"},
    {"no_repeat_ngram_size", "generation default"},
    {"encoder_no_repeat_ngram_size", "generation default"},
    {"bad_words_ids", "generation default"},
    {"num_return_sequences", "generation default"},
    {"output_scores", "generation default"},
    {"return_dict_in_generate", "generation default"},
    {"forced_bos_token_id", "generation default"},
    {"forced_eos_token_id", "generation default"},
    {"remove_invalid_values", "generation default"},
    {"exponential_decay_length_penalty", "generation default"},
    {"suppress_tokens", "generation default"},
    {"begin_suppress_tokens", "generation default"},
};

bool is_null(const json& v) { return v.is_null(); }
bool is_false(const json& v) { return v.is_null() || (v.is_boolean() && !v.get<bool>()); }
bool is_one(const json& v) { return v.is_null() || (v.is_number() && v.get<double>() == 1.0); }
bool is_zero(const json& v) { return v.is_null() || (v.is_number() && v.get<double>() == 0.0); }
bool is_empty(const json& v) {
  return v.is_null() || ((v.is_object() || v.is_array()) && v.empty());
}

struct Refused {
  const char* name;
  bool (*neutral)(const json&);  // the value that leaves the maths unchanged
  const char* what;
};

// Fields that change the maths, which refit does not run (on architectures that do not
// honour them in hf_fields): refused unless neutral.
constexpr Refused kRefused[] = {
    {"attention_bias", is_false, "biases on the attention projections"},
    {"mlp_bias", is_false, "biases on the MLP projections"},
    {"partial_rotary_factor", is_one, "rotary embedding on part of each head"},
    {"attn_logit_softcapping", is_null, "soft-capping of attention logits"},
    {"final_logit_softcapping", is_null, "soft-capping of the output logits"},
    {"logit_scale", is_one, "a scale on the output logits"},
    {"logits_scaling", is_one, "a scale on the output logits"},
    {"embedding_multiplier", is_one, "a multiplier on the embeddings"},
    {"residual_multiplier", is_one, "a multiplier on the residual branches"},
    {"attention_multiplier", is_null, "a custom attention softmax scale"},
    {"query_pre_attn_scalar", is_null, "a custom attention softmax scale"},
    {"use_qk_norm", is_false, "q/k normalisation"},
    {"qk_layernorm", is_false, "q/k normalisation"},
    {"no_rope_layers", is_empty, "layers without rotary embedding"},
    {"use_mrope", is_false, "multimodal rotary embedding"},
    {"pruned_heads", is_empty, "pruned attention heads"},
    {"is_encoder_decoder", is_false, "an encoder-decoder model"},
    {"num_experts", is_zero, "a mixture of experts"},
    {"num_local_experts", is_zero, "a mixture of experts"},
    {"num_experts_per_tok", is_zero, "a mixture of experts"},
    {"moe_intermediate_size", is_zero, "a mixture of experts"},
    {"sliding_window", is_null, "sliding-window attention"},
    {"layer_types", is_null, "per-layer attention kinds"},
    {"use_sliding_window", is_false, "sliding-window attention"},
    {"hidden_activation", is_null, "the FFN activation (Gemma's name for hidden_act)"},
    {"use_bidirectional_attention", is_false, "bidirectional attention"},
};

template <class Table>
auto find_in(const Table& table, const std::string& name) -> decltype(&table[0]) {
  for (const auto& e : table)
    if (name == e.name) return &e;
  return nullptr;
}

bool common_honoured(const std::string& name) {
  for (const char* f : kCommonHonoured)
    if (name == f) return true;
  return false;
}

std::string number(double v) { return fmt::format("{:.4g}", v); }

// "0-27" / "0, 2, 4-7": the layer indices with a property, as ranges.
std::string ranges(const std::vector<int64_t>& layers) {
  std::string out;
  for (size_t i = 0; i < layers.size();) {
    size_t j = i;
    while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += i == j ? fmt::format("{}", layers[i]) : fmt::format("{}-{}", layers[i], layers[j]);
    i = j + 1;
  }
  return out;
}

std::string describe_rope(const RopeConfig& r) {
  const RopeScaling& s = r.scaling;
  std::string out = fmt::format("theta {}", number(r.theta));
  switch (s.kind) {
    case RopeScalingKind::none:
      break;
    case RopeScalingKind::linear:
      out += fmt::format(", linear factor {}", number(s.factor));
      break;
    case RopeScalingKind::dynamic:
      out +=
          fmt::format(", dynamic NTK factor {} (original {}; base fixed for {} positions, as vLLM)",
                      number(s.factor), s.original_max_position,
                      static_cast<int64_t>(s.original_max_position * s.factor));
      break;
    case RopeScalingKind::llama3:
      out += fmt::format(", llama3 factor {} (original {}, low/high freq factor {}/{})",
                         number(s.factor), s.original_max_position, number(s.low_freq_factor),
                         number(s.high_freq_factor));
      break;
    case RopeScalingKind::longrope:
      out += fmt::format(", longrope (original {}, attention factor {})", s.original_max_position,
                         number(s.attention_factor));
      break;
    case RopeScalingKind::yarn:
      out += fmt::format(
          ", yarn factor {} (original {}, attention factor {}, beta fast/slow {}/{}{})",
          number(s.factor), s.original_max_position, number(s.attention_factor),
          number(s.beta_fast), number(s.beta_slow), s.truncate ? "" : ", not truncated");
      break;
  }
  return out;
}

}  // namespace

bool architecture_honours(const ArchitectureDef& arch, const std::string& field) {
  for (const std::string& f : arch.hf_fields)
    if (f == field) return true;
  return false;
}

std::vector<std::string> check_hf_config_fields(const json& j, const ArchitectureDef& arch,
                                                const std::string& source) {
  std::vector<std::string> unrecognised;
  for (const auto& [name, value] : j.items()) {
    if (common_honoured(name) || architecture_honours(arch, name) || find_in(kHarmless, name))
      continue;
    if (const Refused* r = find_in(kRefused, name)) {
      if (r->neutral(value)) continue;
      throw FormatError(fmt::format("{}: '{}' = {} ({}) is not supported for {}", source, name,
                                    value.dump(), r->what, arch.name));
    }
    unrecognised.push_back(name);
  }
  return unrecognised;
}

std::vector<std::string> describe_config(const ModelConfig& c) {
  std::vector<std::string> out;
  out.push_back(
      fmt::format("architecture {}: hidden {}, {} layers, {} heads ({} kv), head_dim {}, "
                  "intermediate {}, vocab {}, context {}",
                  architecture_name(c.arch), c.dim, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim,
                  c.ffn_dim, c.vocab_size, c.max_seq_len));
  // Rope, windows and activations per distinct setting, with the layers that have it.
  std::vector<std::pair<std::string, std::vector<int64_t>>> ropes, windows, acts;
  auto add = [](auto& list, const std::string& what, int64_t l) {
    for (auto& [w, ls] : list)
      if (w == what) return ls.push_back(l);
    list.push_back({what, {l}});
  };
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerConfig lc = c.layer(l);
    std::string rope = "rope: " + describe_rope(lc.rope);
    if (lc.rope.dim != c.head_dim)
      rope += fmt::format(", {} of {} dims rotated", lc.rope.dim, c.head_dim);
    add(ropes, rope, l);
    if (lc.window > 0) add(windows, fmt::format("sliding window {}", lc.window), l);
    // A dense FFN's activation; a mixture's experts are described with the mixture below.
    if (lc.ffn != FfnKind::moe)
      add(acts, fmt::format("hidden_act {}", activation_name(lc.activation)), l);
  }
  // "what" alone when every layer has it (`every` appended), else "what on layers 0-3, 5".
  auto emit = [&](const auto& list, const char* every) {
    for (const auto& [what, ls] : list)
      out.push_back(static_cast<int64_t>(ls.size()) == c.n_layers
                        ? what + every
                        : fmt::format("{} on layers {}", what, ranges(ls)));
  };
  emit(ropes, "");
  emit(windows, " on every layer");
  if (windows.empty()) out.push_back("full attention on every layer");
  emit(acts, "");
  if (c.qkv_bias && c.o_bias)
    out.push_back("attention_bias (q, k, v and o_proj biases)");
  else if (c.qkv_bias)
    out.push_back("q, k, v biases");
  if (c.mlp_bias) out.push_back("mlp_bias (gate, up and down biases)");
  if (c.attention_sinks) out.push_back("attention sinks (a learned softmax sink per head)");
  if (c.qk_norm) out.push_back("q/k RMSNorm per head");
  if (c.has_moe()) {
    std::vector<int64_t> sparse;
    for (int64_t l = 0; l < c.n_layers; ++l)
      if (c.layer(l).ffn == FfnKind::moe) sparse.push_back(l);
    out.push_back(fmt::format(
        "mixture of experts on {}: {} experts, {} per token, expert width {}; router {}{}{}; "
        "experts {}{}",
        static_cast<int64_t>(sparse.size()) == c.n_layers ? "every layer"
                                                          : "layers " + ranges(sparse),
        c.n_experts, c.n_experts_used, c.expert_ffn_dim,
        c.router_scoring == ops::RouterScoring::softmax_topk ? "softmax then top-k"
                                                             : "top-k then softmax",
        c.router_scoring == ops::RouterScoring::softmax_topk && c.router_renormalize
            ? ", renormalised"
            : "",
        c.router_bias ? ", with bias" : "",
        c.expert_activation == ExpertActivation::silu
            ? std::string("silu(gate) * up")
            : fmt::format("swiglu_oai (alpha {}, limit {})", number(c.swiglu_alpha),
                          number(c.swiglu_limit)),
        c.expert_bias ? ", with biases" : ""));
  }
  out.push_back(fmt::format("rms_norm_eps {}", number(c.rms_eps)));
  out.push_back(c.tied_embeddings ? "tied embeddings" : "separate lm_head");
  if (c.attention_scale > 0)
    out.push_back(fmt::format("softmax scale {}", number(c.attention_scale)));
  return out;
}

std::string unrecognised_fields_warning(const ModelConfig& c, const std::string& source) {
  if (c.unrecognised_fields.empty()) return {};
  std::string names;
  for (const std::string& f : c.unrecognised_fields) names += (names.empty() ? "" : ", ") + f;
  return fmt::format("{}: config fields not recognised, ignored: {}", source, names);
}

}  // namespace refit

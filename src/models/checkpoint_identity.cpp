#include "models/checkpoint_identity.h"

#include <fmt/format.h>

#include <cmath>
#include <map>

#include "core/error.h"
#include "formats/hf_folder.h"
#include "models/tensor_table.h"

namespace refit {
namespace {

bool near(double a, double b) { return a == b || std::abs(a - b) <= 1e-5 * std::abs(b); }

std::string text(bool v) { return v ? "true" : "false"; }
std::string text(int64_t v) { return std::to_string(v); }
std::string text(float v) { return fmt::format("{}", v); }
std::string window_text(int64_t w) { return w > 0 ? std::to_string(w) : "none (full attention)"; }
std::string norms_text(NormPlacement n) { return n == NormPlacement::pre ? "pre" : "sandwich"; }
std::string style_text(ops::RopeStyle s) {
  return s == ops::RopeStyle::neox ? "rotate_half (neox)" : "adjacent pairs (gptj)";
}

// One layer's rope as what it computes: its frequencies for the served context, and the
// factor longrope and yarn multiply cos and sin by.
bool same_rotation(const RopeConfig& a, const RopeConfig& b, int64_t context) {
  if (a.dim != b.dim) return false;
  const std::vector<double> fa = rope_frequencies(a, context), fb = rope_frequencies(b, context);
  for (size_t i = 0; i < fa.size(); ++i)
    if (!near(fa[i], fb[i])) return false;
  auto mscale = [](const RopeConfig& r) {
    const bool scaled =
        r.scaling.kind == RopeScalingKind::longrope || r.scaling.kind == RopeScalingKind::yarn;
    return scaled ? r.scaling.attention_factor : 1.0f;
  };
  return near(mscale(a), mscale(b));
}

// Differences of per-layer settings, one entry per field: the first differing layer and
// how many layers differ.
class LayerDifferences {
 public:
  explicit LayerDifferences(int64_t n_layers) : n_layers_(n_layers) {}
  void add(const std::string& field, int64_t layer, std::string checkpoint, std::string served) {
    auto [it, fresh] = by_field_.try_emplace(field);
    if (fresh) {
      order_.push_back(field);
      it->second = {layer, 0, std::move(checkpoint), std::move(served)};
    }
    ++it->second.count;
  }
  void append_to(std::vector<ConfigDifference>& out) const {
    for (const std::string& field : order_) {
      const Entry& e = by_field_.at(field);
      std::string where =
          e.count == n_layers_ ? field
          : e.count == 1       ? fmt::format("{} (layer {})", field, e.layer)
                         : fmt::format("{} (layer {} and {} more)", field, e.layer, e.count - 1);
      out.push_back({where, e.checkpoint, e.served});
    }
  }

 private:
  struct Entry {
    int64_t layer = 0, count = 0;
    std::string checkpoint, served;
  };
  int64_t n_layers_;
  std::vector<std::string> order_;
  std::map<std::string, Entry> by_field_;
};

}  // namespace

std::vector<ConfigDifference> config_differences(const ModelConfig& a, const ModelConfig& b,
                                                 bool compare_tied) {
  std::vector<ConfigDifference> out;
  auto diff = [&](const char* field, const std::string& x, const std::string& y) {
    if (x != y) out.push_back({field, x, y});
  };
  auto diff_float = [&](const char* field, float x, float y) {
    if (!near(x, y)) out.push_back({field, text(x), text(y)});
  };
  diff("architecture (architectures / model_type)", architecture_name(a.arch),
       architecture_name(b.arch));
  diff("hidden_size", text(a.dim), text(b.dim));
  diff("num_hidden_layers", text(a.n_layers), text(b.n_layers));
  diff("num_attention_heads", text(a.n_heads), text(b.n_heads));
  diff("num_key_value_heads", text(a.n_kv_heads), text(b.n_kv_heads));
  diff("head_dim", text(a.head_dim), text(b.head_dim));
  diff("intermediate_size", text(a.ffn_dim), text(b.ffn_dim));
  diff("vocab_size", text(a.vocab_size), text(b.vocab_size));
  diff_float("rms_norm_eps", a.rms_eps, b.rms_eps);
  diff("attention_bias (q, k, v)", text(a.qkv_bias), text(b.qkv_bias));
  diff("attention_bias (o_proj)", text(a.o_bias), text(b.o_bias));
  diff("mlp_bias", text(a.mlp_bias), text(b.mlp_bias));
  diff("attention sinks", text(a.attention_sinks), text(b.attention_sinks));
  diff("num_experts", text(a.n_experts), text(b.n_experts));
  diff("num_experts_per_tok", text(a.n_experts_used), text(b.n_experts_used));
  diff("moe_intermediate_size", text(a.expert_ffn_dim), text(b.expert_ffn_dim));
  diff("router scoring", text(static_cast<int64_t>(a.router_scoring)),
       text(static_cast<int64_t>(b.router_scoring)));
  diff("norm_topk_prob", text(a.router_renormalize), text(b.router_renormalize));
  diff("router bias", text(a.router_bias), text(b.router_bias));
  diff("expert biases", text(a.expert_bias), text(b.expert_bias));
  if (compare_tied) diff("tie_word_embeddings", text(a.tied_embeddings), text(b.tied_embeddings));
  diff_float("embedding scale", a.embedding_scale, b.embedding_scale);
  diff_float("norm weight offset (1 + w)", a.norm_weight_offset, b.norm_weight_offset);
  diff_float("attention softmax scale (query_pre_attn_scalar)", a.softmax_scale(),
             b.softmax_scale());
  if (a.n_layers != b.n_layers) return out;
  LayerDifferences layers(a.n_layers);
  const int64_t context = b.max_seq_len;
  for (int64_t l = 0; l < a.n_layers; ++l) {
    const LayerConfig x = a.layer(l), y = b.layer(l);
    if (x.window != y.window)
      layers.add("sliding_window", l, window_text(x.window), window_text(y.window));
    if (x.qk_norm != y.qk_norm) layers.add("q/k norm", l, text(x.qk_norm), text(y.qk_norm));
    if (x.norms != y.norms)
      layers.add("norm placement", l, norms_text(x.norms), norms_text(y.norms));
    if (x.activation != y.activation)
      layers.add("hidden_act", l, activation_name(x.activation), activation_name(y.activation));
    if (x.ffn != y.ffn)
      layers.add("feed-forward kind", l, x.ffn == FfnKind::moe ? "experts" : "dense",
                 y.ffn == FfnKind::moe ? "experts" : "dense");
    if (x.rope.style != y.rope.style)
      layers.add("rope style", l, style_text(x.rope.style), style_text(y.rope.style));
    if (x.rope.dim != y.rope.dim)
      layers.add("rotary dims (partial_rotary_factor)", l, text(x.rope.dim), text(y.rope.dim));
    else if (!near(x.rope.theta, y.rope.theta))
      layers.add("rope_theta", l, text(x.rope.theta), text(y.rope.theta));
    else if (!same_rotation(x.rope, y.rope, context))
      layers.add("rope_scaling (rotary frequencies)", l, "other frequencies", "the served ones");
  }
  layers.append_to(out);
  return out;
}

void check_checkpoint_is_served_model(const Checkpoint& checkpoint, const ModelConfig& source,
                                      const ModelConfig& served) {
  // read_model_config takes a folder without lm_head as tied; a partial folder (an update
  // of some tensors) lacks it too, so there only what config.json declares counts.
  bool compare_tied = true;
  ModelConfig declared = source;
  if (const HfFolder* hf = checkpoint.hf()) {
    const ModelConfig said = config_from_hf_json(hf->config().dump(), hf->path() + "/config.json");
    const bool has_head = has_slot(said, TensorSlot::output) &&
                          hf->has_tensor(hf_tensor_name(said, TensorSlot::output));
    declared.tied_embeddings = said.tied_embeddings;
    compare_tied = said.tied_embeddings || has_head;
  }
  const std::vector<ConfigDifference> diffs = config_differences(declared, served, compare_tied);
  if (diffs.empty()) return;
  std::string list;
  for (const ConfigDifference& d : diffs)
    list += fmt::format("{}{}: checkpoint {}, served {}", list.empty() ? "" : "; ", d.field,
                        d.checkpoint, d.served);
  fail(
      "{}: its model does not match the served model ({}); a weight update replaces values "
      "and cannot change the architecture or its hyper-parameters",
      checkpoint.path(), list);
}

}  // namespace refit

#include "models/decoder_model.h"

#include <fmt/format.h>

#include "core/error.h"
#include "kernels/ops.h"
#include "models/stacked_experts.h"
#include "models/tensor_table.h"

namespace refit {
namespace {

std::string prefix_of(const std::string& weight_name) {  // "a.b.weight" -> "a.b"
  const size_t dot = weight_name.rfind('.');
  return dot == std::string::npos ? weight_name : weight_name.substr(0, dot);
}

// The fused parameter's name beside its parts: "...self_attn.q_proj" -> "...self_attn.qkv_proj".
std::string sibling(const std::string& prefix, const char* name) {
  const size_t dot = prefix.rfind('.');
  return (dot == std::string::npos ? std::string() : prefix.substr(0, dot + 1)) + name;
}

}  // namespace

DecoderModel::DecoderModel(const ModelConfig& config, DType weight_dtype, const TensorParallel& tp)
    : config_(config), weight_dtype_(weight_dtype), tp_(tp) {
  config_.validate("model config");
  const ModelConfig& c = config_;
  const std::string embed_name = hf_tensor_name(c, TensorSlot::token_embd);
  embed_ = std::make_unique<VocabParallelEmbedding>(params_, embed_name, c.vocab_size, c.dim,
                                                    weight_dtype, tp_);
  for (int64_t l = 0; l < c.n_layers; ++l) add_block(l);
  // Stacked forms, with the parts this rank holds (under --ep, its experts').
  for (CheckpointAlias& alias : stacked_expert_aliases(c)) {
    std::erase_if(alias.parts,
                  [&](const AliasPart& p) { return !params_.target(p.name).parameter; });
    params_.add_alias(std::move(alias));
  }
  final_norm_ = &params_.add(hf_tensor_name(c, TensorSlot::output_norm), {c.dim}, DType::f32);
  lm_head_ = std::make_unique<ParallelLmHead>(params_, hf_tensor_name(c, TensorSlot::output),
                                              c.vocab_size, c.dim, weight_dtype, tp_,
                                              c.tied_embeddings ? &embed_->weight() : nullptr);
}

namespace {

// Layer l's attention from the config and the architecture's tensor names.
AttentionSpec attention_spec(const ModelConfig& c, int64_t l, const LayerConfig& layer) {
  auto name = [&](TensorSlot s) { return hf_tensor_name(c, s, l); };
  AttentionSpec a;
  a.dim = c.dim;
  a.n_heads = c.n_heads;
  a.n_kv_heads = c.n_kv_heads;
  a.head_dim = c.head_dim;
  a.bias = c.qkv_bias;
  a.o_bias = c.o_bias;
  a.norm_eps = c.rms_eps;
  a.norm_weight_offset = c.norm_weight_offset;
  a.scale = c.softmax_scale();
  a.window = layer.window;
  a.rope_style = layer.rope.style;
  if (has_slot(c, TensorSlot::attn_qkv)) {  // stored fused: row ranges of one tensor
    const std::string fused = prefix_of(name(TensorSlot::attn_qkv));
    const int64_t total = c.q_dim() + 2 * c.kv_dim();
    a.qkv_name = fused;
    a.qkv = {{fused, c.q_dim(), c.head_dim, 0, total},
             {fused, c.kv_dim(), c.head_dim, c.q_dim(), total},
             {fused, c.kv_dim(), c.head_dim, c.q_dim() + c.kv_dim(), total}};
  } else {
    const std::string q = prefix_of(name(TensorSlot::attn_q));
    a.qkv_name = sibling(q, "qkv_proj");
    a.qkv = {{q, c.q_dim(), c.head_dim},
             {prefix_of(name(TensorSlot::attn_k)), c.kv_dim(), c.head_dim},
             {prefix_of(name(TensorSlot::attn_v)), c.kv_dim(), c.head_dim}};
  }
  a.o_proj = prefix_of(name(TensorSlot::attn_output));
  if (layer.qk_norm) {
    a.q_norm = name(TensorSlot::attn_q_norm);
    a.k_norm = name(TensorSlot::attn_k_norm);
  }
  if (c.attention_sinks) a.sinks = name(TensorSlot::attn_sinks);
  return a;
}

// Layer l's FFN from the config and the architecture's tensor names.
FeedForwardSpec ffn_spec(const ModelConfig& c, int64_t l, const LayerConfig& layer) {
  auto name = [&](TensorSlot s) { return hf_tensor_name(c, s, l); };
  FeedForwardSpec f;
  f.dim = c.dim;
  f.hidden = c.ffn_dim;
  f.activation = layer.activation;
  f.bias = c.mlp_bias;
  if (has_slot(c, TensorSlot::ffn_gate_up)) {
    const std::string fused = prefix_of(name(TensorSlot::ffn_gate_up));
    f.gate_up_name = fused;
    f.gate_up = {{fused, c.ffn_dim, 1, 0, 2 * c.ffn_dim},
                 {fused, c.ffn_dim, 1, c.ffn_dim, 2 * c.ffn_dim}};
  } else {
    const std::string gate = prefix_of(name(TensorSlot::ffn_gate));
    f.gate_up_name = sibling(gate, "gate_up_proj");
    f.gate_up = {{gate, c.ffn_dim}, {prefix_of(name(TensorSlot::ffn_up)), c.ffn_dim}};
  }
  f.down_proj = prefix_of(name(TensorSlot::ffn_down));
  return f;
}

// Layer l's mixture of experts: the router, and per expert its checkpoint tensors, which
// fill the stacked parameters named beside them (vLLM's "...mlp.experts.w13_weight").
MoeSpec moe_spec(const ModelConfig& c, int64_t l) {
  MoeSpec m;
  m.router = hf_tensor_name(c, TensorSlot::ffn_router, l);
  if (c.router_bias) m.router_bias = hf_tensor_name(c, TensorSlot::ffn_router_bias, l);
  const std::string first = hf_expert_tensor_name(c, TensorSlot::ffn_gate_exps, l, 0);
  const size_t at = first.find(".experts.");
  if (at == std::string::npos) fail("{}: expert tensor names must contain '.experts.'", first);
  const std::string experts = first.substr(0, at) + ".experts.";
  m.gate_up_name = experts + "w13_weight";
  m.down_name = experts + "w2_weight";
  m.gate_up_bias_name = experts + "w13_bias";
  m.down_bias_name = experts + "w2_bias";
  for (int64_t e = 0; e < c.n_experts; ++e) {
    auto name = [&](TensorSlot s) { return hf_expert_tensor_name(c, s, l, e); };
    m.gate.push_back(name(TensorSlot::ffn_gate_exps));
    m.up.push_back(name(TensorSlot::ffn_up_exps));
    m.down.push_back(name(TensorSlot::ffn_down_exps));
    if (c.expert_bias) {
      m.gate_bias.push_back(name(TensorSlot::ffn_gate_exps_bias));
      m.up_bias.push_back(name(TensorSlot::ffn_up_exps_bias));
      m.down_bias.push_back(name(TensorSlot::ffn_down_exps_bias));
    }
  }
  m.dim = c.dim;
  m.hidden = c.expert_ffn_dim;
  m.n_experts = c.n_experts;
  m.n_used = c.n_experts_used;
  m.scoring = c.router_scoring;
  m.renormalize = c.router_renormalize;
  m.activation = c.expert_activation;
  m.swiglu_alpha = c.swiglu_alpha;
  m.swiglu_limit = c.swiglu_limit;
  return m;
}

}  // namespace

void DecoderModel::add_block(int64_t l) {
  const ModelConfig& c = config_;
  auto name = [&](TensorSlot s) { return hf_tensor_name(c, s, l); };
  Block b;
  b.config = c.layer(l);
  // Layers with the same rope settings share one table.
  size_t rope = 0;
  while (rope < ropes_.size() && !(ropes_[rope] == b.config.rope)) ++rope;
  if (rope == ropes_.size()) {
    ropes_.push_back(b.config.rope);
    rope_tables_.push_back(rope_cos_sin_table(b.config.rope, c.max_seq_len));
  }
  b.rope_table = static_cast<int64_t>(rope);

  // Parameters in checkpoint order: norm, attention, (post-norm), norm, FFN, (post-norm).
  const bool sandwich = b.config.norms == NormPlacement::sandwich;
  b.attn_norm = &params_.add(name(TensorSlot::attn_norm), {c.dim}, DType::f32);
  b.attention =
      std::make_unique<SelfAttention>(params_, attention_spec(c, l, b.config), weight_dtype_, tp_);
  if (sandwich)
    b.post_attn_norm = &params_.add(name(TensorSlot::post_attn_norm), {c.dim}, DType::f32);
  b.ffn_norm = &params_.add(name(TensorSlot::ffn_norm), {c.dim}, DType::f32);
  if (b.config.ffn == FfnKind::moe)
    b.moe = std::make_unique<MoeFeedForward>(params_, moe_spec(c, l), weight_dtype_, tp_);
  else
    b.ffn = std::make_unique<FeedForward>(params_, ffn_spec(c, l, b.config), weight_dtype_, tp_);
  if (sandwich)
    b.post_ffn_norm = &params_.add(name(TensorSlot::post_ffn_norm), {c.dim}, DType::f32);
  blocks_.push_back(std::move(b));
}

int64_t DecoderModel::local_kv_heads() const {
  return blocks_.empty() ? config_.n_kv_heads : blocks_[0].attention->local_kv_heads();
}

void DecoderModel::norm(const Tensor& x, const Parameter& w, Tensor& out) const {
  ops::rms_norm(x, w.data(), config_.rms_eps, out, config_.norm_weight_offset);
}

namespace {

// The batch's new tokens stacked into one activation: ids and positions per row, and the
// rows each sequence wants logits for (result.first_row / n_rows filled).
struct StackedBatch {
  Tensor ids, positions;
  std::vector<int64_t> logit_rows;
};

StackedBatch stack_batch(std::span<const BatchSequence> batch, int64_t max_seq_len,
                         BatchForwardResult& result) {
  const int64_t B = static_cast<int64_t>(batch.size());
  if (B == 0) fail("batched_forward: empty batch");
  int64_t N = 0;
  for (int64_t b = 0; b < B; ++b) {
    const BatchSequence& s = batch[static_cast<size_t>(b)];
    const int64_t T = static_cast<int64_t>(s.tokens.size());
    if (s.start_pos < 0 || s.start_pos + T > max_seq_len)
      fail("batched_forward: sequence {} positions {}..{} exceed the context of {}", b, s.start_pos,
           s.start_pos + T - 1, max_seq_len);
    if (T == 0 && s.logits != LogitsWanted::none)
      fail("batched_forward: sequence {} has no new tokens but wants logits", b);
    N += T;
  }
  if (N == 0) fail("batched_forward: no tokens in the batch");
  StackedBatch st{Tensor::empty({N}, DType::i32), Tensor::empty({N}, DType::i32), {}};
  int32_t* idp = st.ids.data<int32_t>();
  int32_t* pp = st.positions.data<int32_t>();
  int64_t row = 0;
  for (const BatchSequence& s : batch) {
    const int64_t T = static_cast<int64_t>(s.tokens.size());
    for (int64_t t = 0; t < T; ++t) {
      idp[row + t] = s.tokens[static_cast<size_t>(t)];
      pp[row + t] = static_cast<int32_t>(s.start_pos + t);
    }
    result.first_row.push_back(static_cast<int64_t>(st.logit_rows.size()));
    result.first_token.push_back(row);
    if (s.logits == LogitsWanted::all)
      for (int64_t t = 0; t < T; ++t) st.logit_rows.push_back(row + t);
    else if (s.logits == LogitsWanted::last)
      st.logit_rows.push_back(row + T - 1);
    result.n_rows.push_back(static_cast<int64_t>(st.logit_rows.size()) - result.first_row.back());
    row += T;
  }
  return st;
}

}  // namespace

BatchForwardResult DecoderModel::forward(std::span<const BatchSequence> batch, KvStore& kv) const {
  BatchForwardResult result;
  const StackedBatch st = stack_batch(batch, config_.max_seq_len, result);
  kv.begin(batch);
  Tensor x = embed_->forward(st.ids);  // [N, dim]
  if (config_.embedding_scale != 1.0f) ops::scale(x, config_.embedding_scale, x);
  Tensor h = Tensor::empty({x.size(0), config_.dim}, DType::f32);
  const Tensor forced = forced_routing(batch, result);
  int64_t moe_layer = 0;
  for (size_t l = 0; l < blocks_.size(); ++l) {
    const Block& blk = blocks_[l];
    norm(x, *blk.attn_norm, h);
    Tensor o =
        blk.attention->forward(h, st.positions, rope_tables_[static_cast<size_t>(blk.rope_table)],
                               static_cast<int64_t>(l), kv);
    if (blk.post_attn_norm) norm(o, *blk.post_attn_norm, o);
    ops::add(x, o, x);
    norm(x, *blk.ffn_norm, h);
    Tensor f;
    if (blk.moe) {
      MoeRouting routing{forced.defined() ? forced.select(1, moe_layer).contiguous() : Tensor(),
                         result.routed_experts.select(1, moe_layer)};
      f = blk.moe->forward(h, routing);
      ++moe_layer;
    } else {
      f = blk.ffn->forward(h);
    }
    if (blk.post_ffn_norm) norm(f, *blk.post_ffn_norm, f);
    ops::add(x, f, x);
  }
  result.logits = logits(x, st.logit_rows);
  return result;
}

Tensor DecoderModel::forced_routing(std::span<const BatchSequence> batch,
                                    BatchForwardResult& result) const {
  int64_t moe_layers = 0;
  for (const Block& b : blocks_) moe_layers += b.moe != nullptr;
  if (moe_layers == 0) return Tensor();
  const int64_t k = config_.n_experts_used,
                N = result.first_token.empty()
                        ? 0
                        : result.first_token.back() +
                              static_cast<int64_t>(batch.back().tokens.size());
  result.routed_experts = Tensor::empty({N, moe_layers, k}, DType::i32);
  Tensor forced;
  for (size_t b = 0; b < batch.size(); ++b) {
    const std::span<const int32_t> f = batch[b].forced_experts;
    if (f.empty()) continue;
    const int64_t per_token = moe_layers * k, n = static_cast<int64_t>(f.size()) / per_token;
    if (n * per_token != static_cast<int64_t>(f.size()) ||
        n > static_cast<int64_t>(batch[b].tokens.size()))
      fail(
          "batched_forward: sequence {}'s forced routing has {} ids, not [<= {} tokens, {} "
          "layers, {}]",
          b, f.size(), batch[b].tokens.size(), moe_layers, k);
    if (!forced.defined()) {
      forced = Tensor::empty({N, moe_layers, k}, DType::i32);
      std::fill_n(forced.data<int32_t>(), forced.numel(), -1);
    }
    std::copy(f.begin(), f.end(), forced.data<int32_t>() + result.first_token[b] * per_token);
  }
  return forced;
}

Tensor DecoderModel::logits(const Tensor& x, const std::vector<int64_t>& rows) const {
  const int64_t R = static_cast<int64_t>(rows.size());
  if (R == 0) return Tensor::empty({0, config_.vocab_size}, DType::f32);
  Tensor picked = Tensor::empty({R, config_.dim}, DType::f32);
  for (int64_t r = 0; r < R; ++r)
    picked.select(0, r).copy_from(x.select(0, rows[static_cast<size_t>(r)]));
  Tensor normed = Tensor::empty({R, config_.dim}, DType::f32);
  norm(picked, *final_norm_, normed);
  return lm_head_->forward(normed);
}

}  // namespace refit

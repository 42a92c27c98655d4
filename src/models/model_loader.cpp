#include "models/model_loader.h"

#include <fmt/format.h>

#include <optional>
#include <regex>
#include <unordered_set>

#include "core/error.h"
#include "core/float_formats.h"
#include "formats/gguf_finite.h"
#include "formats/gguf_types.h"
#include "kernels/weight_layout.h"
#include "models/config_fields.h"
#include "models/fp8_checkpoint_tensor.h"
#include "models/gguf_block_codes.h"
#include "models/stacked_experts.h"
#include "models/tensor_table.h"
#include "weights/finite_scan.h"

namespace refit {
namespace {

bool is_plain_ggml(GgmlType t) {
  return t == GgmlType::f32 || t == GgmlType::f16 || t == GgmlType::bf16;
}

DType dtype_of_ggml(GgmlType t) {
  switch (t) {
    case GgmlType::f16:
      return DType::f16;
    case GgmlType::bf16:
      return DType::bf16;
    default:
      return DType::f32;  // f32, and quantized types dequantized at load
  }
}

ModelConfig config_from_llama2c(const Llama2cModel& m) {
  const Llama2cConfig& h = m.config();
  ModelConfig c;
  c.arch = Architecture::llama;
  c.dim = h.dim;
  c.n_layers = h.n_layers;
  c.n_heads = h.n_heads;
  c.n_kv_heads = h.n_kv_heads;
  c.head_dim = h.n_heads > 0 ? h.dim / h.n_heads : 0;
  c.ffn_dim = h.hidden_dim;
  c.vocab_size = h.vocab_size;
  c.max_seq_len = h.seq_len;
  c.rms_eps = 1e-5f;
  c.rope_theta = 10000.0f;
  // run.c rotates adjacent pairs of the original (Meta) q/k row order; the loader
  // permutes q/k rows to Hugging Face order, where rotate_half ("neox") is the same rope.
  c.rope_style = ops::RopeStyle::neox;
  c.tied_embeddings = h.shared_classifier;
  c.bos_id = 1;
  c.eos_id = 2;
  return c;
}

// llama2.c stores each kind of tensor for all layers together: [L, ...].
Tensor llama2c_tensor(const Llama2cModel& m, const std::string& name) {
  static const std::regex layer_re(R"(model\.layers\.(\d+)\.(.+))");
  std::smatch match;
  if (std::regex_match(name, match, layer_re)) {
    int64_t l = std::stoll(match[1]);
    static const std::pair<const char*, const char*> map[] = {
        {"input_layernorm.weight", "rms_att_weight"},
        {"self_attn.q_proj.weight", "wq"},
        {"self_attn.k_proj.weight", "wk"},
        {"self_attn.v_proj.weight", "wv"},
        {"self_attn.o_proj.weight", "wo"},
        {"post_attention_layernorm.weight", "rms_ffn_weight"},
        {"mlp.gate_proj.weight", "w1"},
        {"mlp.down_proj.weight", "w2"},
        {"mlp.up_proj.weight", "w3"}};
    for (auto [suffix, file_name] : map)
      if (match[2] == suffix) {
        const Tensor* t = m.find_tensor(file_name);
        if (!t || l >= t->size(0)) return Tensor();
        Tensor layer = t->select(0, l);
        if (match[2] == "self_attn.q_proj.weight")
          return permute_rows_for_gguf_rope(layer, m.config().n_heads, true);
        if (match[2] == "self_attn.k_proj.weight")
          return permute_rows_for_gguf_rope(layer, m.config().n_kv_heads, true);
        return layer;
      }
    return Tensor();
  }
  if (name == "model.embed_tokens.weight") return m.tensor("token_embedding_table");
  if (name == "model.norm.weight") return m.tensor("rms_final_weight");
  if (name == "lm_head.weight") {
    const Tensor* t = m.find_tensor("wcls");
    return t ? *t : Tensor();
  }
  return Tensor();
}

}  // namespace

ModelConfig read_model_config(const Checkpoint& ck) {
  ModelConfig c;
  switch (ck.format()) {
    case CheckpointFormat::gguf: {
      const GgufFile& g = *ck.gguf();
      c = config_from_gguf(g.metadata());
      const GgufTensorInfo* embd = g.find_tensor("token_embd.weight");
      if (!embd) throw FormatError(fmt::format("{}: no token_embd.weight tensor", g.path()));
      if (embd->shape.size() != 2)
        throw FormatError(fmt::format("{}: token_embd.weight must be 2-d", g.path()));
      c.vocab_size = embd->shape[0];
      c.tied_embeddings = g.find_tensor("output.weight") == nullptr;
      if (const GgufTensorInfo* q = g.find_tensor(first_block_matmul(c).gguf_name))
        c.weight_dtype = dtype_of_ggml(q->type);
      // LongRoPE (Phi-3): per-frequency factors for within and beyond the original context.
      if (g.find_tensor("rope_factors_long.weight") && g.find_tensor("rope_factors_short.weight")) {
        c.rope_scaling.kind = RopeScalingKind::longrope;
        c.rope_scaling.short_factors = g.dequantize("rope_factors_short.weight").to_floats();
        c.rope_scaling.long_factors = g.dequantize("rope_factors_long.weight").to_floats();
      }
      if (g.find_tensor("rope_freqs.weight")) {
        Tensor f = g.dequantize("rope_freqs.weight");
        c.rope_freq_factors = f.to_floats();
      }
      c.validate(g.path());
      break;
    }
    case CheckpointFormat::hf_folder:
    case CheckpointFormat::safetensors: {
      const HfFolder* hf = ck.hf();
      if (!hf) fail("{}: a lone .safetensors file has no config.json; pass its folder", ck.path());
      c = config_from_hf_json(hf->config().dump(), hf->path() + "/config.json");
      // Never silently: what the config says that refit does not know is said at load.
      if (std::string w = unrecognised_fields_warning(c, hf->path() + "/config.json"); !w.empty())
        fmt::print(stderr, "refit: warning: {}\n", w);
      if (!hf->has_tensor(hf_tensor_name(c, TensorSlot::output))) c.tied_embeddings = true;
      const std::string q = first_block_matmul(c).hf_name;
      if (hf->has_tensor(q)) {
        DType dt = hf->tensor_info(q).dtype;
        c.weight_dtype = (dt == DType::bf16 || dt == DType::f16) ? dt : DType::f32;
      }
      break;
    }
    case CheckpointFormat::llama2c:
      c = config_from_llama2c(*ck.llama2c());
      c.validate(ck.path());
      break;
  }
  return c;
}

CheckpointWeights::CheckpointWeights(const Checkpoint& checkpoint, const ModelConfig& config)
    : checkpoint_(checkpoint) {
  if (checkpoint.format() == CheckpointFormat::gguf)
    for (const TensorSpec& s : model_tensor_specs(config)) {
      gguf_names_[s.hf_name] = s.gguf_name;
      if (s.expert >= 0) gguf_experts_[s.hf_name] = s.expert;
      if (s.gguf_rope_permute_heads > 0 || s.gguf_offset != 0.0f)
        gguf_changes_[s.hf_name] = {s.gguf_rope_permute_heads, s.gguf_offset};
    }
  if (checkpoint.hf()) {
    stacked_ = stacked_expert_aliases(config);
    for (size_t a = 0; a < stacked_.size(); ++a)
      for (size_t p = 0; p < stacked_[a].parts.size(); ++p)
        stacked_parts_[stacked_[a].parts[p].name].push_back({a, p});
  }
}

bool CheckpointWeights::find_stacked(const std::string& name, Lazy* out) const {
  auto it = stacked_parts_.find(name);
  if (it == stacked_parts_.end()) return false;
  const HfFolder& hf = *checkpoint_.hf();
  for (auto [a, p] : it->second) {
    const CheckpointAlias& alias = stacked_[a];
    if (alias.form == AliasForm::mxfp4_scales || !hf.has_tensor(alias.name)) continue;
    auto checked = [&](const CheckpointAlias& form) {
      Tensor t = hf.tensor(form.name);
      try {
        check_alias_tensor(form, t);
      } catch (const Error& e) {
        fail("{}: {}", hf.path(), e.what());
      }
      return t;
    };
    const AliasPart& part = alias.parts[p];
    if (alias.form == AliasForm::values) {
      out->view = alias_part_view(part, checked(alias));
      return true;
    }
    // MXFP4 blocks: decoded at use from them and their scales (both views of the files).
    if (!hf.has_tensor(alias.partner))
      fail("{}: '{}' has no '{}' beside it", hf.path(), alias.name, alias.partner);
    const CheckpointAlias* scales_alias = nullptr;
    for (const CheckpointAlias& other : stacked_)
      if (other.name == alias.partner) scales_alias = &other;
    if (!scales_alias) fail("{}: no stacked form '{}'", hf.path(), alias.partner);
    const Tensor blocks = checked(alias), scales = checked(*scales_alias);
    const Tensor mine = alias_part_view(part, blocks);  // [rows, K/32, 16]
    out->shape = {mine.size(0), mine.size(1) * 32};
    out->dtype = DType::f32;
    out->produce = [part, blocks, scales] { return decode_mxfp4_part(part, blocks, scales); };
    out->codes = mxfp4_part_codes(part, blocks, scales);
    out->non_finite = [part, scales, one = *scales_alias]() mutable -> std::string {
      const Tensor s = alias_part_view(part, scales);
      one.shape = s.shape();  // the part's own scales, named after the stacked tensor
      return mxfp4_scales_non_finite(one, s);
    };
    return true;
  }
  return false;
}

Tensor CheckpointWeights::find(const std::string& name) const {
  const Checkpoint& ck = checkpoint_;
  switch (ck.format()) {
    case CheckpointFormat::gguf: {
      const GgufFile& g = *ck.gguf();
      auto it = gguf_names_.find(name);
      if (it == gguf_names_.end()) return Tensor();
      const GgufTensorInfo* info = g.find_tensor(it->second);
      if (!info) return Tensor();
      if (auto expert = gguf_experts_.find(name); expert != gguf_experts_.end())
        return gguf_expert_tensor(g, it->second, expert->second);
      Tensor t = is_plain_ggml(info->type) ? g.tensor(it->second) : g.dequantize(it->second);
      auto change = gguf_changes_.find(name);
      return change == gguf_changes_.end() ? t : undo_gguf_change(t, change->second);
    }
    case CheckpointFormat::hf_folder:
    case CheckpointFormat::safetensors:
      if (ck.hf() && !ck.hf()->has_tensor(name)) {
        Lazy stacked;
        if (!find_stacked(name, &stacked)) return Tensor();
        return stacked.view.defined() ? stacked.view : stacked.produce();
      }
      if (!ck.hf()) return Tensor();
      // FP8 by value (code * scale); a parameter of the file's scheme takes the codes
      // themselves instead (fp8_codes_to_store, in load_weights and refit from disk).
      if (auto fp8 = read_hf_fp8(*ck.hf(), name)) return decode_fp8(*fp8);
      return ck.hf()->tensor(name);
    case CheckpointFormat::llama2c:
      return llama2c_tensor(*ck.llama2c(), name);
  }
  return Tensor();
}

bool CheckpointWeights::find_lazy(const std::string& name, Lazy* out) const {
  if (checkpoint_.format() == CheckpointFormat::gguf) {
    auto it = gguf_names_.find(name);
    if (it == gguf_names_.end()) return false;
    const GgufTensorInfo* info = checkpoint_.gguf()->find_tensor(it->second);
    if (!info) return false;
    if (auto expert = gguf_experts_.find(name); expert != gguf_experts_.end()) {
      if (is_plain_ggml(info->type)) {  // one expert of a stacked tensor: a view
        out->view = find(name);
        return true;
      }
      // Quantized: that expert's blocks decoded when the load or commit writes it, so
      // memory stays at one expert however many the checkpoint has.
      out->shape = Shape(info->shape.begin() + 1, info->shape.end());
      out->dtype = DType::f32;
      const GgufFile* file = checkpoint_.gguf();
      out->produce = [file, gguf_name = it->second, e = expert->second] {
        return gguf_expert_tensor(*file, gguf_name, e);
      };
      out->codes = gguf_block_codes(*file, it->second, expert->second);
      return true;
    }
    auto change_it = gguf_changes_.find(name);
    const bool changed = change_it != gguf_changes_.end();
    if (is_plain_ggml(info->type) && !changed) {
      out->view = checkpoint_.gguf()->tensor(it->second);
      return true;
    }
    out->shape = info->shape;
    out->dtype = dtype_of_ggml(info->type);
    // Captures the file, not this object: the producer runs at commit, possibly after
    // this lookup is gone (the caller keeps the checkpoint alive until then).
    const GgufFile* file = checkpoint_.gguf();
    const std::string gguf_name = it->second;
    const bool plain = is_plain_ggml(info->type);
    const GgufChangeToUndo change = changed ? change_it->second : GgufChangeToUndo{};
    out->produce = [file, gguf_name, plain, change] {
      Tensor t = plain ? file->tensor(gguf_name) : file->dequantize(gguf_name);
      return undo_gguf_change(t, change);
    };
    if (!plain && change.offset == 0.0f)
      out->codes = gguf_block_codes(*file, gguf_name, -1, change.rope_permute_heads);
    // The converter's changes (row order, + offset) keep finite values finite, so the
    // file's own values (or Q8_0 / Q4_0 scales) say whether the produced tensor is finite.
    if (plain || gguf_finite_scan_supported(info->type))
      out->non_finite = [file, gguf_name, plain]() -> std::string {
        if (!plain) return scan_gguf_finite(file->raw(gguf_name)).problem;
        const std::optional<NonFinite> bad = find_non_finite(file->tensor(gguf_name));
        if (!bad) return "";
        std::string at;
        for (int64_t i : bad->index) at += fmt::format("{}{}", at.empty() ? "" : ", ", i);
        return fmt::format("element [{}] of GGUF tensor '{}' is {}", at, gguf_name, bad->value);
      };
    return true;
  }
  if (checkpoint_.hf() && !checkpoint_.hf()->has_tensor(name)) return find_stacked(name, out);
  out->view = find(name);
  return out->view.defined();
}

Tensor gguf_expert_tensor(const GgufFile& g, const std::string& name, int64_t expert) {
  const GgufTensorInfo& info = g.tensor_info(name);
  // Weights stack [E, out, in], per-expert biases [E, n].
  if (info.shape.size() < 2 || info.shape.size() > 3 || expert < 0 || expert >= info.shape[0])
    throw FormatError(fmt::format("{}: '{}' {} does not stack expert {} along its outermost dim",
                                  g.path(), name, shape_str(info.shape), expert));
  if (is_plain_ggml(info.type)) return g.tensor(name).select(0, expert);
  // Experts are whole blocks of rows: expert e's bytes are the e-th E-th of the tensor.
  const GgmlTensorView raw = g.raw(name);
  const int64_t per_expert = static_cast<int64_t>(info.nbytes) / info.shape[0];
  Tensor out = Tensor::empty(Shape(info.shape.begin() + 1, info.shape.end()), DType::f32);
  dequantize_row(info.type, raw.bytes.data<const uint8_t>() + expert * per_expert,
                 static_cast<size_t>(per_expert), out.data<float>(), out.numel());
  return out;
}

Tensor undo_gguf_change(const Tensor& t, const GgufChangeToUndo& change) {
  Tensor out = t;
  // llama.cpp's converter permuted q/k rows for its adjacent-pair rope; undo it so
  // parameters hold Hugging Face order (refit's canonical form) and use rotate_half.
  if (change.rope_permute_heads > 0)
    out = permute_rows_for_gguf_rope(out, change.rope_permute_heads, true);
  // Gemma's converter stored norm weights as (1 + w): the parameter holds w.
  if (change.offset != 0.0f) {
    Tensor f = Tensor::empty(out.shape(), DType::f32);
    const std::vector<float> values = out.to_floats();
    for (size_t i = 0; i < values.size(); ++i) f.data<float>()[i] = values[i] - change.offset;
    out = f;
  }
  return out;
}

void load_weights(Model& model, const Checkpoint& ck, const LoadOptions& options) {
  const ParameterSet& params = model.parameters();
  const std::vector<std::string> names = params.checkpoint_names();
  CheckpointWeights weights(ck, model.config());
  // Check every tensor exists and fits before writing any (a bad file changes nothing).
  // Views of the file cost nothing; a tensor that must be converted (dequantized, re-ordered)
  // is declared now and made when it is written, so memory stays at one such tensor.
  std::vector<CheckpointWeights::Lazy> tensors;
  std::vector<std::optional<Fp8CheckpointTensor>> codes;  // FP8 stored as it is
  std::vector<bool> as_blocks;                            // Q8_0 / MXFP4 blocks stored as they are
  for (const std::string& name : names) {
    CheckpointTarget target = params.target(name);
    codes.push_back(fp8_codes_to_store(ck, name, *target.parameter));
    CheckpointWeights::Lazy t;
    if (!codes.back() && !weights.find_lazy(name, &t))
      fail("{}: checkpoint has no tensor '{}'", ck.path(), name);
    try {
      // Declared like any produced tensor below; stored as codes when the parameter can.
      as_blocks.push_back(
          !codes.back() &&
          target.parameter->block_codes_unsupported_reason(*target.sub_shard, t.codes).empty());
      if (codes.back())
        target.parameter->check_codes_loadable(*target.sub_shard, codes.back()->codes,
                                               codes.back()->scales, codes.back()->method);
      else if (t.view.defined())
        target.parameter->check_loadable(*target.sub_shard, t.view);
      else
        target.parameter->check_declared(*target.sub_shard, t.shape, t.dtype, Device::cpu());
    } catch (const Error& e) {
      fail("{}: {}", ck.path(), e.what());
    }
    tensors.push_back(std::move(t));
  }
  for (size_t i = 0; i < names.size(); ++i) {
    CheckpointTarget target = params.target(names[i]);
    if (codes[i])
      target.parameter->load_codes(*target.sub_shard, codes[i]->codes, codes[i]->scales,
                                   codes[i]->method);
    else if (as_blocks[i])
      target.parameter->load_block_codes(*target.sub_shard, tensors[i].codes);
    else if (tensors[i].view.defined())
      target.parameter->load(*target.sub_shard, tensors[i].view);
    else
      target.parameter->load(*target.sub_shard, tensors[i].produce());
    tensors[i] = {};  // views keep the file's pages referenced no longer than needed
    if (options.progress) options.progress(i + 1, names.size());
  }
}

void apply_weight_layout(Model& model, const std::string& layout) {
  // "auto" (the default): each weight in the layout its fastest kernel reads, as the
  // kernels say (kernels/weight_layout.h). Today that is the interleave for q8_0-w8a8
  // codes where the AVX-512 VNNI kernel runs (prefill 10-28% faster on `medium`, decode
  // within noise: bench/RESULTS.md, session 8) and plain for everything else.
  const bool automatic = layout.empty() || layout == "auto";
  std::optional<LayoutTransform> forced;
  if (layout == "transpose")
    forced = LayoutTransform::transpose;
  else if (layout == "shuffle16x16" || layout == "shuffle_16x16" || layout == "shuffle")
    forced = LayoutTransform::shuffle_16x16;
  else if (layout == "interleave4x16" || layout == "interleave_4x16" || layout == "interleave")
    forced = LayoutTransform::interleave_4x16;
  else if (!automatic && layout != "plain")
    fail("unknown weight layout '{}' (use auto, plain, transpose, shuffle16x16 or interleave4x16)",
         layout);
  if (!automatic && !forced) return;
  const std::string embedding = hf_tensor_name(model.config(), TensorSlot::token_embd);
  // Stacked experts stay in plain row order: each expert's matmul reads its row range.
  std::unordered_set<std::string> expert_tensors;
  for (const TensorSpec& s : model_tensor_specs(model.config()))
    if (s.expert >= 0) expert_tensors.insert(s.hf_name);
  for (const auto& p : model.parameters().all()) {
    if (p->local_shape().size() != 2 || p->name() == embedding) continue;
    if (!p->sub_shards().empty() && expert_tensors.count(p->sub_shards()[0].checkpoint_name))
      continue;
    std::optional<LayoutTransform> t = forced;
    if (automatic && preferred_weight_layout(p->quantization(), p->logical_dtype(),
                                             p->local_shape()) == Layout::interleaved_4x16)
      t = LayoutTransform::interleave_4x16;
    if (t && p->transform_unsupported_reason(*t).empty()) p->apply_transform(*t);
  }
}

void limit_context(ModelConfig& config, int64_t max_model_len, const std::string& source) {
  if (max_model_len == 0) return;
  if (max_model_len < 0 || max_model_len > config.max_seq_len)
    fail("{}: max_model_len {} must be positive and at most the model's context of {} positions",
         source, max_model_len, config.max_seq_len);
  config.max_seq_len = max_model_len;
}

std::unique_ptr<Model> load_model(const Checkpoint& ck, const LoadOptions& options) {
  ModelConfig config = read_model_config(ck);
  limit_context(config, options.max_model_len, ck.path());
  auto model = create_model(config, config.weight_dtype, options.tensor_parallel);
  load_weights(*model, ck, options);
  return model;
}

std::unique_ptr<Model> load_model(const std::string& path, const LoadOptions& options) {
  auto ck = Checkpoint::open(path);
  auto model = load_model(*ck, options);
  ck->check_unchanged();  // a file truncated under the load read zeros: refuse them
  return model;
}

}  // namespace refit

#include "synthetic/synthetic_checkpoint.h"

#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/file_sink.h"
#include "formats/gguf_quantize.h"
#include "formats/gguf_writer.h"
#include "formats/safetensors_writer.h"
#include "models/stacked_experts.h"
#include "models/tensor_table.h"
#include "synthetic/synthetic_model.h"
#include "synthetic/synthetic_vocab.h"

namespace refit {

namespace {

void check_dtype(DType d) {
  if (d != DType::f32 && d != DType::f16 && d != DType::bf16)
    fail("synthetic checkpoint: weight dtype {} is not supported (f32, f16 or bf16)",
         dtype_name(d));
}

std::string default_name(const ModelConfig& c, const SyntheticCheckpointOptions& o) {
  return o.name.empty()
             ? fmt::format("synthetic-{}-{}d-s{}", architecture_name(c.arch), c.dim, o.seed)
             : o.name;
}

// A float as JSON with its shortest decimal form (1e-05, not 9.999999747378752e-06).
double json_float(float v) { return std::stod(fmt::format("{}", v)); }

void write_text_file(const std::string& path, const std::string& text) {
  FileSink sink(path);
  sink.write(text.data(), text.size());
  sink.finish();
}

const char* torch_dtype_name(DType d) {
  return d == DType::bf16 ? "bfloat16" : d == DType::f16 ? "float16" : "float32";
}

}  // namespace

uint32_t gguf_file_type(DType weight_dtype, bool q8_0, bool mxfp4_experts) {
  if (q8_0) return 7;            // LLAMA_FTYPE_MOSTLY_Q8_0
  if (mxfp4_experts) return 38;  // LLAMA_FTYPE_MOSTLY_MXFP4_MOE
  switch (weight_dtype) {
    case DType::f32:
      return 0;  // LLAMA_FTYPE_ALL_F32
    case DType::f16:
      return 1;  // LLAMA_FTYPE_MOSTLY_F16
    case DType::bf16:
      return 32;  // LLAMA_FTYPE_MOSTLY_BF16
    default:
      fail("GGUF file type: no llama_ftype for {} weights", dtype_name(weight_dtype));
  }
}

nlohmann::json hf_config_json(const ModelConfig& c, DType weight_dtype, bool mxfp4_experts) {
  nlohmann::json j;
  const char* architecture = "LlamaForCausalLM";
  const char* model_type = "llama";
  switch (c.arch) {
    case Architecture::llama:
      break;
    case Architecture::mistral:
      architecture = "MistralForCausalLM", model_type = "mistral";
      break;
    case Architecture::qwen2:
      architecture = "Qwen2ForCausalLM", model_type = "qwen2";
      break;
    case Architecture::qwen3:
      architecture = "Qwen3ForCausalLM", model_type = "qwen3";
      break;
    case Architecture::gemma3:
      architecture = "Gemma3ForCausalLM", model_type = "gemma3_text";
      break;
    case Architecture::phi3:
      architecture = "Phi3ForCausalLM", model_type = "phi3";
      break;
    case Architecture::qwen3moe:
      architecture = "Qwen3MoeForCausalLM", model_type = "qwen3_moe";
      break;
    case Architecture::gpt_oss:
      architecture = "GptOssForCausalLM", model_type = "gpt_oss";
      break;
  }
  j["architectures"] = {architecture};
  j["model_type"] = model_type;
  j["hidden_size"] = c.dim;
  j["intermediate_size"] = c.ffn_dim;
  j["num_hidden_layers"] = c.n_layers;
  j["num_attention_heads"] = c.n_heads;
  j["num_key_value_heads"] = c.n_kv_heads;
  j["head_dim"] = c.head_dim;
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = c.max_seq_len;
  j["rms_norm_eps"] = json_float(c.rms_eps);
  j["rope_theta"] = json_float(c.rope_theta);
  j["rope_scaling"] = nullptr;
  j["vocab_size"] = c.vocab_size;
  j["tie_word_embeddings"] = c.tied_embeddings;
  j["torch_dtype"] = torch_dtype_name(weight_dtype);
  j["bos_token_id"] = c.bos_id;
  j["eos_token_id"] = c.eos_id;
  j["initializer_range"] = 0.02;
  j["attention_dropout"] = 0.0;
  j["use_cache"] = true;
  j["transformers_version"] = "4.51.0";
  switch (c.arch) {
    case Architecture::llama:
      j["attention_bias"] = c.qkv_bias || c.o_bias;  // transformers: q, k, v and o together
      j["mlp_bias"] = c.mlp_bias;
      j["pretraining_tp"] = 1;
      break;
    case Architecture::mistral:
      j["sliding_window"] = nullptr;
      break;
    case Architecture::qwen2:  // q/k/v biases are implied by the architecture
    case Architecture::qwen3:
      if (c.arch == Architecture::qwen3) j["attention_bias"] = c.qkv_bias || c.o_bias;
      j["use_sliding_window"] = false;
      j["sliding_window"] = c.max_seq_len;
      j["max_window_layers"] = c.n_layers;
      break;
    case Architecture::gemma3: {
      j.erase("hidden_act");
      j["hidden_activation"] = "gelu_pytorch_tanh";
      j["query_pre_attn_scalar"] = c.head_dim;
      j["rope_local_base_freq"] = json_float(c.layer(0).rope.theta);
      nlohmann::json kinds = nlohmann::json::array();
      for (int64_t l = 0; l < c.n_layers; ++l) {
        const int64_t w = c.layer(l).window;
        if (w > 0) j["sliding_window"] = w;
        kinds.push_back(w > 0 ? "sliding_attention" : "full_attention");
      }
      j["layer_types"] = kinds;
      j["final_logit_softcapping"] = nullptr;
      j["attn_logit_softcapping"] = nullptr;
      break;
    }
    case Architecture::phi3:
      j["sliding_window"] = nullptr;
      break;
    case Architecture::qwen3moe: {
      j["attention_bias"] = c.qkv_bias || c.o_bias;
      j["use_sliding_window"] = false;
      j["sliding_window"] = nullptr;
      j["max_window_layers"] = c.n_layers;
      j["num_experts"] = c.n_experts;
      j["num_experts_per_tok"] = c.n_experts_used;
      j["moe_intermediate_size"] = c.expert_ffn_dim;
      j["norm_topk_prob"] = c.router_renormalize;
      j["decoder_sparse_step"] = 1;
      nlohmann::json dense = nlohmann::json::array();
      for (int64_t l = 0; l < c.n_layers; ++l)
        if (c.layer(l).ffn != FfnKind::moe) dense.push_back(l);
      j["mlp_only_layers"] = dense;
      j["output_router_logits"] = false;
      j["router_aux_loss_coef"] = 0.001;
      break;
    }
    case Architecture::gpt_oss: {
      j["intermediate_size"] = c.expert_ffn_dim;
      j["attention_bias"] = true;
      j["num_local_experts"] = c.n_experts;
      j["num_experts_per_tok"] = c.n_experts_used;
      j["experts_per_token"] = c.n_experts_used;
      j["swiglu_limit"] = json_float(c.swiglu_limit);
      nlohmann::json kinds = nlohmann::json::array();
      j["sliding_window"] = nullptr;
      for (int64_t l = 0; l < c.n_layers; ++l) {
        const int64_t w = c.layer(l).window;
        if (w > 0) j["sliding_window"] = w;
        kinds.push_back(w > 0 ? "sliding_attention" : "full_attention");
      }
      j["layer_types"] = kinds;
      j["initial_context_length"] = c.max_seq_len;
      j["output_router_logits"] = false;
      j["router_aux_loss_coef"] = 0.9;
      break;
    }
  }
  if (mxfp4_experts) {
    if (c.arch != Architecture::gpt_oss)
      fail("synthetic checkpoint: MXFP4 experts are written for gpt-oss only");
    j["quantization_config"] = {{"quant_method", "mxfp4"},
                                {"modules_to_not_convert",
                                 {"model.layers.*.self_attn", "model.layers.*.mlp.router",
                                  "model.embed_tokens", "lm_head"}}};
  }
  return j;
}

nlohmann::json hf_generation_config_json(const ModelConfig& c) {
  return {{"_from_model_config", true},
          {"bos_token_id", c.bos_id},
          {"eos_token_id", c.eos_id},
          {"transformers_version", "4.51.0"}};
}

namespace {

// One safetensors entry of a synthetic HF folder: a tensor of the table, or a stacked form
// holding several of them (gpt-oss's experts, as transformers stores them).
struct HfItem {
  SafetensorsEntry entry;
  std::shared_ptr<const TensorSpec> spec;                // a table tensor, or
  std::shared_ptr<const CheckpointAlias> alias;          // a stacked form
  std::vector<std::shared_ptr<const TensorSpec>> parts;  // its parts' specs
};

std::vector<HfItem> hf_items(const ModelConfig& c, const SyntheticCheckpointOptions& o) {
  std::unordered_map<std::string, std::shared_ptr<const CheckpointAlias>> stacked_by_part;
  for (CheckpointAlias& a : stacked_expert_aliases(c)) {
    const bool weight = a.form != AliasForm::values || a.shape.size() == 3;
    const bool mxfp4 = a.form != AliasForm::values;
    if (weight && mxfp4 != o.mxfp4_experts) continue;  // the form this folder holds
    auto shared = std::make_shared<const CheckpointAlias>(std::move(a));
    for (const AliasPart& part : shared->parts)
      if (shared->form != AliasForm::mxfp4_scales) stacked_by_part[part.name] = shared;
  }
  std::unordered_map<std::string, std::shared_ptr<const TensorSpec>> specs;
  for (const TensorSpec& spec : model_tensor_specs(c))
    specs[spec.hf_name] = std::make_shared<const TensorSpec>(spec);
  std::vector<HfItem> items;
  std::unordered_set<const CheckpointAlias*> written;
  for (const TensorSpec& spec : model_tensor_specs(c)) {
    auto it = stacked_by_part.find(spec.hf_name);
    if (it == stacked_by_part.end()) {
      items.push_back({{spec.hf_name, synthetic_storage_dtype(spec, o.weight_dtype), spec.shape},
                       specs.at(spec.hf_name),
                       nullptr,
                       {}});
      continue;
    }
    if (!written.insert(it->second.get()).second) continue;
    const CheckpointAlias& a = *it->second;
    HfItem item{{a.name, DType::u8, a.shape}, nullptr, it->second, {}};
    for (const AliasPart& part : a.parts) item.parts.push_back(specs.at(part.name));
    if (a.form == AliasForm::values)
      item.entry.dtype = synthetic_storage_dtype(*item.parts.front(), o.weight_dtype);
    items.push_back(item);
    if (a.form == AliasForm::mxfp4_blocks) {  // its scales next
      CheckpointAlias scales = a;
      scales.name = a.partner, scales.partner = a.name, scales.form = AliasForm::mxfp4_scales;
      scales.shape.pop_back();
      HfItem s{{scales.name, DType::u8, scales.shape},
               nullptr,
               std::make_shared<const CheckpointAlias>(scales),
               item.parts};
      items.push_back(s);
    }
  }
  return items;
}

// f32 [rows, K] as ggml's MXFP4 blocks, written in transformers' layout into `codes`
// [rows, K/32, 16] and `scales` [rows, K/32] (views of the stacked tensors).
void hf_mxfp4(const Tensor& values, Tensor codes, Tensor scales) {
  const int64_t rows = values.size(0), groups = values.size(1) / kQK_MXFP4;
  std::vector<BlockMxfp4> blocks(static_cast<size_t>(groups));
  const Tensor v = values.contiguous();
  for (int64_t r = 0; r < rows; ++r) {
    quantize_row_mxfp4(v.data<const float>() + r * values.size(1), blocks.data(), values.size(1));
    Tensor row_codes = Tensor::empty({groups, 16}, DType::u8);
    Tensor row_scales = Tensor::empty({groups}, DType::u8);
    for (int64_t g = 0; g < groups; ++g)
      mxfp4_block_to_hf(blocks[static_cast<size_t>(g)], row_codes.data<uint8_t>() + g * 16,
                        row_scales.data<uint8_t>() + g);
    codes.select(0, r).copy_from(row_codes);
    scales.select(0, r).copy_from(row_scales);
  }
}

}  // namespace

void write_synthetic_hf(const std::string& dir, const ModelConfig& config,
                        const SyntheticCheckpointOptions& o) {
  check_dtype(o.weight_dtype);
  if (o.gguf_q8_0) fail("{}: Q8_0 weights exist only in GGUF files (use f32, f16 or bf16)", dir);
  config.validate("synthetic checkpoint");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail("{}: cannot create the folder: {}", dir, ec.message());
  const std::filesystem::path root(dir);

  const SyntheticVocab vocab = synthetic_vocab(config.vocab_size);
  write_text_file((root / "config.json").string(),
                  hf_config_json(config, o.weight_dtype, o.mxfp4_experts).dump(2) + "\n");
  write_text_file((root / "generation_config.json").string(),
                  hf_generation_config_json(config).dump(2) + "\n");
  write_text_file((root / "tokenizer.json").string(), hf_tokenizer_json(vocab).dump(2) + "\n");
  write_text_file((root / "tokenizer_config.json").string(),
                  hf_tokenizer_config_json(vocab, config.max_seq_len).dump(2) + "\n");

  // Split into shards of at most max_shard_bytes (a tensor larger than that gets its own).
  const std::vector<HfItem> items = hf_items(config, o);
  std::vector<std::vector<size_t>> shards(1);  // item indices
  uint64_t shard_bytes = 0, total_bytes = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const uint64_t n = items[i].entry.nbytes();
    if (!shards.back().empty() && shard_bytes + n > o.max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(i);
    shard_bytes += n;
    total_bytes += n;
  }
  const size_t n_shards = shards.size();
  auto shard_name = [&](size_t i) {
    return n_shards == 1 ? std::string("model.safetensors")
                         : fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, n_shards);
  };
  // A stale single file or index from an earlier run would shadow the new layout.
  std::filesystem::remove(
      root / (n_shards == 1 ? "model.safetensors.index.json" : "model.safetensors"), ec);

  const std::string name = default_name(config, o);
  size_t written = 0;
  uint64_t bytes_written = 0;
  nlohmann::json weight_map = nlohmann::json::object();
  Tensor pending_scales;  // MXFP4 scales made with their blocks, written next
  for (size_t s = 0; s < n_shards; ++s) {
    std::vector<SafetensorsEntry> entries;
    for (size_t i : shards[s]) {
      weight_map[items[i].entry.name] = shard_name(s);
      entries.push_back(items[i].entry);
    }
    SafetensorsWriter writer((root / shard_name(s)).string(), entries,
                             {{"format", "pt"}, {"refit.synthetic", name}});
    for (size_t i : shards[s]) {
      const HfItem& item = items[i];
      Tensor t;
      if (item.spec) {
        t = synthetic_tensor(config, *item.spec, o.weight_dtype, o.seed);
      } else if (item.alias->form == AliasForm::values) {
        t = Tensor::empty(item.alias->shape, item.entry.dtype);
        for (size_t p = 0; p < item.alias->parts.size(); ++p)
          alias_part_view(item.alias->parts[p], t)
              .copy_from(synthetic_tensor(config, *item.parts[p], o.weight_dtype, o.seed));
      } else if (item.alias->form == AliasForm::mxfp4_blocks) {
        t = Tensor::empty(item.alias->shape, DType::u8);
        pending_scales = Tensor::empty(items[i + 1].alias->shape, DType::u8);
        for (size_t p = 0; p < item.alias->parts.size(); ++p)
          hf_mxfp4(synthetic_tensor(config, *item.parts[p], DType::f32, o.seed),
                   alias_part_view(item.alias->parts[p], t),
                   alias_part_view(item.alias->parts[p], pending_scales));
      } else {
        t = pending_scales;
        pending_scales = Tensor();
      }
      writer.write(item.entry.name, t);
      bytes_written += item.entry.nbytes();
      if (o.progress) o.progress(++written, items.size(), bytes_written);
    }
    writer.finish();
  }
  if (n_shards > 1) {
    nlohmann::json index = {{"metadata", {{"total_size", total_bytes}}},
                            {"weight_map", weight_map}};
    write_text_file((root / "model.safetensors.index.json").string(), index.dump(2) + "\n");
  }
}

void write_synthetic_gguf(const std::string& path, const ModelConfig& c,
                          const SyntheticCheckpointOptions& o) {
  if (!o.gguf_q8_0) check_dtype(o.weight_dtype);
  c.validate("synthetic checkpoint");
  if (o.mxfp4_experts && !c.has_moe())
    fail("synthetic checkpoint: MXFP4 experts need a mixture-of-experts architecture");
  const DType weight_dtype = o.gguf_q8_0 ? DType::f32 : o.weight_dtype;  // what is generated
  // llama.cpp runs Mistral under the llama architecture.
  const std::string arch = c.arch == Architecture::mistral ? "llama" : architecture_name(c.arch);
  GgufWriter w;
  w.add_string("general.architecture", arch);
  w.add_string("general.name", default_name(c, o));
  w.add_u32("general.file_type", gguf_file_type(o.weight_dtype, o.gguf_q8_0, o.mxfp4_experts));
  if (o.gguf_q8_0 || o.mxfp4_experts)
    w.add_u32("general.quantization_version", 2);  // GGML_QNT_VERSION
  auto key = [&](const char* suffix) { return arch + "." + suffix; };
  w.add_u32(key("vocab_size"), static_cast<uint32_t>(c.vocab_size));
  w.add_u32(key("context_length"), static_cast<uint32_t>(c.max_seq_len));
  w.add_u32(key("embedding_length"), static_cast<uint32_t>(c.dim));
  w.add_u32(key("feed_forward_length"), static_cast<uint32_t>(c.ffn_dim));
  w.add_u32(key("block_count"), static_cast<uint32_t>(c.n_layers));
  w.add_u32(key("attention.head_count"), static_cast<uint32_t>(c.n_heads));
  w.add_u32(key("attention.head_count_kv"), static_cast<uint32_t>(c.n_kv_heads));
  if (c.head_dim != c.dim / c.n_heads || c.arch == Architecture::qwen3) {
    w.add_u32(key("attention.key_length"), static_cast<uint32_t>(c.head_dim));
    w.add_u32(key("attention.value_length"), static_cast<uint32_t>(c.head_dim));
  }
  w.add_f32(key("attention.layer_norm_rms_epsilon"), c.rms_eps);
  w.add_f32(key("rope.freq_base"), c.rope_theta);
  w.add_u32(key("rope.dimension_count"), static_cast<uint32_t>(c.rotary_dim()));
  // Gemma 3 and gpt-oss: layer 0 is a local one (llama.cpp's patterns say which others are).
  if ((c.arch == Architecture::gemma3 || c.arch == Architecture::gpt_oss) && c.layer(0).window > 0)
    w.add_u32(key("attention.sliding_window"), static_cast<uint32_t>(c.layer(0).window));
  if (c.has_moe()) {
    for (int64_t l = 0; l < c.n_layers; ++l)
      if (c.layer(l).ffn != FfnKind::moe)
        fail("synthetic GGUF: llama.cpp's {} has every layer sparse; layer {} is dense", arch, l);
    w.add_u32(key("expert_count"), static_cast<uint32_t>(c.n_experts));
    w.add_u32(key("expert_used_count"), static_cast<uint32_t>(c.n_experts_used));
    w.add_u32(key("expert_feed_forward_length"), static_cast<uint32_t>(c.expert_ffn_dim));
  }
  add_gguf_tokenizer_metadata(w, synthetic_vocab(c.vocab_size));

  // Per-expert specs are one GGUF tensor stacking every expert ([E, out, in]): written once,
  // at expert 0, from all E specs.
  const std::vector<TensorSpec> all_specs = model_tensor_specs(c);
  std::vector<TensorSpec> specs;
  for (const TensorSpec& spec : all_specs)
    if (spec.expert <= 0) specs.push_back(spec);
  auto gguf_shape = [&](const TensorSpec& spec) {
    Shape shape = spec.shape;
    if (spec.expert == 0) shape.insert(shape.begin(), c.n_experts);
    return shape;
  };
  auto make_tensor = [&](const TensorSpec& spec, DType dtype) {
    if (spec.expert < 0) return synthetic_tensor(c, spec, dtype, o.seed);
    Tensor stacked = Tensor::empty(gguf_shape(spec), dtype);
    int64_t e = 0;
    for (const TensorSpec& part : all_specs)
      if (part.layer == spec.layer && part.slot == spec.slot && part.expert >= 0)
        stacked.select(0, e++).copy_from(synthetic_tensor(c, part, dtype, o.seed));
    return stacked;
  };
  // Only 2-D weights are quantized; norms and biases stay f32 (llama-quantize does the same).
  auto mxfp4 = [&](const TensorSpec& spec) {
    return o.mxfp4_experts && spec.expert == 0 && spec.role == TensorRole::matmul;
  };
  auto quantized = [&](const TensorSpec& spec) {
    return mxfp4(spec) ||
           (o.gguf_q8_0 && (spec.role == TensorRole::matmul || spec.role == TensorRole::embedding));
  };
  for (const TensorSpec& spec : specs) {
    std::optional<GgmlType> type = mxfp4(spec) ? GgmlType::mxfp4
                                   : quantized(spec)
                                       ? GgmlType::q8_0
                                       : ggml_type_of(synthetic_storage_dtype(spec, weight_dtype));
    REFIT_ASSERT(type.has_value());
    w.add_tensor(spec.gguf_name, *type, gguf_shape(spec));
  }
  w.open(path);
  size_t written = 0;
  uint64_t bytes_written = 0;
  std::vector<BlockQ8_0> blocks;
  std::vector<BlockMxfp4> mx_blocks;
  for (const TensorSpec& spec : specs) {
    Tensor t =
        make_tensor(spec, mxfp4(spec) ? DType::f32 : synthetic_storage_dtype(spec, weight_dtype));
    if (spec.gguf_rope_permute_heads > 0)
      t = permute_rows_for_gguf_rope(t, spec.gguf_rope_permute_heads);
    if (spec.gguf_offset != 0.0f) {  // as llama.cpp's converter stores Gemma's norms: 1 + w
      std::vector<float> v = t.to_floats();
      for (float& x : v) x += spec.gguf_offset;
      t = Tensor::from_floats(t.shape(), v);
    }
    // Blocks of 32 values, quantized on the pool as llama-quantize would.
    auto write_blocks = [&](auto& blocks, int64_t qk, auto quantize) {
      blocks.resize(static_cast<size_t>(t.numel() / qk));
      const float* x = t.data<float>();
      parallel_for(
          static_cast<int64_t>(blocks.size()),
          [&](int64_t b0, int64_t b1, int) {
            quantize(x + b0 * qk, blocks.data() + b0, (b1 - b0) * qk);
          },
          1024);
      const size_t bytes = blocks.size() * sizeof(blocks[0]);
      w.write_tensor(spec.gguf_name, blocks.data(), bytes);
      bytes_written += bytes;
    };
    if (mxfp4(spec)) {
      write_blocks(mx_blocks, kQK_MXFP4, quantize_row_mxfp4);
    } else if (quantized(spec)) {
      write_blocks(blocks, kQK8_0, quantize_row_q8_0);
    } else {
      w.write_tensor(spec.gguf_name, t);
      bytes_written += t.nbytes();
    }
    if (o.progress) o.progress(++written, specs.size(), bytes_written);
  }
  w.finish();
}

}  // namespace refit

#include "models/quantize_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <unordered_set>

#include "core/error.h"
#include "formats/gguf.h"
#include "formats/hf_folder.h"
#include "models/compressed_tensors.h"
#include "models/tensor_table.h"

namespace refit {

std::string QuantizedModelSummary::str() const {
  std::string s = fmt::format("{}: {} linear weights quantized", scheme.name(), quantized.size());
  if (!kept.empty())
    s += fmt::format(", {} kept unquantized ({})", kept.size(), fmt::join(kept, "; "));
  return s;
}

namespace {

// The checkpoint names of the blocks' matmul weights, from the architecture's table.
std::unordered_set<std::string> block_matmuls(const ModelConfig& config) {
  std::unordered_set<std::string> names;
  for (const TensorSpec& s : model_tensor_specs(config))
    if (s.role == TensorRole::matmul && s.layer >= 0) names.insert(s.hf_name);
  return names;
}

bool is_linear_weight(const Parameter& p, const std::unordered_set<std::string>& matmuls) {
  for (const SubShard& s : p.sub_shards())
    if (matmuls.count(s.checkpoint_name)) return true;
  return false;
}

// A GGUF's first block matmul (blk.0.attn_q, or attn_qkv where q/k/v are stored fused):
// its type is the file's weight scheme.
const GgufTensorInfo* first_gguf_matmul(const GgufFile& g) {
  return g.find_tensor(first_block_matmul(config_from_gguf(g.metadata())).gguf_name);
}

// The static activation scales of a W8A8 weight: one f32 [1] parameter per checkpoint
// tensor, named as the checkpoint names it (`<layer>.input_scale` beside `<layer>.weight`),
// so a fused q/k/v keeps three and a refit of any one of them is a name the trainer knows.
void add_input_scales(ParameterSet& set, Parameter& weight) {
  std::vector<const Parameter*> scales;
  for (const SubShard& sub : weight.sub_shards()) {
    const std::string& w = sub.checkpoint_name;
    const std::string suffix = ".weight";
    if (!w.ends_with(suffix))
      fail("'{}': a static activation scale sits beside a '.weight' tensor, not '{}'",
           weight.name(), w);
    Parameter& s = set.add(w.substr(0, w.size() - suffix.size()) + ".input_scale", {1}, DType::f32);
    s.set_positive_scale();
    scales.push_back(&s);
  }
  weight.set_input_scales(std::move(scales));
}

}  // namespace

QuantizedModelSummary quantize_linear_weights(Model& model, const QuantScheme& scheme, bool lm_head,
                                              const std::unordered_set<std::string>& kept_float) {
  QuantizedModelSummary summary;
  summary.scheme = scheme;
  if (!scheme.enabled()) return summary;
  // The output projection: its own parameter, or the embedding table it is tied to.
  const ModelConfig& c = model.config();
  const std::string head =
      !lm_head ? ""
               : hf_tensor_name(c, c.tied_embeddings ? TensorSlot::token_embd : TensorSlot::output);
  const std::unordered_set<std::string> matmuls = block_matmuls(c);
  // Static activation scales are added as parameters below: walk the ones there now.
  std::vector<Parameter*> params;
  for (const auto& p : model.parameters().all()) params.push_back(p.get());
  for (Parameter* p : params) {
    if (!is_linear_weight(*p, matmuls) && p->name() != head) continue;
    size_t float_parts = 0;
    for (const SubShard& sub : p->sub_shards())
      float_parts += kept_float.count(sub.checkpoint_name);
    if (float_parts == p->sub_shards().size()) {
      summary.kept.push_back(fmt::format("{}: stored unquantized in the checkpoint", p->name()));
      continue;
    }
    if (float_parts > 0)
      fail(
          "'{}' is fused from {} checkpoint tensors, of which {} are stored unquantized; refit "
          "stores a fused weight in one scheme",
          p->name(), p->sub_shards().size(), float_parts);
    std::string why = p->quantization_unsupported_reason(scheme);
    if (why.empty()) {
      p->set_quantization(scheme);
      if (scheme.static_activations) add_input_scales(model.parameters(), *p);
      summary.quantized.push_back(p->name());
    } else {
      summary.kept.push_back(fmt::format("{}: {}", p->name(), why));
    }
  }
  if (summary.quantized.empty())
    fail("--quant {}: no linear weight of this model can take it ({})", scheme.name(),
         fmt::join(summary.kept, "; "));
  return summary;
}

// GGUF Q8_0 and MXFP4 weights are stored as the file holds them (weights/block_codes.h).
// Decoding them to f32 and quantizing again (a refit from those values, or a parameter the
// codes cannot fill as they are) gives the stored values back exactly:
//  * Q8_0: the decoded block is q * d (d an f16, max |q| = 127 in a ggml block); amax / 127
//    is d again (127 * d is exact in f32), and round(q * d * (1 / d)) = q.
//  * MXFP4: values c * 2^E with e2m1 codes c; the new exponent is E + floor(log2 max|c|) - 2
//    <= E, and every c times the resulting power of two (1, 2, 4 or 8 for max |c| = 6..0.5)
//    is again an e2m1 value, so the decoded values are the same (the bytes may differ).
bool checkpoint_lm_head_quantized(const Checkpoint& ck) {
  // An HF FP8 checkpoint quantizes lm_head unless its config leaves it out (compressed-tensors
  // `ignore: ["lm_head"]`, as llm-compressor's recipes do): then the head is F8 in the file.
  if (const HfFolder* hf = ck.hf())
    return hf->has_tensor("lm_head.weight") &&
           hf->tensor_info("lm_head.weight").dtype == DType::f8_e4m3fn;
  if (ck.format() != CheckpointFormat::gguf) return false;
  const GgufTensorInfo* q = first_gguf_matmul(*ck.gguf());
  const GgufTensorInfo* out = ck.gguf()->find_tensor("output.weight");
  if (!out) out = ck.gguf()->find_tensor("token_embd.weight");  // tied: the table is the head
  return q && out && out->type == q->type &&
         (q->type == GgmlType::q8_0 || q->type == GgmlType::mxfp4);
}

namespace {

const char* const kReads =
    "refit reads quant_method fp8 (weight_scale_inv, per tensor or 128x128 blocks) and "
    "compressed-tensors FP8 (float-quantized: per tensor, per channel or 128x128 blocks); a "
    "bf16/f16/f32 checkpoint can be quantized at load with --quant";

// The quant_methods of transformers' quantizers refit does not serve, each with what it is.
std::string refused_method(const std::string& method) {
  static const std::pair<const char*, const char*> known[] = {
      {"awq", "AWQ: 4-bit integer weights in groups, packed"},
      {"gptq", "GPTQ: 2/3/4/8-bit integer weights in groups, packed"},
      {"bitsandbytes", "bitsandbytes: LLM.int8() or NF4/FP4 4-bit weights"},
      {"modelopt", "NVIDIA ModelOpt (FP8 / NVFP4 with its own scale layout)"},
      {"hqq", "HQQ: half-quadratic integer weights with zero points"},
      {"eetq", "EETQ: int8 weight-only"},
      {"fbgemm_fp8", "FBGEMM FP8: per-row scales with an activation scale upper bound"},
      {"aqlm", "AQLM: additive codebooks"},
      {"quanto", "optimum-quanto"},
      {"torchao", "torchao tensor subclasses"},
      {"auto-round", "AutoRound: integer weights in groups"},
      {"vptq", "VPTQ: vector codebooks"},
      {"higgs", "HIGGS: Hadamard + codebooks"},
      {"bitnet", "BitNet: ternary weights"},
      {"fp_quant", "FP-Quant: MXFP4/NVFP4 with rotations"},
      {"spqr", "SpQR: sparse outliers + 3-bit weights"},
      {"compressed_tensors", "compressed-tensors spelled with an underscore"},
  };
  for (const auto& [name, what] : known)
    if (method == name) return what;
  return "";
}

bool flag(const nlohmann::json& qc, const char* key) {
  return qc.contains(key) && qc[key].is_boolean() && qc[key].get<bool>();
}

// quant_method "fp8": transformers' FineGrainedFP8 / DeepSeek-V3 / Qwen FP8 checkpoints.
QuantScheme hf_fp8_scheme(const nlohmann::json& qc, const std::string& file) {
  QuantScheme s;
  s.method = QuantMethod::fp8_tensor;
  if (qc.contains("weight_block_size") && !qc["weight_block_size"].is_null()) {
    const nlohmann::json& b = qc["weight_block_size"];
    if (!b.is_array() || b.size() != 2 || b[0] != 128 || b[1] != 128)
      fail("{}: weight_block_size {} is not supported (refit reads [128, 128])", file, b.dump());
    s.method = QuantMethod::fp8_block;
  }
  // Static input_scale tensors would be silently unused by a dynamic or f32 path: refused.
  const nlohmann::json scheme = qc.value("activation_scheme", nlohmann::json("dynamic"));
  if (!scheme.is_string() || scheme.get<std::string>() != "dynamic")
    fail(
        "{}: quantization_config activation_scheme {} is not supported for quant_method 'fp8' "
        "(refit reads \"dynamic\"; static per-tensor scales are read from compressed-tensors "
        "checkpoints)",
        file, scheme.dump());
  s.w8a8 = true;
  return s;
}

}  // namespace

QuantScheme checkpoint_quant_scheme(const Checkpoint& ck) {
  QuantScheme s;
  if (ck.format() == CheckpointFormat::gguf) {
    const GgufTensorInfo* q = first_gguf_matmul(*ck.gguf());
    if (q && q->type == GgmlType::q8_0) s.method = QuantMethod::q8_0;
    if (q && q->type == GgmlType::mxfp4) s.method = QuantMethod::mxfp4;
    return s;
  }
  const HfFolder* hf = ck.hf();
  if (!hf || !hf->config().contains("quantization_config")) return s;
  const nlohmann::json& qc = hf->config()["quantization_config"];
  const std::string file = ck.path() + "/config.json";
  if (qc.is_null()) return s;
  if (!qc.is_object()) fail("{}: quantization_config must be an object ({})", file, kReads);
  if (flag(qc, "load_in_4bit") || flag(qc, "load_in_8bit"))
    fail("{}: quantization_config load_in_{}bit (bitsandbytes) is not supported ({})", file,
         flag(qc, "load_in_4bit") ? 4 : 8, kReads);
  if (!qc.contains("quant_method") || !qc["quant_method"].is_string())
    fail("{}: quantization_config has no quant_method ({})", file, kReads);
  const std::string method = qc["quant_method"].get<std::string>();
  // MXFP4 (gpt-oss): the experts only (checkpoint_expert_scheme); every other layer is float.
  if (method == "mxfp4") return s;
  if (method == "fp8") return hf_fp8_scheme(qc, file);
  if (method == "compressed-tensors") return parse_compressed_tensors(qc, file).scheme;
  const std::string what = refused_method(method);
  fail("{}: quantization_config quant_method '{}'{} is not supported ({})", file, method,
       what.empty() ? "" : " (" + what + ")", kReads);
}

std::string describe_quant_scheme(const QuantScheme& s) {
  if (!s.enabled()) return "";
  QuantScheme weights = s;
  weights.w8a8 = weights.static_activations = false;
  const std::string acts = !s.w8a8                ? "W8A16 (activations in f32)"
                           : s.static_activations ? "W8A8, static per-tensor activation scales "
                                                    "(input_scale; max over fused layers)"
                           : s.int8_activations() ? "W8A8, int8 activations per block of 32"
                                                  : "W8A8, dynamic per-token activation scales";
  return fmt::format("quantization: {} weights, {}", weights.name(), acts);
}

namespace {

std::string module_of(const std::string& weight) {
  const std::string suffix = ".weight";
  return weight.ends_with(suffix) ? weight.substr(0, weight.size() - suffix.size()) : weight;
}

bool stored_fp8(const HfFolder& hf, const std::string& name) {
  return hf.has_tensor(name) && hf.tensor_info(name).dtype == DType::f8_e4m3fn;
}

}  // namespace

QuantScheme checkpoint_expert_scheme(const Checkpoint& ck) {
  QuantScheme s;
  if (const GgufFile* g = ck.gguf()) {
    const ModelConfig c = config_from_gguf(g->metadata());
    for (const TensorSpec& spec : model_tensor_specs(c)) {
      if (spec.slot != TensorSlot::ffn_gate_exps) continue;
      const GgufTensorInfo* t = g->find_tensor(spec.gguf_name);
      if (t && t->type == GgmlType::mxfp4) s.method = QuantMethod::mxfp4;
      if (t && t->type == GgmlType::q8_0) s.method = QuantMethod::q8_0;
      return s;
    }
    return s;
  }
  const HfFolder* hf = ck.hf();
  if (hf && hf->config().contains("quantization_config") &&
      hf->config()["quantization_config"].is_object() &&
      hf->config()["quantization_config"].value("quant_method", "") == "mxfp4") {
    s.method = QuantMethod::mxfp4;
    return s;
  }
  return checkpoint_quant_scheme(ck);
}

namespace {

// The per-expert checkpoint tensors of a model (is_expert_slot matmuls).
std::unordered_set<std::string> expert_matmuls(const ModelConfig& c) {
  std::unordered_set<std::string> names;
  for (const TensorSpec& s : model_tensor_specs(c))
    if (s.expert >= 0 && s.role == TensorRole::matmul) names.insert(s.hf_name);
  return names;
}

// Both passes' summaries as one: a weight one pass kept because the other quantizes it is
// not kept.
QuantizedModelSummary merged(QuantizedModelSummary dense, const QuantizedModelSummary& experts) {
  std::unordered_set<std::string> quantized(dense.quantized.begin(), dense.quantized.end());
  quantized.insert(experts.quantized.begin(), experts.quantized.end());
  std::vector<std::string> kept;
  const std::vector<std::string>* lists[] = {&dense.kept, &experts.kept};
  for (const std::vector<std::string>* list : lists)
    for (const std::string& k : *list)
      if (!quantized.count(k.substr(0, k.find(':'))) &&
          std::find(kept.begin(), kept.end(), k) == kept.end())
        kept.push_back(k);
  dense.quantized.insert(dense.quantized.end(), experts.quantized.begin(), experts.quantized.end());
  dense.kept = std::move(kept);
  if (!dense.scheme.enabled()) dense.scheme = experts.scheme;
  return dense;
}

}  // namespace

QuantizedModelSummary quantize_for_checkpoint(Model& model, const Checkpoint& ck,
                                              const QuantScheme& requested) {
  const QuantScheme stored = checkpoint_quant_scheme(ck);
  // A file whose experts are in another scheme than its other layers (gpt-oss: MXFP4
  // experts, float attention) serves each as stored; --quant in the experts' own method
  // (mxfp4-w8a8: int8 activations) applies to the experts alone, any other to every weight.
  const QuantScheme stored_experts = checkpoint_expert_scheme(ck);
  if (stored_experts.enabled() && stored_experts.method != stored.method &&
      (!requested.enabled() || requested.method == stored_experts.method)) {
    const QuantScheme experts = requested.enabled() ? requested : stored_experts;
    {
      const std::unordered_set<std::string> expert_names = expert_matmuls(model.config());
      std::unordered_set<std::string> others;
      for (const TensorSpec& s : model_tensor_specs(model.config()))
        if (s.role == TensorRole::matmul && s.layer >= 0 && !expert_names.count(s.hf_name))
          others.insert(s.hf_name);
      QuantizedModelSummary dense;
      if (stored.enabled()) dense = quantize_for_dense(model, ck, stored, stored, expert_names);
      return merged(dense, quantize_linear_weights(model, experts, false, others));
    }
  }
  const QuantScheme quant = requested.enabled() ? requested : stored;
  return quantize_for_dense(model, ck, quant, stored, {});
}

QuantizedModelSummary quantize_for_dense(Model& model, const Checkpoint& ck,
                                         const QuantScheme& quant, const QuantScheme& stored,
                                         const std::unordered_set<std::string>& left_out) {
  if (!quant.enabled()) return {};
  const bool as_stored = quant.method == stored.method;
  const bool head = as_stored && checkpoint_lm_head_quantized(ck);
  // Serving a pre-quantized HF checkpoint as stored: the layers it keeps in float (its
  // ignore list, modules_to_not_convert) stay float, as vLLM keeps them.
  std::unordered_set<std::string> kept_float;
  const HfFolder* hf = ck.hf();
  if (as_stored && hf && stored.enabled()) {
    std::optional<CompressedTensorsConfig> ct;
    const nlohmann::json& qc = hf->config()["quantization_config"];
    if (qc.value("quant_method", "") == "compressed-tensors")
      ct = parse_compressed_tensors(qc, ck.path() + "/config.json");
    for (const TensorSpec& spec : model_tensor_specs(model.config())) {
      if (spec.role != TensorRole::matmul || !hf->has_tensor(spec.hf_name)) continue;
      const bool fp8 = stored_fp8(*hf, spec.hf_name);
      // The config and the tensors must tell the same story: a layer the config quantizes
      // stored in float (or the reverse) is a broken checkpoint, not something to guess at.
      if (ct && ct->quantizes(module_of(spec.hf_name)) != fp8)
        fail(
            "{}: '{}' is stored {} but quantization_config (config_groups targets, ignore) says "
            "it is {}",
            ck.path(), spec.hf_name, dtype_name(hf->tensor_info(spec.hf_name).dtype),
            fp8 ? "not quantized" : "quantized");
      if (!fp8 && spec.layer >= 0) kept_float.insert(spec.hf_name);
    }
  }
  kept_float.insert(left_out.begin(), left_out.end());
  return quantize_linear_weights(model, quant, head, kept_float);
}

}  // namespace refit

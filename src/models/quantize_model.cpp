#include "models/quantize_model.h"

#include <fmt/format.h>

#include <unordered_set>

#include "core/error.h"
#include "formats/gguf.h"
#include "formats/hf_folder.h"
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

}  // namespace

QuantizedModelSummary quantize_linear_weights(Model& model, const QuantScheme& scheme,
                                              bool lm_head) {
  QuantizedModelSummary summary;
  summary.scheme = scheme;
  if (!scheme.enabled()) return summary;
  // The output projection: its own parameter, or the embedding table it is tied to.
  const ModelConfig& c = model.config();
  const std::string head =
      !lm_head ? ""
               : hf_tensor_name(c, c.tied_embeddings ? TensorSlot::token_embd : TensorSlot::output);
  const std::unordered_set<std::string> matmuls = block_matmuls(c);
  for (const auto& p : model.parameters().all()) {
    if (!is_linear_weight(*p, matmuls) && p->name() != head) continue;
    std::string why = p->quantization_unsupported_reason(scheme);
    if (why.empty()) {
      p->set_quantization(scheme);
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

// GGUF Q8_0 and MXFP4 weights are decoded to f32 by the checkpoint reader and quantized
// again here. That gives the stored values back exactly:
//  * Q8_0: the decoded block is q * d (d an f16, max |q| = 127 in a ggml block); amax / 127
//    is d again (127 * d is exact in f32), and round(q * d * (1 / d)) = q.
//  * MXFP4: values c * 2^E with e2m1 codes c; the new exponent is E + floor(log2 max|c|) - 2
//    <= E, and every c times the resulting power of two (1, 2, 4 or 8 for max |c| = 6..0.5)
//    is again an e2m1 value, so the decoded values are the same (the bytes may differ).
bool checkpoint_lm_head_quantized(const Checkpoint& ck) {
  if (ck.format() != CheckpointFormat::gguf) return false;
  const GgufTensorInfo* q = first_gguf_matmul(*ck.gguf());
  const GgufTensorInfo* out = ck.gguf()->find_tensor("output.weight");
  if (!out) out = ck.gguf()->find_tensor("token_embd.weight");  // tied: the table is the head
  return q && out && out->type == q->type &&
         (q->type == GgmlType::q8_0 || q->type == GgmlType::mxfp4);
}

QuantScheme checkpoint_quant_scheme(const Checkpoint& ck) {
  QuantScheme s;
  if (ck.format() == CheckpointFormat::gguf) {
    const GgufTensorInfo* q = first_gguf_matmul(*ck.gguf());
    if (q && q->type == GgmlType::q8_0) s.method = QuantMethod::q8_0;
    if (q && q->type == GgmlType::mxfp4) s.method = QuantMethod::mxfp4;
    return s;
  }
  if (const HfFolder* hf = ck.hf()) {
    const nlohmann::json& config = hf->config();
    if (!config.contains("quantization_config")) return s;
    const nlohmann::json& qc = config["quantization_config"];
    const std::string method = qc.value("quant_method", "");
    if (method != "fp8")
      fail(
          "{}: quantization_config quant_method '{}' is not supported (refit reads fp8 "
          "checkpoints)",
          ck.path(), method);
    s.method = QuantMethod::fp8_tensor;
    if (qc.contains("weight_block_size") && !qc["weight_block_size"].is_null()) {
      const nlohmann::json& b = qc["weight_block_size"];
      if (!b.is_array() || b.size() != 2 || b[0] != 128 || b[1] != 128)
        fail("{}: weight_block_size {} is not supported (refit reads [128, 128])", ck.path(),
             b.dump());
      s.method = QuantMethod::fp8_block;
    }
    s.w8a8 = qc.value("activation_scheme", "dynamic") == "dynamic";
  }
  return s;
}

}  // namespace refit

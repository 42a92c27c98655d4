#include "models/checkpoint_tensor_use.h"

#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "models/tensor_table.h"
#include "weights/update_report.h"

namespace refit {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::string without(const std::string& s, const std::string& tail) {
  return s.substr(0, s.size() - tail.size());
}

bool consumed_hf(const std::string& name, const std::unordered_set<std::string>& known,
                 const ModelConfig& served) {
  for (const char* scale : {"_scale_inv", "_scale"})
    if (ends_with(name, scale) && known.count(without(name, scale))) return true;
  if (ends_with(name, ".input_scale") && known.count(without(name, ".input_scale") + ".weight"))
    return true;
  if (ends_with(name, ".rotary_emb.inv_freq")) return true;
  return served.tied_embeddings && has_slot(served, TensorSlot::output) &&
         name == hf_tensor_name(served, TensorSlot::output);
}

}  // namespace

std::vector<std::string> unknown_checkpoint_tensors(const Checkpoint& checkpoint,
                                                    const ModelConfig& source,
                                                    const ModelConfig& served,
                                                    const ParameterSet& params) {
  const std::vector<std::string> names = params.checkpoint_names();
  const std::unordered_set<std::string> known(names.begin(), names.end());
  std::vector<std::string> unknown;
  if (const GgufFile* g = checkpoint.gguf()) {
    std::unordered_set<std::string> known_gguf = {"rope_freqs.weight", "rope_factors_long.weight",
                                                  "rope_factors_short.weight"};
    for (const TensorSpec& s : model_tensor_specs(source))
      if (known.count(s.hf_name) || params.elsewhere(s.hf_name)) known_gguf.insert(s.gguf_name);
    for (const GgufTensorInfo& t : g->tensors())
      if (!known_gguf.count(t.name)) unknown.push_back(t.name);
  } else if (const HfFolder* hf = checkpoint.hf()) {
    for (const std::string& name : hf->tensor_names())
      if (!known.count(name) && !params.alias(name) && !params.elsewhere(name) &&
          !consumed_hf(name, known, served))
        unknown.push_back(name);
  }
  return unknown;  // llama2.c: a fixed set of tensors, every one read
}

void refuse_unknown_tensors(const std::string& path, const std::vector<std::string>& unknown) {
  if (unknown.empty()) return;
  fail(
      "{}: {} tensor{} no parameter of the served model takes: {} (a checkpoint of another "
      "model? \"ignore_unknown_tensors\": true loads the rest and lists them as ignored)",
      path, unknown.size(), unknown.size() == 1 ? " that" : "s that", name_list(unknown));
}

}  // namespace refit

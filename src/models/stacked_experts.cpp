#include "models/stacked_experts.h"

#include <map>

#include "core/error.h"
#include "models/tensor_table.h"

namespace refit {

std::vector<CheckpointAlias> stacked_expert_aliases(const ModelConfig& c) {
  // Per stacked tensor (in table order), the per-expert specs it holds.
  std::vector<std::string> order;
  std::map<std::string, std::vector<TensorSpec>> members;
  for (TensorSpec& s : model_tensor_specs(c)) {
    if (s.expert < 0 || s.hf_stacked.empty()) continue;
    if (!members.count(s.hf_stacked)) order.push_back(s.hf_stacked);
    members[s.hf_stacked].push_back(std::move(s));
  }
  std::vector<CheckpointAlias> aliases;
  for (const std::string& name : order) {
    const std::vector<TensorSpec>& specs = members[name];
    const TensorSpec& first = specs.front();
    int64_t kinds = 0;  // slots interleaved in it: 1 (down) or 2 (gate, up)
    for (const TensorSpec& s : specs) kinds += s.expert == 0;
    const bool interleaved = first.stacked_rows != StackedRows::all;
    if (interleaved != (kinds == 2) || kinds > 2)
      fail("{}: {} expert slots stacked in it, rows {}", name, kinds,
           interleaved ? "interleaved" : "whole");
    const int64_t rows = first.shape[0] * kinds;
    const bool weight = first.shape.size() == 2;
    CheckpointAlias values{name, AliasForm::values, {}, "", {}};
    if (!weight)
      values.shape = {c.n_experts, rows};
    else if (first.stacked_in_major)
      values.shape = {c.n_experts, first.shape[1], rows};
    else
      values.shape = {c.n_experts, rows, first.shape[1]};
    auto part = [&](const TensorSpec& s, bool transpose) {
      const int64_t start = s.stacked_rows == StackedRows::odd ? 1 : 0;
      return AliasPart{s.hf_name, s.expert, transpose, start, interleaved ? 2 : 1};
    };
    for (const TensorSpec& s : specs) values.parts.push_back(part(s, weight && s.stacked_in_major));
    aliases.push_back(values);
    if (!weight || first.shape[1] % 32 != 0) continue;
    const int64_t k = first.shape[1];
    CheckpointAlias blocks{name + "_blocks",
                           AliasForm::mxfp4_blocks,
                           {c.n_experts, rows, k / 32, 16},
                           name + "_scales",
                           {}};
    CheckpointAlias scales{name + "_scales",
                           AliasForm::mxfp4_scales,
                           {c.n_experts, rows, k / 32},
                           name + "_blocks",
                           {}};
    for (const TensorSpec& s : specs) {
      blocks.parts.push_back(part(s, false));
      scales.parts.push_back(part(s, false));
    }
    aliases.push_back(blocks);
    aliases.push_back(scales);
  }
  return aliases;
}

}  // namespace refit

// A llama.cpp reference run of the oracle pack (../shared/oracle/llamacpp/<folder>/<prompt>.
// tokens.txt): its prompt and greedy ids, and the teacher-forced logits a model gives for them.
#pragma once

#include <string>
#include <vector>

#include "models/model.h"
#include "reference_files.h"

namespace refit::testing {

struct RefRun {
  std::vector<int32_t> prompt, generated, sequence;  // sequence = prompt ++ generated
};

inline RefRun reference_run(const std::string& folder_path, const std::string& prompt) {
  auto ref = read_key_values(folder_path + "/" + prompt + ".tokens.txt");
  RefRun r{ids_of(ref["prompt_ids"]), ids_of(ref["generated_ids"]), {}};
  r.sequence = r.prompt;
  r.sequence.insert(r.sequence.end(), r.generated.begin(), r.generated.end());
  return r;
}

// Logits of every position of `sequence`, fed in one forward pass.
inline std::vector<float> teacher_forced(const Model& model, const std::vector<int32_t>& sequence) {
  KvCache cache = model.make_cache(static_cast<int64_t>(sequence.size()));
  return model.forward(sequence, 0, cache, /*all_logits=*/true).to_floats();
}

}  // namespace refit::testing

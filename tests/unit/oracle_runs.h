// A llama.cpp reference run of the oracle pack (../shared/oracle/llamacpp/<folder>/<prompt>.
// tokens.txt): its prompt and greedy ids, and the teacher-forced logits a model gives for them.
#pragma once

#include <string>
#include <vector>

#include "formats_test_util.h"
#include "models/model.h"
#include "reference_files.h"

namespace refit::testing {

inline const std::string kLlamaCppPack = kOracle + "/llamacpp";
// The pack's three prompts (every folder has a run of each).
inline constexpr const char* kPackPrompts[] = {"once_upon_a_time", "the_quick_brown_fox",
                                               "hello_world_123"};
// A folder's model: <pack>/<folder>/micro-<folder>-s1.gguf.
inline std::string pack_gguf(const std::string& folder) {
  return kLlamaCppPack + "/" + folder + "/micro-" + folder + "-s1.gguf";
}

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

inline RefRun pack_run(const std::string& folder, const std::string& prompt) {
  return reference_run(kLlamaCppPack + "/" + folder, prompt);
}

// Logits of every position of `sequence`, fed in one forward pass.
inline std::vector<float> teacher_forced(const Model& model, const std::vector<int32_t>& sequence) {
  KvCache cache = model.make_cache(static_cast<int64_t>(sequence.size()));
  return model.forward(sequence, 0, cache, /*all_logits=*/true).to_floats();
}

}  // namespace refit::testing

#include "cli/inspect_generation.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "models/model_loader.h"
#include "runtime/generation_setup.h"
#include "tokenizer/vocab_loaders.h"

namespace refit::cli {
namespace {

struct Read {
  GenerationSetup setup;
  std::string error;
};

Read read(const Checkpoint& ck, const std::string& mode) {
  Read r;
  // The tokenizer and config as the Engine would have them; either may be missing (a
  // llama2.c model without its tokenizer, a lone .safetensors): the setup does without.
  std::unique_ptr<Tokenizer> tok;
  try {
    if (ck.format() != CheckpointFormat::llama2c) tok = load_tokenizer(ck.path());
  } catch (const std::exception&) {
  }
  ModelConfig config;
  try {
    config = read_model_config(ck);
  } catch (const std::exception&) {
  }
  try {
    r.setup = read_generation_setup(&ck, tok.get(), config, mode);
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  return r;
}

}  // namespace

nlohmann::ordered_json generation_json(const Checkpoint& ck, const std::string& mode) {
  const Read r = read(ck, mode);
  nlohmann::ordered_json j;
  if (!r.error.empty()) {
    j["error"] = r.error;
    return j;
  }
  const StopTokenIds& stop = r.setup.stop_ids;
  j["stop_token_ids"] = stop.ids;
  j["primary_eos"] = stop.primary >= 0 ? nlohmann::ordered_json(stop.primary) : nullptr;
  nlohmann::ordered_json origins = nlohmann::ordered_json::object();
  for (const auto& [origin, ids] : stop.origins) origins[origin] = ids;
  j["stop_token_sources"] = origins;
  const GenerationDefaults& d = r.setup.defaults;
  j["generation_config"] = d.mode;
  j["defaults_source"] =
      d.source.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(d.source);
  j["defaults"] = d.fields_json();
  j["notes"] = d.notes;
  return j;
}

void print_generation(const Checkpoint& ck, const std::string& mode) {
  const Read r = read(ck, mode);
  if (!r.error.empty()) {
    fmt::print("generation:    error: {}\n", r.error);
    return;
  }
  const StopTokenIds& stop = r.setup.stop_ids;
  fmt::print("stop ids:      {}\n",
             stop.ids.empty() ? "none" : fmt::format("{}", fmt::join(stop.ids, ", ")));
  for (const auto& [origin, ids] : stop.origins)
    fmt::print("  {:<44} {}\n", origin, fmt::join(ids, ", "));
  fmt::print("defaults:      {}\n", r.setup.defaults.str());
  for (const std::string& note : r.setup.defaults.notes) fmt::print("  {}\n", note);
}

}  // namespace refit::cli

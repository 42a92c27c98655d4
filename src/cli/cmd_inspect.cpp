// `refit inspect PATH [--json]`: what a checkpoint holds — format, architecture,
// hyper-parameters, vocabulary summary, what refit applies from the config (and the fields
// it does not recognise), the chat template a chat request gets, and every tensor (name, dtype,
// shape, bytes).
#include <fmt/format.h>

#include <algorithm>

#include "cli/command.h"
#include "cli/inspect_chat_template.h"
#include "cli/inspect_config.h"
#include "cli/inspect_generation.h"
#include "formats/checkpoint.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab_loaders.h"

namespace refit::cli {
namespace {

// What the tokenizer honours (normalizer, pre-tokenizer, post-processor, ...), one line
// each; a tokenizer refit refuses says why instead.
std::vector<std::string> tokenizer_components(const Checkpoint& c) {
  if (!c.vocab().present) return {};
  try {
    return load_tokenizer(c.path())->components();
  } catch (const std::exception& e) {
    return {fmt::format("tokenizer refused: {}", e.what())};
  }
}

nlohmann::ordered_json to_json(const Checkpoint& c) {
  nlohmann::ordered_json j;
  j["path"] = c.path();
  j["format"] = checkpoint_format_name(c.format());
  j["architecture"] = c.architecture();
  j["hparams"] = c.hparams();
  const VocabSummary& v = c.vocab();
  nlohmann::ordered_json vj;
  vj["present"] = v.present;
  vj["source"] = v.source;
  vj["model"] = v.model;
  if (!v.pre.empty()) vj["pre"] = v.pre;
  vj["size"] = v.size;
  if (v.n_merges) vj["merges"] = v.n_merges;
  vj["bos_id"] = v.bos_id ? nlohmann::ordered_json(*v.bos_id) : nlohmann::ordered_json();
  vj["eos_id"] = v.eos_id ? nlohmann::ordered_json(*v.eos_id) : nlohmann::ordered_json();
  vj["bos"] = v.bos_text;
  vj["eos"] = v.eos_text;
  vj["components"] = tokenizer_components(c);
  j["vocab"] = vj;
  nlohmann::ordered_json tensors = nlohmann::ordered_json::array();
  for (const auto& t : c.tensors())
    tensors.push_back(
        {{"name", t.name}, {"dtype", t.dtype}, {"shape", t.shape}, {"bytes", t.nbytes}});
  j["tensors"] = tensors;
  j["total_bytes"] = c.total_bytes();
  j["config"] = config_section_json(c);
  j["chat_template"] = chat_template_section_json(c);
  return j;
}

std::string escaped(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '\n')
      out += "\\n";
    else if (ch == '\t')
      out += "\\t";
    else
      out += ch;
  }
  return out;
}

void print_text(const Checkpoint& c) {
  fmt::print("file:          {}\n", c.path());
  fmt::print("format:        {}\n", checkpoint_format_name(c.format()));
  fmt::print("architecture:  {}\n", c.architecture().empty() ? "(not stated)" : c.architecture());
  fmt::print("hyper-parameters:\n");
  for (const auto& [k, v] : c.hparams().items())
    fmt::print("  {:<44} {}\n", k, v.is_string() ? escaped(v.get<std::string>()) : v.dump());
  const VocabSummary& v = c.vocab();
  fmt::print("vocabulary:    ");
  if (!v.present && v.size == 0) {
    fmt::print("none\n");
  } else {
    fmt::print("{} tokens", v.size);
    if (!v.model.empty()) fmt::print(", model {}", v.model);
    if (!v.pre.empty()) fmt::print(", pre-tokenizer {}", v.pre);
    if (v.n_merges) fmt::print(", {} merges", v.n_merges);
    auto special = [](std::string_view what, const std::optional<int64_t>& id,
                      const std::string& text) {
      if (id) fmt::print(", {} {}", what, *id);
      if (!text.empty()) fmt::print(" '{}'", escaped(text));
    };
    special("bos", v.bos_id, v.bos_text);
    special("eos", v.eos_id, v.eos_text);
    fmt::print("\n               from {}\n", v.source);
    for (const std::string& line : tokenizer_components(c)) fmt::print("               {}\n", line);
  }
  print_config_section(c);
  print_chat_template_section(c);
  fmt::print("tensors:       {} ({} bytes)\n", c.tensors().size(), c.total_bytes());
  size_t width = 4;
  for (const auto& t : c.tensors()) width = std::max(width, t.name.size());
  for (const auto& t : c.tensors())
    fmt::print("  {:<{}}  {:<6} {:<18} {:>12}\n", t.name, width, t.dtype, shape_str(t.shape),
               t.nbytes);
}

CommandRegistrar registrar{
    {"inspect", "Show a checkpoint's format, hyper-parameters, vocabulary and tensors",
     [](CLI::App& sub) {
       auto path = std::make_shared<std::string>();
       auto json = std::make_shared<bool>(false);
       auto generation_config = std::make_shared<std::string>("auto");
       sub.add_option("path", *path,
                      "GGUF file, safetensors file, Hugging Face folder or llama2.c .bin")
           ->required();
       sub.add_flag("--json", *json, "Print JSON for machines");
       sub.add_option("--generation-config", *generation_config,
                      "As `serve`: auto, vllm or a FOLDER (which sampling defaults to show)");
       return std::function<int()>([path, json, generation_config] {
         auto checkpoint = Checkpoint::open(*path);
         if (*json) {
           nlohmann::ordered_json j = to_json(*checkpoint);
           j["generation"] =
               generation_json(*checkpoint, *generation_config);  // stop ids, defaults
           fmt::print("{}\n", j.dump(2));
         } else {
           print_text(*checkpoint);
           print_generation(*checkpoint, *generation_config);  // stop ids, sampling defaults
         }
         return 0;
       });
     }}};

}  // namespace
}  // namespace refit::cli

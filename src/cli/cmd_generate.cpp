// `refit generate`: load a model (or the built-in demo model), tokenise the prompt,
// generate, and print the text as it is produced.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/command.h"
#include "cli/engine_args.h"
#include "cli/progress_bar.h"
#include "core/error.h"
#include "dist/communicator.h"
#include "runtime/engine.h"
#include "tokenizer/tokenizer.h"

namespace refit::cli {
namespace {

struct GenerateOptions {
  EngineArgs engine;
  std::string prompt, prompt_ids, logits_file;
  int64_t n = 64;
  float temperature = 0.0f, top_p = 1.0f, min_p = 0.0f, repeat_penalty = 1.0f;
  int top_k = 0;
  uint64_t seed = 0;
  bool json = false, ignore_eos = false;
  std::string refit_from, refit_names;
  int64_t refit_after = 0;
  // Which of -n and the sampling flags were given: the others take the model's
  // generation_config.json defaults (runtime/generation_defaults.h), as vLLM's LLM does.
  bool n_given = false;
  SamplingFieldsGiven given;
};

std::vector<std::string> split_names(const std::string& text) {
  std::vector<std::string> names;
  std::string name;
  std::istringstream in(text);
  while (std::getline(in, name, ','))
    if (!name.empty()) names.push_back(name);
  return names;
}

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::string cleaned = text;
  for (char& ch : cleaned)
    if (ch == ',') ch = ' ';
  std::istringstream in(cleaned);
  std::string word;
  while (in >> word) {
    try {
      size_t used = 0;
      long long v = std::stoll(word, &used);
      if (used != word.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument("range");
      ids.push_back(static_cast<int32_t>(v));
    } catch (const std::exception&) {
      fail("--prompt-ids: '{}' is not a token id", word);
    }
  }
  return ids;
}

int run(const GenerateOptions& o) {
  EngineOptions engine_options = cli::engine_options(o.engine, "generate");
  if (!o.json && !o.engine.model.empty()) {
    std::error_code ec;
    const std::string& model = o.engine.model;
    const auto bytes =
        std::filesystem::is_regular_file(model, ec) ? std::filesystem::file_size(model, ec) : 0;
    engine_options.progress = progress_bar(model, bytes);
  }
  Engine engine(engine_options);
  const bool leader = engine.rank() == 0;  // every rank computes; rank 0 prints
  const Tokenizer* tokenizer = engine.tokenizer();

  GenerateRequest req;
  if (!o.prompt_ids.empty()) {
    req.prompt = parse_ids(o.prompt_ids);
  } else {
    if (!tokenizer)
      fail("{} carries no tokenizer: pass --tokenizer FILE or --prompt-ids", engine.description());
    req.prompt = tokenizer->encode(o.prompt, /*add_special=*/true, /*parse_special=*/false);
    if (req.prompt.empty()) req.prompt.push_back(engine.config().bos_id);
  }
  const GenerationDefaults& defaults = engine.generation_defaults();
  req.max_tokens =
      defaults.max_tokens_for(o.n_given ? std::optional<int64_t>(o.n) : std::nullopt, o.n);
  req.sampling.temperature = o.temperature;
  req.sampling.top_k = o.top_k;
  req.sampling.top_p = o.top_p;
  req.sampling.min_p = o.min_p;
  req.sampling.repetition_penalty = o.repeat_penalty;
  defaults.apply(req.sampling, o.given);
  req.sampling.seed = o.seed;
  req.record_logits = !o.logits_file.empty();
  if (!o.ignore_eos) req.stop_tokens = engine.stop_ids().ids;

  // Refit mid-generation: after `refit_after` tokens, swap in B's weights (all, or the
  // named tensors) between two decode steps; 0 means before the prompt is processed.
  const std::vector<std::string> refit_names = split_names(o.refit_names);
  auto do_refit = [&] { engine.update_weights_from_disk(o.refit_from, refit_names); };
  if (!o.refit_from.empty() && o.refit_after == 0) do_refit();

  std::unique_ptr<StreamingDecoder> stream;
  if (tokenizer && !o.json && leader) {
    stream = std::make_unique<StreamingDecoder>(*tokenizer);
    // Echo the prompt as llama.cpp does, so the continuation reads naturally.
    for (int32_t id : req.prompt) fmt::print("{}", stream->push(id));
    std::fflush(stdout);
  }
  std::vector<uint64_t> versions;
  int64_t generated = 0;
  // The model-level loop (not Engine::generate, which holds the weights' read lock for
  // the whole request) so that the refit can commit between two steps.
  GenerateResult result = generate(engine.model(), req, [&](int32_t token) {
    versions.push_back(engine.weight_version());  // the weights that produced this token
    if (stream) {
      fmt::print("{}", stream->push(token));
      std::fflush(stdout);
    } else if (!o.json && leader) {
      fmt::print("{} ", token);
      std::fflush(stdout);
    }
    if (!o.refit_from.empty() && o.refit_after > 0 && ++generated == o.refit_after) do_refit();
    return true;
  });
  if (!leader) return 0;
  if (stream) fmt::print("{}", stream->finish());
  if (!o.json) fmt::print("\n");

  if (req.record_logits) {
    std::ofstream out(o.logits_file, std::ios::binary);
    if (!out) fail("--logits: cannot write {}", o.logits_file);
    out.write(reinterpret_cast<const char*>(result.logits.data()),
              static_cast<std::streamsize>(result.logits.size() * sizeof(float)));
    if (!out) fail("--logits: write to {} failed", o.logits_file);
  }
  const double decode_tps = result.tokens.size() > 1 && result.decode_seconds > 0
                                ? (result.tokens.size() - 1) / result.decode_seconds
                                : 0.0;
  const double prefill_tps =
      result.prefill_seconds > 0 ? req.prompt.size() / result.prefill_seconds : 0.0;
  if (o.json) {
    nlohmann::json j;
    j["model"] = engine.description();
    j["prompt_tokens"] = req.prompt;
    j["tokens"] = result.tokens;
    j["text"] = tokenizer ? tokenizer->decode(result.tokens) : "";
    j["finish_reason"] = result.finish_reason;
    j["weight_versions"] = versions;
    j["weight_version"] = engine.weight_version();
    j["n_positions"] = result.n_positions;
    j["tp"] = engine.world_size();
    j["prefill_tokens_per_second"] = prefill_tps;
    j["decode_tokens_per_second"] = decode_tps;
    fmt::print("{}\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  } else if (isatty(STDERR_FILENO)) {
    fmt::print(stderr, "[{} prompt tokens at {:.1f} t/s, {} generated at {:.1f} t/s]\n",
               req.prompt.size(), prefill_tps, result.tokens.size(), decode_tps);
  }
  return 0;
}

CommandRegistrar registrar{
    {"generate", "Generate text with a model (the built-in demo model without -m)",
     [](CLI::App& sub) {
       auto o = std::make_shared<GenerateOptions>();
       add_engine_args(sub, o->engine);
       sub.add_option("-p,--prompt", o->prompt, "Prompt text")->default_val("Once upon a time");
       sub.add_option("--prompt-ids", o->prompt_ids, "Prompt as token ids, e.g. \"1 2 3\"");
       // Unset flags take the model's generation_config.json values, else these defaults.
       auto* n = sub.add_option("-n,--n-predict", o->n,
                                "Number of tokens to generate (default: "
                                "the model's max_new_tokens, else 64)")
                     ->check(CLI::NonNegativeNumber);
       auto* temp = sub.add_option("--temp", o->temperature, "Temperature (0 = greedy)");
       auto* top_k = sub.add_option("--top-k", o->top_k, "Top-k (0 = off)");
       auto* top_p = sub.add_option("--top-p", o->top_p, "Top-p (1 = off)");
       auto* min_p = sub.add_option("--min-p", o->min_p, "Min-p (0 = off)");
       auto* penalty =
           sub.add_option("--repeat-penalty", o->repeat_penalty, "Repetition penalty (1 = off)");
       sub.add_option("--seed", o->seed, "Random seed for sampling");
       sub.add_flag("--json", o->json, "Print one JSON object: prompt_tokens, tokens, text");
       sub.add_option("--logits", o->logits_file, "Write f32 logits of every position to FILE");
       sub.add_flag("--ignore-eos", o->ignore_eos, "Do not stop at the end-of-sequence token");
       sub.add_option("--refit-from", o->refit_from,
                      "Refit to this checkpoint's weights during generation");
       sub.add_option("--refit-after", o->refit_after,
                      "Generated tokens before the refit (0: before the prompt)")
           ->check(CLI::NonNegativeNumber);
       sub.add_option("--refit-names", o->refit_names,
                      "Comma-separated tensor names to refit (default: all)");
       return std::function<int()>([o, n, temp, top_k, top_p, min_p, penalty] {
         o->n_given = n->count() > 0;
         o->given = {temp->count() > 0, top_p->count() > 0, top_k->count() > 0, min_p->count() > 0,
                     penalty->count() > 0};
         return run(*o);
       });
     }}};

}  // namespace
}  // namespace refit::cli

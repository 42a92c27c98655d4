// `refit generate`: load a model (or the built-in demo model), tokenise the prompt,
// generate, and print the text as it is produced.
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unistd.h>

#include "cli/command.h"
#include "cli/model_source.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "runtime/generator.h"
#include "tokenizer/tokenizer.h"

namespace refit::cli {
namespace {

struct GenerateOptions {
  std::string model, tokenizer, prompt, prompt_ids, logits_file;
  int64_t n = 64;
  float temperature = 0.0f, top_p = 1.0f, min_p = 0.0f, repeat_penalty = 1.0f;
  int top_k = 0, threads = 0;
  uint64_t seed = 0;
  bool json = false, ignore_eos = false;
};

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
  if (o.threads > 0) set_num_threads(o.threads);
  LoadedModel loaded = load_model_for_cli(o.model, o.tokenizer, !o.json);
  const LlamaModel& model = *loaded.model;

  GenerateRequest req;
  if (!o.prompt_ids.empty()) {
    req.prompt = parse_ids(o.prompt_ids);
  } else {
    if (!loaded.tokenizer)
      fail("{} carries no tokenizer: pass --tokenizer FILE or --prompt-ids", loaded.description);
    req.prompt = loaded.tokenizer->encode(o.prompt, /*add_special=*/true, /*parse_special=*/false);
    if (req.prompt.empty()) req.prompt.push_back(model.config().bos_id);
  }
  req.max_tokens = o.n;
  req.sampling.temperature = o.temperature;
  req.sampling.top_k = o.top_k;
  req.sampling.top_p = o.top_p;
  req.sampling.min_p = o.min_p;
  req.sampling.repetition_penalty = o.repeat_penalty;
  req.sampling.seed = o.seed;
  req.record_logits = !o.logits_file.empty();
  if (!o.ignore_eos) {
    int32_t eos = loaded.tokenizer ? loaded.tokenizer->vocab().eos() : model.config().eos_id;
    if (eos >= 0) req.stop_tokens.push_back(eos);
  }

  std::unique_ptr<StreamingDecoder> stream;
  if (loaded.tokenizer && !o.json) {
    stream = std::make_unique<StreamingDecoder>(*loaded.tokenizer);
    // Echo the prompt as llama.cpp does, so the continuation reads naturally.
    for (int32_t id : req.prompt) fmt::print("{}", stream->push(id));
    std::fflush(stdout);
  }
  GenerateResult result = generate(model, req, [&](int32_t token) {
    if (stream) {
      fmt::print("{}", stream->push(token));
      std::fflush(stdout);
    } else if (!o.json) {
      fmt::print("{} ", token);
      std::fflush(stdout);
    }
    return true;
  });
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
  const double prefill_tps = result.prefill_seconds > 0 ? req.prompt.size() / result.prefill_seconds : 0.0;
  if (o.json) {
    nlohmann::json j;
    j["model"] = loaded.description;
    j["prompt_tokens"] = req.prompt;
    j["tokens"] = result.tokens;
    j["text"] = loaded.tokenizer ? loaded.tokenizer->decode(result.tokens) : "";
    j["finish_reason"] = result.finish_reason;
    j["n_positions"] = result.n_positions;
    j["prefill_tokens_per_second"] = prefill_tps;
    j["decode_tokens_per_second"] = decode_tps;
    fmt::print("{}\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  } else if (isatty(STDERR_FILENO)) {
    fmt::print(stderr, "[{} prompt tokens at {:.1f} t/s, {} generated at {:.1f} t/s]\n",
               req.prompt.size(), prefill_tps, result.tokens.size(), decode_tps);
  }
  return 0;
}

CommandRegistrar registrar{{"generate", "Generate text with a model (the built-in demo model without -m)",
                            [](CLI::App& sub) {
  auto o = std::make_shared<GenerateOptions>();
  sub.add_option("-m,--model", o->model, "GGUF file, Hugging Face folder or llama2.c .bin (default: built-in demo model)");
  sub.add_option("-p,--prompt", o->prompt, "Prompt text")->default_val("Once upon a time");
  sub.add_option("--prompt-ids", o->prompt_ids, "Prompt as token ids, e.g. \"1 2 3\"");
  sub.add_option("-n,--n-predict", o->n, "Number of tokens to generate")->check(CLI::NonNegativeNumber);
  sub.add_option("--temp", o->temperature, "Temperature (0 = greedy)");
  sub.add_option("--top-k", o->top_k, "Top-k (0 = off)");
  sub.add_option("--top-p", o->top_p, "Top-p (1 = off)");
  sub.add_option("--min-p", o->min_p, "Min-p (0 = off)");
  sub.add_option("--repeat-penalty", o->repeat_penalty, "Repetition penalty (1 = off)");
  sub.add_option("--seed", o->seed, "Random seed for sampling");
  sub.add_option("-t,--threads", o->threads, "Threads (default: all cores)");
  sub.add_option("--tokenizer", o->tokenizer, "Tokenizer file for formats that carry none (llama2.c)");
  sub.add_flag("--json", o->json, "Print one JSON object: prompt_tokens, tokens, text");
  sub.add_option("--logits", o->logits_file, "Write f32 logits of every position to FILE");
  sub.add_flag("--ignore-eos", o->ignore_eos, "Do not stop at the end-of-sequence token");
  return std::function<int()>([o] { return run(*o); });
}}};

}  // namespace
}  // namespace refit::cli

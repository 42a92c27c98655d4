// Stop ids and generation_config.json sampling defaults (runtime/stop_tokens.h,
// runtime/generation_defaults.h, runtime/generation_setup.h): what transformers, vLLM and
// llama.cpp stop on and default to, read once for every front end.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "formats_test_util.h"
#include "runtime/engine.h"
#include "runtime/generation_defaults.h"
#include "runtime/stop_tokens.h"
#include "synthetic/synthetic_checkpoint.h"
#include "synthetic/synthetic_model.h"

namespace refit {
namespace {

using nlohmann::json;
using testing::expect_format_error;
using testing::TempDir;

void write_json(const std::string& path, const json& j) { std::ofstream(path) << j.dump(2); }
json read_json(const std::string& path) { return json::parse(std::ifstream(path)); }

// A tiny Llama HF folder without tokenizer files (the case that used to stop on a default 2).
std::string tokenizerless_folder(const TempDir& dir, const std::string& name) {
  ModelConfig c = synthetic_preset(Architecture::llama, "tiny");
  c.dim = 64, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 16, c.ffn_dim = 96;
  c.vocab_size = 400;
  c.max_seq_len = 128;
  const std::string folder = dir.file(name);
  write_synthetic_hf(folder, c, {});
  std::filesystem::remove(folder + "/tokenizer.json");
  std::filesystem::remove(folder + "/tokenizer_config.json");
  return folder;
}

EngineOptions options(const std::string& model, const std::string& generation_config = "auto") {
  EngineOptions o;
  o.model_path = model;
  o.threads = 1;
  o.generation_config = generation_config;
  return o;
}

std::vector<int32_t> greedy(Engine& engine, int64_t n, const std::vector<int32_t>& stop) {
  GenerateRequest req;
  req.prompt = {1, 17, 42, 99};
  req.max_tokens = n;
  req.stop_tokens = stop;
  return engine.generate(req).tokens;
}

TEST(StopTokens, eos_token_id_is_an_int_or_a_list_and_anything_else_names_the_file) {
  EXPECT_EQ(json_token_ids(json(2), "c.json", "eos_token_id"), std::vector<int32_t>{2});
  EXPECT_EQ(json_token_ids(json::parse("[128001, 128008, 128009]"), "c.json", "eos_token_id"),
            (std::vector<int32_t>{128001, 128008, 128009}));
  EXPECT_TRUE(json_token_ids(json(), "c.json", "eos_token_id").empty());
  expect_format_error([] { json_token_ids(json("</s>"), "c.json", "eos_token_id"); },
                      {"c.json", "'eos_token_id'"});
  expect_format_error([] { json_token_ids(json::parse("[1, -3]"), "c.json", "eos_token_id"); },
                      {"c.json", "-3"});
}

// Catches: a config.json eos list read as nothing (the default 2 stopped instead), and
// generation_config.json's ids not merged.
TEST(StopTokens, a_folder_without_tokenizer_stops_on_every_config_and_generation_config_id) {
  TempDir dir;
  const std::string folder = tokenizerless_folder(dir, "m");
  std::vector<int32_t> free_run;
  {
    Engine engine(options(folder));
    free_run = greedy(engine, 12, {});
  }
  ASSERT_EQ(free_run.size(), 12u);
  // Ids that never occur in the free run (so only the listed ones can stop it).
  std::vector<int32_t> absent;
  for (int32_t id = 3; absent.size() < 2; ++id)
    if (std::find(free_run.begin(), free_run.end(), id) == free_run.end()) absent.push_back(id);
  // Each position k: its token listed once, in config.json's list (second entry) or in
  // generation_config.json, stops the run right there.
  for (int k : {2, 5}) {
    for (bool in_generation_config : {false, true}) {
      json cfg = read_json(folder + "/config.json");
      json gen = read_json(folder + "/generation_config.json");
      cfg["eos_token_id"] =
          json::array({absent[0], in_generation_config ? absent[1] : free_run[k]});
      gen["eos_token_id"] = in_generation_config ? json::array({free_run[k]}) : json(absent[1]);
      write_json(folder + "/config.json", cfg);
      write_json(folder + "/generation_config.json", gen);
      Engine engine(options(folder));
      const StopTokenIds& stop = engine.stop_ids();
      EXPECT_TRUE(stop.contains(absent[0]) && stop.contains(absent[1]) &&
                  stop.contains(free_run[k]))
          << stop.str();
      EXPECT_FALSE(stop.contains(2)) << "a folder naming its eos ids must not stop on 2";
      EXPECT_EQ(stop.primary, absent[0]);  // no tokenizer: config.json's first
      const auto first = std::find(free_run.begin(), free_run.end(), free_run[k]);
      const std::vector<int32_t> want(free_run.begin(), first + 1);
      EXPECT_EQ(greedy(engine, 12, stop.ids), want)
          << "k " << k << ", in generation_config " << in_generation_config;
    }
  }
}

// Catches: the synthetic folder's tokenizer eos dropped from the merged set.
TEST(StopTokens, the_tokenizer_eos_is_the_primary_and_joins_the_set) {
  TempDir dir;
  ModelConfig c = synthetic_preset(Architecture::llama, "tiny");
  c.dim = 64, c.n_layers = 1, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 16, c.ffn_dim = 96;
  c.vocab_size = 400;
  const std::string folder = dir.file("m");
  write_synthetic_hf(folder, c, {});
  json gen = read_json(folder + "/generation_config.json");
  gen["eos_token_id"] = json::array({2, 7});
  write_json(folder + "/generation_config.json", gen);
  Engine engine(options(folder));
  EXPECT_EQ(engine.stop_ids().ids, (std::vector<int32_t>{2, 7})) << engine.stop_ids().str();
  EXPECT_EQ(engine.stop_ids().primary, 2);
  // `--generation-config vllm` drops sampling defaults only: the file's eos ids still stop.
  Engine vllm_mode(options(folder, "vllm"));
  EXPECT_EQ(vllm_mode.stop_ids().ids, (std::vector<int32_t>{2, 7}));
}

// A vocabulary-only GGUF with these tokens and integer keys.
std::shared_ptr<GgufFile> vocab_gguf(const TempDir& dir, const std::vector<std::string>& tokens,
                                     const std::vector<std::pair<std::string, uint32_t>>& keys) {
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_array_strings("tokenizer.ggml.tokens", tokens);
  for (const auto& [k, v] : keys) w.add_u32(k, v);
  const std::vector<uint8_t> bytes = w.header_bytes();
  const std::string path =
      dir.write("v" + std::to_string(TempDir::counter()++) + ".gguf",
                std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  return GgufFile::open(path);
}

// Catches: eot/eom keys or llama.cpp's end-of-generation texts not stopping a GGUF model
// (a Llama 3 Instruct GGUF names eos 128001 and ends its turns with <|eot_id|>).
TEST(StopTokens, gguf_end_of_generation_ids_are_llama_cpps) {
  TempDir dir;
  const std::vector<std::string> llama3 = {"<unk>",      "a", "<|end_of_text|>", "<|eot_id|>",
                                           "<|eom_id|>", "b", "<|python|>"};
  // eos 2 by key; eot and eom found by their texts.
  EXPECT_EQ(gguf_end_of_generation_ids(
                vocab_gguf(dir, llama3, {{"tokenizer.ggml.eos_token_id", 2}})->metadata()),
            (std::vector<int32_t>{2, 3, 4}));
  // eot/eom keys name ids whatever their text; a key past the vocabulary is ignored.
  EXPECT_EQ(gguf_end_of_generation_ids(vocab_gguf(dir, {"x", "y", "z", "w"},
                                                  {{"tokenizer.ggml.eos_token_id", 0},
                                                   {"tokenizer.ggml.eot_token_id", 2},
                                                   {"tokenizer.ggml.eom_token_id", 99}})
                                           ->metadata()),
            (std::vector<int32_t>{0, 2}));
  // Qwen's FIM pad/repo/file-separator tokens end generation; Gemma's <end_of_turn> too.
  EXPECT_EQ(gguf_end_of_generation_ids(
                vocab_gguf(dir,
                           {"<|endoftext|>", "<|im_end|>", "<|fim_pad|>", "<|repo_name|>",
                            "<|file_sep|>", "<|fim_prefix|>", "<end_of_turn>"},
                           {})
                    ->metadata()),
            (std::vector<int32_t>{0, 1, 2, 3, 4, 6}));
  // gpt-oss: <|end|> closes a message, not the turn, beside <|return|> and <|call|>.
  EXPECT_EQ(
      gguf_end_of_generation_ids(
          vocab_gguf(dir, {"<|end|>", "<|return|>", "<|call|>", "<|start|>"}, {})->metadata()),
      (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(gguf_end_of_generation_ids(vocab_gguf(dir, {"<|end|>", "q"}, {})->metadata()),
            (std::vector<int32_t>{0}));
}

TEST(GenerationDefaults, vllms_fields_apply_to_what_a_request_leaves_unset) {
  const json file = json::parse(R"({"temperature": 0.6, "top_p": 0.9, "top_k": 20, "min_p": 0.05,
      "repetition_penalty": 1.1, "max_new_tokens": 33, "max_length": 4096, "do_sample": true})");
  const GenerationDefaults d = read_generation_defaults(file, "/m/generation_config.json", "auto");
  SamplingParams s;  // engine defaults: greedy, everything off
  d.apply(s, {});
  EXPECT_FLOAT_EQ(s.temperature, 0.6f);
  EXPECT_FLOAT_EQ(s.top_p, 0.9f);
  EXPECT_EQ(s.top_k, 20);
  EXPECT_FLOAT_EQ(s.min_p, 0.05f);
  EXPECT_FLOAT_EQ(s.repetition_penalty, 1.1f);
  EXPECT_EQ(d.max_tokens_for(std::nullopt, 16), 33);
  EXPECT_EQ(d.max_tokens_for(100, 16), 100);  // auto: a request's own max_tokens wins
  EXPECT_NE(d.str().find("/m/generation_config.json"), std::string::npos) << d.str();
  // Catches: a request's explicit value that equals the engine default (temperature 1.0,
  // top_k 0 = off, top_p 1.0) taken for unset and replaced by the file's.
  SamplingParams given;
  given.temperature = 1.0f;
  given.top_k = 0;
  given.top_p = 1.0f;
  SamplingFieldsGiven set_three;
  set_three.temperature = set_three.top_p = set_three.top_k = true;
  d.apply(given, set_three);
  EXPECT_FLOAT_EQ(given.temperature, 1.0f);
  EXPECT_EQ(given.top_k, 0);
  EXPECT_FLOAT_EQ(given.top_p, 1.0f);
  EXPECT_FLOAT_EQ(given.min_p, 0.05f);  // not given: the file's
  SamplingParams zero;
  zero.temperature = 0.0f;
  SamplingFieldsGiven set_temperature;
  set_temperature.temperature = true;
  d.apply(zero, set_temperature);
  EXPECT_FLOAT_EQ(zero.temperature, 0.0f);  // explicit greedy stays greedy
}

TEST(GenerationDefaults, transformers_defaults_do_sample_and_modes_are_as_vllm_sees_them) {
  // to_diff_dict drops values equal to transformers' defaults: top_k 50 never applies.
  const json file = json::parse(R"({"temperature": 1.0, "top_k": 50, "do_sample": false,
                                    "top_p": 0.8, "max_new_tokens": 10})");
  const GenerationDefaults d = read_generation_defaults(file, "g.json", "auto");
  EXPECT_FALSE(d.temperature);
  EXPECT_FALSE(d.top_k);
  ASSERT_TRUE(d.top_p);  // do_sample false does not stop vLLM from using it
  EXPECT_FLOAT_EQ(*d.top_p, 0.8f);
  EXPECT_EQ(d.notes.size(), 3u);  // temperature, top_k, do_sample: each said
  // vllm: the file's sampling fields are not read at all.
  EXPECT_TRUE(read_generation_defaults(file, "g.json", "vllm").empty());
  // A FOLDER: its max_new_tokens also caps a request's own (vLLM's override_max_tokens).
  const GenerationDefaults folder =
      read_generation_defaults(file, "/f/generation_config.json", "/f");
  EXPECT_EQ(folder.max_tokens_for(100, 16), 10);
  EXPECT_EQ(folder.max_tokens_for(4, 16), 4);
  // -1 (vLLM's "off") is off.
  EXPECT_EQ(
      read_generation_defaults(json::parse(R"({"top_k": -1})"), "g", "auto").top_k.value_or(-5), 0);
}

// Catches: a malformed value taken silently (or failing each request later, as vLLM does).
TEST(GenerationDefaults, a_malformed_value_fails_naming_the_file_and_field) {
  for (const char* text :
       {R"({"temperature": "hot"})", R"({"top_p": 0})", R"({"top_k": 2.5})",
        R"({"max_new_tokens": 0})", R"({"repetition_penalty": -1})", R"({"min_p": true})"}) {
    const json file = json::parse(text);
    const std::string field = file.begin().key();
    expect_format_error(
        [&] { read_generation_defaults(file, "/m/generation_config.json", "auto"); },
        {"/m/generation_config.json", "'" + field + "'"});
  }
  // The engine refuses to load such a folder (before its weights), naming file and field.
  TempDir dir;
  const std::string folder = tokenizerless_folder(dir, "bad");
  json gen = read_json(folder + "/generation_config.json");
  gen["temperature"] = "hot";
  write_json(folder + "/generation_config.json", gen);
  try {
    Engine engine(options(folder));
    ADD_FAILURE() << "a string temperature was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("generation_config.json: 'temperature'"),
              std::string::npos)
        << e.what();
  }
  // --generation-config vllm does not read sampling fields: it loads.
  Engine ignored(options(folder, "vllm"));
  EXPECT_TRUE(ignored.generation_defaults().empty());
  // A FOLDER without the file is refused by name.
  EXPECT_THROW(Engine(options(folder, dir.file("none"))), Error);
}

}  // namespace
}  // namespace refit

// safetensors, llama2.c and Hugging Face folder readers on the oracle files and on built
// variants (unshared classifier, version-1 llama2.c, sharded folders), the Checkpoint facade,
// and `refit inspect` on every file in ../shared/oracle.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "formats/checkpoint.h"
#include "formats_test_util.h"

namespace refit {
namespace {
using namespace refit::testing;

const std::string kStories = kOracle + "/stories260K";

TEST(FormatsLlama2c, stories260k_header_tensors_and_shared_classifier) {
  auto m = Llama2cModel::open(kStories + "/stories260K.bin");
  const auto& c = m->config();
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.hidden_dim, 172);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.seq_len, 512);
  EXPECT_TRUE(c.shared_classifier);
  EXPECT_EQ(c.kv_dim(), 32);
  EXPECT_EQ(m->tensors().size(), 13u);
  EXPECT_EQ(m->tensor("wk").shape(), (Shape{5, 32, 64}));
  EXPECT_EQ(m->tensor("w2").shape(), (Shape{5, 64, 172}));
  EXPECT_EQ(m->tensor("freq_cis_real").shape(), (Shape{512, 4}));
  EXPECT_EQ(m->classifier().raw_data(), m->tensor("token_embedding_table").raw_data());
  // freq_cis_real[pos=1][i=0] = cos(1 * 10000^0) = cos(1)
  EXPECT_NEAR(m->tensor("freq_cis_real").get({1, 0}), std::cos(1.0), 1e-6);
}

TEST(FormatsLlama2c, negative_vocab_size_means_a_separate_classifier_after_the_freq_tables) {
  // dim 4, hidden 8, 1 layer, 2 heads, 2 kv heads, vocab 3 (unshared), seq_len 2
  const int D = 4, H = 8, V = 3, S = 2, HS2 = 1;
  std::string s;
  for (int32_t v : {D, H, 1, 2, 2, -V, S}) put<int32_t>(s, v);
  const size_t n_floats = V * D + D + 4 * D * D + D + 3 * H * D + D + 2 * S * HS2 + V * D;
  std::vector<float> body(n_floats);
  for (size_t i = 0; i < n_floats; ++i) body[i] = static_cast<float>(i);
  TempDir dir;
  auto m = Llama2cModel::open(dir.write("m.bin", s + f32_bytes(body)));
  EXPECT_FALSE(m->config().shared_classifier);
  EXPECT_EQ(m->config().vocab_size, V);
  const Tensor& wcls = m->classifier();
  EXPECT_EQ(wcls.shape(), (Shape{V, D}));
  EXPECT_EQ(wcls.get({0, 0}), static_cast<double>(n_floats - V * D));  // the last V*D floats
  EXPECT_EQ(m->tensor("token_embedding_table").get({0, 0}), 0.0);
  // A broken tokenizer next to the model is reported, not fatal.
  dir.write("tok3.bin", "garbage");
  auto c = Checkpoint::open(dir.file("m.bin"));
  EXPECT_FALSE(c->vocab().present);
  EXPECT_NE(c->vocab().source.find("tok3.bin"), std::string::npos) << c->vocab().source;
  EXPECT_EQ(c->tensors().back().name, "wcls");
}

TEST(FormatsLlama2c, version1_layout_is_read_with_norms_first_and_no_freq_tables) {
  const int D = 4, H = 8, V = 3;
  std::string s = "24ka";
  put<int32_t>(s, 1);
  for (int32_t v : {D, H, 1, 2, 2, V, 2}) put<int32_t>(s, v);
  s.push_back(1);  // shared classifier
  s.resize(256, '\0');
  const size_t n_floats = D + D + D + V * D + 4 * D * D + 3 * H * D;
  std::vector<float> body(n_floats);
  for (size_t i = 0; i < n_floats; ++i) body[i] = static_cast<float>(i);
  TempDir dir;
  auto m = Llama2cModel::open(dir.write("v1.bin", s + f32_bytes(body)));
  EXPECT_EQ(m->config().version, 1);
  EXPECT_EQ(m->find_tensor("freq_cis_real"), nullptr);
  EXPECT_EQ(m->tensor("rms_final_weight").get({0}), 2.0 * D);
  EXPECT_EQ(m->tensor("token_embedding_table").get({0, 0}), 3.0 * D);
}

TEST(FormatsLlama2c, tok512_pieces_scores_and_byte_fallback_ids) {
  auto t = read_llama2c_tokenizer(kStories + "/tok512.bin", 512);
  EXPECT_EQ(t.max_token_length, 7u);
  ASSERT_EQ(t.pieces.size(), 512u);
  EXPECT_EQ(t.pieces[0], "<unk>");
  EXPECT_EQ(t.pieces[1], "\n<s>\n");
  EXPECT_EQ(t.pieces[2], "\n</s>\n");
  EXPECT_EQ(t.pieces[3], "<0x00>");
  EXPECT_EQ(t.pieces[258], "<0xFF>");
  EXPECT_EQ(t.pieces[259], " t");
  EXPECT_EQ(t.pieces[410], " ");
  EXPECT_EQ(t.scores[260], -1.0f);
  EXPECT_EQ(t.scores[511], -252.0f);
}

TEST(FormatsSafetensors, stories260k_hf_file_matches_the_llama2c_weights) {
  auto st = SafetensorsFile::open(kStories + "/hf/model.safetensors");
  EXPECT_EQ(st->tensors().size(), 47u);  // tied embeddings: no lm_head
  EXPECT_EQ(st->data_offset() % 8, 0u);
  Tensor emb = st->tensor("model.embed_tokens.weight");
  EXPECT_TRUE(emb.read_only());
  EXPECT_EQ(emb.shape(), (Shape{512, 64}));
  auto bin = Llama2cModel::open(kStories + "/stories260K.bin");
  EXPECT_EQ(
      std::memcmp(emb.raw_data(), bin->tensor("token_embedding_table").raw_data(), 512 * 64 * 4),
      0);
  // v_proj is not permuted by the HF conversion, so it equals llama2.c's wv per layer.
  Tensor v2 = st->tensor("model.layers.2.self_attn.v_proj.weight");
  EXPECT_EQ(std::memcmp(v2.raw_data(), bin->tensor("wv").select(0, 2).raw_data(), 32 * 64 * 4), 0);
}

TEST(FormatsHfFolder, stories260k_folder_config_and_tensors) {
  auto hf = HfFolder::open(kStories + "/hf");
  EXPECT_EQ(hf->architecture(), "LlamaForCausalLM");
  EXPECT_EQ(hf->config()["num_key_value_heads"], 4);
  EXPECT_TRUE(hf->generation_config().is_null());
  EXPECT_FALSE(hf->tokenizer_json_path().has_value());
  EXPECT_EQ(hf->tensor_names().size(), 47u);
  EXPECT_EQ(hf->tensor("model.norm.weight").shape(), (Shape{64}));
}

// Two shards and an index, as transformers' save_pretrained writes them.
struct ShardedFolder {
  TempDir dir;
  explicit ShardedFolder(const std::string& index_json) {
    dir.write("config.json", R"({"architectures":["LlamaForCausalLM"],"model_type":"llama"})");
    dir.write("generation_config.json", R"({"bos_token_id":1,"eos_token_id":[2,3]})");
    dir.write("tokenizer_config.json", R"({"bos_token":"<s>","eos_token":{"content":"</s>"}})");
    dir.write("model-00001-of-00002.safetensors",
              safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                                f32_bytes({1, 2})));
    dir.write("model-00002-of-00002.safetensors",
              safetensors_bytes(R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                                f32_bytes({3})));
    dir.write("model.safetensors.index.json", index_json);
  }
};

TEST(FormatsHfFolder, sharded_index_maps_each_tensor_to_its_shard) {
  ShardedFolder f(
      R"({"metadata":{},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}})");
  auto hf = HfFolder::open(f.dir.path.string());
  EXPECT_EQ(hf->shards().size(), 2u);
  EXPECT_EQ(hf->tensor_names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(hf->tensor("b").to_floats(), (std::vector<float>{3}));
  EXPECT_EQ(hf->generation_config()["eos_token_id"][1], 3);
  auto c = Checkpoint::open(f.dir.path.string());
  EXPECT_EQ(c->format(), CheckpointFormat::hf_folder);
  EXPECT_EQ(c->vocab().bos_text, "<s>");
  EXPECT_EQ(c->vocab().eos_text, "</s>");
}

TEST(FormatsHfFolder, index_naming_files_outside_the_folder_or_missing_tensors_is_refused) {
  ShardedFolder escape(R"({"weight_map":{"a":"../model-00001-of-00002.safetensors"}})");
  expect_format_error([&] { HfFolder::open(escape.dir.path.string()); },
                      {"model.safetensors.index.json", "not a file in the folder"});
  ShardedFolder missing(
      R"({"weight_map":{"a":"model-00001-of-00002.safetensors","zz":"model-00002-of-00002.safetensors"}})");
  expect_format_error([&] { HfFolder::open(missing.dir.path.string()); },
                      {"model-00002-of-00002.safetensors", "'zz'", "lacks it"});
  ShardedFolder bad_json("{\"weight_map\": [");
  expect_format_error([&] { HfFolder::open(bad_json.dir.path.string()); },
                      {"model.safetensors.index.json", "not valid JSON"});
}

TEST(FormatsCheckpoint, detects_every_oracle_format) {
  EXPECT_EQ(Checkpoint::open(kStories + "/stories260K.bin")->format(), CheckpointFormat::llama2c);
  EXPECT_EQ(Checkpoint::open(kStories + "/stories260K.gguf")->format(), CheckpointFormat::gguf);
  EXPECT_EQ(Checkpoint::open(kStories + "/hf")->format(), CheckpointFormat::hf_folder);
  EXPECT_EQ(Checkpoint::open(kStories + "/hf/model.safetensors")->format(),
            CheckpointFormat::safetensors);
  auto bin = Checkpoint::open(kStories + "/stories260K.bin");
  EXPECT_TRUE(bin->vocab().present);  // tok512.bin lies alongside
  EXPECT_EQ(bin->vocab().size, 512);
  EXPECT_EQ(bin->total_bytes(), 1056540u - 28u);
  auto gguf = Checkpoint::open(kStories + "/stories260K.gguf");
  EXPECT_EQ(gguf->architecture(), "llama");
  EXPECT_EQ(gguf->hparams()["llama.context_length"], 2048);
  EXPECT_EQ(gguf->vocab().bos_id, 1);
  EXPECT_EQ(gguf->vocab().eos_text, "</s>");
}

// Runs the CLI and returns (exit code, stdout).
std::pair<int, std::string> run_cli(const std::string& args) {
  std::string out;
  FILE* p = ::popen((std::string(REFIT_BINARY) + " " + args + " 2>&1").c_str(), "r");
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int rc = ::pclose(p);
  return {WEXITSTATUS(rc), out};
}

TEST(FormatsInspect, json_output_for_every_oracle_checkpoint_lists_every_tensor) {
  std::vector<std::string> paths = {kStories + "/stories260K.bin", kStories + "/stories260K.gguf",
                                    kStories + "/hf", kStories + "/hf/model.safetensors"};
  for (const char* v : {"llama-spm", "phi-3", "gpt-2", "deepseek-llm", "falcon", "starcoder"})
    paths.push_back(kOracle + "/vocab/ggml-vocab-" + v + ".gguf");
  for (const char* m : {"llama-f32/micro-llama-f32-s1", "llama-q8_0/micro-llama-q8_0-s1",
                        "llama-mxfp4/micro-llama-mxfp4-s1", "qwen2-f32/micro-qwen2-f32-s1",
                        "qwen3-f32/micro-qwen3-f32-s1"})
    paths.push_back(kOracle + "/llamacpp/" + m + ".gguf");
  for (const auto& path : paths) {
    auto [rc, out] = run_cli("inspect --json '" + path + "'");
    ASSERT_EQ(rc, 0) << path << "\n" << out;
    auto j = nlohmann::json::parse(out);
    auto c = Checkpoint::open(path);
    EXPECT_EQ(j["format"], checkpoint_format_name(c->format())) << path;
    EXPECT_EQ(j["tensors"].size(), c->tensors().size()) << path;
    EXPECT_EQ(j["total_bytes"], c->total_bytes()) << path;
    auto [rc_text, text] = run_cli("inspect '" + path + "'");
    EXPECT_EQ(rc_text, 0) << path;
    EXPECT_NE(text.find("tensors:"), std::string::npos) << path;
  }
  auto [rc, out] = run_cli("inspect " + kOracle + "/llamacpp/llama-q8_0/micro-llama-q8_0-s1.gguf");
  EXPECT_NE(out.find("blk.0.attn_q.weight"), std::string::npos);
  EXPECT_NE(out.find("q8_0"), std::string::npos);
  EXPECT_NE(out.find("32000 tokens"), std::string::npos);
}

TEST(FormatsInspect, a_malformed_file_exits_non_zero_with_the_file_and_problem) {
  TempDir dir;
  std::string path = dir.write("bad.gguf", std::string("GGUF\x07\0\0\0", 8));
  auto [rc, out] = run_cli("inspect " + path);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find(path), std::string::npos) << out;
  EXPECT_NE(out.find("unknown GGUF version 7"), std::string::npos) << out;
}

}  // namespace
}  // namespace refit

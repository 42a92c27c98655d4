// Work and memory checked before they are spent, and numbers checked against their ranges:
// the request parsers and limits the server is built from (no HTTP; tests/cli/
// serve_limits_test.py drives the same through a running server). No model either:
// scripts/fuzz.sh also builds these tests with ASan + UBSan against the parsers alone.
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <fstream>
#include <string>

#include "runtime/sampler.h"
#include "server/api_types.h"
#include "server/chat_request.h"
#include "server/prompt_limits.h"
#include "server/sglang_request.h"
#include "server/weight_carrier.h"
#include "synthetic/synthetic_vocab.h"
#include "tokenizer/token_byte_bound.h"
#include "tokenizer/tokenizer.h"

namespace refit {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

NormalizerStep normalizer_step(NormalizerStep::Kind kind) {
  NormalizerStep step;
  step.kind = kind;
  return step;
}

template <class Fn>
HttpError http_error(Fn&& fn) {
  try {
    fn();
  } catch (const HttpError& e) {
    return e;
  }
  ADD_FAILURE() << "expected an HttpError";
  return {};
}

// Peak RSS since the last reset_peak_rss(), in KiB (Linux: /proc/self/clear_refs "5").
bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  return static_cast<bool>(f.flush());
}
long peak_rss_kib() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

// ---- declared sizes against the bytes carried ----

TEST(ServeRequestLimits, a_tensor_declaring_terabytes_in_a_small_body_is_refused_by_its_size) {
  const json t = {{"name", "w"}, {"dtype", "f32"}, {"shape", {1 << 20, 1 << 20}}, {"data", "AAAA"}};
  const HttpError e = http_error([&] { decode_named_tensor(t, "named_tensors[0]"); });
  EXPECT_EQ(e.status, 400);
  EXPECT_NE(e.message.find("needs 4398046511104 bytes, the data has at most 5"), std::string::npos)
      << e.message;
}

TEST(ServeRequestLimits, a_tensor_declaring_a_gigabyte_costs_no_memory_before_it_is_refused) {
  if (!reset_peak_rss()) GTEST_SKIP() << "/proc/self/clear_refs is not writable";
  const long before = peak_rss_kib();
  // 1 GiB declared, 4 bytes carried: a 120-byte request (it once allocated and zero-filled
  // the declared shape first).
  const json t = {{"name", "w"}, {"dtype", "float32"}, {"shape", {1 << 28}}, {"data", "AAAAAA=="}};
  http_error([&] { decode_named_tensor(t, "named_tensors[0]"); });
  const json bucket = {{"serialized_named_tensors",
                        {{{"flattened_tensor", "AAAA"},
                          {"metadata",
                           {{{"name", "w"},
                             {"dtype", "float32"},
                             {"shape", {1 << 28}},
                             {"start_idx", 0},
                             {"end_idx", int64_t{1} << 30},
                             {"numel", int64_t{1} << 30}}}}}}}};
  http_error([&] {
    decode_serialized_named_tensors(bucket["serialized_named_tensors"],
                                    TensorLoadFormat::flattened_bucket);
  });
  EXPECT_LT(peak_rss_kib() - before, 16 * 1024) << "KiB of peak RSS for two refused tensors";
}

TEST(ServeRequestLimits, a_base64_entry_nested_deep_is_refused_while_parsing) {
  // The entry's JSON text inside base64 gets the body's depth limit: dumping a million-deep
  // shape for an error message would overflow the stack.
  std::string text = R"({"metadata": [{"name": "w", "dtype": "f32", "shape": )";
  text += std::string(100000, '[') + std::string(100000, ']') + "}]}";
  static const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string b64;
  for (size_t i = 0; i < text.size(); i += 3) {
    uint32_t v = static_cast<uint8_t>(text[i]) << 16;
    if (i + 1 < text.size()) v |= static_cast<uint8_t>(text[i + 1]) << 8;
    if (i + 2 < text.size()) v |= static_cast<uint8_t>(text[i + 2]);
    b64 += a[(v >> 18) & 63];
    b64 += a[(v >> 12) & 63];
    b64 += i + 1 < text.size() ? a[(v >> 6) & 63] : '=';
    b64 += i + 2 < text.size() ? a[v & 63] : '=';
  }
  const HttpError e = http_error([&] {
    decode_serialized_named_tensors(json::array({b64}), TensorLoadFormat::flattened_bucket);
  });
  EXPECT_NE(e.message.find("nests deeper"), std::string::npos) << e.message;
}

// ---- prompts against the context before they are tokenized ----

TEST(ServeRequestLimits, the_byte_bound_never_refuses_a_prompt_that_fits) {
  const auto tok = synthetic_tokenizer(kSyntheticVocabMinSize + 200);
  const size_t per_token = max_text_bytes_per_token(tok->vocab());
  ASSERT_GT(per_token, 0u);
  // Every token of any text stands for at most per_token of its bytes.
  const std::string texts[] = {"Once upon a time there was a little girl.",
                               std::string(5000, ' '),
                               std::string(3000, 'a'),
                               "\xE2\x98\x95 caf\xC3\xA9 \xF0\x9F\x98\x80 \x01\x02\xFF",
                               "<s></s><unk> the the the",
                               "0123456789!@#$%^&*()_+-=[]{};':\",./<>?"};
  for (const std::string& text : texts) {
    const size_t tokens = tok->encode(text, false, true).size();
    EXPECT_GE(tokens * per_token, text.size()) << text.substr(0, 40);
  }
}

TEST(ServeRequestLimits, a_text_prompt_that_cannot_fit_is_refused_before_tokenizing) {
  const auto tok = synthetic_tokenizer(kSyntheticVocabMinSize + 200);
  const PromptLimits limits = prompt_limits(tok.get(), 256);
  ASSERT_GT(limits.max_text_bytes, 0u);
  EXPECT_NO_THROW(check_prompt_text_fits(limits.max_text_bytes, limits, "prompt"));
  const HttpError e =
      http_error([&] { check_prompt_text_fits(limits.max_text_bytes + 1, limits, "prompt"); });
  EXPECT_EQ(e.param, "prompt");
  EXPECT_EQ(e.code, "context_length_exceeded");
  // /generate: refused by its length, with the byte message (not tokenized and then refused
  // by its token count).
  SglangLimits sl;
  sl.tokenizer = tok.get();
  sl.context = 256;
  sl.vocab = static_cast<int64_t>(tok->size());
  sl.prompt = limits;
  const HttpError g = http_error([&] {
    parse_sglang_generate(json{{"text", std::string(8 << 20, 'a')}}, sl);
  });
  EXPECT_EQ(g.param, "text");
  EXPECT_NE(g.message.find("bytes cannot fit"), std::string::npos) << g.message;
}

TEST(ServeRequestLimits, a_token_id_prompt_longer_than_the_context_is_refused_before_conversion) {
  const json body = {{"prompt", std::vector<int>(300, 5)}};
  const HttpError e =
      http_error([&] { parse_generation_request(body, false, 20, nullptr, /*context=*/256); });
  EXPECT_EQ(e.param, "prompt");
  EXPECT_EQ(e.code, "context_length_exceeded");
  EXPECT_NO_THROW(
      parse_generation_request({{"prompt", std::vector<int>(255, 5)}}, false, 20, nullptr, 256));
  SglangLimits sl;
  sl.context = 256;
  sl.vocab = 300;
  sl.prompt.context = 256;
  const HttpError g = http_error([&] {
    parse_sglang_generate(json{{"input_ids", std::vector<int>(256, 5)}}, sl);
  });
  EXPECT_EQ(g.param, "input_ids");
}

TEST(ServeRequestLimits, the_tokenizer_bound_is_unbounded_when_the_normalizer_can_delete_text) {
  VocabData data;
  data.model = VocabModel::vocab_model_bpe;
  data.tokens = {"a", "b", "ab"};
  data.merges = {{"a", "b"}};
  data.hf_pipeline = true;
  data.normalizer = {normalizer_step(NormalizerStep::Kind::nfc)};
  EXPECT_EQ(max_text_bytes_per_token(Vocab(data)), 4u * 3);  // an unknown character, NFC
  data.normalizer = {normalizer_step(NormalizerStep::Kind::nfkc)};
  EXPECT_EQ(max_text_bytes_per_token(Vocab(data)), 4u * 4);  // U+1D400 (4 bytes) -> 'A'
  data.normalizer = {normalizer_step(NormalizerStep::Kind::nfc)};
  data.normalizer.push_back(normalizer_step(NormalizerStep::Kind::strip));
  EXPECT_EQ(max_text_bytes_per_token(Vocab(data)), 0u);
}

// ---- max_tokens and the other numbers ----

TEST(ServeRequestLimits, max_tokens_at_int64_max_is_refused_without_overflow) {
  const GenerationDefaults none;
  const HttpError e = http_error(
      [&] { checked_max_tokens(INT64_MAX, false, false, /*n_prompt=*/3, /*context=*/256, none); });
  EXPECT_EQ(e.param, "max_tokens");
  EXPECT_EQ(e.code, "context_length_exceeded");
  EXPECT_EQ(checked_max_tokens(253, false, false, 3, 256, none), 253);
  EXPECT_THROW(checked_max_tokens(254, false, false, 3, 256, none), HttpError);
}

TEST(ServeRequestLimits, integers_beyond_63_bits_negative_or_fractional_are_400s_naming_them) {
  for (const char* raw :
       {R"({"prompt": "x", "max_tokens": 18446744073709551615})",
        R"({"prompt": "x", "max_tokens": 18446744073709551616})",
        R"({"prompt": "x", "max_tokens": -1})", R"({"prompt": "x", "max_tokens": 2.5})"}) {
    const HttpError e = http_error([&] { parse_generation_request(json::parse(raw), false); });
    EXPECT_EQ(e.param, "max_tokens") << raw;
    EXPECT_EQ(e.message.find("got -1\n"), std::string::npos) << raw;
  }
  const HttpError u = http_error([&] {
    parse_generation_request(json::parse(R"({"prompt": "x", "max_tokens": 18446744073709551615})"),
                             false);
  });
  EXPECT_NE(u.message.find("63 bits"), std::string::npos) << u.message;  // not "got -1"
}

TEST(ServeRequestLimits, floats_are_range_checked_before_they_narrow) {
  // 1e300 is a finite double but inf as a float: refused naming the field, not cast.
  const HttpError g = http_error([&] {
    SglangLimits sl;
    sl.context = 256;
    sl.vocab = 300;
    parse_sglang_generate(
        json{{"input_ids", {1, 2}}, {"sampling_params", {{"temperature", 1e300}}}}, sl);
  });
  EXPECT_EQ(g.param, "sampling_params.temperature");
  for (const auto& [field, value] :
       std::vector<std::pair<const char*, json>>{{"temperature", 1e300},
                                                 {"temperature", -0.5},
                                                 {"top_p", 0},
                                                 {"top_p", 1e300},
                                                 {"min_p", -1},
                                                 {"repetition_penalty", 1e300},
                                                 {"presence_penalty", 3},
                                                 {"frequency_penalty", -1e300},
                                                 {"top_k", -2},
                                                 {"n", 0},
                                                 {"logprobs", 21}}) {
    json body = {{"prompt", "x"}};
    body[field] = value;
    const HttpError e = http_error([&] { parse_generation_request(body, false); });
    EXPECT_EQ(e.param, field) << body.dump();
  }
}

TEST(ServeRequestLimits, a_top_k_beyond_int32_keeps_every_token_instead_of_wrapping) {
  // 2^32 + 5 once became top_k 5.
  const GenerationParams p =
      parse_generation_request({{"prompt", "x"}, {"top_k", (int64_t{1} << 32) + 5}}, false);
  EXPECT_EQ(p.sampling.top_k, INT32_MAX);
}

TEST(ServeRequestLimits, min_tokens_over_max_tokens_is_refused_naming_min_tokens) {
  const HttpError e = http_error([&] {
    parse_generation_request({{"prompt", "x"}, {"max_tokens", 4}, {"min_tokens", 5}}, false);
  });
  EXPECT_EQ(e.param, "min_tokens");
}

TEST(ServeRequestLimits, a_number_beyond_double_is_a_400_naming_its_field) {
  const HttpError e =
      http_error([&] { parse_json_body(R"({"prompt": "x", "temperature": 1e999})"); });
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "temperature");
}

// ---- chat messages ----

TEST(ServeRequestLimits, a_chat_message_without_content_is_refused_unless_it_is_the_assistants) {
  for (const char* role : {"user", "system", "tool"}) {
    const HttpError e = http_error([&] {
      parse_chat_input(
          json{{"messages", {{{"role", "user"}, {"content", "hi"}}, {{"role", role}}}}});
    });
    EXPECT_EQ(e.param, "messages[1].content") << role;
    const HttpError n = http_error([&] {
      parse_chat_input(json{{"messages", {{{"role", role}, {"content", nullptr}}}}});
    });
    EXPECT_EQ(n.param, "messages[0].content") << role;
  }
  const json call = {
      {"id", "c1"}, {"type", "function"}, {"function", {{"name", "f"}, {"arguments", "{}"}}}};
  EXPECT_NO_THROW(parse_chat_input(json{
      {"messages",
       {{{"role", "user"}, {"content", "hi"}}, {{"role", "assistant"}, {"tool_calls", {call}}}}}}));
}

// ---- sampling at tiny temperatures ----

TEST(ServeRequestLimits, temperatures_down_to_denormals_are_greedy) {
  const std::vector<float> logits = {0.5f, 3.0f, -1.0f, 2.9f, -40.0f};
  for (float t : {1e-6f, 1e-30f, 1e-37f, 1e-38f, 1e-40f, 1e-45f}) {
    SamplingParams sp;
    sp.temperature = t;
    sp.seed = 7;
    Sampler s(sp);
    EXPECT_EQ(s.params().temperature, 0.0f) << t;
    for (int i = 0; i < 20; ++i) {
      std::span<const float> processed = s.process(logits, {});
      for (float x : processed) EXPECT_TRUE(std::isfinite(x)) << t;
      EXPECT_EQ(s.draw(processed), 1) << t;
    }
  }
}

}  // namespace
}  // namespace refit

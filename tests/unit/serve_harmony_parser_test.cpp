// gpt-oss's harmony output read into reasoning, content and tool calls, on the token ids a
// model emits (tests/data/harmony: a byte-level vocabulary with the harmony special tokens).
// The structural tokens are matched by id, so none of their text reaches a field.
#include <gtest/gtest.h>

#include "core/error.h"
#include "server/harmony_chat.h"
#include "server/harmony_parser.h"
#include "tokenizer/vocab_loaders.h"

namespace refit {
namespace {

const Tokenizer& tok() {
  static const std::unique_ptr<Tokenizer> t = load_tokenizer("tests/data/harmony");
  return *t;
}

std::vector<TokenId> ids(const std::string& text) { return tok().encode(text, false, true); }

struct Parsed {
  std::string reasoning, content;
  std::vector<HarmonyToolCall> calls;
  std::vector<HarmonyDelta> deltas;
};

// Everything the model wrote after the prompt's "<|start|>assistant", one token at a time.
Parsed parse(const std::vector<TokenId>& output) {
  int n = 0;
  HarmonyParser p(tok(), *HarmonyTokens::find(tok()),
                  [&n] { return "call_" + std::to_string(n++); });
  Parsed out;
  for (TokenId id : output) out.deltas.push_back(p.push(id));
  out.deltas.push_back(p.finish());
  out.reasoning = p.reasoning();
  out.content = p.content();
  out.calls = p.tool_calls();
  return out;
}
Parsed parse(const std::string& text) { return parse(ids(text)); }

void expect_no_marker(const std::string& s) {
  for (const char* m : {"<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>",
                        "<|return|>", "<|call|>"})
    EXPECT_EQ(s.find(m), std::string::npos) << m << " in " << s;
}

TEST(HarmonyParser, analysis_then_final_is_reasoning_and_content) {
  const Parsed p = parse(
      "<|channel|>analysis<|message|>Let me think.<|end|>"
      "<|start|>assistant<|channel|>final<|message|>The answer is 4<|return|>");
  EXPECT_EQ(p.reasoning, "Let me think.");
  EXPECT_EQ(p.content, "The answer is 4");
  EXPECT_TRUE(p.calls.empty());
}

TEST(HarmonyParser, commentary_to_a_function_is_a_tool_call) {
  const Parsed p = parse(
      "<|channel|>analysis<|message|>Need weather.<|end|>"
      "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
      "<|message|>{\"city\":\"Paris\"}<|call|>");
  EXPECT_EQ(p.reasoning, "Need weather.");
  EXPECT_EQ(p.content, "");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[0].arguments, "{\"city\":\"Paris\"}");
  EXPECT_EQ(p.calls[0].id, "call_0");
}

// Harmony also lets the recipient stand in the role part, before the channel, and the
// content type be a bare word.
TEST(HarmonyParser, recipient_before_the_channel_and_a_bare_content_type) {
  const Parsed p = parse(
      "<|channel|>final<|message|>Checking.<|end|>"
      "<|start|>assistant to=functions.lookup<|channel|>commentary json<|message|>{}<|call|>");
  EXPECT_EQ(p.content, "Checking.");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "lookup");
  EXPECT_EQ(p.calls[0].arguments, "{}");
}

TEST(HarmonyParser, several_messages_of_a_kind_are_joined_with_newlines) {
  const Parsed p = parse(
      "<|channel|>analysis<|message|>one<|end|><|start|>assistant<|channel|>analysis<|message|>"
      "two<|end|><|start|>assistant<|channel|>commentary<|message|>Hi<|end|>"
      "<|start|>assistant<|channel|>commentary to=functions.a <|constrain|>json<|message|>{\"x\":1}"
      "<|call|><|start|>assistant<|channel|>commentary to=functions.b<|message|>{}<|end|>"
      "<|start|>assistant<|channel|>final<|message|>there<|return|>");
  EXPECT_EQ(p.reasoning, "one\ntwo");
  EXPECT_EQ(p.content, "Hi\nthere");  // the commentary preamble is shown, as vLLM shows it
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].name, "a");
  EXPECT_EQ(p.calls[1].name, "b");
  EXPECT_EQ(p.calls[1].id, "call_1");
}

TEST(HarmonyParser, output_cut_inside_a_body_keeps_the_partial_message) {
  const Parsed p = parse("<|channel|>analysis<|message|>Let me th");
  EXPECT_EQ(p.reasoning, "Let me th");
  EXPECT_EQ(p.content, "");
  const Parsed tool =
      parse("<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"ci");
  ASSERT_EQ(tool.calls.size(), 1u);
  EXPECT_EQ(tool.calls[0].arguments, "{\"ci");
}

TEST(HarmonyParser, output_cut_inside_a_header_loses_only_the_header) {
  const Parsed p = parse("<|channel|>analysis<|message|>ok<|end|><|start|>assistant<|channel|>fin");
  EXPECT_EQ(p.reasoning, "ok");
  EXPECT_EQ(p.content, "");
}

TEST(HarmonyParser, built_in_tool_calls_are_not_content) {
  const Parsed p = parse(
      "<|channel|>commentary to=browser.search <|constrain|>json<|message|>{\"q\":1}<|call|>");
  EXPECT_EQ(p.content, "");
  EXPECT_TRUE(p.calls.empty());
  const Parsed a = parse("<|channel|>analysis to=python<|message|>print(1)<|call|>");
  EXPECT_EQ(a.reasoning, "print(1)");
}

TEST(HarmonyParser, text_outside_any_message_is_content_not_lost) {
  const Parsed p = parse("<|channel|>final<|message|>Hi<|end|> there<|endoftext|>");
  EXPECT_EQ(p.content, "Hi\n there");
}

// The specials' text written as ordinary tokens (a model spelling "<|channel|>" byte by
// byte) is text, not structure.
TEST(HarmonyParser, marker_text_from_ordinary_tokens_is_text) {
  std::vector<TokenId> out = ids("<|channel|>final<|message|>");
  for (TokenId id : tok().encode("<|end|>", false, /*parse_special=*/false)) out.push_back(id);
  out.push_back(ids("<|return|>")[0]);
  EXPECT_GT(out.size(), 5u);
  EXPECT_EQ(parse(out).content, "<|end|>");
}

// Streamed one token at a time: the deltas add up to the whole answer, a character split
// over byte tokens never comes out in halves, no delta carries a marker, and a tool call's
// first delta opens it.
TEST(HarmonyParser, streamed_deltas_add_up_to_the_whole_answer) {
  const std::string text =
      "<|channel|>analysis<|message|>中文 one<|end|><|start|>assistant<|channel|>analysis"
      "<|message|>two 👍<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather "
      "<|constrain|>json<|message|>{\"city\":\"日本\"}<|call|><|start|>assistant<|channel|>final"
      "<|message|>The answer is 4<|return|>";
  const std::vector<TokenId> out = ids(text);
  const Parsed p = parse(out);
  std::string reasoning, content, args;
  int opened = 0;
  for (const HarmonyDelta& d : p.deltas) {
    reasoning += d.reasoning;
    content += d.content;
    for (const auto& t : d.tools) {
      EXPECT_EQ(t.index, 0u);
      if (t.opened) {
        ++opened;
        EXPECT_TRUE(args.empty()) << "the opening delta comes first";
      }
      args += t.arguments;
    }
    for (const std::string* s : {&d.reasoning, &d.content}) {
      expect_no_marker(*s);
      EXPECT_EQ(utf8_complete_prefix(*s), s->size()) << "a split character: " << *s;
    }
  }
  EXPECT_EQ(opened, 1);
  EXPECT_EQ(reasoning, p.reasoning);
  EXPECT_EQ(reasoning, "中文 one\ntwo 👍");
  EXPECT_EQ(content, "The answer is 4");
  EXPECT_EQ(args, "{\"city\":\"日本\"}");
  EXPECT_GT(out.size(), std::string(text).size() / 8) << "the vocabulary splits it finely";
}

TEST(HarmonyParser, harmony_applies_by_vocabulary_or_by_flag) {
  EXPECT_TRUE(harmony_for("auto", &tok()).has_value());
  EXPECT_TRUE(harmony_for("gpt-oss", &tok()).has_value());
  EXPECT_TRUE(harmony_for("openai_gptoss", &tok()).has_value());
  EXPECT_FALSE(harmony_for("none", &tok()).has_value());
  EXPECT_FALSE(harmony_for("auto", nullptr).has_value());
  EXPECT_THROW(harmony_for("deepseek-r1", &tok()), Error);
  // A vocabulary without them: auto leaves it alone, the explicit flag names what is missing.
  VocabData d;
  d.source = "plain";
  d.model = VocabModel::vocab_model_bpe;
  for (int b = 0; b < 256; ++b) d.tokens.push_back(tok().vocab().text(b));
  d.merges = {{d.tokens[104], d.tokens[105]}};
  d.tokens.push_back(d.tokens[104] + d.tokens[105]);
  d.tokens.push_back("<|start|>");
  const Tokenizer plain(std::move(d));
  EXPECT_FALSE(harmony_for("auto", &plain).has_value());
  try {
    harmony_for("gpt-oss", &plain);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("<|channel|>"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("<|start|>"), std::string::npos) << e.what();
  }
}

// What the request says of earlier turns, where gpt-oss's template looks for it.
TEST(HarmonyChat, earlier_reasoning_becomes_thinking_and_null_content_empty) {
  ChatInput in;
  in.messages = ChatInput::Json::parse(R"([
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": null, "reasoning": "Need a tool.",
     "tool_calls": [{"function": {"name": "f", "arguments": {}}}]},
    {"role": "assistant", "content": "Hello", "reasoning_content": "Greeted."},
    {"role": "assistant", "content": "Kept", "thinking": "Own.", "reasoning": "Other."},
    {"role": "user", "content": "x", "reasoning": "not an assistant turn"}])");
  harmony_chat_input(in);
  EXPECT_EQ(in.messages[1]["content"], "");
  EXPECT_EQ(in.messages[1]["thinking"], "Need a tool.");
  EXPECT_EQ(in.messages[2]["thinking"], "Greeted.");
  EXPECT_EQ(in.messages[3]["thinking"], "Own.");
  EXPECT_FALSE(in.messages[4].contains("thinking"));
}

// The OpenAI shapes vLLM gives: the whole message, and a stream's deltas with a tool call's
// id and name first and its argument text after.
TEST(HarmonyChat, message_and_delta_json_have_vllms_shape) {
  HarmonyParser p(tok(), *HarmonyTokens::find(tok()), [] { return std::string("call_x"); });
  HarmonyDelta all;
  for (TokenId id : ids("<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant"
                        "<|channel|>commentary to=functions.get_weather <|constrain|>json"
                        "<|message|>{\"city\":\"Paris\"}<|call|>"))
    merge_delta(all, p.push(id));
  merge_delta(all, p.finish());
  const nlohmann::json m = harmony_message(p);
  EXPECT_EQ(m["role"], "assistant");
  EXPECT_TRUE(m["content"].is_null());
  EXPECT_EQ(m["reasoning"], "Need weather.");
  EXPECT_EQ(m["reasoning_content"], "Need weather.");
  ASSERT_EQ(m["tool_calls"].size(), 1u);
  EXPECT_EQ(m["tool_calls"][0], nlohmann::json::parse(
                                    R"({"id": "call_x", "type": "function", "function":
                                        {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}})"));
  const nlohmann::json d = harmony_delta(all, p);
  EXPECT_EQ(d["reasoning"], "Need weather.");
  EXPECT_EQ(d["reasoning_content"], "Need weather.");
  EXPECT_FALSE(d.contains("content"));
  ASSERT_EQ(d["tool_calls"].size(), 2u);
  EXPECT_EQ(d["tool_calls"][0],
            nlohmann::json::parse(R"({"index": 0, "id": "call_x", "type": "function",
                                      "function": {"name": "get_weather", "arguments": ""}})"));
  EXPECT_EQ(d["tool_calls"][1], nlohmann::json::parse(R"({"index": 0, "function":
                                    {"arguments": "{\"city\":\"Paris\"}"}})"));
  EXPECT_EQ(harmony_finish_reason(p, "stop"), "tool_calls");
  EXPECT_EQ(harmony_finish_reason(p, "length"), "tool_calls");
  EXPECT_EQ(harmony_finish_reason(p, "abort"), "abort");
  HarmonyParser plain(tok(), *HarmonyTokens::find(tok()), [] { return std::string(); });
  EXPECT_EQ(harmony_finish_reason(plain, "stop"), "stop");
}

}  // namespace
}  // namespace refit

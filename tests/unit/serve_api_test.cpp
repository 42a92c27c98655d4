// OpenAI request parsing and validation, chat templates, and the stop-string / UTF-8
// handling of streamed choices (no HTTP: the pieces the server is built from).
#include <gtest/gtest.h>

#include "server/api_types.h"
#include "server/chat_template.h"
#include "server/choice_stream.h"
#include "server/rl_endpoints.h"

namespace refit {
namespace {

using nlohmann::json;

HttpError parse_error(const json& body, bool chat) {
  try {
    parse_generation_request(body, chat);
  } catch (const HttpError& e) {
    return e;
  }
  ADD_FAILURE() << "expected an HttpError for " << body.dump();
  return {};
}

TEST(ServeApi, completion_fields_are_parsed_with_openai_defaults) {
  GenerationParams p = parse_generation_request(json{{"model", "m"},
                                                     {"prompt", "hi"},
                                                     {"max_tokens", 5},
                                                     {"stop", "\n"},
                                                     {"seed", 3},
                                                     {"logprobs", 2}},
                                                false);
  EXPECT_EQ(p.prompt_texts, std::vector<std::string>{"hi"});
  EXPECT_EQ(*p.max_tokens, 5);
  EXPECT_EQ(p.stop, std::vector<std::string>{"\n"});
  EXPECT_TRUE(p.seed_given);
  EXPECT_EQ(p.sampling.seed, 3u);
  EXPECT_EQ(p.logprobs, 2);
  EXPECT_FLOAT_EQ(p.sampling.temperature, 1.0f);  // OpenAI's default
  EXPECT_EQ(p.n, 1);
  GenerationParams ids = parse_generation_request(json{{"prompt", {1, 2, 3}}}, false);
  EXPECT_EQ(ids.prompt_ids, (std::vector<std::vector<int32_t>>{{1, 2, 3}}));
  EXPECT_FALSE(ids.max_tokens.has_value());
}

TEST(ServeApi, unknown_fields_are_ignored_as_vllm_and_sglang_do) {
  // Real clients send fields of newer servers (cache_salt, return_tokens_as_token_ids...).
  GenerationParams p =
      parse_generation_request(json{{"prompt", "x"}, {"bogus", 1}, {"cache_salt", "s"}}, false);
  EXPECT_EQ(p.prompt_texts, std::vector<std::string>{"x"});
  // Known fields of vLLM's are parsed, not ignored.
  GenerationParams v = parse_generation_request(json{{"prompt", "x"},
                                                     {"min_tokens", 3},
                                                     {"stop_token_ids", {7, 9}},
                                                     {"presence_penalty", 0.5},
                                                     {"prompt_logprobs", 2},
                                                     {"return_tokens_as_token_ids", true}},
                                                false);
  EXPECT_EQ(v.min_tokens, 3);
  EXPECT_EQ(v.stop_token_ids, (std::vector<int32_t>{7, 9}));
  EXPECT_FLOAT_EQ(v.sampling.presence_penalty, 0.5f);
  EXPECT_EQ(v.prompt_logprobs, 2);
  EXPECT_TRUE(v.return_tokens_as_token_ids);
}

TEST(ServeApi, bad_fields_are_refused_naming_the_field) {
  EXPECT_EQ(parse_error(json{{"prompt", "x"}, {"min_tokens", -1}}, false).param, "min_tokens");
  EXPECT_EQ(parse_error(json{{"prompt", "x"}, {"stop_token_ids", {-3}}}, false).param,
            "stop_token_ids");
  EXPECT_EQ(parse_error(json{{"prompt", "x"}, {"max_tokens", -1}}, false).param, "max_tokens");
  EXPECT_EQ(parse_error(json{{"prompt", "x"}, {"max_tokens", "ten"}}, false).param, "max_tokens");
  EXPECT_EQ(parse_error(json{{"prompt", "x"}, {"temperature", -0.5}}, false).param, "temperature");
  EXPECT_EQ(parse_error(json{{"prompt", "x"}, {"top_p", 0}}, false).param, "top_p");
  EXPECT_EQ(parse_error(json{{"prompt", "x"}, {"n", 0}}, false).param, "n");
  EXPECT_EQ(parse_error(json{{"prompt", "x"}, {"stop", {1}}}, false).param, "stop");
  EXPECT_EQ(parse_error(json{{"prompt", "x"}, {"logprobs", 21}}, false).param, "logprobs");
  EXPECT_EQ(parse_error(json{{"prompt", "x"}, {"presence_penalty", 2.5}}, false).param,
            "presence_penalty");
  EXPECT_EQ(parse_error(json{{"prompt", {-1}}}, false).param, "prompt");
  EXPECT_EQ(parse_error(json{{"max_tokens", 3}}, false).param, "prompt");
  EXPECT_EQ(parse_error(json{{"messages", json::array()}}, true).param, "messages");
  EXPECT_EQ(parse_error(json{{"messages", {{{"role", "tool"}, {"content", "x"}}}}}, true).param,
            "messages[0].role");
  EXPECT_EQ(parse_error(json{{"messages", {{{"role", "user"}}}}}, true).param,
            "messages[0].content");
  EXPECT_EQ(
      parse_generation_request(
          json{{"messages", {{{"role", "user"}, {"content", "x"}}, {{"role", "assistant"}}}}}, true)
          .messages.size(),
      2u);  // an assistant turn may omit its content
  EXPECT_EQ(
      parse_error(json{{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"top_logprobs", 2}},
                  true)
          .param,
      "top_logprobs");
  // A chat-only field on /v1/completions is a field that route does not know: ignored.
  EXPECT_EQ(
      parse_generation_request(json{{"prompt", "x"}, {"messages", 1}}, false).prompt_texts.size(),
      1u);
  EXPECT_EQ(parse_error(json::array(), false).status, 400);
  try {
    parse_json_body("{\"prompt\": ");
    FAIL();
  } catch (const HttpError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_NE(e.message.find("not valid JSON"), std::string::npos);
    EXPECT_EQ(e.body()["error"]["type"], "invalid_request_error");
  }
}

TEST(ServeApi, chat_messages_accept_text_parts) {
  GenerationParams p = parse_generation_request(
      json::parse(R"({"messages": [{"role": "developer", "content": "be brief"},
                                    {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
                      "logprobs": true, "top_logprobs": 3, "max_completion_tokens": 7})"),
      true);
  ASSERT_EQ(p.messages.size(), 2u);
  EXPECT_EQ(p.messages[0].role, "system");
  EXPECT_EQ(p.messages[1].content, "ab");
  EXPECT_EQ(p.logprobs, 3);
  EXPECT_EQ(*p.max_tokens, 7);
}

TEST(ServeChatTemplate, families_are_detected_and_rendered) {
  EXPECT_EQ(detect_chat_template("{{ '<|start_header_id|>' + message['role'] }}"),
            ChatTemplateKind::llama3);
  EXPECT_EQ(detect_chat_template("{% for m in messages %}<|im_start|>{{ m.role }}"),
            ChatTemplateKind::chatml);
  EXPECT_EQ(detect_chat_template("{{ bos_token + '[INST] ' + content + ' [/INST]' }}"),
            ChatTemplateKind::llama2);
  EXPECT_EQ(detect_chat_template("{{ '<|user|>\n' + content + eos_token }}"),
            ChatTemplateKind::zephyr);
  EXPECT_EQ(detect_chat_template("{{ messages }}"), ChatTemplateKind::fallback);
  const std::vector<ChatMessage> msgs{
      {"system", "S"}, {"user", "U"}, {"assistant", "A"}, {"user", "V"}};
  ChatTemplate t;
  t.bos_text = "<s>";
  t.eos_text = "</s>";
  t.kind = ChatTemplateKind::chatml;
  EXPECT_EQ(t.render(msgs),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>"
            "assistant\nA<|im_end|>\n"
            "<|im_start|>user\nV<|im_end|>\n<|im_start|>assistant\n");
  t.kind = ChatTemplateKind::llama2;
  EXPECT_EQ(t.render(msgs),
            "<s>[INST] <<SYS>>\nS\n<</SYS>>\n\nU [/INST] A </s><s>[INST] V [/INST]");
  t.kind = ChatTemplateKind::llama3;
  t.bos_text = "<|begin_of_text|>";
  EXPECT_EQ(t.render({{"user", "U"}}),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|><|start_"
            "header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(t.end_of_turn_texts(), std::vector<std::string>{"<|eot_id|>"});
  // No template file: the documented fallback.
  ChatTemplate none = load_chat_template("", "<s>", "</s>");
  EXPECT_EQ(none.kind, ChatTemplateKind::fallback);
  EXPECT_EQ(none.render({{"user", "U"}}), "<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ServeApi, base64_decodes_and_refuses_garbage) {
  EXPECT_EQ(base64_decode("aGVsbG8="), "hello");
  EXPECT_EQ(base64_decode("aGVsbG8"), "hello");
  EXPECT_EQ(base64_decode("AAAAAA=="), std::string(4, '\0'));
  EXPECT_THROW(base64_decode("a*b="), Error);
}

// Without a tokenizer a token's text is "<id> ": enough to pin the stop-string logic.
TEST(ServeChoiceStream, stop_strings_cut_the_text_hold_back_partial_matches_and_cancel) {
  auto handle = std::make_shared<RequestHandle>();
  ChoiceStream c(handle, nullptr, {"13 14"}, 3);
  auto token = [](int32_t id) {
    RequestHandle::Event e{};
    e.kind = RequestHandle::Event::token;
    e.token_event.token = id;
    e.token_event.logprob = -0.5f;
    e.token_event.weight_version = 4;
    return e;
  };
  EXPECT_FALSE(c.apply(token(12)));
  // The last len("13 14") - 1 = 4 characters are held back: they may begin a stop string.
  EXPECT_EQ(c.take_text(), "");
  EXPECT_FALSE(c.apply(token(13)));
  EXPECT_EQ(c.take_text(), "12");   // of "12 13 "
  EXPECT_TRUE(c.apply(token(14)));  // "12 13 14 ": stop string found across two tokens
  EXPECT_TRUE(c.done());
  EXPECT_EQ(c.finish_reason(), "stop");
  EXPECT_EQ(c.text(), "12 ");
  EXPECT_TRUE(handle->cancelled());
  EXPECT_EQ(c.take_text(), " ");  // the rest before the stop string
  EXPECT_EQ(c.take_text(), "");
  EXPECT_EQ(c.versions(), (std::vector<uint64_t>{4, 4, 4}));
  json lp = c.completion_logprobs(0, 3);
  EXPECT_EQ(lp["token_logprobs"].size(), 3u);
  EXPECT_EQ(lp["text_offset"], json({0, 3, 6}));
}

}  // namespace
}  // namespace refit

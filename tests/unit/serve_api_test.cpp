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
  EXPECT_EQ(parse_error(json{{"messages", {{{"role", 3}, {"content", "x"}}}}}, true).param,
            "messages[0]");
  EXPECT_EQ(parse_error(json{{"messages", {{{"role", "user"}, {"content", 5}}}}}, true).param,
            "messages[0].content");
  EXPECT_EQ(
      parse_error(json{{"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}}}},
                  true)
          .param,
      "messages[0].content[0]");
  EXPECT_EQ(parse_error(json{{"messages", {{{"role", "user"}, {"content", "x"}}}},
                             {"chat_template_kwargs", "yes"}},
                        true)
                .param,
            "chat_template_kwargs");
  EXPECT_EQ(
      parse_error(json{{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"tools", 1}}, true)
          .param,
      "tools");
  // Output constrained to a tool call is not something refit's sampler does: refused.
  EXPECT_EQ(parse_error(json{{"messages", {{{"role", "user"}, {"content", "x"}}}},
                             {"tool_choice", "required"}},
                        true)
                .param,
            "tool_choice");
  EXPECT_EQ(
      parse_generation_request(
          json{{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"tool_choice", "auto"}}, true)
          .chat_input.messages.size(),
      1u);
  EXPECT_EQ(parse_error(json{{"messages", {{{"role", "user"}, {"content", "x"}}}},
                             {"chat_template", "{{ 1 }}"}},
                        true)
                .param,
            "chat_template");
  EXPECT_EQ(parse_error(json::parse(R"({"messages": [{"role": "assistant", "content": "",
               "tool_calls": [{"id": "a", "type": "function",
                               "function": {"name": "f", "arguments": "{not json"}}]}]})"),
                        true)
                .param,
            "messages[0].tool_calls[0].function.arguments");
  EXPECT_EQ(parse_error(json{{"messages", {{{"role", "user"}}}}}, true).param,
            "messages[0].content");
  EXPECT_EQ(
      parse_generation_request(
          json{{"messages", {{{"role", "user"}, {"content", "x"}}, {{"role", "assistant"}}}}}, true)
          .chat_input.messages.size(),
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

TEST(ServeApi, chat_messages_are_passed_on_as_vllm_passes_them) {
  GenerationParams p = parse_generation_request(
      json::parse(R"({"messages": [{"role": "developer", "content": "be brief"},
                                    {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                                    {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                                       "function": {"name": "f", "arguments": "{\"x\": 1}"}}]},
                                    {"role": "tool", "tool_call_id": "c1", "content": "2"}],
                      "tools": [{"type": "function", "function": {"name": "f"}}],
                      "chat_template_kwargs": {"enable_thinking": false},
                      "logprobs": true, "top_logprobs": 3, "max_completion_tokens": 7})"),
      true);
  const ChatInput& in = p.chat_input;
  ASSERT_EQ(in.messages.size(), 4u);
  EXPECT_EQ(in.messages[0]["role"], "developer");  // the template decides what roles mean
  EXPECT_EQ(in.messages[1]["content"], "a\nb");    // text parts joined as vLLM joins them
  // The arguments JSON text becomes an object (templates write it with tojson).
  EXPECT_EQ(in.messages[2]["tool_calls"][0]["function"]["arguments"], json({{"x", 1}}));
  EXPECT_TRUE(in.messages[2]["content"].is_null());
  EXPECT_EQ(in.messages[3]["tool_call_id"], "c1");
  EXPECT_EQ(in.tools.size(), 1u);
  EXPECT_EQ(in.kwargs["enable_thinking"], false);
  EXPECT_TRUE(in.add_generation_prompt);
  EXPECT_FALSE(in.continue_final_message);
  EXPECT_FALSE(p.add_special_tokens);  // the template writes the specials
  EXPECT_EQ(p.logprobs, 3);
  EXPECT_EQ(*p.max_tokens, 7);
  // continue_final_message turns the generation prompt off unless the client set both.
  const json cont = json::parse(
      R"({"messages": [{"role": "user", "content": "x"}], "continue_final_message": true})");
  EXPECT_FALSE(parse_generation_request(cont, true).chat_input.add_generation_prompt);
  json both = cont;
  both["add_generation_prompt"] = true;
  EXPECT_EQ(parse_error(both, true).param, "continue_final_message");
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

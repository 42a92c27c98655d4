// Chat templates run in the embedded Jinja2 exactly as transformers' apply_chat_template
// runs them: the rendered prompts of ../shared/realhf (made by jinja2 set up as
// transformers sets it up) byte for byte, the special tokens it passes, where the template
// is read from, and transformers' environment (tojson without HTML escaping, loop
// controls, {% generation %}, raise_exception, continue_final_message).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "realhf_files.h"
#include "server/api_types.h"
#include "server/chat_request.h"
#include "server/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab_loaders.h"

namespace refit {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

using testing::kRealHf;
json read_json(const fs::path& p) { return testing::read_realhf_json(p); }
nlohmann::ordered_json read_ordered(const fs::path& p) {
  return testing::read_realhf_json<nlohmann::ordered_json>(p);
}

// The chat input of one realhf case, as a client would send it.
ChatInput case_input(const nlohmann::ordered_json& c) {
  nlohmann::ordered_json body{{"messages", c["messages"]}};
  if (c.contains("tools")) body["tools"] = c["tools"];
  if (c.contains("chat_template_kwargs")) body["chat_template_kwargs"] = c["chat_template_kwargs"];
  return parse_chat_input(body);
}

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() /
            ("refit_chat_template_" + std::to_string(::getpid()) + "_" + std::to_string(next_++));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name, std::ios::binary) << text;
  }

 private:
  fs::path path_;
  static inline int next_ = 0;
};

std::string render_one(const ChatTemplate& t, const json& body) {
  return t.render(parse_chat_input(body));
}

const json kHello{{"messages", {{{"role", "user"}, {"content", "Hello"}}}}};

}  // namespace

TEST(ServeChatTemplate, renders_every_realhf_case_byte_for_byte_as_jinja2) {
  if (!fs::exists(kRealHf / "models.json")) GTEST_SKIP() << "no " << kRealHf;
  const json models = read_json(kRealHf / "models.json")["models"];
  const nlohmann::ordered_json cases = read_ordered(kRealHf / "cases.json")["chat"];
  size_t checked = 0;
  for (const auto& [name, model] : models.items()) {
    const json ref = read_json(kRealHf / "refs" / (name + ".json"));
    const ChatTemplate t =
        load_chat_template((kRealHf / model["dir"].get<std::string>()).string(), {});
    ASSERT_FALSE(t.is_fallback()) << name;
    EXPECT_NE(t.source().find(model["template"].get<std::string>()), std::string::npos)
        << name << ": read from " << t.source();
    EXPECT_EQ(t.special_tokens(), ref["special_tokens"]) << name;
    for (const json& row : ref["chat"]) {
      nlohmann::ordered_json c;
      for (const auto& k : cases)
        if (k["id"].get<std::string>() == row["case"].get<std::string>()) c = k;
      ASSERT_FALSE(c.is_null()) << row["case"];
      SCOPED_TRACE(name + " / " + row["case"].get<std::string>());
      if (row.contains("error")) {
        EXPECT_THROW(t.render(case_input(c)), TemplateRenderError);
      } else {
        EXPECT_EQ(t.render(case_input(c)), row["prompt_text"].get<std::string>());
      }
      ++checked;
    }
  }
  EXPECT_GE(checked, 22u);  // 5 models: 4 cases each, two tool cases for Qwen2.5
}

// The prompt ids are the rendered text encoded with parse_special and no added specials:
// what apply_chat_template(tokenize=True), vLLM and SGLang feed the model.
TEST(ServeChatTemplate, realhf_prompt_ids_match_hugging_face) {
  if (!fs::exists(kRealHf / "models.json")) GTEST_SKIP() << "no " << kRealHf;
  const json models = read_json(kRealHf / "models.json")["models"];
  const nlohmann::ordered_json cases = read_ordered(kRealHf / "cases.json")["chat"];
  for (const auto& [name, model] : models.items()) {
    const fs::path dir = kRealHf / model["dir"].get<std::string>();
    if (model.contains("tokenizer_json")) continue;  // held elsewhere (tokenizer tests read it)
    const json ref = read_json(kRealHf / "refs" / (name + ".json"));
    const ChatTemplate t = load_chat_template(dir.string(), {});
    std::unique_ptr<Tokenizer> tok = load_tokenizer(dir.string());
    ASSERT_TRUE(tok) << name;
    for (const json& row : ref["chat"]) {
      if (row.contains("error")) continue;
      nlohmann::ordered_json c;
      for (const auto& k : cases)
        if (k["id"].get<std::string>() == row["case"].get<std::string>()) c = k;
      SCOPED_TRACE(name + " / " + row["case"].get<std::string>());
      const std::string text = t.render(case_input(c));
      EXPECT_EQ(tok->encode(text, /*add_special=*/false, /*parse_special=*/true),
                row["prompt_ids"].get<std::vector<int32_t>>());
    }
  }
}

TEST(ServeChatTemplate, template_sources_in_transformers_order_and_the_override) {
  TempDir d;
  d.write("tokenizer_config.json",
          R"({"chat_template": "config:{{ messages[0].content }}", "bos_token": "<s>",
              "eos_token": {"content": "</s>", "lstrip": false}})");
  EXPECT_EQ(render_one(load_chat_template(d.path().string(), {}), kHello), "config:Hello");
  d.write("chat_template.json", R"({"chat_template": "json:{{ messages[0].content }}"})");
  EXPECT_EQ(render_one(load_chat_template(d.path().string(), {}), kHello), "json:Hello");
  d.write("chat_template.jinja", "jinja:{{ bos_token }}{{ messages[0].content }}{{ eos_token }}");
  const ChatTemplate t = load_chat_template(d.path().string(), {});
  EXPECT_EQ(render_one(t, kHello), "jinja:<s>Hello</s>");  // AddedToken objects give content
  EXPECT_NE(t.source().find("chat_template.jinja"), std::string::npos);
  // --chat-template wins over the folder: a file, or the template text itself.
  d.write("mine.jinja", "file:{{ messages | length }}");
  EXPECT_EQ(render_one(
                load_chat_template(d.path().string(), {(d.path() / "mine.jinja").string(), "", ""}),
                kHello),
            "file:1");
  EXPECT_EQ(
      render_one(load_chat_template(d.path().string(), {"inline:{{ 1 + 1 }}", "", ""}), kHello),
      "inline:2");
  EXPECT_THROW(load_chat_template(d.path().string(), {"/no/such/template.jinja", "", ""}),
               FormatError);
}

TEST(ServeChatTemplate, named_templates_pick_tool_use_when_the_request_has_tools) {
  TempDir d;
  d.write("tokenizer_config.json", R"({"chat_template": [
      {"name": "default", "template": "plain"},
      {"name": "tool_use", "template": "tools:{{ tools | length }}"}]})");
  const ChatTemplate t = load_chat_template(d.path().string(), {});
  EXPECT_EQ(render_one(t, kHello), "plain");
  json with_tools = kHello;
  with_tools["tools"] = {{{"type", "function"}, {"function", {{"name", "f"}}}}};
  EXPECT_EQ(render_one(t, with_tools), "tools:1");
}

TEST(ServeChatTemplate, transformers_environment) {
  auto t = [](const std::string& text) {
    return ChatTemplate({{"default", text}}, "test", json::object(), false);
  };
  // tojson is json.dumps(ensure_ascii=False): no HTML escaping, non-ASCII kept, indent.
  EXPECT_EQ(render_one(t("{{ {'a': '<é>'} | tojson }}"), kHello), R"({"a": "<é>"})");
  EXPECT_EQ(render_one(t("{{ [1] | tojson(indent=2) }}"), kHello), "[\n  1\n]");
  // trim_blocks and lstrip_blocks: a block's own line leaves no whitespace behind.
  EXPECT_EQ(render_one(t("  {% if true %}\nx\n  {% endif %}\ny"), kHello), "x\ny");
  // Loop controls and the {% generation %} block.
  EXPECT_EQ(render_one(t("{% for i in range(5) %}{% if i == 3 %}{% break %}{% endif %}{{ i }}"
                         "{% endfor %}{% generation %}!{% endgeneration %}"),
                       kHello),
            "012!");
  // chat_template_kwargs reach the template and win over everything else.
  json kw = kHello;
  kw["chat_template_kwargs"] = {{"enable_thinking", false}, {"add_generation_prompt", false}};
  EXPECT_EQ(render_one(t("{{ enable_thinking }} {{ add_generation_prompt }}"), kw), "False False");
  // strftime_now reads the clock.
  EXPECT_EQ(render_one(t("{{ strftime_now('%Y') | length }}"), kHello), "4");
  // The sandbox: templates cannot reach Python internals.
  EXPECT_THROW(
      render_one(t("{{ messages.__class__.__mro__ }}{{ ''.__class__.__subclasses__() }}"), kHello),
      TemplateRenderError);
}

TEST(ServeChatTemplate, raise_exception_and_errors_become_the_request_error) {
  const ChatTemplate t({{"default",
                         "{% if messages[0].role != 'system' %}"
                         "{{ raise_exception('Conversations must start with a system turn') }}"
                         "{% endif %}ok"}},
                       "test", json::object(), false);
  try {
    render_chat_prompt(t, parse_chat_input(kHello));
    FAIL() << "no error";
  } catch (const HttpError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "messages");
    EXPECT_NE(e.message.find("Conversations must start with a system turn"), std::string::npos)
        << e.message;
  }
  // A type error inside the template is the request's too, with Python's words.
  const ChatTemplate bad({{"default", "{{ messages[0].content + 1 }}"}}, "test", json::object(),
                         false);
  try {
    bad.render(parse_chat_input(kHello));
    FAIL() << "no error";
  } catch (const TemplateRenderError& e) {
    EXPECT_NE(std::string(e.what()).find("TypeError"), std::string::npos) << e.what();
  }
  // A template that does not compile is refused when loaded, naming where it came from.
  try {
    ChatTemplate({{"default", "{% for m in messages %}"}}, "/models/x/tokenizer_config.json",
                 json::object(), false);
    FAIL() << "no error";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("/models/x/tokenizer_config.json"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("line 1"), std::string::npos) << e.what();
  }
}

// transformers' continue_final_message: the prompt ends right after the last message's
// text, so the model continues it instead of starting a new turn.
TEST(ServeChatTemplate, continue_final_message_cuts_after_the_last_message) {
  const ChatTemplate t({{"default",
                         "{% for m in messages %}<{{ m.role }}>{{ m.content }}</turn>\n"
                         "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"}},
                       "test", json::object(), false);
  const json body = json::parse(R"({"messages": [{"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "The answer is"}], "continue_final_message": true})");
  EXPECT_EQ(render_one(t, body), "<user>Hi</turn>\n<assistant>The answer is");
  json missing = body;
  missing["messages"][1]["content"] = "";
  missing["messages"].push_back({{"role", "user"}, {"content", "x"}});
  missing["messages"][2]["content"] = "never rendered";
  const ChatTemplate drops({{"default", "{{ messages[0].content }}"}}, "test", json::object(),
                           false);
  EXPECT_THROW(render_one(drops, missing), TemplateRenderError);
}

// The end-of-turn markers a template writes stop a chat (llama.cpp's end-of-generation
// texts), except gpt-oss's <|end|>, which ends a message inside a turn.
TEST(ServeChatTemplate, end_of_turn_markers_follow_the_template) {
  auto ends = [](const std::string& text) {
    return ChatTemplate({{"default", text}}, "test", json::object(), false).end_of_turn_texts();
  };
  EXPECT_EQ(ends("{{ '<|start_header_id|>' }}x<|eot_id|>"), std::vector<std::string>{"<|eot_id|>"});
  EXPECT_EQ(ends("<|user|>x<|end|>"), std::vector<std::string>{"<|end|>"});    // Phi-3
  EXPECT_EQ(ends("<|start|>x<|end|><|return|>"), std::vector<std::string>{});  // gpt-oss
  EXPECT_EQ(ends("[INST] x [/INST]"), std::vector<std::string>{});
}

TEST(ServeChatTemplate, a_model_without_a_template_gets_the_chatml_fallback) {
  TempDir d;
  const ChatTemplate t = load_chat_template(d.path().string(), {"", "<s>", "</s>"});
  EXPECT_TRUE(t.is_fallback());
  EXPECT_NE(t.source().find("carries no chat template"), std::string::npos);
  EXPECT_EQ(render_one(t, kHello), "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(t.end_of_turn_texts(), std::vector<std::string>{"<|im_end|>"});
  EXPECT_EQ(t.special_tokens()["bos_token"], "<s>");
}

}  // namespace refit

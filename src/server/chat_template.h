// Chat templates: turn a chat request into the prompt text a model was trained on, by
// running the model's own Jinja template as transformers runs it (server/jinja_runtime.h).
//
// Where the template comes from, first found wins:
//   --chat-template FILE (or an inline template)
//   a Hugging Face folder: chat_template.jinja, chat_template.json, tokenizer_config.json
//     "chat_template" (a string, or named templates: "tool_use" when the request has
//     tools and the model has one, else "default")
//   a GGUF file: tokenizer.chat_template (and tokenizer.chat_template.tool_use)
// A model with none gets the documented fallback, ChatML markers as plain text
// ("<|im_start|>user\nHi<|im_end|>\n...<|im_start|>assistant\n"); GET /v1/models and
// `refit inspect` say which was used.
#pragma once

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/jinja_runtime.h"

namespace refit {

// What of a chat request the template sees (server/chat_request.h parses it).
// Ordered JSON: a template that writes `tools | tojson` must see the keys in the order
// the client sent them, as Python's dicts keep them.
struct ChatInput {
  using Json = nlohmann::ordered_json;
  Json messages = Json::array();  // as sent, tool-call arguments parsed
  Json tools;                     // null when the request has none
  Json documents;                 // null when none
  Json kwargs = Json::object();   // chat_template_kwargs (win over all)
  bool add_generation_prompt = true;
  bool continue_final_message = false;
};

class ChatTemplate {
 public:
  ChatTemplate() = default;  // no template: render() refuses
  // `templates` maps a name ("default", "tool_use", ...) to Jinja text; `special_tokens`
  // holds bos_token, eos_token, ... as transformers' special_tokens_map has them.
  ChatTemplate(const std::map<std::string, std::string>& templates, std::string source,
               nlohmann::json special_tokens, bool fallback);

  // The prompt; encode it with parse_special = true and no added specials. Throws
  // TemplateRenderError when the template raises (a 400 for the client).
  std::string render(const ChatInput& input) const;

  const std::string& source() const { return source_; }
  bool is_fallback() const { return fallback_; }
  bool loaded() const { return !templates_.empty(); }
  const nlohmann::json& special_tokens() const { return special_tokens_; }
  std::vector<std::string> names() const;
  // Texts that end an assistant turn beyond the model's EOS ids: the fallback's
  // "<|im_end|>"; a model's own template ends turns with its EOS tokens.
  std::vector<std::string> end_of_turn_texts() const;

 private:
  std::map<std::string, std::string> texts_;
  std::map<std::string, std::shared_ptr<const JinjaTemplate>> templates_;
  std::string source_;
  nlohmann::json special_tokens_ = nlohmann::json::object();
  bool fallback_ = false;
};

struct ChatTemplateOptions {
  std::string override_template;  // --chat-template: a file, or the template text itself
  std::string bos_text;           // the vocabulary's BOS/EOS text, for GGUF models
  std::string eos_text;
};

// The template of the checkpoint at `model_path` (a folder, a file in one, or a GGUF
// file); the fallback when it has none. Throws FormatError naming the file for a template
// that does not compile or a tokenizer_config.json that is not JSON.
ChatTemplate load_chat_template(const std::string& model_path, const ChatTemplateOptions& options);

// The fallback's Jinja text.
const char* fallback_chat_template();

}  // namespace refit

// Chat templates: turn OpenAI chat messages into the prompt text a model was trained on.
//
// The template comes from the model (tokenizer_config.json "chat_template" in a Hugging
// Face folder, or GGUF metadata "tokenizer.chat_template"). Rather than a Jinja
// interpreter, refit recognises the families that cover nearly every Llama-family model
// by their marker tokens and renders them natively:
//   llama3   <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>  (Llama 3.x)
//   chatml   <|im_start|>role\ncontent<|im_end|>\n                          (Qwen2/3, many)
//   llama2   <s>[INST] <<SYS>>\nsys\n<</SYS>>\n\nuser [/INST] answer </s>     (Llama 2, Mistral)
//   zephyr   <|system|>\ncontent</s>\n<|user|>\n...                         (Zephyr, TinyLlama
//   chat)
// A template that matches none of them — or a model without one — uses the documented
// fallback: ChatML markers as plain text ("<|im_start|>user\nHi<|im_end|>\n...") followed by
// "<|im_start|>assistant\n". The chosen family is reported by GET /v1/models.
#pragma once

#include <string>
#include <vector>

namespace refit {

struct ChatMessage {
  std::string role;  // system, user, assistant (tool messages are refused upstream)
  std::string content;
};

enum class ChatTemplateKind : uint8_t { llama3, chatml, llama2, zephyr, fallback };
const char* chat_template_kind_name(ChatTemplateKind k);

struct ChatTemplate {
  ChatTemplateKind kind = ChatTemplateKind::fallback;
  std::string source;    // where it was read from, or "built-in fallback"
  std::string bos_text;  // the BOS token's text (llama2/llama3 templates start with it)
  std::string eos_text;  // the EOS token's text (llama2/zephyr close assistant turns with it)
  // The prompt for `messages`, ending with the assistant turn's opening when
  // add_generation_prompt. Encode it with parse_special = true and no added BOS.
  std::string render(const std::vector<ChatMessage>& messages,
                     bool add_generation_prompt = true) const;
  // Texts that end an assistant turn in this family (used as extra stop strings).
  std::vector<std::string> end_of_turn_texts() const;
};

// Recognises a Jinja template's family from its text.
ChatTemplateKind detect_chat_template(const std::string& jinja);
// Reads the template a checkpoint carries (HF folder or GGUF file); fallback when none.
ChatTemplate load_chat_template(const std::string& model_path, const std::string& bos_text,
                                const std::string& eos_text);

}  // namespace refit

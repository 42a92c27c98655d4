#include "server/chat_template.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "formats/gguf.h"

namespace refit {

const char* chat_template_kind_name(ChatTemplateKind k) {
  switch (k) {
    case ChatTemplateKind::llama3:
      return "llama3";
    case ChatTemplateKind::chatml:
      return "chatml";
    case ChatTemplateKind::llama2:
      return "llama2";
    case ChatTemplateKind::zephyr:
      return "zephyr";
    case ChatTemplateKind::fallback:
      return "fallback (chatml markers)";
  }
  return "?";
}

ChatTemplateKind detect_chat_template(const std::string& t) {
  if (t.find("<|start_header_id|>") != std::string::npos) return ChatTemplateKind::llama3;
  if (t.find("<|im_start|>") != std::string::npos) return ChatTemplateKind::chatml;
  if (t.find("[INST]") != std::string::npos) return ChatTemplateKind::llama2;
  if (t.find("<|user|>") != std::string::npos) return ChatTemplateKind::zephyr;
  return ChatTemplateKind::fallback;
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt) const {
  std::string out;
  switch (kind) {
    case ChatTemplateKind::llama3:
      out = bos_text;
      for (const ChatMessage& m : messages)
        out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + m.content + "<|eot_id|>";
      if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      return out;
    case ChatTemplateKind::zephyr:
      for (const ChatMessage& m : messages)
        out += "<|" + m.role + "|>\n" + m.content + eos_text + "\n";
      if (add_generation_prompt) out += "<|assistant|>\n";
      return out;
    case ChatTemplateKind::llama2: {
      // Meta's template: the system prompt is folded into the first user turn; each
      // user turn opens with BOS, each assistant answer closes with EOS.
      std::string system;
      size_t i = 0;
      if (!messages.empty() && messages[0].role == "system") {
        system = "<<SYS>>\n" + messages[0].content + "\n<</SYS>>\n\n";
        i = 1;
      }
      bool first = true;
      for (; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if (m.role == "user") {
          out += bos_text + "[INST] " + (first ? system : std::string()) + m.content + " [/INST]";
          first = false;
        } else if (m.role == "assistant") {
          out += " " + m.content + " " + eos_text;
        } else {
          fail("the llama2 chat template has no '{}' role outside the first message", m.role);
        }
      }
      return out;  // the model answers right after [/INST]
    }
    case ChatTemplateKind::chatml:
    case ChatTemplateKind::fallback:
      for (const ChatMessage& m : messages)
        out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      if (add_generation_prompt) out += "<|im_start|>assistant\n";
      return out;
  }
  return out;
}

std::vector<std::string> ChatTemplate::end_of_turn_texts() const {
  switch (kind) {
    case ChatTemplateKind::llama3:
      return {"<|eot_id|>"};
    case ChatTemplateKind::chatml:
    case ChatTemplateKind::fallback:
      return {"<|im_end|>"};
    case ChatTemplateKind::llama2:
    case ChatTemplateKind::zephyr:
      return {};
  }
  return {};
}

namespace {

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// tokenizer_config.json "chat_template": a string, or a list of {name, template}
// (the one named "default" is used).
std::string template_from_tokenizer_config(const std::filesystem::path& file) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_text(file));
  } catch (const std::exception& e) {
    fail("{}: not valid JSON ({})", file.string(), e.what());
  }
  if (!j.contains("chat_template")) return {};
  const auto& t = j["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array())
    for (const auto& entry : t)
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string())
        return entry["template"].get<std::string>();
  return {};
}

}  // namespace

ChatTemplate load_chat_template(const std::string& model_path, const std::string& bos_text,
                                const std::string& eos_text) {
  ChatTemplate t;
  t.bos_text = bos_text;
  t.eos_text = eos_text;
  t.source = "built-in fallback";
  std::string jinja;
  std::string source;
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!model_path.empty()) {
    fs::path p(model_path);
    fs::path dir = fs::is_directory(p, ec) ? p : p.parent_path();
    if (fs::is_regular_file(p, ec)) {
      std::ifstream in(p, std::ios::binary);
      char magic[4] = {};
      in.read(magic, 4);
      if (in && std::string(magic, 4) == "GGUF") {
        auto gguf = GgufFile::open(model_path);
        if (auto s = gguf->metadata().get_string("tokenizer.chat_template")) {
          jinja = *s;
          source = model_path + " (tokenizer.chat_template)";
        }
      }
    }
    if (jinja.empty() && fs::is_regular_file(dir / "tokenizer_config.json", ec)) {
      jinja = template_from_tokenizer_config(dir / "tokenizer_config.json");
      if (!jinja.empty()) source = (dir / "tokenizer_config.json").string();
    }
  }
  if (!jinja.empty()) {
    t.kind = detect_chat_template(jinja);
    t.source = t.kind == ChatTemplateKind::fallback
                   ? source + ": unrecognised template, built-in fallback"
                   : source;
  }
  return t;
}

}  // namespace refit

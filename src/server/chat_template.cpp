#include "server/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

#include "core/error.h"
#include "formats/gguf.h"
#include "formats/json_depth.h"

namespace refit {

namespace fs = std::filesystem;

const char* fallback_chat_template() {
  return "{% for message in messages %}"
         "{{ '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') + "
         "'<|im_end|>' + '\\n' }}"
         "{% endfor %}"
         "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
}

ChatTemplate::ChatTemplate(const std::map<std::string, std::string>& templates, std::string source,
                           nlohmann::json special_tokens, bool fallback)
    : texts_(templates),
      source_(std::move(source)),
      special_tokens_(std::move(special_tokens)),
      fallback_(fallback) {
  for (const auto& [name, text] : templates)
    templates_[name] = std::make_shared<const JinjaTemplate>(
        text, name == "default" ? source_ : source_ + " (template '" + name + "')");
}

std::vector<std::string> ChatTemplate::names() const {
  std::vector<std::string> out;
  for (const auto& [name, t] : templates_) out.push_back(name);
  return out;
}

std::string ChatTemplate::render(const ChatInput& input) const {
  if (templates_.empty()) throw TemplateRenderError("this model has no chat template");
  // transformers' get_chat_template: "tool_use" for a request with tools, where the
  // model names one; otherwise "default".
  auto it = templates_.end();
  if (!input.tools.is_null()) it = templates_.find("tool_use");
  if (it == templates_.end()) it = templates_.find("default");
  if (it == templates_.end())
    throw TemplateRenderError(
        fmt::format("{} names its chat templates but none is 'default'", source_));
  if (input.continue_final_message && input.add_generation_prompt)
    throw TemplateRenderError(
        "continue_final_message and add_generation_prompt cannot both be true: the first "
        "continues the last message, the second opens a new one");
  // The variables in apply_chat_template's order; later keys win, as in its kwargs dict.
  ChatInput::Json vars = ChatInput::Json::object();
  vars["messages"] = input.messages;
  vars["tools"] = input.tools;
  vars["documents"] = input.documents;
  vars["add_generation_prompt"] = input.add_generation_prompt;
  for (const auto& [k, v] : special_tokens_.items()) vars[k] = v;
  for (const auto& [k, v] : input.kwargs.items()) vars[k] = v;
  return it->second->render(vars, input.continue_final_message);
}

std::vector<std::string> ChatTemplate::end_of_turn_texts() const {
  if (fallback_) return {"<|im_end|>"};
  // The end-of-turn markers the template writes: llama.cpp stops on them as end-of-
  // generation tokens even where a model's EOS is another one (a Llama 3 base folder's
  // <|end_of_text|> with the instruct template's <|eot_id|>).
  auto writes = [this](std::string_view marker) {
    for (const auto& [name, text] : texts_)
      if (text.find(marker) != std::string::npos) return true;
    return false;
  };
  std::vector<std::string> out;
  for (const char* marker : {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|eom_id|>"})
    if (writes(marker)) out.push_back(marker);
  // gpt-oss (harmony) ends every message with <|end|> and the turn with <|return|> or
  // <|call|>: as llama.cpp, <|end|> is then no end of generation.
  if (writes("<|return|>") || writes("<|call|>")) std::erase(out, std::string("<|end|>"));
  return out;
}

namespace {

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw FormatError(fmt::format("{}: cannot be read", p.string()));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

nlohmann::json read_json(const fs::path& p) {
  const std::string text = read_text(p);
  try {
    return parse_json_limited(text.data(), text.data() + text.size(), p.string());
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(fmt::format("{}: not valid JSON ({})", p.string(), e.what()));
  }
}

// A "chat_template" value: a string, or a list of {name, template}.
std::map<std::string, std::string> templates_of(const nlohmann::json& value,
                                                const std::string& source) {
  std::map<std::string, std::string> out;
  if (value.is_string()) {
    out["default"] = value.get<std::string>();
  } else if (value.is_array()) {
    for (const auto& entry : value) {
      if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() ||
          !entry.contains("template") || !entry["template"].is_string())
        throw FormatError(fmt::format(
            "{}: 'chat_template' lists must hold {{\"name\", \"template\"}} strings", source));
      out[entry["name"].get<std::string>()] = entry["template"].get<std::string>();
    }
  } else if (!value.is_null()) {
    throw FormatError(
        fmt::format("{}: 'chat_template' must be a string or a list of named templates", source));
  }
  return out;
}

// transformers' special_tokens_map: tokenizer_config.json first, special_tokens_map.json
// filling what it lacks; AddedToken objects give their content; None left out.
nlohmann::json special_tokens_of(const fs::path& dir) {
  static const char* kKeys[] = {
      "bos_token", "eos_token", "unk_token",  "sep_token",
      "pad_token", "cls_token", "mask_token", "additional_special_tokens"};
  auto text = [](const nlohmann::json& v) -> nlohmann::json {
    if (v.is_object()) return v.value("content", nlohmann::json());
    return v;
  };
  nlohmann::json out = nlohmann::json::object();
  std::error_code ec;
  for (const char* file : {"tokenizer_config.json", "special_tokens_map.json"}) {
    if (!fs::is_regular_file(dir / file, ec)) continue;
    const nlohmann::json j = read_json(dir / file);
    if (!j.is_object()) continue;
    for (const char* key : kKeys) {
      if (out.contains(key) || !j.contains(key) || j[key].is_null()) continue;
      nlohmann::json v;
      if (j[key].is_array()) {
        v = nlohmann::json::array();
        for (const auto& e : j[key]) v.push_back(text(e));
        if (v.empty()) continue;
      } else {
        v = text(j[key]);
      }
      if (!v.is_null()) out[key] = v;
    }
  }
  return out;
}

bool is_gguf(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in && std::string(magic, 4) == "GGUF";
}

struct Found {
  std::map<std::string, std::string> templates;
  std::string source;
};

Found from_folder(const fs::path& dir) {
  std::error_code ec;
  Found f;
  // The order recent transformers reads them in: the .jinja file a save_pretrained of
  // 4.43+ writes, the processor-style JSON, then the inline tokenizer_config.json value.
  if (fs::is_regular_file(dir / "chat_template.jinja", ec)) {
    f.templates["default"] = read_text(dir / "chat_template.jinja");
    f.source = (dir / "chat_template.jinja").string();
  } else if (fs::is_regular_file(dir / "chat_template.json", ec)) {
    const nlohmann::json j = read_json(dir / "chat_template.json");
    f.source = (dir / "chat_template.json").string();
    f.templates =
        templates_of(j.is_object() ? j.value("chat_template", nlohmann::json()) : j, f.source);
  } else if (fs::is_regular_file(dir / "tokenizer_config.json", ec)) {
    const nlohmann::json j = read_json(dir / "tokenizer_config.json");
    if (j.is_object() && j.contains("chat_template")) {
      f.source = (dir / "tokenizer_config.json").string();
      f.templates = templates_of(j["chat_template"], f.source);
    }
  }
  return f;
}

Found from_gguf(const std::string& path) {
  Found f;
  auto gguf = GgufFile::open(path);
  const GgufMetadata& md = gguf->metadata();
  if (auto s = md.get_string("tokenizer.chat_template")) {
    f.templates["default"] = *s;
    f.source = path + " (tokenizer.chat_template)";
  }
  // Named ones, as llama.cpp's convert script writes them (tokenizer.chat_templates lists
  // the names, each at tokenizer.chat_template.<name>).
  if (const auto* names = md.find_array_strings("tokenizer.chat_templates"))
    for (const std::string& name : *names)
      if (auto s = md.get_string("tokenizer.chat_template." + name)) f.templates[name] = *s;
  return f;
}

}  // namespace

ChatTemplate load_chat_template(const std::string& model_path, const ChatTemplateOptions& options) {
  std::error_code ec;
  Found found;
  nlohmann::json special = nlohmann::json::object();
  if (!model_path.empty()) {
    const fs::path p(model_path);
    const fs::path dir = fs::is_directory(p, ec) ? p : p.parent_path();
    if (fs::is_regular_file(p, ec) && is_gguf(p)) {
      found = from_gguf(model_path);
    } else {
      found = from_folder(dir);
      special = special_tokens_of(dir);
    }
  }
  if (special.empty()) {  // GGUF, or a folder without tokenizer files: the vocabulary's
    if (!options.bos_text.empty()) special["bos_token"] = options.bos_text;
    if (!options.eos_text.empty()) special["eos_token"] = options.eos_text;
  }
  if (!options.override_template.empty()) {
    const std::string& o = options.override_template;
    found = {};
    if (fs::is_regular_file(o, ec)) {
      found.templates["default"] = read_text(o);
      found.source = o + " (--chat-template)";
    } else if (o.find("{{") != std::string::npos || o.find("{%") != std::string::npos) {
      found.templates["default"] = o;
      found.source = "--chat-template (inline)";
    } else {
      throw FormatError(
          fmt::format("--chat-template {}: no such file, and not a Jinja template either", o));
    }
  }
  if (found.templates.empty())
    return ChatTemplate({{"default", fallback_chat_template()}},
                        model_path.empty() ? "built-in fallback (ChatML markers)"
                                           : "built-in fallback (ChatML markers): " + model_path +
                                                 " carries no chat template",
                        special, /*fallback=*/true);
  return ChatTemplate(found.templates, found.source, special, /*fallback=*/false);
}

}  // namespace refit

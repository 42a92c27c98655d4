#include "cli/inspect_chat_template.h"

#include <fmt/format.h>

#include <optional>

#include "server/chat_template.h"

namespace refit::cli {
namespace {

struct Loaded {
  std::optional<ChatTemplate> chat_template;
  std::string error;
};

Loaded load(const Checkpoint& c) {
  Loaded out;
  try {
    out.chat_template = load_chat_template(c.path(), {"", c.vocab().bos_text, c.vocab().eos_text});
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  return out;
}

}  // namespace

nlohmann::ordered_json chat_template_section_json(const Checkpoint& checkpoint) {
  const Loaded l = load(checkpoint);
  nlohmann::ordered_json j;
  if (!l.chat_template) {
    j["error"] = l.error;
    return j;
  }
  const ChatTemplate& t = *l.chat_template;
  j["source"] = t.source();
  j["fallback"] = t.is_fallback();
  j["names"] = t.names();
  j["special_tokens"] = t.special_tokens();
  return j;
}

void print_chat_template_section(const Checkpoint& checkpoint) {
  const Loaded l = load(checkpoint);
  if (!l.chat_template) {
    fmt::print("chat template: unusable: {}\n", l.error);
    return;
  }
  const ChatTemplate& t = *l.chat_template;
  std::string names;
  for (const std::string& n : t.names()) names += (names.empty() ? "" : ", ") + n;
  fmt::print("chat template: {}{}\n", t.source(),
             t.names().size() > 1 ? fmt::format(" (templates: {})", names) : "");
  std::string special;
  for (const auto& [k, v] : t.special_tokens().items())
    special += fmt::format("{}{} {}", special.empty() ? "" : ", ", k, v.dump());
  if (!special.empty()) fmt::print("               given {}\n", special);
}

}  // namespace refit::cli

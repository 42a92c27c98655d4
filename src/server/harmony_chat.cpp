#include "server/harmony_chat.h"

namespace refit {

using nlohmann::json;

void harmony_chat_input(ChatInput& input) {
  for (auto& m : input.messages) {
    if (!m.is_object() || m.value("role", "") != "assistant") continue;
    if (m.contains("content") && m["content"].is_null()) m["content"] = "";
    if (m.contains("thinking")) continue;
    for (const char* key : {"reasoning", "reasoning_content"})
      if (m.contains(key) && m[key].is_string()) {
        m["thinking"] = m[key];
        break;
      }
  }
}

namespace {

json text_or_null(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

}  // namespace

json harmony_message(const HarmonyParser& parser) {
  json calls = json::array();
  for (const HarmonyToolCall& c : parser.tool_calls())
    calls.push_back(json{{"id", c.id},
                         {"type", "function"},
                         {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  return json{{"role", "assistant"},
              {"content", text_or_null(parser.content())},
              {"reasoning", text_or_null(parser.reasoning())},
              {"reasoning_content", text_or_null(parser.reasoning())},
              {"tool_calls", calls}};
}

json harmony_delta(const HarmonyDelta& delta, const HarmonyParser& parser) {
  json d = json::object();
  if (!delta.content.empty()) d["content"] = delta.content;
  if (!delta.reasoning.empty()) {
    d["reasoning"] = delta.reasoning;
    d["reasoning_content"] = delta.reasoning;
  }
  if (!delta.tools.empty()) {
    json calls = json::array();
    for (const HarmonyDelta::Tool& t : delta.tools) {
      const HarmonyToolCall& call = parser.tool_calls()[t.index];
      if (t.opened)
        calls.push_back(json{{"index", t.index},
                             {"id", call.id},
                             {"type", "function"},
                             {"function", {{"name", call.name}, {"arguments", ""}}}});
      if (!t.arguments.empty())
        calls.push_back(json{{"index", t.index}, {"function", {{"arguments", t.arguments}}}});
    }
    d["tool_calls"] = calls;
  }
  return d;
}

void merge_delta(HarmonyDelta& into, const HarmonyDelta& more) {
  into.reasoning += more.reasoning;
  into.content += more.content;
  for (const HarmonyDelta::Tool& t : more.tools) {
    if (!t.opened && !into.tools.empty() && into.tools.back().index == t.index) {
      into.tools.back().arguments += t.arguments;
      continue;
    }
    into.tools.push_back(t);
  }
}

std::string harmony_finish_reason(const HarmonyParser& parser, const std::string& finish_reason) {
  if (parser.tool_calls().empty() || (finish_reason != "stop" && finish_reason != "length"))
    return finish_reason;
  return "tool_calls";
}

}  // namespace refit

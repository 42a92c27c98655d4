#include "server/chat_request.h"

#include <fmt/format.h>

#include "server/api_types.h"

namespace refit {

const char* const kChatInputFields[] = {"messages",
                                        "tools",
                                        "tool_choice",
                                        "parallel_tool_calls",
                                        "documents",
                                        "chat_template",
                                        "chat_template_kwargs",
                                        "add_generation_prompt",
                                        "continue_final_message",
                                        "reasoning_effort"};
const size_t kChatInputFieldCount = sizeof(kChatInputFields) / sizeof(kChatInputFields[0]);

namespace {

using Json = nlohmann::ordered_json;

// Content as the template sees it: a string; text parts joined with "\n" (vLLM's
// "string" content format, what nearly every template expects); null stays null.
Json message_content(const Json& c, const std::string& param) {
  if (c.is_string() || c.is_null()) return c;
  if (!c.is_array())
    bad_request(param, fmt::format("'{}' must be a string or a list of text parts", param));
  std::string text;
  size_t i = 0;
  for (const auto& part : c) {
    const std::string where = fmt::format("{}[{}]", param, i++);
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      bad_request(where, fmt::format("'{}' must be an object with a string 'type'", where));
    const std::string type = part["type"].get<std::string>();
    if (type != "text")
      bad_request(where, fmt::format("content parts of type '{}' are not supported: refit "
                                     "serves text models ({{\"type\": \"text\", \"text\": ...}})",
                                     type));
    if (!part.contains("text") || !part["text"].is_string())
      bad_request(where, fmt::format("'{}' needs a string 'text'", where));
    if (i > 1) text += "\n";
    text += part["text"].get<std::string>();
  }
  return text;
}

Json tool_calls(const Json& calls, const std::string& param) {
  if (!calls.is_array()) bad_request(param, fmt::format("'{}' must be a list", param));
  Json out = calls;
  for (size_t j = 0; j < out.size(); ++j) {
    const std::string where = fmt::format("{}[{}]", param, j);
    Json& call = out[j];
    if (!call.is_object() || !call.contains("function") || !call["function"].is_object())
      bad_request(where, fmt::format("'{}' needs a 'function' object", where));
    Json& fn = call["function"];
    if (!fn.contains("name") || !fn["name"].is_string())
      bad_request(where + ".function.name", fmt::format("'{}' needs a string name", where));
    if (fn.contains("arguments") && fn["arguments"].is_string()) {
      // vLLM and SGLang parse it before the template runs: templates write arguments
      // with tojson, which would otherwise quote the JSON text a second time.
      try {
        fn["arguments"] = Json::parse(fn["arguments"].get<std::string>());
      } catch (const Json::exception&) {
        bad_request(where + ".function.arguments",
                    fmt::format("'{}.function.arguments' is not valid JSON", where));
      }
    }
  }
  return out;
}

bool optional_bool(const Json& body, const char* key, bool fallback) {
  if (!body.contains(key) || body[key].is_null()) return fallback;
  if (!body[key].is_boolean()) bad_request(key, fmt::format("'{}' must be true or false", key));
  return body[key].get<bool>();
}

}  // namespace

ChatInput parse_chat_input(const Json& body) {
  ChatInput in;
  if (!body.contains("messages") || !body["messages"].is_array() || body["messages"].empty())
    bad_request("messages", "'messages' must be a non-empty list of {role, content} objects");
  size_t i = 0;
  for (const auto& m : body["messages"]) {
    const std::string where = fmt::format("messages[{}]", i++);
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      bad_request(where, fmt::format("{} needs a string 'role'", where));
    const std::string role = m["role"].get<std::string>();
    Json msg = m;
    // Only an assistant turn may come without content (one that called tools; vLLM takes
    // any assistant turn so, its content None): any other served as empty would be a wrong
    // prompt answered with confidence.
    if (role != "assistant" && (!m.contains("content") || m["content"].is_null()))
      bad_request(where + ".content", fmt::format("{} ({}) needs 'content'", where, role));
    if (m.contains("content")) msg["content"] = message_content(m["content"], where + ".content");
    if (m.contains("tool_calls") && !m["tool_calls"].is_null())
      msg["tool_calls"] = tool_calls(m["tool_calls"], where + ".tool_calls");
    if (role == "tool" && m.contains("tool_call_id") && !m["tool_call_id"].is_string())
      bad_request(where + ".tool_call_id", "'tool_call_id' must be a string");
    in.messages.push_back(std::move(msg));
  }
  if (body.contains("tools") && !body["tools"].is_null()) {
    const auto& tools = body["tools"];
    if (!tools.is_array()) bad_request("tools", "'tools' must be a list of tool objects");
    for (size_t t = 0; t < tools.size(); ++t)
      if (!tools[t].is_object())
        bad_request(fmt::format("tools[{}]", t), "each tool must be an object");
    in.tools = tools;
  }
  // tool_choice "required" or a named function asks for output constrained to a tool call,
  // which refit's sampler does not do: refused rather than answered with free text.
  if (body.contains("tool_choice") && !body["tool_choice"].is_null()) {
    const auto& choice = body["tool_choice"];
    if (!choice.is_string() ||
        (choice.get<std::string>() != "auto" && choice.get<std::string>() != "none"))
      bad_request("tool_choice",
                  fmt::format("tool_choice {} is not supported: refit does not constrain output to "
                              "tool calls ('auto' and 'none' are accepted)",
                              choice.dump()));
  }
  if (body.contains("parallel_tool_calls") && !body["parallel_tool_calls"].is_null() &&
      !body["parallel_tool_calls"].is_boolean())
    bad_request("parallel_tool_calls", "'parallel_tool_calls' must be true or false");
  if (body.contains("documents") && !body["documents"].is_null()) {
    if (!body["documents"].is_array()) bad_request("documents", "'documents' must be a list");
    in.documents = body["documents"];
  }
  if (body.contains("chat_template_kwargs") && !body["chat_template_kwargs"].is_null()) {
    if (!body["chat_template_kwargs"].is_object())
      bad_request("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    in.kwargs = body["chat_template_kwargs"];
  }
  // vLLM and SGLang hand the request's reasoning_effort to the template (gpt-oss's writes
  // "Reasoning: low|medium|high"); chat_template_kwargs still win.
  if (body.contains("reasoning_effort") && !body["reasoning_effort"].is_null()) {
    if (!body["reasoning_effort"].is_string())
      bad_request("reasoning_effort", "'reasoning_effort' must be a string (low, medium, high)");
    if (!in.kwargs.contains("reasoning_effort"))
      in.kwargs["reasoning_effort"] = body["reasoning_effort"];
  }
  if (body.contains("chat_template") && !body["chat_template"].is_null())
    // vLLM refuses it too unless started with --trust-request-chat-template: a template
    // is code the server runs.
    bad_request("chat_template",
                "a chat template sent with the request is not run; start the server with "
                "--chat-template FILE");
  in.add_generation_prompt = optional_bool(body, "add_generation_prompt", true);
  in.continue_final_message = optional_bool(body, "continue_final_message", false);
  if (in.add_generation_prompt && in.continue_final_message &&
      body.contains("add_generation_prompt") && !body["add_generation_prompt"].is_null())
    bad_request("continue_final_message",
                "'continue_final_message' and 'add_generation_prompt' cannot both be true");
  if (in.continue_final_message) in.add_generation_prompt = false;
  return in;
}

ChatInput parse_chat_input(const nlohmann::json& body) { return parse_chat_input(Json(body)); }

}  // namespace refit

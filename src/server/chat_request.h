// The chat fields of a /v1/chat/completions (or /tokenize) request, validated and shaped
// the way vLLM and SGLang hand them to a chat template: messages as sent (roles are the
// template's business), text content parts joined, an assistant tool call's `arguments`
// JSON string parsed into an object; tools, documents, chat_template_kwargs,
// add_generation_prompt and continue_final_message passed on.
#pragma once

#include <nlohmann/json.hpp>

#include "server/chat_template.h"

namespace refit {

// The request fields parse_chat_input reads (for the unknown-field check).
extern const char* const kChatInputFields[];
extern const size_t kChatInputFieldCount;

// Throws HttpError (400) naming the field that is malformed.
// Give the body as ordered JSON (parse_json_body_ordered) so objects keep the client's key
// order; the plain-JSON overload (for tests and callers without the text) sorts them.
ChatInput parse_chat_input(const nlohmann::ordered_json& body);
ChatInput parse_chat_input(const nlohmann::json& body);

// The template's prompt for `input`; a template that raises is the request's fault, a
// 400 carrying the template's message (as vLLM answers it).
std::string render_chat_prompt(const ChatTemplate& chat_template, const ChatInput& input);

}  // namespace refit

// A chat completion of a harmony model (gpt-oss) as vLLM answers it: the request's earlier
// reasoning handed to the template where gpt-oss's template reads it, and the parsed output
// (server/harmony_parser.h) as the OpenAI message or streamed delta.
//
//   message: {"role": "assistant", "content": final text or null, "reasoning": analysis text
//             or null, "reasoning_content": the same, "tool_calls": [...]}
//   delta:   {"content"?, "reasoning"?, "reasoning_content"?, "tool_calls"?}
//
// Reasoning goes out under both names: "reasoning" is current vLLM's field, "reasoning_content"
// SGLang's and earlier vLLM's, and clients read one or the other. A choice that called a
// function ends with finish_reason "tool_calls" (vLLM's rule, whatever stopped it).
#pragma once

#include <nlohmann/json.hpp>

#include "server/chat_template.h"
#include "server/harmony_parser.h"

namespace refit {

// An earlier assistant turn as gpt-oss's template reads it: its analysis in "thinking" (vLLM's
// clients send it back as "reasoning", SGLang's as "reasoning_content"; copied where
// "thinking" is absent), and content "" where a tool-calling turn sent null (the template
// tests `"<|channel|>" in message.content`, which a null fails; "" renders as null would).
void harmony_chat_input(ChatInput& input);

// The whole answer's message.
nlohmann::json harmony_message(const HarmonyParser& parser);

// A delta from what the parser added since the last chunk (several tokens' worth merged).
nlohmann::json harmony_delta(const HarmonyDelta& delta, const HarmonyParser& parser);

// Appends `more` to `into`: text concatenated, argument pieces of one call merged.
void merge_delta(HarmonyDelta& into, const HarmonyDelta& more);

// finish_reason "tool_calls" when the parser saw a function call and the choice ended
// normally (stop or length); errors and aborts keep theirs.
std::string harmony_finish_reason(const HarmonyParser& parser, const std::string& finish_reason);

}  // namespace refit

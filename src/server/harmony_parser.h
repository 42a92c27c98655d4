// gpt-oss's "harmony" response format, read from the generated token ids as vLLM reads it
// (openai_harmony's StreamableParser) to fill a chat completion:
//
//   <|channel|>analysis<|message|>...<|end|>                       -> reasoning
//   <|start|>assistant<|channel|>final<|message|>...<|return|>     -> content
//   <|start|>assistant<|channel|>commentary<|message|>...<|end|>   -> content (a preamble)
//   <|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json
//     <|message|>{...}<|call|>                                     -> tool call NAME
//
// The prompt ends with "<|start|>assistant" (the template's generation prompt), so the
// output opens with a message header. The structural tokens are matched by id, never by
// text, so none of them reaches the client's text and a split inside one cannot happen.
// What the parser does with anything else:
//   * several messages of one kind are joined with "\n" (vLLM's non-streaming join); the
//     streamed deltas carry the same "\n", so a stream adds up to the whole answer;
//   * a message cut off by max_tokens keeps what it has (vLLM keeps the partial one); a cut
//     inside a header loses only the header;
//   * text outside any message (after <|end|>, before a <|start|>) is content, not lost;
//   * a commentary message to a built-in tool (browser.*, python) is dropped, and an analysis
//     one is reasoning, as vLLM's chat route does;
//   * tool-call arguments are the model's text as written (vLLM re-serialises valid JSON
//     with Python's separators; the text is kept here so a stream adds up to the answer).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace refit {

// The harmony structural tokens of a vocabulary (o200k_harmony: <|return|> 200002,
// <|constrain|> 200003, <|channel|> 200005, <|start|> 200006, <|end|> 200007,
// <|message|> 200008, <|call|> 200012).
struct HarmonyTokens {
  TokenId start = kNoToken, end = kNoToken, message = kNoToken, channel = kNoToken,
          constrain = kNoToken, return_turn = kNoToken, call = kNoToken;

  // All of them, when the vocabulary has every one (that is what makes it harmony's).
  static std::optional<HarmonyTokens> find(const Tokenizer& tokenizer);
  // The texts a vocabulary lacks, for the error of an explicit --reasoning-parser gpt-oss.
  static std::vector<std::string> missing(const Tokenizer& tokenizer);
};

struct HarmonyToolCall {
  std::string id, name, arguments;
};

// What one token (or the end) added: text for each field, and the tool calls it touched.
struct HarmonyDelta {
  struct Tool {
    size_t index = 0;
    bool opened = false;  // first delta of this call: carries id and name
    std::string arguments;
  };
  std::string reasoning, content;
  std::vector<Tool> tools;
  bool empty() const { return reasoning.empty() && content.empty() && tools.empty(); }
};

class HarmonyParser {
 public:
  // `make_call_id` names each tool call (vLLM: "chatcmpl-tool-<random>").
  HarmonyParser(const Tokenizer& tokenizer, HarmonyTokens tokens,
                std::function<std::string()> make_call_id);

  HarmonyDelta push(TokenId id);
  // Flushes an incomplete UTF-8 character held back at the end of the output.
  HarmonyDelta finish();

  // Everything so far: the whole answer's fields.
  const std::string& reasoning() const { return reasoning_; }
  const std::string& content() const { return content_; }
  const std::vector<HarmonyToolCall>& tool_calls() const { return calls_; }

 private:
  enum class Sink { none, reasoning, content, tool };
  enum class State { header, body, between };
  void open_message();   // at <|message|>: decides where the body goes
  void close_message();  // at <|end|>, <|return|>, <|call|>
  void emit(const std::string& text, HarmonyDelta& delta);
  void flush_decoder(HarmonyDelta& delta);

  const Tokenizer& tokenizer_;
  HarmonyTokens tokens_;
  std::function<std::string()> make_call_id_;
  StreamingDecoder decoder_;
  State state_ = State::header;
  Sink sink_ = Sink::none;
  bool sink_started_ = false;  // the current message has emitted text
  std::string header_;         // decoded header text, with <|channel|> / <|constrain|> spelled
  std::string reasoning_, content_;
  std::vector<HarmonyToolCall> calls_;
};

// `--reasoning-parser` (SGLang's flag; vLLM's value name accepted too): whether chat
// completions of this tokenizer's model are read as harmony. "auto": when the vocabulary has
// the harmony tokens; "gpt-oss" / "openai_gptoss": always (throws naming the missing tokens
// when it has not); "none": never (the text as generated). Throws on another value.
std::optional<HarmonyTokens> harmony_for(const std::string& reasoning_parser,
                                         const Tokenizer* tokenizer);

}  // namespace refit

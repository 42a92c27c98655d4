#include "server/harmony_parser.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <sstream>

#include "core/error.h"

namespace refit {

namespace {

constexpr const char* kChannelMark = "<|channel|>";

struct Header {
  std::string channel, recipient;
};

// "assistant to=functions.f <|channel|> commentary <|constrain|> json" and the other orders
// harmony allows: the recipient may stand before or after the channel. The content type
// (after <|constrain|>, or a bare word) does not change where the text goes.
Header parse_header(const std::string& text) {
  std::istringstream words(text);
  Header h;
  std::string word, previous;
  while (words >> word) {
    if (word.rfind("to=", 0) == 0)
      h.recipient = word.substr(3);
    else if (previous == kChannelMark)
      h.channel = word;
    previous = word;
  }
  return h;
}

}  // namespace

std::optional<HarmonyTokens> HarmonyTokens::find(const Tokenizer& tokenizer) {
  const Vocab& v = tokenizer.vocab();
  HarmonyTokens t;
  t.start = v.find("<|start|>");
  t.end = v.find("<|end|>");
  t.message = v.find("<|message|>");
  t.channel = v.find("<|channel|>");
  t.constrain = v.find("<|constrain|>");
  t.return_turn = v.find("<|return|>");
  t.call = v.find("<|call|>");
  for (TokenId id : {t.start, t.end, t.message, t.channel, t.constrain, t.return_turn, t.call})
    if (id == kNoToken) return std::nullopt;
  return t;
}

std::vector<std::string> HarmonyTokens::missing(const Tokenizer& tokenizer) {
  std::vector<std::string> out;
  for (const char* text : {"<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>",
                           "<|return|>", "<|call|>"})
    if (tokenizer.vocab().find(text) == kNoToken) out.emplace_back(text);
  return out;
}

HarmonyParser::HarmonyParser(const Tokenizer& tokenizer, HarmonyTokens tokens,
                             std::function<std::string()> make_call_id)
    : tokenizer_(tokenizer),
      tokens_(tokens),
      make_call_id_(std::move(make_call_id)),
      decoder_(tokenizer, DecodeOptions{}) {}

void HarmonyParser::emit(const std::string& text, HarmonyDelta& delta) {
  if (text.empty()) return;
  if (state_ == State::header) {
    header_ += text;
    return;
  }
  if (state_ == State::between) {
    // Text outside any message: content, as its own segment.
    state_ = State::body;
    sink_ = Sink::content;
    sink_started_ = false;
  }
  switch (sink_) {
    case Sink::none:
      return;
    case Sink::reasoning:
    case Sink::content: {
      std::string& whole = sink_ == Sink::reasoning ? reasoning_ : content_;
      std::string& part = sink_ == Sink::reasoning ? delta.reasoning : delta.content;
      // A second message of the same kind: joined with "\n", in the stream too.
      const std::string piece = (!sink_started_ && !whole.empty()) ? "\n" + text : text;
      whole += piece;
      part += piece;
      break;
    }
    case Sink::tool: {
      const size_t index = calls_.size() - 1;
      calls_.back().arguments += text;
      if (delta.tools.empty() || delta.tools.back().index != index)
        delta.tools.push_back({index, false, {}});
      delta.tools.back().arguments += text;
      break;
    }
  }
  sink_started_ = true;
}

void HarmonyParser::flush_decoder(HarmonyDelta& delta) { emit(decoder_.finish(), delta); }

void HarmonyParser::open_message() {
  const Header h = parse_header(header_);
  header_.clear();
  sink_started_ = false;
  const bool to_function = h.recipient.rfind("functions.", 0) == 0;
  const bool to_other = !h.recipient.empty() && !to_function && h.recipient != "assistant";
  if (to_function && (h.channel.empty() || h.channel == "commentary" || h.channel == "analysis")) {
    sink_ = Sink::tool;
    calls_.push_back({make_call_id_(), h.recipient.substr(std::string("functions.").size()), ""});
  } else if (h.channel == "analysis") {
    sink_ = Sink::reasoning;
  } else if (to_other) {
    sink_ = Sink::none;  // a built-in tool's commentary call: not the user's text
  } else {
    sink_ = Sink::content;  // final, a commentary preamble, or a message without a channel
  }
}

void HarmonyParser::close_message() {
  state_ = State::between;
  sink_ = Sink::none;
  header_.clear();
}

HarmonyDelta HarmonyParser::push(TokenId id) {
  HarmonyDelta delta;
  const HarmonyTokens& t = tokens_;
  const bool structural = id == t.start || id == t.end || id == t.message || id == t.channel ||
                          id == t.constrain || id == t.return_turn || id == t.call;
  if (!structural) {
    emit(decoder_.push(id), delta);
    return delta;
  }
  flush_decoder(delta);
  const size_t calls_before = calls_.size();
  if (id == t.start) {
    close_message();
    state_ = State::header;
  } else if (id == t.channel || id == t.constrain) {
    if (state_ == State::header) header_ += id == t.channel ? " <|channel|> " : " <|constrain|> ";
  } else if (id == t.message) {
    if (state_ == State::header) {
      open_message();
      state_ = State::body;
    }
  } else {  // <|end|>, <|return|>, <|call|>
    close_message();
  }
  if (calls_.size() > calls_before) delta.tools.push_back({calls_.size() - 1, true, {}});
  return delta;
}

HarmonyDelta HarmonyParser::finish() {
  HarmonyDelta delta;
  flush_decoder(delta);
  return delta;
}

std::optional<HarmonyTokens> harmony_for(const std::string& reasoning_parser,
                                         const Tokenizer* tokenizer) {
  if (reasoning_parser == "none") return std::nullopt;
  const bool forced = reasoning_parser == "gpt-oss" || reasoning_parser == "openai_gptoss";
  if (!forced && reasoning_parser != "auto" && !reasoning_parser.empty())
    throw Error(fmt::format(
        "--reasoning-parser {}: refit knows auto, gpt-oss (vLLM's openai_gptoss) and none",
        reasoning_parser));
  if (!tokenizer) {
    if (forced)
      throw Error(
          fmt::format("--reasoning-parser {}: the model carries no tokenizer", reasoning_parser));
    return std::nullopt;
  }
  std::optional<HarmonyTokens> found = HarmonyTokens::find(*tokenizer);
  if (!found && forced)
    throw Error(fmt::format("--reasoning-parser {}: the vocabulary lacks the harmony tokens {}",
                            reasoning_parser, fmt::join(HarmonyTokens::missing(*tokenizer), ", ")));
  return found;
}

}  // namespace refit

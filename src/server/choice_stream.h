// One choice of a completion as the HTTP layer assembles it from the scheduler's token
// events: incremental UTF-8-safe text, stop strings (the text is cut before the stop and
// the request cancelled), per-token logprobs and weight versions, and the OpenAI JSON.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace refit {

struct ChoiceOptions {
  DecodeOptions decode;           // skip_special_tokens (SGLang, vLLM), clean-up
  bool keep_stop_string = false;  // SGLang no_stop_trim, vLLM include_stop_str_in_output
};

class ChoiceStream {
 public:
  ChoiceStream(std::shared_ptr<RequestHandle> handle, const Tokenizer* tokenizer,
               std::vector<std::string> stop, int64_t prompt_tokens, ChoiceOptions options = {});

  // Applies one scheduler event. Returns true when the choice just finished.
  bool apply(const RequestHandle::Event& event);
  bool done() const { return done_; }
  RequestHandle& handle() { return *handle_; }

  // Text that can be sent now (held back: a possible beginning of a stop string, or an
  // incomplete UTF-8 character), and the logprob entries of the tokens not sent yet.
  std::string take_text();
  size_t tokens_taken() const { return tokens_sent_; }
  void mark_tokens_sent() { tokens_sent_ = tokens_.size(); }

  const std::string& text() const { return text_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  const std::vector<float>& logprobs() const { return logprobs_; }
  const std::vector<uint64_t>& versions() const { return versions_; }
  const std::vector<std::vector<TokenLogprob>>& top() const { return top_; }
  const std::vector<int64_t>& ranks() const { return ranks_; }
  // Prompt logprobs, in position order (what the request asked for from its start).
  const std::vector<TokenEvent>& prompt_logprobs() const { return prompt_logprobs_; }
  int64_t cached_tokens() const { return cached_tokens_; }
  // Routing replay: i32 [positions, moe layers, k] once finished (when the request asked).
  const std::vector<int32_t>& routed_experts() const { return routed_experts_; }
  // What stopped it: the stop string (stopped_by_string) or the stop token (the last one).
  bool stopped_by_string() const { return stopped_by_string_; }
  const std::string& matched_stop() const { return matched_stop_; }
  const std::string& finish_reason() const { return finish_reason_; }
  const std::string& error() const { return error_; }
  bool busy() const { return busy_; }
  int64_t prompt_tokens() const { return prompt_tokens_; }

  std::string piece(int32_t token) const;
  // Completions-style logprobs for tokens [from, to): tokens, token_logprobs, top_logprobs,
  // text_offset.
  nlohmann::json completion_logprobs(size_t from, size_t to) const;
  // Chat-style: {"content": [{token, logprob, bytes, top_logprobs}]}.
  nlohmann::json chat_logprobs(size_t from, size_t to) const;

 private:
  std::shared_ptr<RequestHandle> handle_;
  const Tokenizer* tokenizer_;
  std::unique_ptr<StreamingDecoder> decoder_;
  std::vector<std::string> stop_;
  size_t max_stop_ = 0;
  int64_t prompt_tokens_;
  std::string text_;
  size_t text_sent_ = 0;
  size_t tokens_sent_ = 0;
  std::vector<int32_t> tokens_;
  std::vector<float> logprobs_;
  std::vector<uint64_t> versions_;
  std::vector<std::vector<TokenLogprob>> top_;
  std::vector<int64_t> ranks_;
  std::vector<TokenEvent> prompt_logprobs_;
  int64_t cached_tokens_ = 0;
  std::vector<int32_t> routed_experts_;
  ChoiceOptions options_;
  std::string matched_stop_;
  std::vector<size_t> offsets_;  // text offset of each token
  std::string finish_reason_, error_;
  bool busy_ = false, done_ = false, stopped_by_string_ = false;
};

}  // namespace refit

#include "server/choice_stream.h"

#include <algorithm>

namespace refit {

ChoiceStream::ChoiceStream(std::shared_ptr<RequestHandle> handle, const Tokenizer* tokenizer,
                           std::vector<std::string> stop, int64_t prompt_tokens,
                           ChoiceOptions options)
    : handle_(std::move(handle)),
      tokenizer_(tokenizer),
      stop_(std::move(stop)),
      prompt_tokens_(prompt_tokens),
      options_(options) {
  for (const auto& s : stop_) max_stop_ = std::max(max_stop_, s.size());
  if (tokenizer_) decoder_ = std::make_unique<StreamingDecoder>(*tokenizer_, options_.decode);
}

std::string ChoiceStream::piece(int32_t token) const {
  return tokenizer_ ? tokenizer_->token_to_piece(token) : std::to_string(token) + " ";
}

bool ChoiceStream::apply(const RequestHandle::Event& e) {
  if (done_) return false;
  switch (e.kind) {
    case RequestHandle::Event::restart:
      // Retracted and re-run from the prompt (never after text was sent: only
      // non-streaming requests ask for restarts).
      text_.clear();
      tokens_.clear();
      logprobs_.clear();
      versions_.clear();
      top_.clear();
      ranks_.clear();
      prompt_logprobs_.clear();
      offsets_.clear();
      text_sent_ = tokens_sent_ = 0;
      if (tokenizer_) decoder_ = std::make_unique<StreamingDecoder>(*tokenizer_, options_.decode);
      return false;
    case RequestHandle::Event::prompt:
      for (const TokenEvent& t : e.prompt_logprobs) prompt_logprobs_.push_back(t);
      return false;
    case RequestHandle::Event::token: {
      const TokenEvent& t = e.token_event;
      offsets_.push_back(text_.size());
      tokens_.push_back(t.token);
      logprobs_.push_back(t.logprob);
      versions_.push_back(t.weight_version);
      top_.push_back(t.top);
      ranks_.push_back(t.rank);
      cached_tokens_ = t.cached_tokens;
      const size_t before = text_.size();
      text_ += decoder_ ? decoder_->push(t.token) : std::to_string(t.token) + " ";
      if (!stop_.empty()) {
        // A stop string may straddle the previous text: search from max_stop back.
        const size_t from = before > max_stop_ ? before - max_stop_ : 0;
        size_t cut = std::string::npos;
        for (const auto& s : stop_) {
          const size_t at = text_.find(s, from);
          if (at < cut ||
              (at == cut && at != std::string::npos && s.size() > matched_stop_.size())) {
            cut = at;
            matched_stop_ = s;
          }
        }
        if (cut != std::string::npos) {
          text_.resize(options_.keep_stop_string ? cut + matched_stop_.size() : cut);
          finish_reason_ = "stop";
          stopped_by_string_ = true;
          done_ = true;
          handle_->cancel();  // the scheduler frees its blocks at the next step
          return true;
        }
      }
      return false;
    }
    case RequestHandle::Event::finished:
      if (decoder_) text_ += decoder_->finish();
      finish_reason_ = e.finish_reason;
      cached_tokens_ = e.cached_tokens;
      routed_experts_ = e.routed_experts;
      error_ = e.error;
      busy_ = e.busy;
      done_ = true;
      return true;
  }
  return false;
}

std::string ChoiceStream::take_text() {
  size_t end = text_.size();
  if (!done_ && max_stop_ > 0)
    end = text_.size() > max_stop_ - 1 ? text_.size() - (max_stop_ - 1) : 0;
  // Never split a UTF-8 character when holding back.
  while (end > text_sent_ && end < text_.size() &&
         (static_cast<unsigned char>(text_[end]) & 0xC0) == 0x80)
    --end;
  if (end <= text_sent_) return {};
  std::string out = text_.substr(text_sent_, end - text_sent_);
  text_sent_ = end;
  return out;
}

nlohmann::json ChoiceStream::completion_logprobs(size_t from, size_t to) const {
  nlohmann::json j;
  j["tokens"] = nlohmann::json::array();
  j["token_logprobs"] = nlohmann::json::array();
  j["top_logprobs"] = nlohmann::json::array();
  j["text_offset"] = nlohmann::json::array();
  for (size_t i = from; i < to && i < tokens_.size(); ++i) {
    j["tokens"].push_back(piece(tokens_[i]));
    j["token_logprobs"].push_back(logprobs_[i]);
    nlohmann::json top = nlohmann::json::object();
    for (const TokenLogprob& t : top_[i]) top[piece(t.token)] = t.logprob;
    j["top_logprobs"].push_back(top);
    j["text_offset"].push_back(offsets_[i]);
  }
  return j;
}

nlohmann::json ChoiceStream::chat_logprobs(size_t from, size_t to) const {
  auto entry = [&](int32_t token, float lp) {
    const std::string p = piece(token);
    nlohmann::json e{
        {"token", p}, {"logprob", lp}, {"bytes", std::vector<int>(p.begin(), p.end())}};
    for (auto& b : e["bytes"]) b = static_cast<int>(static_cast<unsigned char>(b.get<int>()));
    return e;
  };
  nlohmann::json content = nlohmann::json::array();
  for (size_t i = from; i < to && i < tokens_.size(); ++i) {
    nlohmann::json e = entry(tokens_[i], logprobs_[i]);
    e["top_logprobs"] = nlohmann::json::array();
    for (const TokenLogprob& t : top_[i]) e["top_logprobs"].push_back(entry(t.token, t.logprob));
    content.push_back(e);
  }
  return nlohmann::json{{"content", content}};
}

}  // namespace refit

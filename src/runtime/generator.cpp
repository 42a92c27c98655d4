#include "runtime/generator.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace refit {

GenerateResult generate(const Model& model, const GenerateRequest& req,
                        const TokenCallback& on_token) {
  const ModelConfig& c = model.config();
  if (req.prompt.empty()) fail("generate: the prompt has no tokens");
  if (req.max_tokens < 0) fail("generate: max_tokens must be >= 0, got {}", req.max_tokens);
  for (int32_t id : req.prompt)
    if (id < 0 || id >= c.vocab_size)
      fail("generate: prompt token {} is outside the vocabulary (size {})", id, c.vocab_size);
  const int64_t needed = static_cast<int64_t>(req.prompt.size()) + req.max_tokens;
  if (needed > c.max_seq_len)
    fail(
        "generate: the prompt ({} tokens) plus {} new tokens needs {} positions, but the "
        "model's context length is {}; shorten the prompt or lower -n",
        req.prompt.size(), req.max_tokens, needed, c.max_seq_len);
  Sampler sampler(req.sampling);
  KvCache cache = model.make_cache(needed);
  GenerateResult result;
  std::vector<int32_t> history = req.prompt;
  const size_t vocab = static_cast<size_t>(c.vocab_size);
  auto record = [&](const Tensor& logits) {
    if (!req.record_logits) return;
    const float* p = logits.data<float>();
    result.logits.insert(result.logits.end(), p, p + logits.numel());
  };

  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  Tensor logits = model.forward(req.prompt, 0, cache, req.record_logits);
  record(logits);
  int64_t pos = static_cast<int64_t>(req.prompt.size());
  auto t1 = clock::now();
  result.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
  result.finish_reason = "length";
  std::span<const float> last(logits.data<float>() + (logits.size(0) - 1) * vocab, vocab);
  for (int64_t i = 0; i < req.max_tokens; ++i) {
    int32_t next = sampler.sample(last, history);
    result.tokens.push_back(next);
    history.push_back(next);
    const bool stop =
        std::find(req.stop_tokens.begin(), req.stop_tokens.end(), next) != req.stop_tokens.end();
    if (on_token && !on_token(next)) {
      result.finish_reason = "callback";
      break;
    }
    if (stop) {
      result.finish_reason = "stop";
      break;
    }
    // Feed the new token unless it is the last one and nobody wants its logits.
    if (i + 1 == req.max_tokens && !req.record_logits) break;
    logits = model.forward(std::span<const int32_t>(&next, 1), pos++, cache);
    record(logits);
    last = std::span<const float>(logits.data<float>(), vocab);
  }
  result.decode_seconds = std::chrono::duration<double>(clock::now() - t1).count();
  result.n_positions = req.record_logits ? static_cast<int64_t>(result.logits.size() / vocab) : pos;
  return result;
}

}  // namespace refit

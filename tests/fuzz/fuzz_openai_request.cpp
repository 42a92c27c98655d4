// /v1/completions and /v1/chat/completions (first byte: bit 0 picks chat): the body parsed
// as the server parses it, the prompts checked against the context and tokenized, max_tokens
// checked. The chat template is not rendered (it is the model's code, not a parser).
#include "fuzz_request_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace refit;
  if (size == 0) return 0;
  const bool chat = data[0] & 1;
  const std::string body = fuzz::body_text(data + 1, size - 1);
  REFIT_REQUEST_FUZZ_GUARD({
    const nlohmann::ordered_json ordered =
        chat ? parse_json_body_ordered(body) : nlohmann::ordered_json();
    const GenerationParams p = parse_generation_request(parse_json_body(body), chat, 20,
                                                        chat ? &ordered : nullptr, fuzz::kContext);
    std::vector<std::vector<int32_t>> prompts = p.prompt_ids;
    for (const std::string& text : p.prompt_texts) {
      check_prompt_text_fits(text.size(), fuzz::demo_prompt_limits(), "prompt");
      prompts.push_back(fuzz::demo_tokenizer().encode(text, p.add_special_tokens, true));
    }
    const GenerationDefaults defaults;
    for (const auto& ids : prompts)
      checked_max_tokens(p.max_tokens, p.max_tokens_null, chat, static_cast<int64_t>(ids.size()),
                         fuzz::kContext, defaults);
    p.sampling.validate();  // what the scheduler's sampler would refuse at submit
  });
  return 0;
}

// vLLM's /tokenize and /detokenize bodies: a prompt checked against the context and
// tokenized, chat messages validated (parse_chat_input), token ids decoded.
#include "fuzz_request_common.h"
#include "server/chat_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace refit;
  const Tokenizer& tok = fuzz::demo_tokenizer();
  REFIT_REQUEST_FUZZ_GUARD({
    const std::string body = fuzz::body_text(data, size);
    const nlohmann::json j = parse_json_body(body);
    if (!j.is_object()) return 0;
    if (j.contains("messages")) {
      parse_chat_input(parse_json_body_ordered(body));
    } else if (j.contains("prompt") && j["prompt"].is_string()) {
      const std::string& text = j["prompt"].get_ref<const std::string&>();
      check_prompt_text_fits(text.size(), fuzz::demo_prompt_limits(), "prompt");
      const std::vector<int32_t> ids = tok.encode(text, true, true);
      tok.decode(ids);
    } else if (j.contains("tokens") && j["tokens"].is_array()) {
      std::vector<int32_t> ids;
      for (const auto& v : j["tokens"])
        if (v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < fuzz::kVocab)
          ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
      tok.decode(ids);
    }
  });
  return 0;
}

// SGLang's /generate: the body parsed into scheduler requests (text prompts tokenized with
// the demo vocabulary, input_ids, per-prompt sampling_params, n expansion, logprob fields).
#include "fuzz_request_common.h"
#include "server/sglang_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace refit;
  static const GenerationDefaults defaults;
  SglangLimits limits;
  limits.tokenizer = &fuzz::demo_tokenizer();
  limits.model = "demo";
  limits.context = fuzz::kContext;
  limits.prompt = fuzz::demo_prompt_limits();
  limits.vocab = fuzz::kVocab;
  limits.eos_ids = {2};
  limits.defaults = &defaults;
  REFIT_REQUEST_FUZZ_GUARD({
    const SglangGenerateRequest r =
        parse_sglang_generate(parse_json_body(fuzz::body_text(data, size)), limits);
    for (const SglangItem& it : r.items) it.spec.sampling.validate();
  });
  return 0;
}

#include "server/sglang_request.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "server/api_types.h"
#include "server/base64.h"
#include "server/http_util.h"
#include "server/prompt_limits.h"
#include "server/request_fields.h"

namespace refit {

using nlohmann::json;

namespace {

// One prompt's sampling parameters under SGLang's names (sampling_params.py).
struct SglangSampling {
  SamplingParams sampling;
  int64_t max_new_tokens = 128;
  int64_t min_new_tokens = 0;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool skip_special_tokens = true;
  bool no_stop_trim = false;
  int n = 1;
  bool seed_given = false;
  SamplingFieldsGiven given;  // fields set here; the rest take the model's defaults
};

constexpr double kFloatMax = 3.4028234663852886e38;

// The fields the request gives, over SGLang's defaults.
SglangSampling parse_given_sampling(const json& sp) {
  SglangSampling out;
  out.sampling.temperature = 1.0f;  // SGLang's default
  out.sampling.repeat_last_n = -1;  // penalties see the whole sequence, as in SGLang
  if (sp.is_null()) return out;
  if (!sp.is_object())
    bad_request("sampling_params", "'sampling_params' must be an object (or a list of objects)");
  static const char* known[] = {"max_new_tokens",
                                "min_new_tokens",
                                "stop",
                                "stop_token_ids",
                                "temperature",
                                "top_p",
                                "top_k",
                                "min_p",
                                "ignore_eos",
                                "skip_special_tokens",
                                "spaces_between_special_tokens",
                                "no_stop_trim",
                                "repetition_penalty",
                                "frequency_penalty",
                                "presence_penalty",
                                "n",
                                "sampling_seed",
                                "json_schema",
                                "regex",
                                "ebnf",
                                "structural_tag",
                                "logit_bias",
                                "custom_params",
                                "stream_interval"};
  for (const auto& [key, value] : sp.items()) {
    const std::string name = "sampling_params." + key;
    bool is_known = false;
    for (const char* k : known) is_known = is_known || key == k;
    if (!is_known) {
      ignore_unknown_field("/generate sampling_params", key);
      continue;
    }
    if (value.is_null()) continue;
    if (key == "max_new_tokens") {
      out.max_new_tokens = json_integer_in(value, name, 0, INT64_MAX);
    } else if (key == "min_new_tokens") {
      out.min_new_tokens = json_integer_in(value, name, 0, INT64_MAX);
    } else if (key == "stop") {
      if (value.is_string())
        out.stop.push_back(value.get<std::string>());
      else if (value.is_array())
        for (const auto& x : value) {
          if (!x.is_string())
            bad_request(name, "'sampling_params.stop' must be a string or a list of strings");
          out.stop.push_back(x.get<std::string>());
        }
      else
        bad_request(name, "'sampling_params.stop' must be a string or a list of strings");
      for (const auto& x : out.stop)
        if (x.empty()) bad_request(name, "stop strings must not be empty");
    } else if (key == "stop_token_ids") {
      if (!value.is_array())
        bad_request(name, "'sampling_params.stop_token_ids' must be a list of token ids");
      for (const auto& x : value) {
        if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > INT32_MAX)
          bad_request(
              name, fmt::format("stop token ids must be non-negative integers, got {}", x.dump()));
        out.stop_token_ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
      }
    } else if (key == "temperature") {
      // SGLang sets no upper bound; float's range is refit's (a larger value would be inf).
      out.sampling.temperature = json_float_in(value, name, 0, kFloatMax);
      out.given.temperature = true;
    } else if (key == "top_p") {
      out.sampling.top_p = json_float_in(value, name, 0, 1);
      out.given.top_p = true;
      if (!(out.sampling.top_p > 0)) bad_request(name, "'sampling_params.top_p' must be in (0, 1]");
    } else if (key == "top_k") {
      const int64_t k = json_integer(value, name);
      if (k < -1 || k == 0)
        bad_request(name, fmt::format("'{}' must be -1 (off) or >= 1, got {}", name, k));
      out.sampling.top_k = k < 0 ? 0 : static_cast<int>(std::min<int64_t>(k, INT32_MAX));
      out.given.top_k = true;
    } else if (key == "min_p") {
      out.sampling.min_p = json_float_in(value, name, 0, 1);
      out.given.min_p = true;
    } else if (key == "ignore_eos") {
      out.ignore_eos = json_boolean(value, name);
    } else if (key == "skip_special_tokens") {
      out.skip_special_tokens = json_boolean(value, name);
    } else if (key == "spaces_between_special_tokens") {
      json_boolean(value, name);  // refit's decoder never inserts spaces between special tokens
    } else if (key == "no_stop_trim") {
      out.no_stop_trim = json_boolean(value, name);
    } else if (key == "repetition_penalty") {
      out.sampling.repetition_penalty = json_float_in(value, name, 0, 2);
      out.given.repetition_penalty = true;
      if (!(out.sampling.repetition_penalty > 0))
        bad_request(name, "'sampling_params.repetition_penalty' must be in (0, 2]");
    } else if (key == "frequency_penalty") {
      out.sampling.frequency_penalty = json_float_in(value, name, -2, 2);
    } else if (key == "presence_penalty") {
      out.sampling.presence_penalty = json_float_in(value, name, -2, 2);
    } else if (key == "n") {
      out.n = static_cast<int>(json_integer_in(value, name, 1, 64));
    } else if (key == "sampling_seed") {
      if (!value.is_number_integer())
        bad_request(name, "'sampling_params.sampling_seed' must be an integer");
      out.sampling.seed = value.is_number_unsigned() ? value.get<uint64_t>()
                                                     : static_cast<uint64_t>(value.get<int64_t>());
      out.seed_given = true;
    } else if (key == "json_schema" || key == "regex" || key == "ebnf" || key == "structural_tag") {
      bad_request(name, fmt::format("'{}' (constrained decoding) is not supported by refit", name));
    } else if (key == "logit_bias") {
      if (!value.empty())
        bad_request(name, "'sampling_params.logit_bias' is not supported by refit");
    }
    // custom_params, stream_interval: accepted; refit has no custom logit processors and
    // streams every token.
  }
  return out;
}

SglangSampling parse_sampling(const json& sp, const GenerationDefaults* defaults) {
  SglangSampling out = parse_given_sampling(sp);
  // The model's generation_config.json values for the fields the request left unset: SGLang's
  // ModelConfig.get_default_sampling_params fields (temperature, top_p, top_k, min_p,
  // repetition_penalty; not max_new_tokens, whose default stays SGLang's 128).
  if (defaults) defaults->apply(out.sampling, out.given);
  // SGLang: a temperature below 1e-6 is greedy.
  if (out.sampling.temperature < 1e-6f) out.sampling.temperature = 0.0f;
  return out;
}

// The member `name` of `body`, or null: a reference into `body` (never a temporary).
const json& member(const json& body, const char* name) {
  static const json null_value;
  auto it = body.find(name);
  return it == body.end() ? null_value : *it;
}

// A field that is one value for every prompt or a list with one per prompt.
const json& per_prompt(const json& v, size_t i, size_t batch, const char* name) {
  static const json null_value;
  if (v.is_null()) return null_value;
  if (!v.is_array()) return v;
  if (v.size() != batch)
    bad_request(name, fmt::format("'{}' has {} entries for {} prompts", name, v.size(), batch));
  return v[i];
}

}  // namespace

namespace {

// Routing replay: return_routed_experts (SGLang's) and routed_experts_start_len; and
// routed_experts given back (base64 int32 [positions, moe layers, k], a string per prompt)
// to force that routing, refit's own for rescoring a rollout exactly as it was routed.
void set_routing_replay(const json& body, size_t i, size_t batch, const SglangLimits& limits,
                        SglangItem& it) {
  const json& want = member(body, "return_routed_experts");
  it.spec.return_routed_experts = !want.is_null() && json_boolean(want, "return_routed_experts");
  const json& start = member(body, "routed_experts_start_len");
  if (!start.is_null())
    it.routed_experts_start =
        json_integer_in(start, "routed_experts_start_len", 0,
                        static_cast<int64_t>(it.spec.prompt.size()) + it.spec.max_tokens);
  const json& given = per_prompt(member(body, "routed_experts"), i, batch, "routed_experts");
  if ((it.spec.return_routed_experts || !given.is_null()) && limits.routing_width == 0)
    bad_request(it.spec.return_routed_experts ? "return_routed_experts" : "routed_experts",
                "this model has no mixture-of-experts layers: it routes no experts");
  if (given.is_null()) return;
  if (!given.is_string())
    bad_request("routed_experts",
                "'routed_experts' must be base64 of int32 [positions, moe layers, k] (a string "
                "per prompt)");
  std::string bytes;
  try {
    bytes = base64_decode(given.get<std::string>());
  } catch (const Error& e) {
    bad_request("routed_experts", fmt::format("'routed_experts': {}", e.what()));
  }
  const size_t per = static_cast<size_t>(limits.routing_width) * sizeof(int32_t);
  if (bytes.empty() || bytes.size() % per != 0)
    bad_request("routed_experts",
                fmt::format("'routed_experts' holds {} bytes, not whole positions of {} int32 "
                            "ids (moe layers x experts per token)",
                            bytes.size(), limits.routing_width));
  it.spec.forced_experts.resize(bytes.size() / sizeof(int32_t));
  std::memcpy(it.spec.forced_experts.data(), bytes.data(), bytes.size());
}

}  // namespace

SglangGenerateRequest parse_sglang_generate(const json& body, const SglangLimits& limits) {
  static const char* known[] = {"text",
                                "input_ids",
                                "sampling_params",
                                "return_logprob",
                                "logprob_start_len",
                                "top_logprobs_num",
                                "token_ids_logprob",
                                "return_text_in_logprobs",
                                "rid",
                                "stream",
                                "image_data",
                                "video_data",
                                "audio_data",
                                "input_embeds",
                                "lora_path",
                                "return_routed_experts",
                                "routed_experts_start_len",
                                "routed_experts"};
  for (const auto& [key, value] : body.items()) {
    bool is_known = false;
    for (const char* k : known) is_known = is_known || key == k;
    if (!is_known) ignore_unknown_field("/generate", key);
  }
  for (const char* k :
       {"image_data", "video_data", "audio_data", "input_embeds", "lora_path", "token_ids_logprob"})
    if (body.contains(k) && !body[k].is_null() && !(body[k].is_array() && body[k].empty()))
      bad_request(
          k,
          fmt::format(
              "'{}' is not supported by refit (text-only models, no LoRA, no per-id logprobs)", k));
  const Tokenizer* tok = limits.tokenizer;
  const bool has_text = body.contains("text") && !body["text"].is_null();
  const bool has_ids = body.contains("input_ids") && !body["input_ids"].is_null();
  if (has_text == has_ids)
    bad_request(has_text ? "input_ids" : "text", "give exactly one of 'text' and 'input_ids'");

  // The prompts, as token ids; single or batch.
  std::vector<std::vector<int32_t>> prompts;
  bool single = true;
  if (has_text) {
    if (!tok)
      bad_request("text", fmt::format("{} carries no tokenizer: send 'input_ids'", limits.model));
    const json& t = body["text"];
    std::vector<std::string> texts;
    if (t.is_string())
      texts.push_back(t.get<std::string>());
    else if (t.is_array() && !t.empty()) {
      single = false;
      for (const auto& x : t) {
        if (!x.is_string()) bad_request("text", "'text' must be a string or a list of strings");
        texts.push_back(x.get<std::string>());
      }
    } else
      bad_request("text", "'text' must be a string or a non-empty list of strings");
    for (const auto& x : texts) check_prompt_text_fits(x.size(), limits.prompt, "text");
    for (const auto& x : texts)
      prompts.push_back(tok->encode(x, /*add_special=*/true, /*parse_special=*/true));
  } else {
    const json& ids = body["input_ids"];
    if (!ids.is_array() || ids.empty())
      bad_request("input_ids", "'input_ids' must be a non-empty list of token ids (or of lists)");
    auto id_list = [&limits](const json& list) {
      if (!list.is_array())
        bad_request("input_ids", "'input_ids' must be a list of token ids or a list of such lists");
      check_prompt_ids_fit(list.size(), limits.prompt, "input_ids");
      std::vector<int32_t> out;
      for (const auto& v : list) {
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
          bad_request("input_ids",
                      fmt::format("token ids must be non-negative integers, got {}", v.dump()));
        out.push_back(static_cast<int32_t>(v.get<int64_t>()));
      }
      return out;
    };
    if (ids[0].is_number_integer())
      prompts.push_back(id_list(ids));
    else {
      single = false;
      for (const auto& x : ids) prompts.push_back(id_list(x));
    }
  }
  const size_t batch = prompts.size();
  const json sp_all = body.value("sampling_params", json());
  if (sp_all.is_array() && sp_all.size() != batch)
    bad_request("sampling_params", fmt::format("'sampling_params' has {} entries for {} prompts",
                                               sp_all.size(), batch));
  std::vector<SglangSampling> samplings;
  for (size_t i = 0; i < batch; ++i)
    samplings.push_back(parse_sampling(sp_all.is_array() ? sp_all[i] : sp_all, limits.defaults));
  const int n = samplings[0].n;
  for (const auto& x : samplings)
    if (x.n != n)
      bad_request("sampling_params.n",
                  "every prompt's sampling_params.n must be the same (SGLang's rule)");
  if (n > 1) single = false;
  const bool stream = body.contains("stream") && !body["stream"].is_null() &&
                      json_boolean(body["stream"], "stream");
  const bool text_in_logprobs =
      body.contains("return_text_in_logprobs") && !body["return_text_in_logprobs"].is_null() &&
      json_boolean(body["return_text_in_logprobs"], "return_text_in_logprobs");
  const json rid_field = body.value("rid", json());
  if (!rid_field.is_null() && !rid_field.is_string() && !(rid_field.is_array() && !single))
    bad_request("rid", "'rid' must be a string (or, for a batch, a list of strings)");
  if (rid_field.is_array() && rid_field.size() != batch)
    bad_request("rid", fmt::format("'rid' has {} entries for {} prompts", rid_field.size(), batch));

  const int64_t ctx = limits.context;
  const int vocab = static_cast<int>(limits.vocab);
  // SGLang's expansion: item k is prompt k % batch, sample k / batch.
  SglangGenerateRequest out;
  out.single = single;
  out.stream = stream;
  out.text_in_logprobs = text_in_logprobs;
  for (int j = 0; j < n; ++j)
    for (size_t i = 0; i < batch; ++i) {
      const size_t k = static_cast<size_t>(j) * batch + i;
      const SglangSampling& ss = samplings[i];
      SglangItem it;
      it.stop = ss.stop;
      it.choice.decode.skip_special = ss.skip_special_tokens;
      it.choice.keep_stop_string = ss.no_stop_trim;
      if (rid_field.is_string())
        it.rid = single ? rid_field.get<std::string>()
                        : fmt::format("{}_{}", rid_field.get<std::string>(), k);
      else if (rid_field.is_array()) {
        if (!rid_field[i].is_string()) bad_request("rid", "'rid' entries must be strings");
        it.rid = n > 1 ? fmt::format("{}_{}", rid_field[i].get<std::string>(), j)
                       : rid_field[i].get<std::string>();
      } else
        it.rid = random_id("gen");
      const json& rl = per_prompt(member(body, "return_logprob"), i, batch, "return_logprob");
      it.return_logprob = !rl.is_null() && json_boolean(rl, "return_logprob");
      const json& ls = per_prompt(member(body, "logprob_start_len"), i, batch, "logprob_start_len");
      it.logprob_start = ls.is_null() ? -1 : json_integer(ls, "logprob_start_len");
      const json& tn = per_prompt(member(body, "top_logprobs_num"), i, batch, "top_logprobs_num");
      it.top_logprobs = tn.is_null()
                            ? 0
                            : static_cast<int>(json_integer_in(tn, "top_logprobs_num", 0,
                                                               std::max(limits.max_logprobs, 0)));
      const int64_t n_prompt = static_cast<int64_t>(prompts[i].size());
      if (n_prompt == 0)
        bad_request(has_text ? "text" : "input_ids", "the prompt is empty (no tokens)");
      if (it.logprob_start < -1 || it.logprob_start >= std::max<int64_t>(n_prompt, 1))
        bad_request(
            "logprob_start_len",
            fmt::format(
                "'logprob_start_len' must be -1 or in 0..{} (the prompt has {} tokens), got {}",
                n_prompt - 1, n_prompt, it.logprob_start));
      if (ss.max_new_tokens > ctx ||
          n_prompt + std::max<int64_t>(ss.max_new_tokens, 1) > ctx)  // no overflow
        throw HttpError{400,
                        fmt::format("this model's maximum context length is {} tokens; the request "
                                    "has {} prompt tokens "
                                    "and max_new_tokens {}",
                                    ctx, n_prompt, ss.max_new_tokens),
                        "invalid_request_error", "sampling_params.max_new_tokens",
                        "context_length_exceeded"};
      RequestSpec& spec = it.spec;
      spec.prompt = prompts[i];
      spec.max_tokens = ss.max_new_tokens;
      spec.min_tokens = ss.min_new_tokens;
      spec.sampling = ss.sampling;
      spec.sampling.seed =
          ss.seed_given ? ss.sampling.seed + static_cast<uint64_t>(j) : std::random_device{}();
      spec.stop_tokens = ss.stop_token_ids;
      if (!ss.ignore_eos)
        spec.stop_tokens.insert(spec.stop_tokens.end(), limits.eos_ids.begin(),
                                limits.eos_ids.end());
      spec.logprob_mode = limits.logprob_mode;
      spec.top_logprobs = it.return_logprob ? std::min(it.top_logprobs, vocab) : 0;
      spec.token_logprobs = it.return_logprob;
      if (it.return_logprob && it.logprob_start >= 0) {
        spec.prompt_logprobs_from = it.logprob_start;
        spec.prompt_top_logprobs = spec.top_logprobs;
      }
      spec.restart_on_retract = !stream;
      set_routing_replay(body, i, batch, limits, it);
      out.items.push_back(std::move(it));
    }
  return out;
}

}  // namespace refit

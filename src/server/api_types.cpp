#include "server/api_types.h"

#include <fmt/format.h>

#include <set>

#include "server/chat_request.h"
#include "server/request_fields.h"

namespace refit {

nlohmann::json HttpError::body() const {
  nlohmann::json e;
  e["message"] = message;
  e["type"] = type;
  e["param"] = param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param);
  e["code"] = code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code);
  return nlohmann::json{{"error", e}};
}

void bad_request(const std::string& param, const std::string& message) {
  throw HttpError{400, message, "invalid_request_error", param, {}};
}

double json_number(const nlohmann::json& j, const std::string& name) {
  if (!j.is_number())
    bad_request(name, fmt::format("'{}' must be a number, got {}", name, j.dump()));
  return j.get<double>();
}

int64_t json_integer(const nlohmann::json& j, const std::string& name) {
  // 2^64 and beyond parse as floats; 2^63..2^64-1 as unsigned, which int64 cannot hold.
  if (!j.is_number_integer() || (j.is_number_unsigned() && j.get<uint64_t>() > uint64_t{INT64_MAX}))
    bad_request(
        name, fmt::format("'{}' must be an integer (of at most 63 bits), got {}", name, j.dump()));
  return j.get<int64_t>();
}

float json_float_in(const nlohmann::json& j, const std::string& name, double lo, double hi) {
  const double v = json_number(j, name);
  if (!(v >= lo && v <= hi))
    bad_request(name, fmt::format("'{}' must be in [{}, {}], got {}", name, lo, hi, j.dump()));
  return static_cast<float>(v);
}

int64_t json_integer_in(const nlohmann::json& j, const std::string& name, int64_t lo, int64_t hi) {
  const int64_t v = json_integer(j, name);
  if (v < lo || v > hi)
    bad_request(name, fmt::format("'{}' must be in {}..{}, got {}", name, lo, hi, v));
  return v;
}

bool json_boolean(const nlohmann::json& j, const std::string& name) {
  if (!j.is_boolean())
    bad_request(name, fmt::format("'{}' must be true or false, got {}", name, j.dump()));
  return j.get<bool>();
}

namespace {

std::vector<int32_t> id_list(const nlohmann::json& j, int64_t context) {
  if (context > 0 && j.size() >= static_cast<size_t>(context))
    throw HttpError{400,
                    fmt::format("this model's maximum context length is {} tokens; the prompt has "
                                "{} token ids and leaves no room for output",
                                context, j.size()),
                    "invalid_request_error", "prompt", "context_length_exceeded"};
  std::vector<int32_t> ids;
  for (const auto& v : j) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
      bad_request(
          "prompt",
          fmt::format("token ids in 'prompt' must be non-negative integers, got {}", v.dump()));
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return ids;
}

template <class Json>
Json parse_body(const std::string& body) {
  // The depth is checked while parsing, before anything recurses over the value (dumping
  // a million-deep array for an error message would overflow the stack). No request of
  // any route nests deeper than a few levels.
  static constexpr int kMaxDepth = 64;
  std::string last_key;  // for an error inside a value: the field it belongs to
  const auto depth_limit = [&last_key](int depth, typename Json::parse_event_t event,
                                       Json& parsed) {
    if (event == Json::parse_event_t::key && parsed.is_string())
      last_key = parsed.template get<std::string>();
    if (depth > kMaxDepth &&
        (event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start))
      throw HttpError{400,
                      fmt::format("the request body nests deeper than {} levels", kMaxDepth),
                      "invalid_request_error",
                      {},
                      {}};
    return true;
  };
  try {
    return Json::parse(body, depth_limit);
  } catch (const typename Json::parse_error& e) {
    throw HttpError{400,
                    fmt::format("the request body is not valid JSON: {}", e.what()),
                    "invalid_request_error",
                    {},
                    {}};
  } catch (const typename Json::out_of_range& e) {  // a number beyond double, e.g. 1e999
    throw HttpError{400,
                    fmt::format("'{}' holds a number out of range: {}",
                                last_key.empty() ? "the body" : last_key, e.what()),
                    "invalid_request_error",
                    last_key,
                    {}};
  }
}

}  // namespace

nlohmann::json parse_json_body(const std::string& body) { return parse_body<nlohmann::json>(body); }

nlohmann::ordered_json parse_json_body_ordered(const std::string& body) {
  return parse_body<nlohmann::ordered_json>(body);
}

GenerationParams parse_generation_request(const nlohmann::json& body, bool chat, int max_logprobs,
                                          const nlohmann::ordered_json* ordered_body,
                                          int64_t context) {
  if (!body.is_object()) bad_request({}, "the request body must be a JSON object");
  static const std::set<std::string> common = {"model",
                                               "max_tokens",
                                               "temperature",
                                               "top_p",
                                               "top_k",
                                               "min_p",
                                               "repetition_penalty",
                                               "seed",
                                               "stop",
                                               "n",
                                               "stream",
                                               "stream_options",
                                               "logprobs",
                                               "user",
                                               "presence_penalty",
                                               "frequency_penalty",
                                               "logit_bias",
                                               "ignore_eos",
                                               "min_tokens",
                                               "stop_token_ids",
                                               "skip_special_tokens",
                                               "include_stop_str_in_output",
                                               "return_tokens_as_token_ids",
                                               "prompt_logprobs",
                                               "return_token_ids",
                                               "add_special_tokens",
                                               "return_routed_experts"};
  static const std::set<std::string> completions_only = {"prompt", "echo", "best_of", "suffix"};
  static const std::set<std::string> chat_only = [] {
    std::set<std::string> keys{"top_logprobs", "max_completion_tokens"};
    keys.insert(kChatInputFields, kChatInputFields + kChatInputFieldCount);
    return keys;
  }();
  GenerationParams p;
  p.chat = chat;
  for (const auto& [key, value] : body.items()) {
    const bool known =
        common.count(key) || (chat ? chat_only.count(key) : completions_only.count(key));
    if (!known) ignore_unknown_field(chat ? "/v1/chat/completions" : "/v1/completions", key);
  }
  if (body.contains("model")) {
    if (!body["model"].is_string()) bad_request("model", "'model' must be a string");
    p.model = body["model"].get<std::string>();
  }
  if (chat) {
    p.chat_input = ordered_body ? parse_chat_input(*ordered_body) : parse_chat_input(body);
  } else {
    if (!body.contains("prompt")) bad_request("prompt", "'prompt' is required");
    const auto& pr = body["prompt"];
    if (pr.is_string()) {
      p.prompt_texts.push_back(pr.get<std::string>());
    } else if (pr.is_array() && !pr.empty() && pr[0].is_number_integer()) {
      p.prompt_ids.push_back(id_list(pr, context));
    } else if (pr.is_array() && !pr.empty()) {
      for (const auto& item : pr) {
        if (item.is_string())
          p.prompt_texts.push_back(item.get<std::string>());
        else if (item.is_array())
          p.prompt_ids.push_back(id_list(item, context));
        else
          bad_request("prompt", "'prompt' must be a string, a list of strings, or token ids");
      }
      if (!p.prompt_texts.empty() && !p.prompt_ids.empty())
        bad_request("prompt", "'prompt' mixes strings and token-id lists");
    } else {
      bad_request("prompt", "'prompt' must be a non-empty string, list of strings, or token ids");
    }
  }
  const char* max_key =
      chat && body.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (body.contains(max_key) && !body[max_key].is_null()) {
    const int64_t m = json_integer(body[max_key], max_key);
    if (m < 0) bad_request(max_key, fmt::format("'{}' must be >= 0, got {}", max_key, m));
    p.max_tokens = m;
  }
  p.max_tokens_null = body.contains(max_key) && body[max_key].is_null();
  // Returns whether the request set the field (null is unset, as in vLLM's pydantic models).
  // Ranges are checked on the JSON number before it narrows to float.
  auto opt_float = [&](const char* key, float& field, double lo, double hi) {
    if (!body.contains(key) || body[key].is_null()) return false;
    field = json_float_in(body[key], key, lo, hi);
    return true;
  };
  constexpr double kFloatMax = 3.4028234663852886e38;
  SamplingFieldsGiven& given = p.sampling_given;
  p.sampling.temperature = 1.0f;  // OpenAI's default
  given.temperature = opt_float("temperature", p.sampling.temperature, 0, 100);
  given.top_p = opt_float("top_p", p.sampling.top_p, 0, 1);
  if (!(p.sampling.top_p > 0))
    bad_request("top_p", fmt::format("'top_p' must be in (0, 1], got {}", p.sampling.top_p));
  given.min_p = opt_float("min_p", p.sampling.min_p, 0, 1);
  given.repetition_penalty =
      opt_float("repetition_penalty", p.sampling.repetition_penalty, 0, kFloatMax);
  if (!(p.sampling.repetition_penalty > 0))
    bad_request("repetition_penalty", "'repetition_penalty' must be > 0");
  if (body.contains("top_k") && !body["top_k"].is_null()) {
    // vLLM: -1 (or 0) means off; a k beyond the vocabulary keeps every token.
    const int64_t k = json_integer_in(body["top_k"], "top_k", -1, INT64_MAX);
    p.sampling.top_k = k < 0 ? 0 : static_cast<int>(std::min<int64_t>(k, INT32_MAX));
    given.top_k = true;
  }
  if (body.contains("seed") && !body["seed"].is_null()) {
    const auto& s = body["seed"];
    if (!s.is_number_integer()) bad_request("seed", "'seed' must be an integer");
    p.sampling.seed =
        s.is_number_unsigned() ? s.get<uint64_t>() : static_cast<uint64_t>(s.get<int64_t>());
    p.seed_given = true;
  }
  if (body.contains("stop") && !body["stop"].is_null()) {
    const auto& s = body["stop"];
    if (s.is_string())
      p.stop.push_back(s.get<std::string>());
    else if (s.is_array()) {
      for (const auto& x : s) {
        if (!x.is_string()) bad_request("stop", "'stop' must be a string or a list of strings");
        p.stop.push_back(x.get<std::string>());
      }
    } else {
      bad_request("stop", "'stop' must be a string or a list of strings");
    }
    if (p.stop.size() > 4) bad_request("stop", "at most 4 stop sequences");
    for (const auto& x : p.stop)
      if (x.empty()) bad_request("stop", "stop sequences must not be empty");
  }
  if (body.contains("n") && !body["n"].is_null()) {
    const int64_t n = json_integer(body["n"], "n");
    if (n < 1 || n > 16) bad_request("n", fmt::format("'n' must be in 1..16, got {}", n));
    p.n = static_cast<int>(n);
  }
  if (body.contains("best_of") && !body["best_of"].is_null() &&
      json_integer(body["best_of"], "best_of") != p.n)
    bad_request("best_of", "'best_of' other than n is not supported");
  if (body.contains("stream") && !body["stream"].is_null())
    p.stream = json_boolean(body["stream"], "stream");
  if (body.contains("stream_options") && !body["stream_options"].is_null()) {
    const auto& so = body["stream_options"];
    if (!so.is_object()) bad_request("stream_options", "'stream_options' must be an object");
    for (const auto& [k, v] : so.items()) {
      if (k != "include_usage")
        bad_request("stream_options." + k, fmt::format("unknown field 'stream_options.{}'", k));
      p.include_usage = json_boolean(v, "stream_options.include_usage");
    }
  }
  if (chat) {
    const bool want = body.contains("logprobs") && !body["logprobs"].is_null() &&
                      json_boolean(body["logprobs"], "logprobs");
    int64_t top = 0;
    if (body.contains("top_logprobs") && !body["top_logprobs"].is_null()) {
      top = json_integer(body["top_logprobs"], "top_logprobs");
      if (top < 0 || top > max_logprobs)
        bad_request("top_logprobs",
                    fmt::format("'top_logprobs' must be in 0..{} (--max-logprobs)", max_logprobs));
      if (!want) bad_request("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    }
    p.logprobs = want ? static_cast<int>(top) : -1;
  } else if (body.contains("logprobs") && !body["logprobs"].is_null()) {
    const int64_t lp = json_integer(body["logprobs"], "logprobs");
    if (lp < 0 || lp > max_logprobs)
      bad_request("logprobs", fmt::format("'logprobs' must be in 0..{} (--max-logprobs), got {}",
                                          max_logprobs, lp));
    p.logprobs = static_cast<int>(lp);
  }
  opt_float("presence_penalty", p.sampling.presence_penalty, -2, 2);
  opt_float("frequency_penalty", p.sampling.frequency_penalty, -2, 2);
  if (body.contains("min_tokens") && !body["min_tokens"].is_null()) {
    p.min_tokens = json_integer(body["min_tokens"], "min_tokens");
    if (p.min_tokens < 0)
      bad_request("min_tokens", fmt::format("'min_tokens' must be >= 0, got {}", p.min_tokens));
    if (p.max_tokens && p.min_tokens > *p.max_tokens)  // vLLM's rule
      bad_request("min_tokens", fmt::format("'min_tokens' ({}) must be at most max_tokens ({})",
                                            p.min_tokens, *p.max_tokens));
  }
  if (body.contains("stop_token_ids") && !body["stop_token_ids"].is_null()) {
    const auto& ids = body["stop_token_ids"];
    if (!ids.is_array())
      bad_request("stop_token_ids", "'stop_token_ids' must be a list of token ids");
    for (const auto& v : ids) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
        bad_request("stop_token_ids",
                    fmt::format("'stop_token_ids' entries must be non-negative integers, got {}",
                                v.dump()));
      p.stop_token_ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
    }
  }
  for (auto [key, field] :
       {std::pair<const char*, bool*>{"skip_special_tokens", &p.skip_special_tokens},
        {"include_stop_str_in_output", &p.include_stop_str_in_output},
        {"return_tokens_as_token_ids", &p.return_tokens_as_token_ids}})
    if (body.contains(key) && !body[key].is_null()) *field = json_boolean(body[key], key);
  if (body.contains("prompt_logprobs") && !body["prompt_logprobs"].is_null()) {
    const int64_t lp = json_integer(body["prompt_logprobs"], "prompt_logprobs");
    if (lp < 0 || lp > max_logprobs)
      bad_request("prompt_logprobs",
                  fmt::format("'prompt_logprobs' must be in 0..{} (--max-logprobs), got {}",
                              max_logprobs, lp));
    p.prompt_logprobs = static_cast<int>(lp);
  }
  if (body.contains("logit_bias") && !body["logit_bias"].is_null() && !body["logit_bias"].empty())
    bad_request("logit_bias", "'logit_bias' is not supported");
  if (body.contains("suffix") && !body["suffix"].is_null())
    bad_request("suffix", "'suffix' is not supported");
  if (body.contains("echo") && !body["echo"].is_null()) p.echo = json_boolean(body["echo"], "echo");
  if (body.contains("ignore_eos") && !body["ignore_eos"].is_null())
    p.ignore_eos = json_boolean(body["ignore_eos"], "ignore_eos");
  if (body.contains("user") && !body["user"].is_null() && !body["user"].is_string())
    bad_request("user", "'user' must be a string");
  if (body.contains("return_token_ids") && !body["return_token_ids"].is_null())
    p.return_token_ids = json_boolean(body["return_token_ids"], "return_token_ids");
  // SGLang's extra_body field (vLLM returns them for every request under its server flag).
  if (body.contains("return_routed_experts") && !body["return_routed_experts"].is_null())
    p.return_routed_experts = json_boolean(body["return_routed_experts"], "return_routed_experts");
  p.add_special_tokens = !chat;
  if (body.contains("add_special_tokens") && !body["add_special_tokens"].is_null())
    p.add_special_tokens = json_boolean(body["add_special_tokens"], "add_special_tokens");
  return p;
}

}  // namespace refit

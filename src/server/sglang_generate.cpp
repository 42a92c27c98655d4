// SGLang's native generation route, POST /generate, as slime, AReaL and verl call it
// (sglang python/sglang/srt/managers/io_struct.py GenerateReqInput; the response as
// tokenizer_manager.py builds it; finish reasons as schedule_batch.py's FINISH_*.to_json).
//
//   {text | input_ids (one, or a batch), sampling_params (one, or one per prompt),
//    return_logprob, logprob_start_len, top_logprobs_num, return_text_in_logprobs, rid,
//    stream}
//   -> {text, output_ids, meta_info {id, finish_reason {type: stop|length|abort, matched |
//       length | message}, prompt_tokens, completion_tokens, cached_tokens, weight_version,
//       e2e_latency, input_token_logprobs, output_token_logprobs, input_top_logprobs,
//       output_top_logprobs (each entry [logprob, token_id, text | null]),
//       weight_versions (refit: each output token's)}}   (a list for a batch)
//
// A batch with n > 1 expands as SGLang does: the prompts repeated n times
// ([p0, p1, p0, p1]); a string rid becomes rid_0, rid_1, ...; sample j of a prompt draws
// with sampling_seed + j (one seed gives the same tokens at any batch size).
//
// Logprobs follow SGLang's sampler unless --logprobs-mode says otherwise: greedy
// requests report log_softmax of the logits, sampled ones log_softmax of the
// temperature-scaled (and penalised) logits, before top-k/top-p truncation. Input logprobs
// cover prompt positions from logprob_start_len (-1, the default: none); position 0 has
// no logprob (null), as in SGLang. max_new_tokens 0 scores a prompt without generating.
//
// Streaming (stream: true) sends SGLang's server-sent events: every chunk carries the
// whole text, output_ids and meta_info so far (SGLang's default, without
// --incremental-streaming-output), then "data: [DONE]".
#include <fmt/format.h>

#include <chrono>
#include <random>

#include "server/api_types.h"
#include "server/choice_stream.h"
#include "server/client_connection.h"
#include "server/http_server.h"
#include "server/http_util.h"
#include "server/request_fields.h"

namespace refit {

using nlohmann::json;

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw HttpError{400, message, "invalid_request_error", param, {}};
}

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
};

double num(const json& v, const std::string& name) {
  if (!v.is_number()) bad(name, fmt::format("'{}' must be a number, got {}", name, v.dump()));
  return v.get<double>();
}
int64_t integer(const json& v, const std::string& name) {
  if (!v.is_number_integer()) bad(name, fmt::format("'{}' must be an integer, got {}", name, v.dump()));
  return v.get<int64_t>();
}
bool boolean(const json& v, const std::string& name) {
  if (!v.is_boolean()) bad(name, fmt::format("'{}' must be true or false, got {}", name, v.dump()));
  return v.get<bool>();
}

SglangSampling parse_sampling(const json& sp) {
  SglangSampling out;
  out.sampling.temperature = 1.0f;  // SGLang's default
  out.sampling.repeat_last_n = -1;  // penalties see the whole sequence, as in SGLang
  if (sp.is_null()) return out;
  if (!sp.is_object()) bad("sampling_params", "'sampling_params' must be an object (or a list of objects)");
  static const char* known[] = {"max_new_tokens", "min_new_tokens", "stop", "stop_token_ids", "temperature", "top_p",
                                "top_k", "min_p", "ignore_eos", "skip_special_tokens", "spaces_between_special_tokens",
                                "no_stop_trim", "repetition_penalty", "frequency_penalty", "presence_penalty", "n",
                                "sampling_seed", "json_schema", "regex", "ebnf", "structural_tag", "logit_bias",
                                "custom_params", "stream_interval"};
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
      out.max_new_tokens = integer(value, name);
      if (out.max_new_tokens < 0) bad(name, fmt::format("'{}' must be >= 0, got {}", name, out.max_new_tokens));
    } else if (key == "min_new_tokens") {
      out.min_new_tokens = integer(value, name);
      if (out.min_new_tokens < 0) bad(name, fmt::format("'{}' must be >= 0, got {}", name, out.min_new_tokens));
    } else if (key == "stop") {
      if (value.is_string()) out.stop.push_back(value.get<std::string>());
      else if (value.is_array())
        for (const auto& x : value) {
          if (!x.is_string()) bad(name, "'sampling_params.stop' must be a string or a list of strings");
          out.stop.push_back(x.get<std::string>());
        }
      else bad(name, "'sampling_params.stop' must be a string or a list of strings");
      for (const auto& x : out.stop)
        if (x.empty()) bad(name, "stop strings must not be empty");
    } else if (key == "stop_token_ids") {
      if (!value.is_array()) bad(name, "'sampling_params.stop_token_ids' must be a list of token ids");
      for (const auto& x : value) {
        if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > INT32_MAX)
          bad(name, fmt::format("stop token ids must be non-negative integers, got {}", x.dump()));
        out.stop_token_ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
      }
    } else if (key == "temperature") {
      out.sampling.temperature = static_cast<float>(num(value, name));
      if (!(out.sampling.temperature >= 0)) bad(name, fmt::format("'{}' must be >= 0, got {}", name, value.dump()));
    } else if (key == "top_p") {
      out.sampling.top_p = static_cast<float>(num(value, name));
      if (!(out.sampling.top_p > 0 && out.sampling.top_p <= 1)) bad(name, "'sampling_params.top_p' must be in (0, 1]");
    } else if (key == "top_k") {
      const int64_t k = integer(value, name);
      if (k < -1 || k == 0) bad(name, fmt::format("'{}' must be -1 (off) or >= 1, got {}", name, k));
      out.sampling.top_k = k < 0 ? 0 : static_cast<int>(std::min<int64_t>(k, INT32_MAX));
    } else if (key == "min_p") {
      out.sampling.min_p = static_cast<float>(num(value, name));
      if (!(out.sampling.min_p >= 0 && out.sampling.min_p <= 1)) bad(name, "'sampling_params.min_p' must be in [0, 1]");
    } else if (key == "ignore_eos") {
      out.ignore_eos = boolean(value, name);
    } else if (key == "skip_special_tokens") {
      out.skip_special_tokens = boolean(value, name);
    } else if (key == "spaces_between_special_tokens") {
      boolean(value, name);  // refit's decoder never inserts spaces between special tokens
    } else if (key == "no_stop_trim") {
      out.no_stop_trim = boolean(value, name);
    } else if (key == "repetition_penalty") {
      out.sampling.repetition_penalty = static_cast<float>(num(value, name));
      if (!(out.sampling.repetition_penalty > 0 && out.sampling.repetition_penalty <= 2))
        bad(name, "'sampling_params.repetition_penalty' must be in (0, 2]");
    } else if (key == "frequency_penalty") {
      out.sampling.frequency_penalty = static_cast<float>(num(value, name));
      if (!(out.sampling.frequency_penalty >= -2 && out.sampling.frequency_penalty <= 2))
        bad(name, "'sampling_params.frequency_penalty' must be in [-2, 2]");
    } else if (key == "presence_penalty") {
      out.sampling.presence_penalty = static_cast<float>(num(value, name));
      if (!(out.sampling.presence_penalty >= -2 && out.sampling.presence_penalty <= 2))
        bad(name, "'sampling_params.presence_penalty' must be in [-2, 2]");
    } else if (key == "n") {
      const int64_t n = integer(value, name);
      if (n < 1 || n > 64) bad(name, fmt::format("'{}' must be in 1..64, got {}", name, n));
      out.n = static_cast<int>(n);
    } else if (key == "sampling_seed") {
      if (!value.is_number_integer()) bad(name, "'sampling_params.sampling_seed' must be an integer");
      out.sampling.seed = value.is_number_unsigned() ? value.get<uint64_t>() : static_cast<uint64_t>(value.get<int64_t>());
      out.seed_given = true;
    } else if (key == "json_schema" || key == "regex" || key == "ebnf" || key == "structural_tag") {
      bad(name, fmt::format("'{}' (constrained decoding) is not supported by refit", name));
    } else if (key == "logit_bias") {
      if (!value.empty()) bad(name, "'sampling_params.logit_bias' is not supported by refit");
    }
    // custom_params, stream_interval: accepted; refit has no custom logit processors and
    // streams every token.
  }
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
  if (v.size() != batch) bad(name, fmt::format("'{}' has {} entries for {} prompts", name, v.size(), batch));
  return v[i];
}

json finish_reason_json(const ChoiceStream& c, const RequestSpec& spec) {
  const std::string& r = c.finish_reason();
  if (r.empty()) return nullptr;
  if (r == "stop") {
    if (c.stopped_by_string()) return json{{"type", "stop"}, {"matched", c.matched_stop()}};
    return json{{"type", "stop"}, {"matched", c.tokens().empty() ? json(nullptr) : json(c.tokens().back())}};
  }
  if (r == "length") return json{{"type", "length"}, {"length", spec.max_tokens}};
  if (r == "abort") return json{{"type", "abort"}, {"message", "aborted (/abort_request, a pause in abort mode, or the client left)"}};
  return json{{"type", "abort"}, {"message", c.error()}, {"status_code", c.busy() ? 503 : 500}};
}

struct Item {
  std::string rid;
  RequestSpec spec;
  std::unique_ptr<ChoiceStream> choice;
  bool return_logprob = false;
  int64_t logprob_start = -1;
  int top_logprobs = 0;
};

}  // namespace

void HttpServer::sglang_generate_routes() {
  httplib::Server& s = *http_;
  auto generate = [this](const httplib::Request& req, httplib::Response& res) {
    const double t0 = monotonic_seconds();
    const json body = object_body(req);
    static const char* known[] = {"text", "input_ids", "sampling_params", "return_logprob", "logprob_start_len",
                                  "top_logprobs_num", "token_ids_logprob", "return_text_in_logprobs", "rid", "stream",
                                  "image_data", "video_data", "audio_data", "input_embeds", "lora_path"};
    for (const auto& [key, value] : body.items()) {
      bool is_known = false;
      for (const char* k : known) is_known = is_known || key == k;
      if (!is_known) ignore_unknown_field("/generate", key);
    }
    for (const char* k : {"image_data", "video_data", "audio_data", "input_embeds", "lora_path", "token_ids_logprob"})
      if (body.contains(k) && !body[k].is_null() && !(body[k].is_array() && body[k].empty()))
        bad(k, fmt::format("'{}' is not supported by refit (text-only models, no LoRA, no per-id logprobs)", k));
    check_can_generate();
    const Tokenizer* tok = engine_.tokenizer();
    const bool has_text = body.contains("text") && !body["text"].is_null();
    const bool has_ids = body.contains("input_ids") && !body["input_ids"].is_null();
    if (has_text == has_ids) bad(has_text ? "input_ids" : "text", "give exactly one of 'text' and 'input_ids'");

    // The prompts, as token ids; single or batch.
    std::vector<std::vector<int32_t>> prompts;
    bool single = true;
    if (has_text) {
      if (!tok) bad("text", fmt::format("{} carries no tokenizer: send 'input_ids'", engine_.description()));
      const json& t = body["text"];
      std::vector<std::string> texts;
      if (t.is_string()) texts.push_back(t.get<std::string>());
      else if (t.is_array() && !t.empty()) {
        single = false;
        for (const auto& x : t) {
          if (!x.is_string()) bad("text", "'text' must be a string or a list of strings");
          texts.push_back(x.get<std::string>());
        }
      } else bad("text", "'text' must be a string or a non-empty list of strings");
      for (const auto& x : texts) prompts.push_back(tok->encode(x, /*add_special=*/true, /*parse_special=*/true));
    } else {
      const json& ids = body["input_ids"];
      if (!ids.is_array() || ids.empty()) bad("input_ids", "'input_ids' must be a non-empty list of token ids (or of lists)");
      auto id_list = [](const json& list) {
        if (!list.is_array()) bad("input_ids", "'input_ids' must be a list of token ids or a list of such lists");
        std::vector<int32_t> out;
        for (const auto& v : list) {
          if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
            bad("input_ids", fmt::format("token ids must be non-negative integers, got {}", v.dump()));
          out.push_back(static_cast<int32_t>(v.get<int64_t>()));
        }
        return out;
      };
      if (ids[0].is_number_integer()) prompts.push_back(id_list(ids));
      else {
        single = false;
        for (const auto& x : ids) prompts.push_back(id_list(x));
      }
    }
    const size_t batch = prompts.size();
    const json sp_all = body.value("sampling_params", json());
    if (sp_all.is_array() && sp_all.size() != batch)
      bad("sampling_params", fmt::format("'sampling_params' has {} entries for {} prompts", sp_all.size(), batch));
    std::vector<SglangSampling> samplings;
    for (size_t i = 0; i < batch; ++i) samplings.push_back(parse_sampling(sp_all.is_array() ? sp_all[i] : sp_all));
    const int n = samplings[0].n;
    for (const auto& x : samplings)
      if (x.n != n) bad("sampling_params.n", "every prompt's sampling_params.n must be the same (SGLang's rule)");
    if (n > 1) single = false;
    const bool stream = body.contains("stream") && !body["stream"].is_null() && boolean(body["stream"], "stream");
    const bool text_in_logprobs = body.contains("return_text_in_logprobs") && !body["return_text_in_logprobs"].is_null() &&
                                  boolean(body["return_text_in_logprobs"], "return_text_in_logprobs");
    const json rid_field = body.value("rid", json());
    if (!rid_field.is_null() && !rid_field.is_string() && !(rid_field.is_array() && !single))
      bad("rid", "'rid' must be a string (or, for a batch, a list of strings)");
    if (rid_field.is_array() && rid_field.size() != batch)
      bad("rid", fmt::format("'rid' has {} entries for {} prompts", rid_field.size(), batch));

    const int64_t ctx = scheduler_->max_context();
    const int vocab = static_cast<int>(engine_.config().vocab_size);
    const int32_t eos = tok ? tok->vocab().eos() : engine_.config().eos_id;
    // SGLang's expansion: item k is prompt k % batch, sample k / batch.
    std::vector<Item> items;
    for (int j = 0; j < n; ++j)
      for (size_t i = 0; i < batch; ++i) {
        const size_t k = static_cast<size_t>(j) * batch + i;
        const SglangSampling& ss = samplings[i];
        Item it;
        if (rid_field.is_string()) it.rid = single ? rid_field.get<std::string>() : fmt::format("{}_{}", rid_field.get<std::string>(), k);
        else if (rid_field.is_array()) {
          if (!rid_field[i].is_string()) bad("rid", "'rid' entries must be strings");
          it.rid = n > 1 ? fmt::format("{}_{}", rid_field[i].get<std::string>(), j) : rid_field[i].get<std::string>();
        } else it.rid = random_id("gen");
        const json& rl = per_prompt(member(body, "return_logprob"), i, batch, "return_logprob");
        it.return_logprob = !rl.is_null() && boolean(rl, "return_logprob");
        const json& ls = per_prompt(member(body, "logprob_start_len"), i, batch, "logprob_start_len");
        it.logprob_start = ls.is_null() ? -1 : integer(ls, "logprob_start_len");
        const json& tn = per_prompt(member(body, "top_logprobs_num"), i, batch, "top_logprobs_num");
        it.top_logprobs = tn.is_null() ? 0 : static_cast<int>(std::clamp<int64_t>(integer(tn, "top_logprobs_num"), -1, INT32_MAX));
        if (it.top_logprobs < 0 || it.top_logprobs > max_logprobs())
          bad("top_logprobs_num", fmt::format("'top_logprobs_num' must be in 0..{}, got {}", max_logprobs(), it.top_logprobs));
        const int64_t n_prompt = static_cast<int64_t>(prompts[i].size());
        if (n_prompt == 0) bad(has_text ? "text" : "input_ids", "the prompt is empty (no tokens)");
        if (it.logprob_start < -1 || it.logprob_start >= std::max<int64_t>(n_prompt, 1))
          bad("logprob_start_len",
              fmt::format("'logprob_start_len' must be -1 or in 0..{} (the prompt has {} tokens), got {}", n_prompt - 1,
                          n_prompt, it.logprob_start));
        if (n_prompt + std::max<int64_t>(ss.max_new_tokens, 1) > ctx)
          throw HttpError{400,
                          fmt::format("this model's maximum context length is {} tokens; the request has {} prompt tokens "
                                      "and max_new_tokens {}",
                                      ctx, n_prompt, ss.max_new_tokens),
                          "invalid_request_error", "sampling_params.max_new_tokens", "context_length_exceeded"};
        RequestSpec& spec = it.spec;
        spec.prompt = prompts[i];
        spec.max_tokens = ss.max_new_tokens;
        spec.min_tokens = ss.min_new_tokens;
        spec.sampling = ss.sampling;
        spec.sampling.seed = ss.seed_given ? ss.sampling.seed + static_cast<uint64_t>(j) : std::random_device{}();
        spec.stop_tokens = ss.stop_token_ids;
        if (!ss.ignore_eos && eos >= 0) spec.stop_tokens.push_back(eos);
        spec.logprob_mode = options_.logprobs_mode_explicit ? options_.logprobs_mode : LogprobMode::sglang;
        spec.top_logprobs = it.return_logprob ? std::min(it.top_logprobs, vocab) : 0;
        if (it.return_logprob && it.logprob_start >= 0) {
          spec.prompt_logprobs_from = it.logprob_start;
          spec.prompt_top_logprobs = spec.top_logprobs;
        }
        spec.restart_on_retract = !stream;
        items.push_back(std::move(it));
      }

    std::vector<std::shared_ptr<RequestHandle>> handles;
    std::vector<std::unique_ptr<RequestRegistry::Entry>> registered;
    try {
      for (size_t k = 0; k < items.size(); ++k) {
        Item& it = items[k];
        const SglangSampling& ss = samplings[k % batch];
        auto h = scheduler_->submit(it.spec);
        handles.push_back(h);
        registered.push_back(std::make_unique<RequestRegistry::Entry>(registry_.add(it.rid, {h})));
        ChoiceOptions co;
        co.decode.skip_special = ss.skip_special_tokens;
        co.keep_stop_string = ss.no_stop_trim;
        it.choice = std::make_unique<ChoiceStream>(h, tok, ss.stop, static_cast<int64_t>(it.spec.prompt.size()), co);
      }
    } catch (...) {
      for (auto& h : handles) h->cancel();
      throw;
    }

    auto piece_text = [tok](int32_t id) -> json {
      if (!tok) return nullptr;
      const int32_t one[1] = {id};
      DecodeOptions o;
      o.skip_special = false;
      return tok->decode(one, o);
    };
    auto entry = [piece_text](float lp, int32_t id, bool with_text) {
      return json::array({lp, id, with_text ? piece_text(id) : json(nullptr)});
    };
    auto tops = [entry](const std::vector<TokenLogprob>& top, bool with_text) {
      json out = json::array();
      for (const TokenLogprob& t : top) out.push_back(entry(t.logprob, t.token, with_text));
      return out;
    };
    // One item's response object (whole so far).
    // Captures by value: the streaming provider calls it after this handler returned.
    auto item_json = [this, t0, text_in_logprobs, piece_text, entry, tops](const Item& it) {
      const ChoiceStream& c = *it.choice;
      json meta{{"id", it.rid},
                {"finish_reason", c.done() ? finish_reason_json(c, it.spec) : json(nullptr)},
                {"prompt_tokens", it.spec.prompt.size()},
                {"completion_tokens", c.tokens().size()},
                {"cached_tokens", c.cached_tokens()},
                {"weight_version", c.versions().empty() ? current_version_label() : version_label(c.versions().back())},
                {"e2e_latency", monotonic_seconds() - t0}};
      json versions = json::array();
      for (uint64_t v : c.versions()) versions.push_back(version_label(v));
      meta["weight_versions"] = versions;
      if (it.return_logprob) {
        json in_lp = json::array(), in_top = json::array();
        if (it.logprob_start >= 0) {
          if (it.logprob_start == 0) {  // nothing predicts the first token
            in_lp.push_back(json::array({nullptr, it.spec.prompt[0], text_in_logprobs ? piece_text(it.spec.prompt[0]) : json(nullptr)}));
            in_top.push_back(nullptr);
          }
          for (const TokenEvent& t : c.prompt_logprobs()) {
            in_lp.push_back(entry(t.logprob, t.token, text_in_logprobs));
            in_top.push_back(it.top_logprobs > 0 ? tops(t.top, text_in_logprobs) : json(nullptr));
          }
        }
        json out_lp = json::array(), out_top = json::array();
        for (size_t i = 0; i < c.tokens().size(); ++i) {
          out_lp.push_back(entry(c.logprobs()[i], c.tokens()[i], text_in_logprobs));
          out_top.push_back(it.top_logprobs > 0 ? tops(c.top()[i], text_in_logprobs) : json(nullptr));
        }
        meta["input_token_logprobs"] = in_lp;
        meta["output_token_logprobs"] = out_lp;
        meta["input_top_logprobs"] = in_top;
        meta["output_top_logprobs"] = out_top;
      }
      return json{{"text", c.text()}, {"output_ids", c.tokens()}, {"meta_info", meta}};
    };
    auto all_done = [&items] {
      for (const Item& it : items)
        if (!it.choice->done()) return false;
      return true;
    };
    // Applies the next event of any unfinished item; returns its index or -1.
    auto poll = [&items](std::chrono::milliseconds wait) -> int {
      for (size_t i = 0; i < items.size(); ++i) {
        ChoiceStream& c = *items[i].choice;
        if (c.done()) continue;
        RequestHandle::Event e;
        if (c.handle().next(e, items.size() == 1 ? wait : std::chrono::milliseconds(2))) {
          c.apply(e);
          return static_cast<int>(i);
        }
      }
      return -1;
    };

    if (!stream) {
      const ClientConnection client(req);
      while (!all_done()) {
        poll(std::chrono::milliseconds(100));
        if (client.closed()) {
          for (auto& h : handles) h->cancel();
          res.status = 499;
          return;
        }
      }
      json out = json::array();
      for (const Item& it : items) out.push_back(item_json(it));
      send_json(res, 200, single ? out[0] : out);
      return;
    }

    // Streaming: the state lives on in the content provider.
    struct StreamState {
      std::vector<Item> items;
      std::vector<std::shared_ptr<RequestHandle>> handles;
      std::vector<std::unique_ptr<RequestRegistry::Entry>> registered;
    };
    auto st = std::make_shared<StreamState>();
    st->items = std::move(items);
    st->handles = std::move(handles);
    st->registered = std::move(registered);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider("text/event-stream", [st, item_json, single](size_t, httplib::DataSink& sink) {
      auto cancel_all = [&] {
        for (auto& h : st->handles) h->cancel();
      };
      auto done = [&] {
        for (const Item& it : st->items)
          if (!it.choice->done()) return false;
        return true;
      };
      while (!done()) {
        int index = -1;
        for (size_t i = 0; i < st->items.size() && index < 0; ++i) {
          ChoiceStream& c = *st->items[i].choice;
          if (c.done()) continue;
          RequestHandle::Event e;
          if (c.handle().next(e, std::chrono::milliseconds(st->items.size() == 1 ? 100 : 2))) {
            c.apply(e);
            if (e.kind == RequestHandle::Event::token || c.done()) index = static_cast<int>(i);
          }
        }
        if (index < 0) {
          if (!sink.is_writable()) {
            cancel_all();
            return false;
          }
          continue;
        }
        json j = item_json(st->items[static_cast<size_t>(index)]);
        if (!single) j["index"] = index;
        const std::string line = "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
        if (!sink.write(line.data(), line.size())) {
          cancel_all();
          return false;
        }
      }
      static const std::string end = "data: [DONE]\n\n";
      sink.write(end.data(), end.size());
      sink.done();
      return true;
    });
  };
  s.Post("/generate", guarded(generate));
}

}  // namespace refit

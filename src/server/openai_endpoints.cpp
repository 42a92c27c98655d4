// The OpenAI-compatible routes, with vLLM's extra fields:
//
//   POST /v1/completions, /v1/chat/completions (stream: true -> server-sent events)
//   GET  /v1/models
//
// A request becomes one scheduler request per (prompt, n) pair, each read back through a
// ChoiceStream; the whole answer is sent when every choice is done, or streamed chunk by
// chunk as their text arrives.
#include <fmt/format.h>

#include <chrono>
#include <functional>
#include <random>

#include "server/api_types.h"
#include "server/base64.h"
#include "server/chat_request.h"
#include "server/choice_stream.h"
#include "server/client_connection.h"
#include "server/event_signal.h"
#include "server/harmony_chat.h"
#include "server/http_server.h"
#include "server/http_util.h"
#include "server/prompt_limits.h"

namespace refit {

using nlohmann::json;

namespace {

using LabelOf = std::function<std::string(uint64_t)>;

// One generation request in flight: its choices and what the response needs. Shared with
// the streaming provider, which runs after the handler returned.
struct Generation {
  GenerationParams params;
  std::string id, model;
  long created = 0;
  std::vector<std::unique_ptr<ChoiceStream>> choices;
  std::vector<std::vector<int32_t>> prompts;  // per choice
  int64_t prompt_tokens = 0;                  // summed over prompts (once per prompt, not per n)
  std::shared_ptr<RequestRegistry::Entry> registration;
  std::shared_ptr<EventSignal> signal = EventSignal::make();
  // A harmony model's chat (gpt-oss): its tokens, and per choice the parser of a stream.
  std::optional<HarmonyTokens> harmony;
  const Tokenizer* tokenizer = nullptr;
  std::vector<std::unique_ptr<HarmonyParser>> parsers;

  HarmonyParser& harmony_parser(size_t i) {
    if (parsers.size() < choices.size()) parsers.resize(choices.size());
    if (!parsers[i])
      parsers[i] = std::make_unique<HarmonyParser>(*tokenizer, *harmony,
                                                   [] { return random_id("chatcmpl-tool"); });
    return *parsers[i];
  }

  json usage() const {
    int64_t completion = 0;
    for (auto& c : choices) completion += static_cast<int64_t>(c->tokens().size());
    return json{{"prompt_tokens", prompt_tokens},
                {"completion_tokens", completion},
                {"total_tokens", prompt_tokens + completion}};
  }
  bool all_done() const {
    for (auto& c : choices)
      if (!c->done()) return false;
    return true;
  }
  void cancel_all() {
    for (auto& c : choices) c->handle().cancel();
  }
  // Waits for the next event of any unfinished choice; returns its index or -1.
  // (Every choice's on_event wakes signal, so nothing is polled in turn.)
  int poll(std::chrono::milliseconds wait) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      for (size_t i = 0; i < choices.size(); ++i) {
        ChoiceStream& c = *choices[i];
        RequestHandle::Event e;
        if (!c.done() && c.handle().try_next(e)) {
          c.apply(e);
          return static_cast<int>(i);
        }
      }
      if (attempt == 0) signal->wait(wait);
    }
    return -1;
  }
};

// What a request generates from: its prompts as token ids and the stop strings.
struct Prompts {
  std::vector<std::vector<int32_t>> ids;
  std::vector<std::string> stops;
};

Prompts tokenize_prompts(const GenerationParams& p, bool chat, const Tokenizer* tok,
                         const ChatTemplate& chat_template, const std::string& model_description,
                         const PromptLimits& limits) {
  Prompts out{p.prompt_ids, p.stop};
  if (!chat && p.prompt_texts.empty()) return out;
  if (!tok)
    throw HttpError{
        400,
        fmt::format("{} carries no tokenizer: send token ids as 'prompt'", model_description),
        "invalid_request_error",
        chat ? "messages" : "prompt",
        {}};
  if (chat) {
    // The template writes the specials (BOS included): encoding adds none unless the
    // client asks (vLLM's add_special_tokens, false for chat).
    const std::string text = render_chat_prompt(chat_template, p.chat_input);
    check_prompt_text_fits(text.size(), limits, "messages");
    out.ids.push_back(tok->encode(text, p.add_special_tokens, /*parse_special=*/true));
    for (const auto& t : chat_template.end_of_turn_texts()) out.stops.push_back(t);
  } else {
    for (const auto& text : p.prompt_texts) check_prompt_text_fits(text.size(), limits, "prompt");
    for (const auto& text : p.prompt_texts)
      out.ids.push_back(tok->encode(text, p.add_special_tokens, true));
  }
  return out;
}

std::vector<int32_t> stop_token_ids(const GenerationParams& p, bool chat, const Tokenizer* tok,
                                    const ChatTemplate& chat_template,
                                    const StopTokenIds& model_stop) {
  std::vector<int32_t> stop_tokens = p.stop_token_ids;
  if (p.ignore_eos) return stop_tokens;
  // The model's whole set (tokenizer eos, config.json and generation_config.json ids), as
  // vLLM adds generation_config's eos ids to stop_token_ids.
  stop_tokens.insert(stop_tokens.end(), model_stop.ids.begin(), model_stop.ids.end());
  if (tok && chat)  // the template's end-of-turn token, when the vocabulary has one
    for (const auto& t : chat_template.end_of_turn_texts()) {
      auto ids = tok->encode(t, false, true);
      if (ids.size() == 1) stop_tokens.push_back(ids[0]);
    }
  return stop_tokens;
}

// The scheduler request of sample `j` of one prompt.
RequestSpec choice_spec(const Generation& g, const std::vector<int32_t>& prompt, int64_t max_tokens,
                        int j, const std::vector<int32_t>& stop_tokens, LogprobMode logprob_mode) {
  const GenerationParams& p = g.params;
  RequestSpec spec;
  spec.prompt = prompt;
  spec.max_tokens = max_tokens;
  spec.min_tokens = p.min_tokens;
  spec.sampling = p.sampling;
  spec.sampling.repeat_last_n = -1;  // vLLM: the penalty sees the whole prompt and output
  spec.logprob_mode = logprob_mode;
  // vLLM's prompt_logprobs, and echo with logprobs (the prompt's tokens lead the list).
  const int prompt_top =
      p.prompt_logprobs >= 0 ? p.prompt_logprobs : (p.echo && p.logprobs >= 0 ? p.logprobs : -1);
  if (prompt_top >= 0) {
    spec.prompt_logprobs_from = 1;
    spec.prompt_top_logprobs = prompt_top;
  }
  spec.sampling.seed =
      p.seed_given ? p.sampling.seed + static_cast<uint64_t>(j) : std::random_device{}();
  spec.stop_tokens = stop_tokens;
  spec.top_logprobs = std::max(p.logprobs, 0);
  spec.token_logprobs = p.logprobs >= 0;
  spec.restart_on_retract = !p.stream;
  spec.return_routed_experts = p.return_routed_experts;
  spec.on_event = g.signal->notifier();
  return spec;
}

// Submits n choices per prompt into g; a refusal cancels what was already submitted.
std::vector<std::shared_ptr<RequestHandle>> submit_choices(Generation& g, const Prompts& prompts,
                                                           const std::vector<int32_t>& stop_tokens,
                                                           bool chat, Scheduler& scheduler,
                                                           LogprobMode logprob_mode,
                                                           const Tokenizer* tok,
                                                           const GenerationDefaults& defaults) {
  const GenerationParams& p = g.params;
  const int64_t ctx = scheduler.max_context();
  std::vector<std::shared_ptr<RequestHandle>> submitted;
  try {
    for (const std::vector<int32_t>& prompt : prompts.ids) {
      const int64_t n_prompt = static_cast<int64_t>(prompt.size());
      const int64_t max_tokens =
          checked_max_tokens(p.max_tokens, p.max_tokens_null, chat, n_prompt, ctx, defaults);
      g.prompt_tokens += n_prompt;
      for (int j = 0; j < p.n; ++j) {
        auto h = scheduler.submit(choice_spec(g, prompt, max_tokens, j, stop_tokens, logprob_mode));
        submitted.push_back(h);
        ChoiceOptions co;
        co.decode.skip_special = p.skip_special_tokens;
        co.keep_stop_string = p.include_stop_str_in_output;
        g.choices.push_back(std::make_unique<ChoiceStream>(h, tok, prompts.stops, n_prompt, co));
        g.prompts.push_back(prompt);
      }
    }
  } catch (...) {
    for (auto& h : submitted) h->cancel();
    throw;
  }
  return submitted;
}

// vLLM's prompt_logprobs: per prompt position null (the first) or {id: {logprob, rank,
// decoded_token}} holding the prompt's token and the top ones.
json vllm_prompt_logprobs(const ChoiceStream& c) {
  json out = json::array();
  out.push_back(nullptr);
  for (const TokenEvent& t : c.prompt_logprobs()) {
    json entry = json::object();
    entry[std::to_string(t.token)] =
        json{{"logprob", t.logprob}, {"rank", t.rank}, {"decoded_token", c.piece(t.token)}};
    int64_t r = 1;
    for (const TokenLogprob& x : t.top) {
      const std::string key = std::to_string(x.token);
      if (!entry.contains(key))
        entry[key] = json{{"logprob", x.logprob}, {"rank", r}, {"decoded_token", c.piece(x.token)}};
      ++r;
    }
    out.push_back(entry);
  }
  return out;
}

// Completions logprobs with the prompt's tokens first (echo): the first has no logprob.
json echo_logprobs(const ChoiceStream& c, const std::vector<int32_t>& prompt,
                   const json& completion) {
  json j{{"tokens", json::array()},
         {"token_logprobs", json::array()},
         {"top_logprobs", json::array()},
         {"text_offset", json::array()}};
  size_t offset = 0;
  for (size_t i = 0; i < prompt.size(); ++i) {
    const std::string piece = c.piece(prompt[i]);
    j["tokens"].push_back(piece);
    j["text_offset"].push_back(offset);
    offset += piece.size();
    if (i == 0 || i - 1 >= c.prompt_logprobs().size()) {
      j["token_logprobs"].push_back(nullptr);
      j["top_logprobs"].push_back(nullptr);
      continue;
    }
    const TokenEvent& t = c.prompt_logprobs()[i - 1];
    j["token_logprobs"].push_back(t.logprob);
    json top = json::object();
    for (const TokenLogprob& x : t.top) top[c.piece(x.token)] = x.logprob;
    j["top_logprobs"].push_back(top);
  }
  for (const char* k : {"tokens", "token_logprobs", "top_logprobs"})
    for (const auto& v : completion[k]) j[k].push_back(v);
  for (const auto& v : completion["text_offset"])
    j["text_offset"].push_back(v.get<size_t>() + offset);
  return j;
}

// vLLM's return_tokens_as_token_ids: every logprob entry's token as "token_id:N".
void tokens_as_token_ids(json& ch, const ChoiceStream& c, const std::vector<int32_t>& prompt,
                         const GenerationParams& p, bool chat) {
  if (chat && ch["logprobs"].is_object())
    for (size_t k = 0; k < ch["logprobs"]["content"].size(); ++k) {
      json& e = ch["logprobs"]["content"][k];
      e["token"] = fmt::format("token_id:{}", c.tokens()[k]);
      for (size_t t = 0; t < e["top_logprobs"].size(); ++t)
        e["top_logprobs"][t]["token"] = fmt::format("token_id:{}", c.top()[k][t].token);
    }
  if (ch["logprobs"].is_object() && ch["logprobs"].contains("tokens"))
    for (size_t k = 0; k < ch["logprobs"]["tokens"].size(); ++k) {
      const std::vector<int32_t>& ids = c.tokens();
      const size_t n_echo = p.echo ? prompt.size() : 0;
      const int32_t id = k < n_echo ? prompt[k] : ids[k - n_echo];
      ch["logprobs"]["tokens"][k] = fmt::format("token_id:{}", id);
    }
}

// Choice i of the whole (not streamed) answer.
json whole_choice(const Generation& g, size_t i, bool chat, const Tokenizer* tok,
                  const LabelOf& label) {
  const GenerationParams& p = g.params;
  const ChoiceStream& c = *g.choices[i];
  json versions = json::array();
  for (uint64_t x : c.versions()) versions.push_back(label(x));
  json ch{{"index", i},
          {"finish_reason", c.finish_reason()},
          {"token_ids", c.tokens()},
          {"weight_versions", versions}};
  const std::vector<int32_t>& prompt = g.prompts[i];
  if (chat && g.harmony && tok) {
    // Parsed from the tokens, not the text: the structural tokens are matched by id.
    HarmonyParser parser(*tok, *g.harmony, [] { return random_id("chatcmpl-tool"); });
    for (int32_t id : c.tokens()) parser.push(id);
    parser.finish();
    ch["message"] = harmony_message(parser);
    ch["finish_reason"] = harmony_finish_reason(parser, c.finish_reason());
    ch["logprobs"] = p.logprobs >= 0 ? c.chat_logprobs(0, c.tokens().size()) : json(nullptr);
  } else if (chat) {
    ch["message"] = json{{"role", "assistant"}, {"content", c.text()}};
    ch["logprobs"] = p.logprobs >= 0 ? c.chat_logprobs(0, c.tokens().size()) : json(nullptr);
  } else {
    const std::string prompt_text =
        p.echo ? (tok ? tok->decode(prompt) : std::string()) : std::string();
    ch["text"] = prompt_text + c.text();
    json lp = p.logprobs >= 0 ? c.completion_logprobs(0, c.tokens().size()) : json(nullptr);
    if (p.echo && p.logprobs >= 0) lp = echo_logprobs(c, prompt, lp);
    ch["logprobs"] = lp;
  }
  if (p.prompt_logprobs >= 0) ch["prompt_logprobs"] = vllm_prompt_logprobs(c);
  if (p.return_token_ids && !chat) ch["prompt_token_ids"] = prompt;
  if (p.return_tokens_as_token_ids) tokens_as_token_ids(ch, c, prompt, p, chat);
  if (p.return_routed_experts)  // vLLM's choice field, base64 int32 as its recent versions send
    ch["routed_experts"] =
        base64_encode(c.routed_experts().data(), c.routed_experts().size() * sizeof(int32_t));
  return ch;
}

// The whole answer once every choice is done; a client that hangs up stops its generation
// (and frees its KV blocks) instead of leaving it to run to max_tokens for nobody.
void answer_whole(Generation& g, const httplib::Request& req, httplib::Response& res, bool chat,
                  const Tokenizer* tok, const LabelOf& label,
                  const std::function<std::string()>& current_label) {
  const ClientConnection client(req);
  while (!g.all_done()) {
    g.poll(std::chrono::milliseconds(100));
    if (client.closed()) {
      g.cancel_all();
      res.status = 499;  // nginx's "client closed request": logged, never seen
      return;
    }
  }
  for (auto& c : g.choices)
    if (c->finish_reason() == "error")
      throw HttpError{c->busy() ? 503 : 500,
                      c->error(),
                      c->busy() ? "service_unavailable" : "server_error",
                      {},
                      c->busy() ? "server_busy" : ""};
  json choices = json::array();
  uint64_t last_version = 0;
  for (size_t i = 0; i < g.choices.size(); ++i) {
    choices.push_back(whole_choice(g, i, chat, tok, label));
    const ChoiceStream& c = *g.choices[i];
    if (!c.versions().empty()) last_version = std::max(last_version, c.versions().back());
  }
  json body{{"id", g.id},
            {"object", chat ? "chat.completion" : "text_completion"},
            {"created", g.created},
            {"model", g.model},
            {"choices", choices},
            {"usage", g.usage()},
            {"weight_version", last_version ? label(last_version) : current_label()}};
  if (g.params.return_token_ids && chat && !g.prompts.empty())
    body["prompt_token_ids"] = g.prompts[0];
  send_json(res, 200, body);
}

json stream_chunk(const Generation& g, bool chat, size_t index, const json& choice_fields) {
  json ch = choice_fields;
  ch["index"] = index;
  return json{{"id", g.id},
              {"object", chat ? "chat.completion.chunk" : "text_completion"},
              {"created", g.created},
              {"model", g.model},
              {"choices", json::array({ch})}};
}

// The fields of a choice's next chunk: the text and tokens not sent yet (marked sent).
json stream_fields(ChoiceStream& c, const std::string& text, bool chat, bool logprobs,
                   const LabelOf& label) {
  const size_t from = c.tokens_taken(), to = c.tokens().size();
  json fields;
  if (chat) {
    fields["delta"] = text.empty() ? json::object() : json{{"content", text}};
    fields["logprobs"] = logprobs ? c.chat_logprobs(from, to) : json(nullptr);
  } else {
    fields["text"] = text;
    fields["logprobs"] = logprobs ? c.completion_logprobs(from, to) : json(nullptr);
  }
  fields["finish_reason"] = c.done() ? json(c.finish_reason()) : json(nullptr);
  std::vector<int32_t> ids(c.tokens().begin() + static_cast<std::ptrdiff_t>(from),
                           c.tokens().end());
  fields["token_ids"] = ids;
  json vs = json::array();
  for (size_t k = from; k < to; ++k) vs.push_back(label(c.versions()[k]));
  fields["weight_versions"] = vs;
  c.mark_tokens_sent();
  return fields;
}

// Server-sent events, one chunk per new text; the client leaving (a failed write) cancels
// every choice so their KV blocks are freed. Returns what the content provider returns.
bool stream_generation(Generation& g, bool chat, httplib::DataSink& sink, const LabelOf& label) {
  auto send = [&](const json& j) {
    const std::string line =
        "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
    return sink.write(line.data(), line.size());
  };
  if (chat)
    for (size_t i = 0; i < g.choices.size(); ++i) {
      json first = stream_chunk(
          g, chat, i,
          {{"delta", {{"role", "assistant"}, {"content", ""}}}, {"finish_reason", nullptr}});
      if (g.params.return_token_ids && i < g.prompts.size())
        first["prompt_token_ids"] = g.prompts[i];
      if (!send(first)) {
        g.cancel_all();
        return false;
      }
    }
  std::vector<bool> prompt_ids_sent(g.choices.size(), false);
  while (!g.all_done()) {
    const int i = g.poll(std::chrono::milliseconds(100));
    if (i < 0) {
      if (!sink.is_writable()) {
        g.cancel_all();
        return false;
      }
      continue;
    }
    ChoiceStream& c = *g.choices[static_cast<size_t>(i)];
    if (c.done() && c.finish_reason() == "error") {
      send(HttpError{
          c.busy() ? 503 : 500,
          c.error(),
          c.busy() ? "service_unavailable" : "server_error",
          {},
          {}}.body());
      continue;
    }
    const std::string text = c.take_text();
    if (text.empty() && !c.done() && c.tokens_taken() == c.tokens().size()) continue;
    json harmony_fields;
    if (chat && g.harmony) {
      // The tokens not sent yet, through this choice's parser (the text is not used).
      HarmonyParser& parser = g.harmony_parser(static_cast<size_t>(i));
      HarmonyDelta delta;
      for (size_t k = c.tokens_taken(); k < c.tokens().size(); ++k)
        merge_delta(delta, parser.push(c.tokens()[k]));
      if (c.done()) merge_delta(delta, parser.finish());
      harmony_fields =
          json{{"delta", harmony_delta(delta, parser)},
               {"finish_reason",
                c.done() ? json(harmony_finish_reason(parser, c.finish_reason())) : json(nullptr)}};
    }
    json j = stream_chunk(g, chat, static_cast<size_t>(i),
                          stream_fields(c, text, chat, g.params.logprobs >= 0, label));
    for (const auto& [k, v] : harmony_fields.items()) j["choices"][0][k] = v;
    // Completions name the prompt's ids in each choice's first chunk (vLLM's
    // return_token_ids; a chat names them in its opening chunk above).
    if (!chat && g.params.return_token_ids && !prompt_ids_sent[static_cast<size_t>(i)]) {
      j["choices"][0]["prompt_token_ids"] = g.prompts[static_cast<size_t>(i)];
      prompt_ids_sent[static_cast<size_t>(i)] = true;
    }
    if (c.done() && !c.versions().empty()) j["weight_version"] = label(c.versions().back());
    if (!send(j)) {
      g.cancel_all();
      return false;
    }
  }
  if (g.params.include_usage) {
    json u{{"id", g.id},
           {"object", chat ? "chat.completion.chunk" : "text_completion"},
           {"created", g.created},
           {"model", g.model},
           {"choices", json::array()},
           {"usage", g.usage()}};
    send(u);
  }
  static const std::string done = "data: [DONE]\n\n";
  sink.write(done.data(), done.size());
  sink.done();
  return true;
}

}  // namespace

void HttpServer::openai_generation(const httplib::Request& req, httplib::Response& res, bool chat) {
  auto g = std::make_shared<Generation>();
  const nlohmann::ordered_json ordered =
      chat ? parse_json_body_ordered(req.body) : nlohmann::ordered_json();
  const PromptLimits& limits = prompt_limits_;
  g->params = parse_generation_request(parse_json_body(req.body), chat, max_logprobs(),
                                       chat ? &ordered : nullptr, limits.context);
  // The model's generation_config.json defaults for the sampling fields the request left unset.
  engine_.generation_defaults().apply(g->params.sampling, g->params.sampling_given);
  if (options_.return_routed_experts) g->params.return_routed_experts = true;
  const GenerationParams& p = g->params;
  if (p.stream && (p.echo || p.prompt_logprobs >= 0))
    throw HttpError{400,
                    "'echo' and 'prompt_logprobs' are not supported with 'stream': true",
                    "invalid_request_error",
                    p.echo ? "echo" : "prompt_logprobs",
                    {}};
  if (!p.model.empty() && p.model != options_.model_name)
    throw HttpError{404,
                    fmt::format("the model '{}' does not exist; this server serves '{}'", p.model,
                                options_.model_name),
                    "invalid_request_error", "model", "model_not_found"};
  const Tokenizer* tok = engine_.tokenizer();
  if (chat) {
    g->harmony = harmony_for(options_.reasoning_parser, tok);
    g->tokenizer = tok;
    if (g->harmony) harmony_chat_input(g->params.chat_input);
  }
  const Prompts prompts =
      tokenize_prompts(p, chat, tok, chat_template_, engine_.description(), limits);
  const std::vector<int32_t> stop_tokens =
      stop_token_ids(p, chat, tok, chat_template_, engine_.stop_ids());
  g->id = random_id(chat ? "chatcmpl" : "cmpl");
  g->model = options_.model_name;
  g->created = unix_now();
  std::vector<std::shared_ptr<RequestHandle>> submitted =
      submit_choices(*g, prompts, stop_tokens, chat, *scheduler_, options_.logprobs_mode, tok,
                     engine_.generation_defaults());
  // /abort_request by the response id, or by the client's X-Request-Id.
  const std::string rid =
      req.has_header("X-Request-Id") ? req.get_header_value("X-Request-Id") : g->id;
  g->registration = std::make_shared<RequestRegistry::Entry>(registry_.add(rid, submitted));

  LabelOf label = [this](uint64_t v) { return version_label(v); };
  if (!p.stream) {
    answer_whole(*g, req, res, chat, tok, label, [this] { return current_version_label(); });
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider("text/event-stream",
                                   [g, chat, label](size_t, httplib::DataSink& sink) {
                                     return stream_generation(*g, chat, sink, label);
                                   });
}

void HttpServer::openai_routes() {
  httplib::Server& s = *http_;
  s.Post("/v1/completions", guarded([this](const httplib::Request& q, httplib::Response& r) {
           openai_generation(q, r, /*chat=*/false);
         }));
  s.Post("/v1/chat/completions", guarded([this](const httplib::Request& q, httplib::Response& r) {
           openai_generation(q, r, /*chat=*/true);
         }));
  s.Get("/v1/models", guarded([this](const httplib::Request&, httplib::Response& res) {
          json m{{"id", options_.model_name},
                 {"object", "model"},
                 {"created", started_at_},
                 {"owned_by", "refit"},
                 {"max_model_len", scheduler_->max_context()},
                 {"weight_version", current_version_label()},
                 {"chat_template", chat_template_.is_fallback() ? "fallback" : "model"},
                 {"chat_template_source", chat_template_.source()},
                 {"reasoning_parser",
                  harmony_for(options_.reasoning_parser, engine_.tokenizer()) ? "gpt-oss" : "none"},
                 // refit's extras: what ends generation and the defaults of unset fields.
                 {"stop_token_ids", engine_.stop_ids().ids},
                 {"generation_defaults", engine_.generation_defaults().fields_json()},
                 {"generation_config", engine_.generation_defaults().source}};
          send_json(res, 200, json{{"object", "list"}, {"data", json::array({m})}});
        }));
}

}  // namespace refit

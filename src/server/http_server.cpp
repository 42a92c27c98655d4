#include "server/http_server.h"

#include <fmt/format.h>
#include <httplib.h>

#include <chrono>
#include <filesystem>
#include <random>

#include "server/api_types.h"
#include "server/choice_stream.h"
#include "server/client_connection.h"
#include "server/event_signal.h"
#include "parallel/rank_group.h"
#include "server/http_util.h"
#include "server/rl_endpoints.h"
#include "server/weight_sync_endpoints.h"

namespace refit {

using nlohmann::json;

namespace {

// One generation request in flight: its choices and what the response needs.
struct Generation {
  GenerationParams params;
  std::string id, model;
  long created = 0;
  std::vector<std::unique_ptr<ChoiceStream>> choices;
  std::vector<std::vector<int32_t>> prompts;  // per choice
  int64_t prompt_tokens = 0;  // summed over prompts (once per prompt, not per n)
  std::shared_ptr<RequestRegistry::Entry> registration;
  std::shared_ptr<EventSignal> signal = EventSignal::make();
};

// vLLM's prompt_logprobs: per prompt position null (the first) or {id: {logprob, rank,
// decoded_token}} holding the prompt's token and the top ones.
json vllm_prompt_logprobs(const ChoiceStream& c) {
  json out = json::array();
  out.push_back(nullptr);
  for (const TokenEvent& t : c.prompt_logprobs()) {
    json entry = json::object();
    entry[std::to_string(t.token)] = json{{"logprob", t.logprob}, {"rank", t.rank}, {"decoded_token", c.piece(t.token)}};
    int64_t r = 1;
    for (const TokenLogprob& x : t.top) {
      const std::string key = std::to_string(x.token);
      if (!entry.contains(key)) entry[key] = json{{"logprob", x.logprob}, {"rank", r}, {"decoded_token", c.piece(x.token)}};
      ++r;
    }
    out.push_back(entry);
  }
  return out;
}

// Completions logprobs with the prompt's tokens first (echo): the first has no logprob.
json echo_logprobs(const ChoiceStream& c, const std::vector<int32_t>& prompt, const json& completion) {
  json j{{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
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
  for (const auto& v : completion["text_offset"]) j["text_offset"].push_back(v.get<size_t>() + offset);
  return j;
}

}  // namespace

HttpServer::HttpServer(Engine& engine, ServerOptions options, RankGroup* ranks)
    : engine_(engine), options_(std::move(options)), ranks_(ranks), started_at_(unix_now()) {
  if (engine_.world_size() > 1 && !ranks_)
    fail("the model is sharded over {} ranks: the server needs their RankGroup", engine_.world_size());
  if (ranks_ && !ranks_->lead()) fail("the HTTP server runs on rank 0 only (this is rank {})", ranks_->rank());
  if (options_.model_name.empty()) {
    const std::string& d = engine_.description();
    options_.model_name = d.find('/') != std::string::npos || std::filesystem::exists(d)
                              ? std::filesystem::path(d).filename().string()
                              : std::string("refit-demo");
    if (options_.model_name.empty()) options_.model_name = std::filesystem::path(d).parent_path().filename().string();
  }
  const Tokenizer* tok = engine_.tokenizer();
  std::string bos, eos;
  if (tok) {
    if (tok->vocab().bos() >= 0) bos = tok->token_to_piece(tok->vocab().bos());
    if (tok->vocab().eos() >= 0) eos = tok->token_to_piece(tok->vocab().eos());
  }
  chat_template_ = load_chat_template(std::filesystem::exists(engine_.description()) ? engine_.description() : "", bos, eos);
  StepForward forward;
  if (ranks_)
    forward = [r = ranks_](std::span<const BatchSequence> batch, PagedKvCache& cache) { return r->forward(batch, cache); };
  scheduler_ = std::make_unique<Scheduler>(engine_.model(), engine_.weights_mutex(),
                                           [this] { return engine_.weight_version(); }, options_.scheduler, forward);
  // Released weights never serve a token, whichever route submits (health checks too).
  scheduler_->set_admission_check([this] { check_can_generate(); });
  // Every rank's pool gets the size the scheduler chose, before the first step.
  if (ranks_) ranks_->announce_cache(scheduler_->options().kv_blocks, scheduler_->options().block_size);
  http_ = std::make_unique<httplib::Server>();
  const int threads = options_.http_threads;
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  http_->set_payload_max_length(size_t{8} << 30);  // tensor updates are large
  // Every other route's body is small: refused by its declared length before it is read
  // (64 MiB holds any prompt a context can take; tensors travel only to one route).
  http_->set_pre_routing_handler([](const httplib::Request& req, httplib::Response& res) {
    constexpr size_t kBodyLimit = size_t{64} << 20;
    if (req.path == "/update_weights_from_tensor" || !req.has_header("Content-Length"))
      return httplib::Server::HandlerResponse::Unhandled;
    const std::string& length = req.get_header_value("Content-Length");
    const unsigned long long n = std::strtoull(length.c_str(), nullptr, 10);
    if (n <= kBodyLimit) return httplib::Server::HandlerResponse::Unhandled;
    send_json(res, 413,
              HttpError{413, fmt::format("the request body ({} bytes) is over {}'s limit of {} bytes", n, req.path, kBodyLimit),
                        "invalid_request_error", {}, "body_too_large"}
                  .body());
    return httplib::Server::HandlerResponse::Handled;
  });
  http_->set_read_timeout(600);
  http_->set_write_timeout(600);
  routes();
}

HttpServer::~HttpServer() {
  stop();
  scheduler_.reset();
}

void HttpServer::bind() {
  if (options_.port == 0) {
    port_ = http_->bind_to_any_port(options_.host.c_str());
    if (port_ <= 0) fail("cannot listen on {}:<any port>", options_.host);
  } else {
    if (!http_->bind_to_port(options_.host.c_str(), options_.port))
      fail("cannot listen on {}:{} (in use, or not an address of this machine)", options_.host, options_.port);
    port_ = options_.port;
  }
}

void HttpServer::serve() { http_->listen_after_bind(); }
void HttpServer::stop() {
  if (http_) http_->stop();
}

std::string HttpServer::version_label(uint64_t version) const {
  std::lock_guard lock(labels_mutex_);
  auto it = labels_.find(version);
  return it != labels_.end() ? it->second : std::to_string(version);
}

HttpServer::Handler HttpServer::guarded(Handler handler) {
  return [this, handler = std::move(handler)](const httplib::Request& req, httplib::Response& res) {
    ++http_requests_;
    try {
      handler(req, res);
      if (res.status >= 400) ++http_errors_;
      return;
    } catch (const HttpError& e) {
      send_json(res, e.status, e.body());
    } catch (const CapacityExceeded& e) {
      send_json(res, 503, HttpError{503, e.what(), "service_unavailable", {}, "server_busy"}.body());
    } catch (const Error& e) {
      send_json(res, 400, HttpError{400, e.what(), "invalid_request_error", {}, {}}.body());
    } catch (const std::exception& e) {
      send_json(res, 500, HttpError{500, std::string("internal error: ") + e.what(), "server_error", {}, {}}.body());
    }
    ++http_errors_;
  };
}

int HttpServer::max_logprobs() const {
  return options_.max_logprobs < 0 ? static_cast<int>(engine_.config().vocab_size) : options_.max_logprobs;
}

void HttpServer::routes() {
  httplib::Server& s = *http_;

  auto generation = [this](const httplib::Request& req, httplib::Response& res, bool chat) {
    auto g = std::make_shared<Generation>();
    g->params = parse_generation_request(parse_json_body(req.body), chat, max_logprobs());
    const GenerationParams& p = g->params;
    if (p.stream && (p.echo || p.prompt_logprobs >= 0))
      throw HttpError{400, "'echo' and 'prompt_logprobs' are not supported with 'stream': true", "invalid_request_error",
                      p.echo ? "echo" : "prompt_logprobs", {}};
    if (!p.model.empty() && p.model != options_.model_name)
      throw HttpError{404, fmt::format("the model '{}' does not exist; this server serves '{}'", p.model, options_.model_name),
                      "invalid_request_error", "model", "model_not_found"};
    const Tokenizer* tok = engine_.tokenizer();
    std::vector<std::vector<int32_t>> prompts = p.prompt_ids;
    std::vector<std::string> stops = p.stop;
    if (chat || !p.prompt_texts.empty()) {
      if (!tok)
        throw HttpError{400, fmt::format("{} carries no tokenizer: send token ids as 'prompt'", engine_.description()),
                        "invalid_request_error", chat ? "messages" : "prompt", {}};
      if (chat) {
        prompts.push_back(tok->encode(chat_template_.render(p.messages), /*add_special=*/false, /*parse_special=*/true));
        for (const auto& t : chat_template_.end_of_turn_texts()) stops.push_back(t);
      } else {
        for (const auto& text : p.prompt_texts) prompts.push_back(tok->encode(text, true, true));
      }
    }
    const int64_t ctx = scheduler_->max_context();
    std::vector<int32_t> stop_tokens = p.stop_token_ids;
    if (!p.ignore_eos) {
      const int32_t eos = tok ? tok->vocab().eos() : engine_.config().eos_id;
      if (eos >= 0) stop_tokens.push_back(eos);
      if (tok && chat)  // the template's end-of-turn token, when the vocabulary has one
        for (const auto& t : chat_template_.end_of_turn_texts()) {
          auto ids = tok->encode(t, false, true);
          if (ids.size() == 1) stop_tokens.push_back(ids[0]);
        }
    }
    g->id = random_id(chat ? "chatcmpl" : "cmpl");
    g->model = options_.model_name;
    g->created = unix_now();
    std::vector<std::shared_ptr<RequestHandle>> submitted;
    try {
      for (size_t pi = 0; pi < prompts.size(); ++pi) {
        const int64_t n_prompt = static_cast<int64_t>(prompts[pi].size());
        if (n_prompt == 0) throw HttpError{400, "the prompt is empty (no tokens)", "invalid_request_error", "prompt", {}};
        const int64_t max_tokens = p.max_tokens ? *p.max_tokens : (chat ? ctx - n_prompt : 16);
        if (max_tokens > ctx || n_prompt + std::max<int64_t>(max_tokens, 1) > ctx)  // no overflow
          throw HttpError{400,
                          fmt::format("this model's maximum context length is {} tokens; the request has {} prompt tokens "
                                      "and max_tokens {} ({} in all)",
                                      ctx, n_prompt, max_tokens, n_prompt + max_tokens),
                          "invalid_request_error", p.max_tokens ? "max_tokens" : (chat ? "messages" : "prompt"),
                          "context_length_exceeded"};
        g->prompt_tokens += n_prompt;
        for (int j = 0; j < p.n; ++j) {
          RequestSpec spec;
          spec.prompt = prompts[pi];
          spec.max_tokens = max_tokens;
          spec.min_tokens = p.min_tokens;
          spec.sampling = p.sampling;
          spec.sampling.repeat_last_n = -1;  // vLLM: the penalty sees the whole prompt and output
          spec.logprob_mode = options_.logprobs_mode;
          // vLLM's prompt_logprobs, and echo with logprobs (the prompt's tokens lead the list).
          const int prompt_top = p.prompt_logprobs >= 0 ? p.prompt_logprobs : (p.echo && p.logprobs >= 0 ? p.logprobs : -1);
          if (prompt_top >= 0) {
            spec.prompt_logprobs_from = 1;
            spec.prompt_top_logprobs = prompt_top;
          }
          spec.sampling.seed = p.seed_given ? p.sampling.seed + static_cast<uint64_t>(j) : std::random_device{}();
          spec.stop_tokens = stop_tokens;
          spec.top_logprobs = std::max(p.logprobs, 0);
          spec.restart_on_retract = !p.stream;
          spec.on_event = g->signal->notifier();
          auto h = scheduler_->submit(std::move(spec));
          submitted.push_back(h);
          ChoiceOptions co;
          co.decode.skip_special = p.skip_special_tokens;
          co.keep_stop_string = p.include_stop_str_in_output;
          g->choices.push_back(std::make_unique<ChoiceStream>(h, tok, stops, n_prompt, co));
          g->prompts.push_back(prompts[pi]);
        }
      }
    } catch (...) {
      for (auto& h : submitted) h->cancel();
      throw;
    }
    // /abort_request by the response id, or by the client's X-Request-Id.
    const std::string rid = req.has_header("X-Request-Id") ? req.get_header_value("X-Request-Id") : g->id;
    g->registration = std::make_shared<RequestRegistry::Entry>(registry_.add(rid, submitted));

    auto usage = [g] {
      int64_t completion = 0;
      for (auto& c : g->choices) completion += static_cast<int64_t>(c->tokens().size());
      return json{{"prompt_tokens", g->prompt_tokens}, {"completion_tokens", completion},
                  {"total_tokens", g->prompt_tokens + completion}};
    };
    auto versions_of = [this](const ChoiceStream& c) {
      json v = json::array();
      for (uint64_t x : c.versions()) v.push_back(version_label(x));
      return v;
    };
    // Waits for the next event of any unfinished choice; returns its index or -1.
    // (Every choice's on_event wakes g->signal, so nothing is polled in turn.)
    auto poll = [g](std::chrono::milliseconds wait) -> int {
      for (int attempt = 0; attempt < 2; ++attempt) {
        for (size_t i = 0; i < g->choices.size(); ++i) {
          ChoiceStream& c = *g->choices[i];
          RequestHandle::Event e;
          if (!c.done() && c.handle().try_next(e)) {
            c.apply(e);
            return static_cast<int>(i);
          }
        }
        if (attempt == 0) g->signal->wait(wait);
      }
      return -1;
    };
    auto all_done = [g] {
      for (auto& c : g->choices)
        if (!c->done()) return false;
      return true;
    };

    if (!p.stream) {
      // A client that hangs up stops its generation (and frees its KV blocks) instead of
      // leaving it to run to max_tokens for nobody.
      const ClientConnection client(req);
      while (!all_done()) {
        poll(std::chrono::milliseconds(100));
        if (client.closed()) {
          for (auto& c : g->choices) c->handle().cancel();
          res.status = 499;  // nginx's "client closed request": logged, never seen
          return;
        }
      }
      for (auto& c : g->choices)
        if (c->finish_reason() == "error")
          throw HttpError{c->busy() ? 503 : 500, c->error(), c->busy() ? "service_unavailable" : "server_error", {},
                          c->busy() ? "server_busy" : ""};
      json choices = json::array();
      uint64_t last_version = 0;
      for (size_t i = 0; i < g->choices.size(); ++i) {
        const ChoiceStream& c = *g->choices[i];
        json ch{{"index", i}, {"finish_reason", c.finish_reason()}, {"token_ids", c.tokens()},
                {"weight_versions", versions_of(c)}};
        const std::vector<int32_t>& prompt = g->prompts[i];
        if (chat) {
          ch["message"] = json{{"role", "assistant"}, {"content", c.text()}};
          ch["logprobs"] = p.logprobs >= 0 ? c.chat_logprobs(0, c.tokens().size()) : json(nullptr);
        } else {
          const std::string prompt_text = p.echo ? (tok ? tok->decode(prompt) : std::string()) : std::string();
          ch["text"] = prompt_text + c.text();
          json lp = p.logprobs >= 0 ? c.completion_logprobs(0, c.tokens().size()) : json(nullptr);
          if (p.echo && p.logprobs >= 0) lp = echo_logprobs(c, prompt, lp);
          ch["logprobs"] = lp;
        }
        if (p.prompt_logprobs >= 0) ch["prompt_logprobs"] = vllm_prompt_logprobs(c);
        if (p.return_tokens_as_token_ids && chat && ch["logprobs"].is_object())  // vLLM: "token_id:N"
          for (size_t k = 0; k < ch["logprobs"]["content"].size(); ++k) {
            json& e = ch["logprobs"]["content"][k];
            e["token"] = fmt::format("token_id:{}", c.tokens()[k]);
            for (size_t t = 0; t < e["top_logprobs"].size(); ++t)
              e["top_logprobs"][t]["token"] = fmt::format("token_id:{}", c.top()[k][t].token);
          }
        if (p.return_tokens_as_token_ids && ch["logprobs"].is_object() && ch["logprobs"].contains("tokens"))
          for (size_t k = 0; k < ch["logprobs"]["tokens"].size(); ++k) {
            const std::vector<int32_t>& ids = c.tokens();
            const size_t n_echo = p.echo ? prompt.size() : 0;
            const int32_t id = k < n_echo ? prompt[k] : ids[k - n_echo];
            ch["logprobs"]["tokens"][k] = fmt::format("token_id:{}", id);
          }
        if (!c.versions().empty()) last_version = std::max(last_version, c.versions().back());
        choices.push_back(ch);
      }
      json body{{"id", g->id}, {"object", chat ? "chat.completion" : "text_completion"}, {"created", g->created},
                {"model", g->model}, {"choices", choices}, {"usage", usage()},
                {"weight_version", last_version ? version_label(last_version) : current_version_label()}};
      send_json(res, 200, body);
      return;
    }

    // Streaming: server-sent events, one chunk per new text; the client leaving
    // (a failed write) cancels every choice so their KV blocks are freed.
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider("text/event-stream", [this, g, chat, usage, versions_of, poll, all_done](
                                                              size_t, httplib::DataSink& sink) {
      auto cancel_all = [g] {
        for (auto& c : g->choices) c->handle().cancel();
      };
      auto send = [&](const json& j) {
        const std::string line = "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
        return sink.write(line.data(), line.size());
      };
      auto chunk = [&](size_t index, const json& choice_fields) {
        json ch = choice_fields;
        ch["index"] = index;
        return json{{"id", g->id}, {"object", chat ? "chat.completion.chunk" : "text_completion"},
                    {"created", g->created}, {"model", g->model}, {"choices", json::array({ch})}};
      };
      if (chat)
        for (size_t i = 0; i < g->choices.size(); ++i)
          if (!send(chunk(i, {{"delta", {{"role", "assistant"}, {"content", ""}}}, {"finish_reason", nullptr}}))) {
            cancel_all();
            return false;
          }
      while (!all_done()) {
        const int i = poll(std::chrono::milliseconds(100));
        if (i < 0) {
          if (!sink.is_writable()) {
            cancel_all();
            return false;
          }
          continue;
        }
        ChoiceStream& c = *g->choices[static_cast<size_t>(i)];
        if (c.done() && c.finish_reason() == "error") {
          send(HttpError{c.busy() ? 503 : 500, c.error(), c.busy() ? "service_unavailable" : "server_error", {}, {}}.body());
          continue;
        }
        const std::string text = c.take_text();
        const size_t from = c.tokens_taken(), to = c.tokens().size();
        if (text.empty() && !c.done() && from == to) continue;
        json fields;
        const bool logprobs = g->params.logprobs >= 0;
        if (chat) {
          fields["delta"] = text.empty() ? json::object() : json{{"content", text}};
          fields["logprobs"] = logprobs ? c.chat_logprobs(from, to) : json(nullptr);
        } else {
          fields["text"] = text;
          fields["logprobs"] = logprobs ? c.completion_logprobs(from, to) : json(nullptr);
        }
        fields["finish_reason"] = c.done() ? json(c.finish_reason()) : json(nullptr);
        std::vector<int32_t> ids(c.tokens().begin() + static_cast<std::ptrdiff_t>(from), c.tokens().end());
        fields["token_ids"] = ids;
        json vs = json::array();
        for (size_t k = from; k < to; ++k) vs.push_back(version_label(c.versions()[k]));
        fields["weight_versions"] = vs;
        c.mark_tokens_sent();
        json j = chunk(static_cast<size_t>(i), fields);
        if (c.done() && !c.versions().empty()) j["weight_version"] = version_label(c.versions().back());
        if (!send(j)) {
          cancel_all();
          return false;
        }
      }
      if (g->params.include_usage) {
        json u{{"id", g->id}, {"object", chat ? "chat.completion.chunk" : "text_completion"}, {"created", g->created},
               {"model", g->model}, {"choices", json::array()}, {"usage", usage()}};
        send(u);
      }
      static const std::string done = "data: [DONE]\n\n";
      sink.write(done.data(), done.size());
      sink.done();
      return true;
    });
  };

  s.Post("/v1/completions", guarded([generation](const httplib::Request& q, httplib::Response& r) { generation(q, r, false); }));
  s.Post("/v1/chat/completions", guarded([generation](const httplib::Request& q, httplib::Response& r) { generation(q, r, true); }));

  s.Get("/v1/models", guarded([this](const httplib::Request&, httplib::Response& res) {
    json m{{"id", options_.model_name}, {"object", "model"}, {"created", started_at_}, {"owned_by", "refit"},
           {"max_model_len", scheduler_->max_context()}, {"weight_version", current_version_label()},
           {"chat_template", chat_template_kind_name(chat_template_.kind)}, {"chat_template_source", chat_template_.source}};
    send_json(res, 200, json{{"object", "list"}, {"data", json::array({m})}});
  }));
  s.Get("/health", guarded([](const httplib::Request&, httplib::Response& res) { send_json(res, 200, json{{"status", "ok"}}); }));
  s.Get("/metrics", guarded([this](const httplib::Request&, httplib::Response& res) {
    const SchedulerStats st = scheduler_->stats();
    std::string out;
    auto metric = [&](const char* name, const char* type, const char* help, const std::string& value,
                      const char* labels = "") {
      out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{}{} {}\n", name, help, name, type, name, labels, value);
    };
    out += "# HELP refit_requests_total Generation requests that ended, by outcome.\n# TYPE refit_requests_total counter\n";
    out += fmt::format("refit_requests_total{{outcome=\"finished\"}} {}\n", st.requests_finished);
    out += fmt::format("refit_requests_total{{outcome=\"aborted\"}} {}\n", st.requests_aborted);
    out += fmt::format("refit_requests_total{{outcome=\"rejected\"}} {}\n", st.requests_rejected);
    metric("refit_prompt_tokens_total", "counter", "Prompt tokens processed.", std::to_string(st.prompt_tokens));
    metric("refit_generation_tokens_total", "counter", "Tokens generated.", std::to_string(st.generated_tokens));
    metric("refit_running_requests", "gauge", "Requests in the running batch.", std::to_string(st.running));
    metric("refit_queue_depth", "gauge", "Requests waiting for admission.", std::to_string(st.waiting));
    metric("refit_kv_cache_usage_ratio", "gauge", "Fraction of KV-cache blocks in use.", fmt::format("{:.6f}", st.kv.usage()));
    metric("refit_kv_cache_blocks_used", "gauge", "KV-cache blocks in use.", std::to_string(st.kv.used_blocks));
    metric("refit_kv_cache_blocks_total", "gauge", "KV-cache blocks in the pool.", std::to_string(st.kv.total_blocks));
    metric("refit_prefix_cache_queries_total", "counter", "Tokens looked up in the prefix cache at admission.",
           std::to_string(st.prefix_query_tokens));
    metric("refit_prefix_cache_hits_total", "counter", "Tokens whose KV came from the prefix cache.",
           std::to_string(st.prefix_hit_tokens));
    metric("refit_prefix_cache_hit_ratio", "gauge", "Prefix-cache hits over queries (tokens, since start).",
           fmt::format("{:.6f}", st.prefix_query_tokens ? static_cast<double>(st.prefix_hit_tokens) /
                                                             static_cast<double>(st.prefix_query_tokens)
                                                       : 0.0));
    metric("refit_prefix_cache_blocks", "gauge", "KV blocks held by the prefix cache (in use or evictable).",
           std::to_string(st.kv.cached_blocks));
    metric("refit_prefix_cache_evictions_total", "counter", "Cached KV blocks evicted for new content.",
           std::to_string(st.kv.evictions));
    metric("refit_prefix_cache_invalidations_total", "counter", "Prefix-cache flushes (weight updates, /flush_cache).",
           std::to_string(st.prefix_invalidations));
    metric("refit_prefix_cache_dropped_blocks_total", "counter", "Cached KV blocks dropped by invalidations.",
           std::to_string(st.prefix_blocks_dropped));
    metric("refit_steps_total", "counter", "Batched forward steps.", std::to_string(st.steps));
    metric("refit_preemptions_total", "counter", "Requests preempted for KV space.", std::to_string(st.preemptions));
    metric("refit_refits_total", "counter", "Weight updates committed.", std::to_string(st.refits));
    metric("refit_refit_failures_total", "counter", "Weight updates refused.", std::to_string(st.refit_failures));
    metric("refit_refit_duration_seconds_total", "counter", "Time spent applying weight updates.",
           fmt::format("{:.6f}", st.refit_seconds));
    metric("refit_weight_version", "gauge", "Current weight version number.", std::to_string(engine_.weight_version()));
    metric("refit_paused", "gauge", "1 while generation is paused.", st.paused ? "1" : "0");
    metric("refit_tensor_parallel_size", "gauge", "Ranks the model is sharded over.", std::to_string(engine_.world_size()));
    metric("refit_http_requests_total", "counter", "HTTP requests received.", std::to_string(http_requests_.load()));
    metric("refit_http_errors_total", "counter", "HTTP requests answered with an error.", std::to_string(http_errors_.load()));
    res.set_content(out, "text/plain; version=0.0.4");
  }));

  RlContext rl{engine_, *scheduler_, labels_mutex_, labels_, [this](uint64_t v) { return version_label(v); }, ranks_};
  register_rl_endpoints(s, rl);
  register_weight_sync_endpoints(s, rl);
  sglang_generate_routes();
  lifecycle_routes();
  vllm_routes();

  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404)
      send_json(res, 404, HttpError{404, fmt::format("no route {} {}", req.method, req.path), "invalid_request_error", {}, "not_found"}.body());
  });
}

}  // namespace refit

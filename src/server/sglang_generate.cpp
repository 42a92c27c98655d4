// SGLang's native generation route, POST /generate, as slime, AReaL and verl call it
// (sglang python/sglang/srt/managers/io_struct.py GenerateReqInput; the response as
// tokenizer_manager.py builds it; finish reasons as schedule_batch.py's FINISH_*.to_json).
//
//   {text | input_ids (one, or a batch), sampling_params (one, or one per prompt),
//    return_logprob, logprob_start_len, top_logprobs_num, return_text_in_logprobs, rid,
//    stream, return_routed_experts, routed_experts_start_len, routed_experts (refit: given
//    back to force that routing)}
//   -> {text, output_ids, meta_info {id, finish_reason {type: stop|length|abort, matched |
//       length | message}, prompt_tokens, completion_tokens, cached_tokens, weight_version,
//       e2e_latency, input_token_logprobs, output_token_logprobs, input_top_logprobs,
//       output_top_logprobs (each entry [logprob, token_id, text | null]),
//       weight_versions (refit: each output token's), routed_experts (mixture of experts,
//       when asked: base64 of int32 [prompt + completion - 1 - start, moe layers, k], in the
//       last chunk only, as SGLang)}}   (a list for a batch)
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

#include <algorithm>
#include <chrono>
#include <functional>

#include "models/moe_routing.h"
#include "server/api_types.h"
#include "server/base64.h"
#include "server/choice_stream.h"
#include "server/client_connection.h"
#include "server/event_signal.h"
#include "server/http_server.h"
#include "server/http_util.h"
#include "server/sglang_request.h"

namespace refit {

using nlohmann::json;

namespace {

json finish_reason_json(const ChoiceStream& c, const RequestSpec& spec) {
  const std::string& r = c.finish_reason();
  if (r.empty()) return nullptr;
  if (r == "stop") {
    if (c.stopped_by_string()) return json{{"type", "stop"}, {"matched", c.matched_stop()}};
    return json{{"type", "stop"},
                {"matched", c.tokens().empty() ? json(nullptr) : json(c.tokens().back())}};
  }
  if (r == "length") return json{{"type", "length"}, {"length", spec.max_tokens}};
  if (r == "abort")
    return json{{"type", "abort"},
                {"message", "aborted (/abort_request, a pause in abort mode, or the client left)"}};
  return json{{"type", "abort"}, {"message", c.error()}, {"status_code", c.busy() ? 503 : 500}};
}

// A submitted item: what it asked for and the stream of its answer.
struct Running {
  SglangItem item;
  std::unique_ptr<ChoiceStream> choice;
};

// Everything one /generate answer needs, shared with the streaming provider (which runs
// after the handler returned).
struct Generation {
  std::vector<Running> items;
  std::vector<std::shared_ptr<RequestHandle>> handles;
  std::vector<std::unique_ptr<RequestRegistry::Entry>> registered;
  std::shared_ptr<EventSignal> signal = EventSignal::make();
  bool single = true, text_in_logprobs = false;
  double started = 0;
  int64_t routing_width = 0;  // moe layers x k

  bool done() const {
    for (const Running& r : items)
      if (!r.choice->done()) return false;
    return true;
  }
  void cancel_all() {
    for (auto& h : handles) h->cancel();
  }
  // Applies every pending event; returns the items that moved (a token, or the end).
  std::vector<size_t> drain() {
    std::vector<size_t> moved;
    for (size_t i = 0; i < items.size(); ++i) {
      ChoiceStream& c = *items[i].choice;
      RequestHandle::Event e;
      bool any = false;
      while (!c.done() && c.handle().try_next(e)) {
        c.apply(e);
        any = any || e.kind == RequestHandle::Event::token || c.done();
      }
      if (any) moved.push_back(i);
    }
    return moved;
  }
};

using LabelOf = std::function<std::string(uint64_t)>;

// The logprob entries of one item: [logprob, token_id, text | null], and a top list of them.
struct LogprobEntries {
  const Tokenizer* tok;
  bool text_in_logprobs;

  json piece_text(int32_t id) const {
    if (!tok) return nullptr;
    const int32_t one[1] = {id};
    DecodeOptions o;
    o.skip_special = false;
    return tok->decode(one, o);
  }
  json entry(const json& lp, int32_t id) const {
    return json::array({lp, id, text_in_logprobs ? piece_text(id) : json(nullptr)});
  }
  json tops(const std::vector<TokenLogprob>& top) const {
    json out = json::array();
    for (const TokenLogprob& t : top) out.push_back(entry(t.logprob, t.token));
    return out;
  }
};

// The input_/output_ token and top logprobs of meta_info.
void add_logprobs(json& meta, const SglangItem& it, const ChoiceStream& c,
                  const LogprobEntries& lp) {
  json in_lp = json::array(), in_top = json::array();
  if (it.logprob_start == 0) {  // nothing predicts the first token
    in_lp.push_back(lp.entry(nullptr, it.spec.prompt[0]));
    in_top.push_back(nullptr);
  }
  if (it.logprob_start >= 0)
    for (const TokenEvent& t : c.prompt_logprobs()) {
      in_lp.push_back(lp.entry(t.logprob, t.token));
      in_top.push_back(it.top_logprobs > 0 ? lp.tops(t.top) : json(nullptr));
    }
  json out_lp = json::array(), out_top = json::array();
  for (size_t i = 0; i < c.tokens().size(); ++i) {
    out_lp.push_back(lp.entry(c.logprobs()[i], c.tokens()[i]));
    out_top.push_back(it.top_logprobs > 0 ? lp.tops(c.top()[i]) : json(nullptr));
  }
  meta["input_token_logprobs"] = in_lp;
  meta["output_token_logprobs"] = out_lp;
  meta["input_top_logprobs"] = in_top;
  meta["output_top_logprobs"] = out_top;
}

// One item's response object, whole so far: {text, output_ids, meta_info}.
json item_json(const Generation& g, size_t index, const Tokenizer* tok, const LabelOf& label,
               const std::string& current_label) {
  const Running& r = g.items[index];
  const SglangItem& it = r.item;
  const ChoiceStream& c = *r.choice;
  json meta{{"id", it.rid},
            {"finish_reason", c.done() ? finish_reason_json(c, it.spec) : json(nullptr)},
            {"prompt_tokens", it.spec.prompt.size()},
            {"completion_tokens", c.tokens().size()},
            {"cached_tokens", c.cached_tokens()},
            {"weight_version", c.versions().empty() ? current_label : label(c.versions().back())},
            {"e2e_latency", monotonic_seconds() - g.started}};
  json versions = json::array();
  for (uint64_t v : c.versions()) versions.push_back(label(v));
  meta["weight_versions"] = versions;
  if (it.return_logprob) add_logprobs(meta, it, c, LogprobEntries{tok, g.text_in_logprobs});
  if (it.spec.return_routed_experts && c.done()) {  // as SGLang: once, when finished
    const std::vector<int32_t>& all = c.routed_experts();
    const size_t per = static_cast<size_t>(g.routing_width);
    const size_t skip = std::min(all.size(), static_cast<size_t>(it.routed_experts_start) * per);
    meta["routed_experts"] =
        base64_encode(all.data() + skip, (all.size() - skip) * sizeof(int32_t));
  }
  return json{{"text", c.text()}, {"output_ids", c.tokens()}, {"meta_info", meta}};
}

using ItemJson = std::function<json(size_t)>;

// The whole answer once every item is done; a client that hangs up stops its generation
// instead of leaving it to run on.
void answer_whole(Generation& g, const httplib::Request& req, httplib::Response& res,
                  const ItemJson& item) {
  const ClientConnection client(req);
  while (true) {
    g.drain();
    if (g.done()) break;
    if (client.closed()) {
      g.cancel_all();
      res.status = 499;
      return;
    }
    g.signal->wait(std::chrono::milliseconds(100));
  }
  json out = json::array();
  for (size_t i = 0; i < g.items.size(); ++i) out.push_back(item(i));
  send_json(res, 200, g.single ? out[0] : out);
}

// Streaming: one event per item that moved, with everything so far; then [DONE].
bool stream_items(Generation& g, httplib::DataSink& sink, const ItemJson& item) {
  while (!g.done()) {
    const std::vector<size_t> moved = g.drain();
    if (moved.empty()) {
      if (!sink.is_writable()) {
        g.cancel_all();
        return false;
      }
      g.signal->wait(std::chrono::milliseconds(100));
      continue;
    }
    for (size_t i : moved) {
      json j = item(i);
      if (!g.single) j["index"] = i;
      const std::string line =
          "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
      if (!sink.write(line.data(), line.size())) {
        g.cancel_all();
        return false;
      }
    }
  }
  static const std::string end = "data: [DONE]\n\n";
  sink.write(end.data(), end.size());
  sink.done();
  return true;
}

}  // namespace

void HttpServer::sglang_generate(const httplib::Request& req, httplib::Response& res) {
  auto g = std::make_shared<Generation>();
  g->started = monotonic_seconds();
  const Tokenizer* tok = engine_.tokenizer();
  SglangLimits limits;
  limits.tokenizer = tok;
  limits.model = engine_.description();
  limits.context = scheduler_->max_context();
  limits.prompt = prompt_limits_;
  limits.vocab = engine_.config().vocab_size;
  limits.eos_ids = engine_.stop_ids().ids;
  limits.defaults = &engine_.generation_defaults();
  limits.max_logprobs = max_logprobs();
  limits.logprob_mode =
      options_.logprobs_mode_explicit ? options_.logprobs_mode : LogprobMode::sglang;
  limits.routing_width = moe_routing_width(engine_.config());
  g->routing_width = limits.routing_width;
  SglangGenerateRequest parsed = parse_sglang_generate(object_body(req), limits);
  g->single = parsed.single;
  g->text_in_logprobs = parsed.text_in_logprobs;
  try {
    for (SglangItem& it : parsed.items) {
      it.spec.on_event = g->signal->notifier();
      auto h = scheduler_->submit(it.spec);
      g->handles.push_back(h);
      g->registered.push_back(std::make_unique<RequestRegistry::Entry>(registry_.add(it.rid, {h})));
      auto choice = std::make_unique<ChoiceStream>(
          h, tok, it.stop, static_cast<int64_t>(it.spec.prompt.size()), it.choice);
      g->items.push_back(Running{std::move(it), std::move(choice)});
    }
  } catch (...) {
    g->cancel_all();
    throw;
  }
  // Shares g with the streaming provider, which calls it after this handler returned.
  ItemJson item = [this, g](size_t index) {
    return item_json(
        *g, index, engine_.tokenizer(), [this](uint64_t v) { return version_label(v); },
        current_version_label());
  };
  if (!parsed.stream) {
    answer_whole(*g, req, res, item);
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider("text/event-stream", [g, item](size_t, httplib::DataSink& sink) {
    return stream_items(*g, sink, item);
  });
}

void HttpServer::sglang_generate_routes() {
  http_->Post("/generate", guarded([this](const httplib::Request& q, httplib::Response& r) {
                sglang_generate(q, r);
              }));
}

}  // namespace refit

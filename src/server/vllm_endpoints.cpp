// vLLM's utility routes that RL clients call beside the OpenAI ones, and the weight
// routes prime-rl's vLLM server extension adds (prime-rl orchestrator/client.py):
//
//   POST /tokenize   {prompt | messages, add_special_tokens?}  -> {tokens, count, max_model_len}
//   POST /detokenize {tokens}                                  -> {prompt}
//   POST /update_weights {model_path | weight_dir}   a checkpoint (all or some tensors) from disk
//   POST /reload_weights                             back to the weights the server started on
//
// The weight routes are the same transaction as /update_weights_from_disk: validated in
// full, committed between two steps after started requests finish (each request sees one
// weight version); a refused update changes nothing.
#include <fmt/format.h>

#include <algorithm>

#include "models/checkpoint_tensor_use.h"
#include "parallel/rank_group.h"
#include "server/api_types.h"
#include "server/chat_request.h"
#include "server/http_server.h"
#include "server/http_util.h"
#include "server/request_fields.h"
#include "server/update_report_json.h"

namespace refit {

using nlohmann::json;

void HttpServer::vllm_routes() {
  vllm_token_routes();
  vllm_weight_routes();
}

void HttpServer::vllm_token_routes() {
  httplib::Server& s = *http_;
  s.Post("/tokenize", guarded([this](const httplib::Request& req, httplib::Response& res) {
           const json body = object_body(req);
           for (const auto& [key, value] : body.items()) {
             const bool chat_field =
                 std::find_if(kChatInputFields, kChatInputFields + kChatInputFieldCount,
                              [&](const char* f) { return key == f; }) !=
                 kChatInputFields + kChatInputFieldCount;
             if (!chat_field && key != "model" && key != "prompt" && key != "add_special_tokens" &&
                 key != "return_token_strs")
               ignore_unknown_field("/tokenize", key);
           }
           const Tokenizer* tok = engine_.tokenizer();
           if (!tok)
             bad_request("prompt", fmt::format("{} carries no tokenizer", engine_.description()));
           std::vector<int32_t> ids;
           const bool chat = body.contains("messages") && !body["messages"].is_null();
           // vLLM's defaults: a chat's template writes the specials, a prompt gets them.
           bool special = !chat;
           if (body.contains("add_special_tokens") && !body["add_special_tokens"].is_null())
             special = json_boolean(body["add_special_tokens"], "add_special_tokens");
           // A text that cannot fit the context is refused before it is tokenized (vLLM's
           // /tokenize refuses a prompt over max_model_len too).
           if (chat) {
             const std::string text = render_chat_prompt(
                 chat_template_, parse_chat_input(parse_json_body_ordered(req.body)));
             check_prompt_text_fits(text.size(), prompt_limits_, "messages");
             ids = tok->encode(text, special, true);
           } else {
             if (!body.contains("prompt") || !body["prompt"].is_string())
               bad_request("prompt", "'prompt' (a string) or 'messages' is required");
             const std::string& text = body["prompt"].get_ref<const std::string&>();
             check_prompt_text_fits(text.size(), prompt_limits_, "prompt");
             ids = tok->encode(text, special, true);
           }
           send_json(res, 200,
                     json{{"tokens", ids},
                          {"count", ids.size()},
                          {"max_model_len", scheduler_->max_context()}});
         }));

  s.Post("/detokenize", guarded([this](const httplib::Request& req, httplib::Response& res) {
           const json body = object_body(req);
           ignore_unknown_fields(body, {"model", "tokens"}, "/detokenize");
           const Tokenizer* tok = engine_.tokenizer();
           if (!tok)
             bad_request("tokens", fmt::format("{} carries no tokenizer", engine_.description()));
           if (!body.contains("tokens") || !body["tokens"].is_array())
             bad_request("tokens", "'tokens' must be a list of token ids");
           std::vector<int32_t> ids;
           for (const auto& v : body["tokens"]) {
             if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
                 v.get<int64_t>() >= engine_.config().vocab_size)
               bad_request("tokens", fmt::format("token ids must be in 0..{}, got {}",
                                                 engine_.config().vocab_size - 1, v.dump()));
             ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
           }
           send_json(res, 200, json{{"prompt", tok->decode(ids)}});
         }));
}

void HttpServer::vllm_weight_routes() {
  httplib::Server& s = *http_;
  // Loads every tensor of `path` this model has, between steps; the reply as vLLM's
  // extension gives it, plus refit's version label.
  auto load = [this](httplib::Response& res, const std::string& path,
                     const UpdateRequestOptions& opts) {
    try {
      const CheckpointContents contents = engine_.checkpoint_contents(path);
      const std::vector<std::string>& names = contents.present;
      if (!opts.options.ignore_unknown_tensors) refuse_unknown_tensors(path, contents.unknown);
      if (names.empty()) fail("{} holds none of this model's tensors", path);
      UpdateReport report;
      const double seconds = scheduler_->run_exclusive(PauseMode::drain, [&] {
        if (ranks_)
          ranks_->update_from_disk(path, names, opts.options);
        else
          engine_.update_weights_from_disk(path, names, opts.options);
        report = engine_.last_update_report();
      });
      report.ignored = contents.unknown;
      json reply{{"message", fmt::format("weights updated from {} ({} tensors, {:.3f} s)", path,
                                         names.size(), seconds)},
                 {"success", true},
                 {"weight_version", current_version_label()}};
      add_update_report(reply, report, opts.report_names);
      send_json(res, 200, reply);
    } catch (const HttpError&) {
      throw;
    } catch (const std::exception& e) {
      send_json(res, 400,
                json{{"message",
                      std::string("weight update refused, the weights are unchanged: ") + e.what()},
                     {"success", false},
                     {"weight_version", current_version_label()}});
    }
  };
  s.Post("/update_weights",
         guarded([this, load](const httplib::Request& req, httplib::Response& res) {
           const json body = object_body(req);
           ignore_unknown_fields(body,
                                 {"model_path", "weight_dir", "check_finite",
                                  "ignore_unknown_tensors", "report_tensor_names"},
                                 "/update_weights");
           const UpdateRequestOptions opts = parse_update_options(body, options_.check_finite);
           std::string path, field;
           for (const char* key : {"model_path", "weight_dir"})
             if (body.contains(key) && !body[key].is_null()) {
               if (!body[key].is_string() || body[key].get<std::string>().empty())
                 bad_request(key, fmt::format("'{}' must be a non-empty string", key));
               path = body[key].get<std::string>();
               field = key;
             }
           if (path.empty())
             bad_request("model_path", "'model_path' (or 'weight_dir') is required");
           load(res, weights_root_.resolve(path, field), opts);
         }));
  s.Post("/reload_weights",
         guarded([this, load](const httplib::Request& req, httplib::Response& res) {
           const json body = req.body.empty() ? json::object() : object_body(req);
           UpdateRequestOptions opts = parse_update_options(body, options_.check_finite);
           // The file the server started on was taken once: what a fresh load left out
           // is listed, not refused, unless the request asks.
           if (!body.contains("ignore_unknown_tensors")) opts.options.ignore_unknown_tensors = true;
           if (engine_.model_path().empty())
             bad_request("model_path", "the built-in demo model has no file to reload");
           load(res, engine_.model_path(), opts);
         }));
}

}  // namespace refit

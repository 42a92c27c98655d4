#include "server/rl_endpoints.h"

#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>

#include "formats/checkpoint.h"
#include "models/checkpoint_tensor_use.h"
#include "parallel/rank_group.h"
#include "parallel/weight_readback.h"
#include "server/api_types.h"
#include "server/http_util.h"
#include "server/request_fields.h"
#include "server/update_report_json.h"
#include "server/weight_carrier.h"
#include "server/weight_update_request.h"

namespace refit {

using nlohmann::json;

namespace {

void reply(httplib::Response& res, int status, bool success, const std::string& message,
           const std::string& version, json extra = json::object()) {
  json j = std::move(extra);
  j["success"] = success;
  j["message"] = message;
  j["weight_version"] = version;
  res.status = status;
  res.set_content(j.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

template <typename T>
T field(const json& j, const char* name, T fallback) {
  if (!j.contains(name) || j[name].is_null()) return fallback;
  try {
    return j[name].get<T>();
  } catch (const std::exception&) {
    throw HttpError{400,
                    fmt::format("field '{}' has the wrong type: {}", name, j[name].dump()),
                    "invalid_request_error",
                    name,
                    {}};
  }
}

// A refused update: SGLang's 400 {success: false, message, num_paused_requests}; nothing
// changed, so the label is the current one.
void refuse(RlContext& c, httplib::Response& res, const std::string& why) {
  // The scheduler counts refused updates (refit_refit_failures_total): the refusal passes
  // through it between two steps, in place, so nobody is drained, aborted or paused.
  try {
    c.scheduler.run_exclusive(PauseMode::in_place, [&] { throw Error(why); });
  } catch (const std::exception&) {
  }
  reply(res, 400, false, "weight update refused, the weights are unchanged: " + why,
        c.label_of(c.engine.weight_version()), json{{"num_paused_requests", 0}});
}

// SGLang keeps one label, server_args.weight_version: an update that names a version
// sets it and one that names none leaves it as it was. refit labels each numeric version,
// so the new version takes the label given, else its predecessor's when that one was
// named; a server whose versions were never named keeps labelling them by number.
void label_version(RlContext& c, uint64_t before, uint64_t after,
                   const std::optional<std::string>& label) {
  std::lock_guard lock(c.labels_mutex);
  if (label) {
    c.labels[after] = *label;
  } else if (after != before) {
    if (auto it = c.labels.find(before); it != c.labels.end()) c.labels[after] = it->second;
  }
}

struct UpdatePlan {
  PauseMode mode = PauseMode::drain;
  std::optional<std::string> label;
  bool keep_pause = false;
  std::string what;  // "N tensors", for the message
  json extra = json::object();
  const UpdateReport* report = nullptr;  // filled by the commit, added to the reply
  std::optional<bool> report_names;
};

// Runs a validated update between steps, labels it and answers as SGLang does
// ({success, message, num_paused_requests}) plus refit's version and cache figures.
void run_update(RlContext& c, httplib::Response& res, const UpdatePlan& plan,
                const std::function<void()>& commit) {
  uint64_t before = 0;
  int64_t paused_requests = 0;
  try {
    const uint64_t dropped_before = c.scheduler.stats().prefix_blocks_dropped;
    const double seconds = c.scheduler.run_exclusive(plan.mode, [&] {
      // Requests held while the weights change: queued ones (drain, abort) and, between
      // two steps of an is_async update, running ones too.
      const SchedulerStats s = c.scheduler.stats();
      paused_requests = s.running + s.waiting;
      before = c.engine.weight_version();
      commit();
    });
    const uint64_t v = c.engine.weight_version();
    label_version(c, before, v, plan.label);
    if (plan.keep_pause && !c.scheduler.paused()) c.scheduler.pause(PauseMode::in_place);
    const uint64_t dropped = c.scheduler.stats().prefix_blocks_dropped - dropped_before;
    std::string message = "Succeeded to update model weights.";
    if (plan.label) message += fmt::format(" Weight version updated to {}.", *plan.label);
    message +=
        fmt::format(" ({} in {:.3f} s; {} cached KV blocks dropped{})", plan.what, seconds, dropped,
                    plan.keep_pause ? "; generation stays paused until /continue_generation" : "");
    json extra = plan.extra;
    if (plan.report) add_update_report(extra, *plan.report, plan.report_names);
    extra["version"] = v;
    extra["num_paused_requests"] = paused_requests;
    extra["flushed_cache_blocks"] = dropped;
    reply(res, 200, true, message, c.label_of(v), extra);
  } catch (const HttpError&) {
    throw;
  } catch (const std::exception& e) {
    reply(res, 400, false,
          std::string("weight update refused, the weights are unchanged: ") + e.what(),
          c.label_of(c.engine.weight_version()), json{{"num_paused_requests", paused_requests}});
  }
}

// refit's own schema: {"named_tensors": [{name, dtype, shape, data}, ...]}.
NamedTensors decode_refit_named_tensors(const json& list) {
  if (!list.is_array() || list.empty())
    throw HttpError{400,
                    "'named_tensors' must be a non-empty list",
                    "invalid_request_error",
                    "named_tensors",
                    {}};
  NamedTensors tensors;
  for (size_t i = 0; i < list.size(); ++i) {
    Tensor x = decode_named_tensor(list[i], fmt::format("named_tensors[{}]", i));
    tensors.emplace_back(list[i]["name"].get<std::string>(), std::move(x));
  }
  return tensors;
}

void update_from_disk(RlContext& c, const httplib::Request& req, httplib::Response& res) {
  const json body = object_body(req);
  ignore_unknown_fields(body, kDiskUpdateFields, "/update_weights_from_disk");
  DiskUpdateRequest r = parse_disk_update(body);
  const UpdateRequestOptions opts = parse_update_options(body, c.check_finite);
  // Inside --weights-root, symlinks resolved: the path that is checked is the one opened.
  if (c.weights_root) r.model_path = c.weights_root->resolve(r.model_path, "model_path");
  // Everything is read and validated before generation is disturbed: a refused update
  // neither drains nor aborts anyone.
  std::vector<std::string> names, unknown;
  std::unique_ptr<WeightUpdate> staged;
  size_t total = 0;
  try {
    check_disk_load_format(r.load_format,
                           checkpoint_format_name(Checkpoint::open(r.model_path)->format()));
    // SGLang loads whatever tensors the checkpoint holds; so does refit: a partial folder
    // updates its tensors and leaves every other parameter as it is.
    CheckpointContents contents = c.engine.checkpoint_contents(r.model_path);
    names = std::move(contents.present);
    unknown = std::move(contents.unknown);
    total = c.engine.model().parameters().checkpoint_names().size();
    if (!opts.options.ignore_unknown_tensors) refuse_unknown_tensors(r.model_path, unknown);
    if (names.empty())
      throw Error(fmt::format("{}: holds none of the served model's tensors", r.model_path));
    if (!c.ranks) staged = c.engine.stage_update_from_disk(r.model_path, names, opts.options);
  } catch (const HttpError&) {
    throw;
  } catch (const std::exception& e) {
    refuse(c, res, e.what());
    return;
  }
  UpdatePlan plan;
  plan.mode = r.abort_all_requests ? PauseMode::abort
              : r.is_async         ? PauseMode::in_place
                                   : PauseMode::drain;
  plan.label = r.weight_version;
  plan.keep_pause = r.keep_pause;
  plan.what = names.size() == total
                  ? fmt::format("{} tensors", names.size())
                  : fmt::format("{} of {} tensors: a partial checkpoint", names.size(), total);
  plan.extra = json{{"token_step", r.token_step}, {"tensors_updated", names.size()}};
  UpdateReport report;
  plan.report = &report;
  plan.report_names = opts.report_names;
  run_update(c, res, plan, [&] {
    if (c.ranks) {
      c.ranks->update_from_disk(r.model_path, names, opts.options);
      report = c.engine.last_update_report();  // the lead's
    } else {
      c.engine.commit(*staged);
      report = staged->report();
    }
    report.ignored = unknown;
  });
}

void update_from_tensor(RlContext& c, const httplib::Request& req, httplib::Response& res) {
  const json body = object_body(req);
  ignore_unknown_fields(body, kTensorUpdateFields, "/update_weights_from_tensor");
  const TensorUpdateRequest r = parse_tensor_update(body);
  const UpdateRequestOptions opts = parse_update_options(body, c.check_finite);
  const TensorLoadFormat format = tensor_load_format(r.load_format);
  const bool sglang =
      body.contains("serialized_named_tensors") && !body["serialized_named_tensors"].is_null();
  const bool own = body.contains("named_tensors") && !body["named_tensors"].is_null();
  if (sglang == own)
    throw HttpError{400,
                    sglang ? "send either 'serialized_named_tensors' (SGLang's schema) or "
                             "'named_tensors' (refit's), not both"
                           : "'serialized_named_tensors' is required (or refit's 'named_tensors')",
                    "invalid_request_error",
                    "serialized_named_tensors",
                    {}};
  if (own && format == TensorLoadFormat::flattened_bucket)
    throw HttpError{400,
                    "load_format 'flattened_bucket' goes with serialized_named_tensors; "
                    "'named_tensors' is a list",
                    "invalid_request_error",
                    "load_format",
                    {}};
  const NamedTensors tensors =
      own ? decode_refit_named_tensors(body["named_tensors"])
          : decode_serialized_named_tensors(body["serialized_named_tensors"], format);
  // Validate before pausing anything: a refused tensor never disturbs generation. Both
  // null and "direct" load through each parameter's recorded loader: refit addresses
  // parameters only by checkpoint name, and that path is what makes a reload exact.
  auto update = c.engine.begin_update(opts.options);
  for (const auto& [name, tensor] : tensors) {
    try {
      update->update(name, tensor);
    } catch (const std::exception& e) {
      update->abort();
      refuse(c, res, e.what());
      return;
    }
  }
  UpdatePlan plan;
  plan.mode = r.abort_all_requests ? PauseMode::abort : PauseMode::drain;
  plan.label = r.weight_version;
  plan.what = fmt::format("{} tensors", tensors.size());
  plan.extra = json{{"tensors_updated", tensors.size()}};
  UpdateReport report;
  plan.report = &report;
  plan.report_names = opts.report_names;
  if (c.ranks) {
    // Validated here on rank 0 already; every rank validates its shard again and all
    // commit or none does.
    update->abort();
    run_update(c, res, plan, [&] {
      c.ranks->update_from_tensors(tensors, opts.options);
      report = c.engine.last_update_report();  // the lead's
    });
  } else {
    run_update(c, res, plan, [&] {
      c.engine.commit(*update);
      report = update->report();
    });
  }
}

// SGLang's /update_weight_version: relabels the weights being served (no weight moves).
void update_weight_version(RlContext& c, const httplib::Request& req, httplib::Response& res) {
  const json body = object_body(req);
  ignore_unknown_fields(body, kVersionUpdateFields, "/update_weight_version");
  const VersionUpdateRequest r = parse_version_update(body);
  if (r.abort_all_requests) {
    // SGLang aborts every request and goes on serving; a paused server stays paused.
    const bool was_paused = c.scheduler.paused();
    c.scheduler.pause(PauseMode::abort);
    if (!was_paused) c.scheduler.resume();
  }
  const uint64_t v = c.engine.weight_version();
  {
    std::lock_guard lock(c.labels_mutex);
    c.labels[v] = r.new_version;
  }
  reply(res, 200, true, fmt::format("Weight version updated to {}", r.new_version), c.label_of(v),
        json{{"new_version", r.new_version}, {"version", v}});
}

// 256 MiB of values, or a whole parameter (lm_head, the embedding) when that is more.
size_t default_readback_bytes(const Engine& engine) {
  size_t largest = 0;
  for (const ParameterInfo& p : engine.named_parameters()) {
    size_t n = 1;
    for (int64_t d : p.logical_shape) n *= static_cast<size_t>(d);
    largest = std::max(largest, n * sizeof(float));
  }
  return std::max(size_t{256} << 20, largest);
}

// One of at most `limit` readbacks running; a 503 when all are taken.
class ReadbackSlot {
 public:
  ReadbackSlot(std::atomic<int>& running, int limit) : running_(running) {
    if (running_.fetch_add(1) >= limit) {
      running_.fetch_sub(1);
      throw HttpError{503,
                      fmt::format("{} weight readbacks are running; retry later", limit),
                      "service_unavailable",
                      {},
                      "server_busy"};
    }
  }
  ~ReadbackSlot() { running_.fetch_sub(1); }
  ReadbackSlot(const ReadbackSlot&) = delete;
  ReadbackSlot& operator=(const ReadbackSlot&) = delete;

 private:
  std::atomic<int>& running_;
};

}  // namespace

void register_rl_endpoints(httplib::Server& s, RlContext c) {
  if (c.max_readback_bytes == 0) c.max_readback_bytes = default_readback_bytes(c.engine);
  auto wrap = [c](auto handler) mutable {
    return [c, handler](const httplib::Request& req, httplib::Response& res) mutable {
      try {
        handler(c, req, res);
      } catch (const HttpError& e) {
        reply(res, e.status, false, e.message, c.label_of(c.engine.weight_version()));
      } catch (const std::exception& e) {
        reply(res, 400, false, e.what(), c.label_of(c.engine.weight_version()));
      }
    };
  };

  s.Post("/update_weights_from_disk", wrap(update_from_disk));
  s.Post("/update_weights_from_tensor", wrap(update_from_tensor));
  s.Post("/update_weight_version", wrap(update_weight_version));

  auto readbacks = std::make_shared<std::atomic<int>>(0);
  s.Post("/get_weights_by_name",
         wrap([readbacks](RlContext& c, const httplib::Request& req, httplib::Response& res) {
           const json body = object_body(req);
           ignore_unknown_fields(body, {"name", "truncate_size"}, "/get_weights_by_name");
           const std::string name = field<std::string>(body, "name", "");
           const int64_t truncate = field<int64_t>(body, "truncate_size", 100);
           if (truncate < 0)
             throw HttpError{
                 400, "'truncate_size' must be >= 0", "invalid_request_error", "truncate_size", {}};
           // Each reply holds its values several times over (f32, JSON values, text): the
           // bytes per reply and the replies at once are both bounded.
           const ReadbackSlot slot(*readbacks, c.max_concurrent_readbacks);
           const int64_t cap = static_cast<int64_t>(c.max_readback_bytes / sizeof(float));
           const int64_t wanted = std::min(truncate, cap + 1);  // one more tells it was cut
           // Under tensor parallelism every rank reads its piece and the lead puts them together,
           // so the reply is the whole checkpoint tensor whatever --tp is.
           std::vector<WeightPiece> pieces;
           if (c.ranks) {
             pieces = c.ranks->read_weight(name, wanted);
           } else {
             std::shared_lock lock(c.engine.weights_mutex());
             pieces.push_back(local_weight_piece(c.engine, name, wanted));
           }
           for (const WeightPiece& piece : pieces)
             if (piece.status != 200)
               throw HttpError{piece.status, piece.error, "invalid_request_error", "name", {}};
           const Tensor full = assemble_weight(pieces);
           if (std::min(full.numel(), wanted) > cap)
             throw HttpError{400,
                             fmt::format("'truncate_size' {} asks for more than {} values of '{}' "
                                         "({} bytes as f32, --max-readback-bytes)",
                                         truncate, cap, name, c.max_readback_bytes),
                             "invalid_request_error", "truncate_size", "readback_too_large"};
           const float* data = full.data<const float>();
           const std::vector<float> values(data, data + std::min<int64_t>(full.numel(), wanted));
           json out{{"name", name},
                    {"shape", pieces.front().full_shape},
                    {"dtype", pieces.front().dtype},
                    {"values", values}};
           if (!pieces.front().sharding.empty())
             out["sharding"] = pieces.front().sharding;  // a fused parameter's local rows
           reply(res, 200, true, "ok", c.label_of(c.engine.weight_version()), out);
         }));
  // /pause_generation, /continue_generation, /flush_cache and /get_weight_version live with
  // the other lifecycle routes (server/lifecycle_endpoints.cpp).
}

}  // namespace refit

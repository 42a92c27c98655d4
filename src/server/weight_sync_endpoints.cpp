#include "server/weight_sync_endpoints.h"

#include <fmt/format.h>
#include <httplib.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>

#include "parallel/rank_group.h"
#include "parallel/weight_sync.h"
#include "server/api_types.h"
#include "server/http_util.h"
#include "server/request_fields.h"
#include "server/update_report_json.h"

namespace refit {

using nlohmann::json;

namespace {

constexpr const char* kDefaultGroup = "weight_update_group";  // SGLang's default

// One process's sync state for the single-rank server (under --tp the RankGroup holds
// each rank's). One sync operation at a time: init, update and destroy all talk to the
// same trainer in order.
struct SyncState {
  std::mutex mutex;
  WeightSyncGroups groups;
};

void reply(httplib::Response& res, RlContext& c, int status, bool success,
           const std::string& message, json extra = json::object()) {
  json j = std::move(extra);
  j["success"] = success;
  j["message"] = message;
  j["weight_version"] = c.label_of(c.engine.weight_version());
  res.status = status;
  res.set_content(j.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

HttpError bad(const std::string& field, const std::string& message) {
  return HttpError{400, message, "invalid_request_error", field, {}};
}

std::string string_field(const json& j, const char* name, const std::string& fallback,
                         bool required = false) {
  if (!j.contains(name) || j[name].is_null()) {
    if (required) throw bad(name, fmt::format("'{}' is required", name));
    return fallback;
  }
  if (!j[name].is_string())
    throw bad(name, fmt::format("'{}' must be a string, got {}", name, j[name].dump()));
  return j[name].get<std::string>();
}

int64_t int_field(const json& j, const char* name, int64_t lo, int64_t hi) {
  if (!j.contains(name) || j[name].is_null())
    throw bad(name, fmt::format("'{}' is required", name));
  if (!j[name].is_number_integer())
    throw bad(name, fmt::format("'{}' must be an integer, got {}", name, j[name].dump()));
  const int64_t v = j[name].get<int64_t>();
  if (v < lo || v > hi)
    throw bad(name, fmt::format("'{}' must be in {}..{}, got {}", name, lo, hi, v));
  return v;
}

bool bool_field(const json& j, const char* name, bool fallback) {
  if (!j.contains(name) || j[name].is_null()) return fallback;
  if (!j[name].is_boolean())
    throw bad(name, fmt::format("'{}' must be true or false, got {}", name, j[name].dump()));
  return j[name].get<bool>();
}

// weight_version: slime sends str(int); a bare number is taken as its decimal text.
std::string version_label(const json& j) {
  if (!j.contains("weight_version") || j["weight_version"].is_null()) return "";
  const json& v = j["weight_version"];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  throw bad("weight_version", fmt::format("'weight_version' must be a string, got {}", v.dump()));
}

TorchGroupOptions parse_init(const json& body) {
  TorchGroupOptions o;
  o.master_address = string_field(body, "master_address", "", true);
  o.master_port = static_cast<int>(int_field(body, "master_port", 1, 65535));
  o.rank = static_cast<int>(int_field(body, "rank_offset", 0, 1 << 20));  // the ranks add their own
  o.world_size = static_cast<int>(int_field(body, "world_size", 1, 1 << 20));
  o.group_name = string_field(body, "group_name", kDefaultGroup);
  o.backend = string_field(body, "backend", "nccl");  // SGLang's default, refused below by name
  if (body.contains("timeout") && !body["timeout"].is_null()) {
    if (!body["timeout"].is_number() || body["timeout"].get<double>() <= 0)
      throw bad("timeout", "'timeout' must be a positive number of seconds");
    o.timeout = std::chrono::milliseconds(
        static_cast<int64_t>(body["timeout"].get<double>() * 1000.0 + 0.5));
  }
  if (o.backend == "nccl")
    throw bad("backend",
              "backend 'nccl' needs GPUs and NCCL; this refit runs on CPUs and joins 'gloo' "
              "groups: create the "
              "trainer's group with backend='gloo' and pass \"backend\": \"gloo\"");
  if (o.backend != "gloo")
    throw bad("backend",
              fmt::format("unknown backend '{}' (this refit supports 'gloo')", o.backend));
  return o;
}

// The request's tensors as the trainer will broadcast them. A request that cannot be
// parsed into byte counts cannot be received: the caller then leaves the group.
DistributedUpdate parse_update(const json& body, int64_t max_bytes) {
  DistributedUpdate u;
  u.group_name = string_field(body, "group_name", kDefaultGroup);
  const std::string format = string_field(body, "load_format", "");
  if (format == "flattened_bucket")
    u.flattened_bucket = true;
  else if (!format.empty())
    throw bad(
        "load_format",
        fmt::format("load_format '{}' is not supported here (null or 'flattened_bucket')", format));
  // SGLang before batched updates (and AReaL's callers of that era) sent one tensor per
  // request as {name, dtype, shape}: the same as lists of one.
  json lists = body;
  if (!body.contains("names") && body.contains("name")) {
    lists["names"] = json::array({body["name"]});
    lists["dtypes"] = json::array({body.value("dtype", json())});
    lists["shapes"] = json::array({body.value("shape", json())});
  }
  for (const char* f : {"names", "dtypes", "shapes"})
    if (!lists.contains(f) || !lists[f].is_array())
      throw bad(f, fmt::format("'{}' must be a list", f));
  const json &names = lists["names"], &dtypes = lists["dtypes"], &shapes = lists["shapes"];
  if (names.empty()) throw bad("names", "'names' must not be empty");
  if (dtypes.size() != names.size() || shapes.size() != names.size())
    throw bad("names",
              fmt::format("names, dtypes and shapes must have one entry per tensor: {}, {} and {}",
                          names.size(), dtypes.size(), shapes.size()));
  int64_t total = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    if (!names[i].is_string()) throw bad("names", fmt::format("names[{}] must be a string", i));
    if (!dtypes[i].is_string()) throw bad("dtypes", fmt::format("dtypes[{}] must be a string", i));
    const std::string dtype = dtypes[i].get<std::string>();
    const std::optional<DType> dt = dtype_from_torch_name(dtype);
    if (!dt)
      throw bad("dtypes", fmt::format("dtypes[{}]: unknown dtype '{}' for '{}'", i, dtype,
                                      names[i].get<std::string>()));
    if (!shapes[i].is_array() || shapes[i].size() > 16)
      throw bad("shapes", fmt::format("shapes[{}] must be a list of at most 16 sizes", i));
    Shape shape;
    int64_t numel = 1;
    for (const json& d : shapes[i]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0)
        throw bad("shapes", fmt::format("shapes[{}] must hold non-negative integers, got {}", i,
                                        shapes[i].dump()));
      const int64_t n = d.get<int64_t>();
      if (n > 0 && numel > max_bytes / n)
        throw bad("shapes", fmt::format("shapes[{}] {} is too large", i, shapes[i].dump()));
      numel *= n;
      shape.push_back(n);
    }
    total += static_cast<int64_t>(dtype_nbytes(*dt, numel));
    if (total > max_bytes)
      throw bad(
          "shapes",
          fmt::format("the request announces more than {} bytes, beyond any update of this model",
                      max_bytes));
    u.names.push_back(names[i].get<std::string>());
    u.dtypes.push_back(*dt);
    u.shapes.push_back(std::move(shape));
  }
  return u;
}

// The most one update can carry: every parameter in f64, plus slack.
int64_t max_update_bytes(const Engine& engine) {
  int64_t values = 0;
  for (const ParameterInfo& p : engine.named_parameters()) {
    int64_t n = 1;
    for (int64_t d : p.logical_shape) n *= d;
    values += n;
  }
  return values * 8 + (int64_t{64} << 20);
}

// The update's commit between steps; the label and reply as run_update in rl_endpoints.
void commit_between_steps(RlContext& c, httplib::Response& res, const json& body,
                          const DistributedUpdate& u, double receive_seconds,
                          const std::function<void()>& commit, const UpdateReport& report,
                          std::optional<bool> report_names) {
  const bool abort_all = bool_field(body, "abort_all_requests", false);
  const std::string label = version_label(body);
  // flush_cache (SGLang's default true): a committed update always drops every cached
  // block, since each was computed with the old weights; false cannot keep them.
  bool_field(body, "flush_cache", true);
  const uint64_t dropped_before = c.scheduler.stats().prefix_blocks_dropped;
  const double seconds =
      c.scheduler.run_exclusive(abort_all ? PauseMode::abort : PauseMode::drain, commit);
  const uint64_t v = c.engine.weight_version();
  if (!label.empty()) {
    std::lock_guard lock(c.labels_mutex);
    c.labels[v] = label;
  }
  const uint64_t dropped = c.scheduler.stats().prefix_blocks_dropped - dropped_before;
  json extra{{"version", v}, {"num_paused_requests", 0}, {"flushed_cache_blocks", dropped}};
  add_update_report(extra, report, report_names);
  reply(res, c, 200, true,
        fmt::format("Succeeded to update parameter online: {} tensors from group '{}' received in "
                    "{:.3f} s{}, "
                    "committed in {:.3f} s; {} cached KV blocks dropped",
                    u.names.size(), u.group_name, receive_seconds,
                    u.flattened_bucket ? " (one flattened bucket)" : "", seconds, dropped),
        extra);
}

void init_group(RlContext& c, SyncState& st, const httplib::Request& req, httplib::Response& res) {
  const json body = object_body(req);
  ignore_unknown_fields(body,
                        {"master_address", "master_port", "rank_offset", "world_size", "group_name",
                         "backend", "timeout"},
                        "/init_weights_update_group");
  TorchGroupOptions o = parse_init(body);
  const int tp = c.engine.world_size();
  if (o.rank < 1 || o.rank + tp > o.world_size)
    throw bad(
        "rank_offset",
        fmt::format(
            "rank_offset {} with this engine's {} rank(s) does not fit a group of world_size {} "
            "(rank 0 is the trainer's)",
            o.rank, tp, o.world_size));
  std::lock_guard lock(st.mutex);
  std::string description;
  try {
    if (c.ranks) {
      description = c.ranks->sync_init(o);
    } else {
      description = st.groups.init(o);
    }
  } catch (const std::exception& e) {
    reply(res, c, 400, false,
          std::string("Failed to initialize custom process group: ") + e.what());
    return;
  }
  reply(res, c, 200, true,
        fmt::format("Succeeded to initialize custom process group: {} (ranks {}..{})", description,
                    o.rank, o.rank + tp - 1));
}

// Nothing of a refused request can be received, so the trainer (which broadcasts what it
// announced) and the group are out of step: the engine leaves the group rather than
// mis-pair a later broadcast with this one's tensors. Returns whether it left.
bool leave_out_of_step_group(RlContext& c, SyncState& st, const std::string& group) {
  bool left = false;
  try {
    if (c.ranks)
      c.ranks->sync_destroy(group), left = true;
    else if (st.groups.has(group))
      st.groups.destroy(group), left = true;
  } catch (const std::exception&) {
  }
  return left;
}

// Receives the announced tensors and stages them: on every rank under --tp (nullptr is
// returned then), else into a WeightUpdate of this engine (aborted when staging throws).
std::unique_ptr<WeightUpdate> receive_update(RlContext& c, SyncState& st,
                                             const DistributedUpdate& u,
                                             std::vector<std::pair<std::string, Tensor>>& tensors) {
  if (c.ranks) {
    c.ranks->sync_receive(u);  // every rank receives, stages and agrees
    return nullptr;
  }
  tensors = st.groups.receive(u);
  std::unique_ptr<WeightUpdate> update = c.engine.begin_update(u.options);
  try {
    for (const auto& [name, t] : tensors) update->update(name, t);
  } catch (const std::exception&) {
    update->abort();
    throw;
  }
  return update;
}

void update_from_distributed(RlContext& c, SyncState& st, const httplib::Request& req,
                             httplib::Response& res) {
  const json body = object_body(req);
  ignore_unknown_fields(body,
                        {"names", "dtypes", "shapes", "name", "dtype", "shape", "group_name",
                         "flush_cache", "abort_all_requests", "weight_version", "load_format",
                         "check_finite", "ignore_unknown_tensors", "report_tensor_names"},
                        "/update_weights_from_distributed");
  std::lock_guard lock(st.mutex);
  const std::string group = string_field(body, "group_name", kDefaultGroup);
  DistributedUpdate u;
  UpdateRequestOptions opts;
  try {
    u = parse_update(body, max_update_bytes(c.engine));
    opts = parse_update_options(body, c.check_finite);
    u.options = opts.options;
    bool_field(body, "abort_all_requests", false);  // type errors before anything is received
    bool_field(body, "flush_cache", true);
    version_label(body);
  } catch (const HttpError& e) {
    const bool left = leave_out_of_step_group(c, st, group);
    reply(res, c, e.status, false,
          "weight update refused, the weights are unchanged: " + e.message +
              (left ? fmt::format(
                          "; the engine left group '{}' since it could not receive this request's "
                          "broadcasts: init a new group",
                          group)
                    : ""));
    return;
  }
  const auto started = std::chrono::steady_clock::now();
  std::unique_ptr<WeightUpdate> update;
  std::vector<std::pair<std::string, Tensor>> tensors;
  try {
    update = receive_update(c, st, u, tensors);
  } catch (const std::exception& e) {
    reply(res, c, 400, false,
          std::string("weight update refused, the weights are unchanged: ") + e.what());
    return;
  }
  const double received =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  try {
    UpdateReport report;
    commit_between_steps(
        c, res, body, u, received,
        [&] {
          if (c.ranks) {
            c.ranks->sync_commit();
            report = c.engine.last_update_report();  // the lead's
          } else {
            c.engine.commit(*update);
            report = update->report();
          }
        },
        report, opts.report_names);
  } catch (const std::exception& e) {
    if (c.ranks) {
      try {
        c.ranks->sync_abort();
      } catch (const std::exception&) {
      }
    } else if (update && !update->finished()) {
      update->abort();
    }
    reply(res, c, 400, false,
          std::string("weight update refused, the weights are unchanged: ") + e.what());
  }
}

void destroy_group(RlContext& c, SyncState& st, const httplib::Request& req,
                   httplib::Response& res) {
  const json body = object_body(req);
  ignore_unknown_fields(body, {"group_name"}, "/destroy_weights_update_group");
  const std::string group = string_field(body, "group_name", kDefaultGroup);
  std::lock_guard lock(st.mutex);
  try {
    if (c.ranks)
      c.ranks->sync_destroy(group);
    else
      st.groups.destroy(group);
  } catch (const std::exception& e) {
    reply(res, c, 400, false, std::string("Failed to destroy custom process group: ") + e.what());
    return;
  }
  reply(res, c, 200, true, fmt::format("Succeeded to destroy custom process group '{}'.", group));
}

}  // namespace

void register_weight_sync_endpoints(httplib::Server& s, RlContext c) {
  auto state = std::make_shared<SyncState>();
  auto wrap = [c, state](auto handler) mutable {
    return [c, state, handler](const httplib::Request& req, httplib::Response& res) mutable {
      try {
        handler(c, *state, req, res);
      } catch (const HttpError& e) {
        reply(res, c, e.status, false, e.message);
      } catch (const std::exception& e) {
        reply(res, c, 400, false, e.what());
      }
    };
  };
  s.Post("/init_weights_update_group", wrap(init_group));
  s.Post("/update_weights_from_distributed", wrap(update_from_distributed));
  s.Post("/destroy_weights_update_group", wrap(destroy_group));
}

}  // namespace refit

#include "server/rl_endpoints.h"

#include <fmt/format.h>
#include <httplib.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "server/api_types.h"
#include "server/rank_group.h"
#include "server/weight_readback.h"

namespace refit {

using nlohmann::json;

std::string base64_decode(const std::string& text) {
  static const auto table = [] {
    std::array<int8_t, 256> t{};
    t.fill(-1);
    const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i) t[static_cast<unsigned char>(a[i])] = static_cast<int8_t>(i);
    t['-'] = 62;  // URL-safe alphabet too
    t['_'] = 63;
    return t;
  }();
  std::string out;
  out.reserve(text.size() / 4 * 3);
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '=') break;
    if (c == '\n' || c == '\r') continue;
    const int v = table[c];
    if (v < 0) fail("base64: invalid character at offset {}", i);
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return out;
}

namespace {

void reply(httplib::Response& res, int status, bool success, const std::string& message, const std::string& version,
           json extra = json::object()) {
  json j = std::move(extra);
  j["success"] = success;
  j["message"] = message;
  j["weight_version"] = version;
  res.status = status;
  res.set_content(j.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

json object_body(const httplib::Request& req) {
  json j = req.body.empty() ? json::object() : parse_json_body(req.body);
  if (!j.is_object()) throw HttpError{400, "the request body must be a JSON object", "invalid_request_error", {}, {}};
  return j;
}

void only_fields(const json& j, std::initializer_list<const char*> allowed, const char* endpoint) {
  for (const auto& [k, v] : j.items()) {
    bool ok = false;
    for (const char* a : allowed) ok = ok || k == a;
    if (!ok) throw HttpError{400, fmt::format("unknown field '{}' for {}", k, endpoint), "invalid_request_error", k, {}};
  }
}

template <typename T>
T field(const json& j, const char* name, T fallback) {
  if (!j.contains(name) || j[name].is_null()) return fallback;
  try {
    return j[name].get<T>();
  } catch (const std::exception&) {
    throw HttpError{400, fmt::format("field '{}' has the wrong type: {}", name, j[name].dump()), "invalid_request_error", name, {}};
  }
}

// Runs an update between steps; records its label; answers success or the refusal.
void run_update(RlContext& c, httplib::Response& res, const json& body, const std::function<void()>& update) {
  const bool abort_all = field<bool>(body, "abort_all_requests", false);
  const std::string label = field<std::string>(body, "weight_version", "");
  // SGLang's flush_cache (default true) flushes the prefix cache after the update. Here a
  // committed update always drops every cached block (all were computed with the old
  // weights, and reusing one would hand a request stale K/V), so true is what happens
  // anyway and false cannot keep them; the reply says how many blocks went.
  field<bool>(body, "flush_cache", true);  // type-checked
  try {
    const uint64_t dropped_before = c.scheduler.stats().prefix_blocks_dropped;
    const double seconds = c.scheduler.run_exclusive(abort_all ? PauseMode::abort : PauseMode::drain, update);
    const uint64_t v = c.engine.weight_version();
    if (!label.empty()) {
      std::lock_guard lock(c.labels_mutex);
      c.labels[v] = label;
    }
    const uint64_t dropped = c.scheduler.stats().prefix_blocks_dropped - dropped_before;
    reply(res, 200, true, fmt::format("weights updated in {:.3f} s; {} cached KV blocks dropped", seconds, dropped),
          c.label_of(v), json{{"version", v}, {"num_paused_requests", 0}, {"flushed_cache_blocks", dropped}});
  } catch (const HttpError&) {
    throw;
  } catch (const std::exception& e) {
    reply(res, 400, false, std::string("weight update refused, the weights are unchanged: ") + e.what(),
          c.label_of(c.engine.weight_version()));
  }
}

Tensor decode_tensor(const json& t, size_t index) {
  const std::string where = fmt::format("named_tensors[{}]", index);
  if (!t.is_object() || !t.contains("name") || !t["name"].is_string() || !t.contains("shape") || !t["shape"].is_array() ||
      !t.contains("data") || !t["data"].is_string())
    throw HttpError{400, where + " needs name (string), shape (list), data (base64 string) and dtype", "invalid_request_error",
                    where, {}};
  const std::string dtype_name = t.value("dtype", "f32");
  auto dt = dtype_from_name(dtype_name == "float32" ? "f32" : dtype_name == "bfloat16" ? "bf16" : dtype_name == "float16" ? "f16" : dtype_name);
  if (!dt) throw HttpError{400, fmt::format("{}: unknown dtype '{}'", where, dtype_name), "invalid_request_error", where, {}};
  Shape shape;
  for (const auto& d : t["shape"]) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0)
      throw HttpError{400, where + ": shape entries must be non-negative integers", "invalid_request_error", where, {}};
    shape.push_back(d.get<int64_t>());
  }
  const std::string bytes = base64_decode(t["data"].get<std::string>());
  Tensor out = Tensor::empty(shape, *dt);
  if (bytes.size() != out.nbytes())
    throw HttpError{400,
                    fmt::format("{} ('{}'): {} {} needs {} bytes, the data has {}", where, t["name"].get<std::string>(),
                                dtype_name, shape_str(shape), out.nbytes(), bytes.size()),
                    "invalid_request_error", where, {}};
  std::memcpy(out.raw_data(), bytes.data(), bytes.size());
  return out;
}

}  // namespace

void register_rl_endpoints(httplib::Server& s, RlContext c) {
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

  s.Post("/update_weights_from_disk", wrap([](RlContext& c, const httplib::Request& req, httplib::Response& res) {
    const json body = object_body(req);
    only_fields(body, {"model_path", "abort_all_requests", "weight_version", "flush_cache", "load_format"},
                "/update_weights_from_disk");
    const std::string path = field<std::string>(body, "model_path", "");
    if (path.empty()) throw HttpError{400, "'model_path' is required", "invalid_request_error", "model_path", {}};
    run_update(c, res, body, [&] {
      if (c.ranks) c.ranks->update_from_disk(path);
      else c.engine.update_weights_from_disk(path);
    });
  }));

  s.Post("/update_weights_from_tensor", wrap([](RlContext& c, const httplib::Request& req, httplib::Response& res) {
    const json body = object_body(req);
    only_fields(body, {"named_tensors", "abort_all_requests", "weight_version", "flush_cache", "load_format"},
                "/update_weights_from_tensor");
    if (!body.contains("named_tensors") || !body["named_tensors"].is_array() || body["named_tensors"].empty())
      throw HttpError{400, "'named_tensors' must be a non-empty list", "invalid_request_error", "named_tensors", {}};
    std::vector<std::pair<std::string, Tensor>> tensors;
    size_t i = 0;
    for (const auto& t : body["named_tensors"]) {
      Tensor x = decode_tensor(t, i++);
      tensors.emplace_back(t["name"].get<std::string>(), std::move(x));
    }
    // Validate before pausing anything: a refused tensor never disturbs generation.
    auto update = c.engine.begin_update();
    for (const auto& [name, tensor] : tensors) {
      try {
        update->update(name, tensor);
      } catch (const std::exception& e) {
        update->abort();
        reply(res, 400, false, std::string("weight update refused, the weights are unchanged: ") + e.what(),
              c.label_of(c.engine.weight_version()));
        return;
      }
    }
    if (c.ranks) {
      // Validated here on rank 0 already; every rank validates its shard again and all
      // commit or none does.
      update->abort();
      run_update(c, res, body, [&] { c.ranks->update_from_tensors(tensors); });
    } else {
      run_update(c, res, body, [&] { c.engine.commit(*update); });
    }
  }));

  s.Post("/get_weights_by_name", wrap([](RlContext& c, const httplib::Request& req, httplib::Response& res) {
    const json body = object_body(req);
    only_fields(body, {"name", "truncate_size"}, "/get_weights_by_name");
    const std::string name = field<std::string>(body, "name", "");
    const int64_t truncate = field<int64_t>(body, "truncate_size", 100);
    if (truncate < 0) throw HttpError{400, "'truncate_size' must be >= 0", "invalid_request_error", "truncate_size", {}};
    // Under tensor parallelism every rank reads its piece and the lead puts them together,
    // so the reply is the whole checkpoint tensor whatever --tp is.
    std::vector<WeightPiece> pieces;
    if (c.ranks) {
      pieces = c.ranks->read_weight(name, truncate);
    } else {
      std::shared_lock lock(c.engine.weights_mutex());
      pieces.push_back(local_weight_piece(c.engine, name, truncate));
    }
    for (const WeightPiece& piece : pieces)
      if (piece.status != 200) throw HttpError{piece.status, piece.error, "invalid_request_error", "name", {}};
    const Tensor full = assemble_weight(pieces);
    const float* data = full.data<const float>();
    const std::vector<float> values(data, data + std::min<int64_t>(full.numel(), truncate));
    json out{{"name", name}, {"shape", pieces.front().full_shape}, {"dtype", pieces.front().dtype}, {"values", values}};
    if (!pieces.front().sharding.empty()) out["sharding"] = pieces.front().sharding;  // a fused parameter's local rows
    reply(res, 200, true, "ok", c.label_of(c.engine.weight_version()), out);
  }));

  s.Post("/pause_generation", wrap([](RlContext& c, const httplib::Request& req, httplib::Response& res) {
    const json body = object_body(req);
    only_fields(body, {"mode"}, "/pause_generation");
    const std::string mode = field<std::string>(body, "mode", "abort");
    PauseMode m;
    try {
      m = pause_mode_from_name(mode);
    } catch (const Error& e) {
      throw HttpError{400, e.what(), "invalid_request_error", "mode", {}};
    }
    if (m == PauseMode::drain) throw HttpError{400, "mode must be abort, retract or in_place", "invalid_request_error", "mode", {}};
    c.scheduler.pause(m);
    reply(res, 200, true, fmt::format("generation paused ({})", pause_mode_name(m)), c.label_of(c.engine.weight_version()));
  }));
  s.Post("/continue_generation", wrap([](RlContext& c, const httplib::Request&, httplib::Response& res) {
    c.scheduler.resume();
    reply(res, 200, true, "generation continues", c.label_of(c.engine.weight_version()));
  }));
  s.Post("/flush_cache", wrap([](RlContext& c, const httplib::Request&, httplib::Response& res) {
    const int64_t dropped = c.scheduler.flush_cache();
    reply(res, 200, true, fmt::format("prefix cache flushed ({} cached KV blocks dropped)", dropped),
          c.label_of(c.engine.weight_version()), json{{"flushed_cache_blocks", dropped}});
  }));
  s.Get("/get_weight_version", wrap([](RlContext& c, const httplib::Request&, httplib::Response& res) {
    const uint64_t v = c.engine.weight_version();
    reply(res, 200, true, "ok", c.label_of(v), json{{"version", v}});
  }));
}

}  // namespace refit

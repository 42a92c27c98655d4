#include "server/weight_update_request.h"

#include <fmt/format.h>

#include <map>

#include "server/api_types.h"

namespace refit {

using nlohmann::json;

// SGLang's fields, refit's own tensor schema (named_tensors) and refit's validation options
// (check_finite, ignore_unknown_tensors, report_tensor_names: server/update_report_json.h).
const std::initializer_list<const char*> kDiskUpdateFields = {"model_path",
                                                              "load_format",
                                                              "abort_all_requests",
                                                              "weight_version",
                                                              "is_async",
                                                              "torch_empty_cache",
                                                              "keep_pause",
                                                              "recapture_cuda_graph",
                                                              "token_step",
                                                              "flush_cache",
                                                              "manifest",
                                                              "rid",
                                                              "http_worker_ipc",
                                                              "check_finite",
                                                              "ignore_unknown_tensors",
                                                              "report_tensor_names"};
const std::initializer_list<const char*> kTensorUpdateFields = {"serialized_named_tensors",
                                                                "load_format",
                                                                "flush_cache",
                                                                "abort_all_requests",
                                                                "weight_version",
                                                                "disable_draft_model",
                                                                "torch_empty_cache",
                                                                "rid",
                                                                "http_worker_ipc",
                                                                "named_tensors",
                                                                "check_finite",
                                                                "ignore_unknown_tensors",
                                                                "report_tensor_names"};
const std::initializer_list<const char*> kVersionUpdateFields = {
    "new_version", "abort_all_requests", "rid", "http_worker_ipc"};

namespace {

[[noreturn]] void wrong(const std::string& field, const std::string& want, const json& got) {
  std::string shown = got.dump();
  if (shown.size() > 80) shown = shown.substr(0, 77) + "...";
  throw HttpError{400,
                  fmt::format("field '{}' must be {}, not {}", field, want, shown),
                  "invalid_request_error",
                  field,
                  {}};
}

bool present(const json& body, const char* f) { return body.contains(f) && !body[f].is_null(); }

void read_bool(const json& body, const char* f, bool& out) {
  if (!present(body, f)) return;
  if (!body[f].is_boolean()) wrong(f, "true or false", body[f]);
  out = body[f].get<bool>();
}

void read_string(const json& body, const char* f, std::string& out) {
  if (!present(body, f)) return;
  if (!body[f].is_string()) wrong(f, "a string", body[f]);
  out = body[f].get<std::string>();
}

void read_label(const json& body, const char* f, std::optional<std::string>& out) {
  if (!present(body, f)) return;
  if (!body[f].is_string()) wrong(f, "a string (or null)", body[f]);
  out = body[f].get<std::string>();
}

// Fields that only need the right type (no effect on a CPU engine).
void check_type(const json& body, const char* f, json::value_t t, const char* want) {
  if (!present(body, f)) return;
  if (body[f].type() != t && !(t == json::value_t::number_integer && body[f].is_number_integer()))
    wrong(f, want, body[f]);
}

void check_base_req(const json& body) {
  if (present(body, "rid") && !body["rid"].is_string()) wrong("rid", "a string", body["rid"]);
  check_type(body, "http_worker_ipc", json::value_t::string, "a string");
}

}  // namespace

DiskUpdateRequest parse_disk_update(const json& body) {
  DiskUpdateRequest r;
  if (!body.contains("model_path") || !body["model_path"].is_string() ||
      body["model_path"].get<std::string>().empty())
    throw HttpError{400,
                    "'model_path' (a non-empty string) is required",
                    "invalid_request_error",
                    "model_path",
                    {}};
  r.model_path = body["model_path"].get<std::string>();
  read_string(body, "load_format", r.load_format);
  if (r.load_format == "auto") r.load_format.clear();
  read_bool(body, "abort_all_requests", r.abort_all_requests);
  read_label(body, "weight_version", r.weight_version);
  read_bool(body, "is_async", r.is_async);
  read_bool(body, "torch_empty_cache", r.torch_empty_cache);
  read_bool(body, "keep_pause", r.keep_pause);
  read_bool(body, "recapture_cuda_graph", r.recapture_cuda_graph);
  if (present(body, "token_step")) {
    if (!body["token_step"].is_number_integer())
      wrong("token_step", "an integer", body["token_step"]);
    r.token_step = body["token_step"].get<int64_t>();
  }
  read_bool(body, "flush_cache", r.flush_cache);
  check_type(body, "manifest", json::value_t::object, "an object (or null)");
  check_base_req(body);
  return r;
}

TensorUpdateRequest parse_tensor_update(const json& body) {
  TensorUpdateRequest r;
  read_string(body, "load_format", r.load_format);
  read_bool(body, "flush_cache", r.flush_cache);
  read_bool(body, "abort_all_requests", r.abort_all_requests);
  read_label(body, "weight_version", r.weight_version);
  check_type(body, "disable_draft_model", json::value_t::boolean, "true or false (or null)");
  read_bool(body, "torch_empty_cache", r.torch_empty_cache);
  check_base_req(body);
  return r;
}

VersionUpdateRequest parse_version_update(const json& body) {
  VersionUpdateRequest r;
  if (!body.contains("new_version") || !body["new_version"].is_string())
    throw HttpError{
        400, "'new_version' (a string) is required", "invalid_request_error", "new_version", {}};
  r.new_version = body["new_version"].get<std::string>();
  read_bool(body, "abort_all_requests", r.abort_all_requests);
  check_base_req(body);
  return r;
}

void check_disk_load_format(const std::string& load_format, const std::string& checkpoint_format) {
  if (load_format.empty()) return;  // null / "auto": the format is detected
  const bool safetensors = checkpoint_format == "hf_folder" || checkpoint_format == "safetensors";
  if (load_format == "safetensors" || load_format == "fastsafetensors") {
    // fastsafetensors is SGLang's GPU-direct reader of the same files; on a CPU the
    // mapping is already direct.
    if (!safetensors)
      throw HttpError{
          400,
          fmt::format("load_format '{}' asks for safetensors, but model_path is a {} checkpoint",
                      load_format, checkpoint_format),
          "invalid_request_error",
          "load_format",
          {}};
    return;
  }
  if (load_format == "gguf") {
    if (checkpoint_format != "gguf")
      throw HttpError{
          400,
          fmt::format("load_format 'gguf' asks for a GGUF file, but model_path is a {} checkpoint",
                      checkpoint_format),
          "invalid_request_error",
          "load_format",
          {}};
    return;
  }
  // SGLang's other loaders (configs/load_config.py LoadFormat), each refused by name.
  static const std::map<std::string, const char*> refused = {
      {"pt", "PyTorch .bin/.pt pickles"},
      {"npcache", "a numpy cache of PyTorch pickles"},
      {"dummy", "random weights, nothing read"},
      {"sharded_state", "per-rank sharded state files"},
      {"bitsandbytes", "bitsandbytes-quantized weights"},
      {"mistral", "Mistral's consolidated format"},
      {"layered", "layer-by-layer loading onto the GPU"},
      {"jax", "JAX/Flax checkpoints"},
      {"remote", "weights from a remote store"},
      {"remote_instance", "weights from another running instance"},
      {"private", "a private loader"},
      {"flash_rl", "FlashRL's quantized loader"},
      {"extensible", "a plugin loader"},
  };
  auto it = refused.find(load_format);
  const std::string what = it != refused.end() ? fmt::format("SGLang's loader for {}", it->second)
                                               : "not a load format SGLang knows";
  throw HttpError{
      400,
      fmt::format(
          "load_format '{}' ({}) is not supported: refit reads checkpoints with load_format "
          "null, 'auto', 'safetensors', 'fastsafetensors' or 'gguf'",
          load_format, what),
      "invalid_request_error",
      "load_format",
      {}};
}

}  // namespace refit

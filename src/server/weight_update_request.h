// SGLang's weight-update request bodies as refit reads them (sglang
// python/sglang/srt/managers/io_struct.py: UpdateWeightFromDiskReqInput,
// UpdateWeightsFromTensorReqInput, UpdateWeightVersionReqInput, and BaseReq's rid /
// http_worker_ipc). Every field SGLang defines is known here and type-checked strictly
// (a wrong type is a 400 naming the field; null means the default, as in SGLang); fields
// no SGLang version defines are the caller's to ignore (server/request_fields.h).
//
// What each field does on refit (docs/weight-lifecycle.md has the table):
//   model_path           the checkpoint (HF folder, .safetensors, .gguf, llama2.c .bin)
//   load_format          honoured: null/"auto" (detect), "safetensors" and "fastsafetensors"
//                        (a safetensors folder or file), "gguf"; every other SGLang loader is
//                        refused by name, an unknown name too
//   abort_all_requests   end every request first ("abort") instead of draining them
//   weight_version       the new label; absent keeps the current one (SGLang's rule)
//   is_async             apply between two steps without draining: running requests go on
//                        on the new weights, their tokens tagged with the new version
//   keep_pause           generation stays paused after the update (until /continue_generation)
//   flush_cache          type-checked; every commit drops the prefix cache regardless (cached
//                        K/V of old weights would be stale)
//   token_step           echoed back (SGLang records it for the trainer)
//   torch_empty_cache, recapture_cuda_graph, disable_draft_model, manifest, rid,
//   http_worker_ipc      accepted with no effect on a CPU engine (no torch allocator, no
//                        CUDA graphs — storage addresses never move anyway — no draft model;
//                        refit reads tensor metadata from the checkpoint's own headers)
#pragma once

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace refit {

struct DiskUpdateRequest {
  std::string model_path;
  std::string load_format;  // "" for null and "auto"
  bool abort_all_requests = false;
  std::optional<std::string> weight_version;
  bool is_async = false;
  bool torch_empty_cache = false;
  bool keep_pause = false;
  bool recapture_cuda_graph = false;
  int64_t token_step = 0;
  bool flush_cache = true;
};

struct TensorUpdateRequest {
  std::string load_format;  // "" for null
  bool flush_cache = true;
  bool abort_all_requests = false;
  std::optional<std::string> weight_version;
  bool torch_empty_cache = false;
};

struct VersionUpdateRequest {
  std::string new_version;
  bool abort_all_requests = true;  // SGLang's default
};

// The field names each request knows (for ignore_unknown_fields).
extern const std::initializer_list<const char*> kDiskUpdateFields;
extern const std::initializer_list<const char*> kTensorUpdateFields;
extern const std::initializer_list<const char*> kVersionUpdateFields;

// Throw HttpError 400 naming the field that is missing or of the wrong type.
DiskUpdateRequest parse_disk_update(const nlohmann::json& body);
TensorUpdateRequest parse_tensor_update(const nlohmann::json& body);
VersionUpdateRequest parse_version_update(const nlohmann::json& body);

// Checks a disk load_format against SGLang's LoadFormat names and the checkpoint found
// at model_path ("gguf", "hf_folder", ... from checkpoint_format_name). Throws HttpError
// 400 naming load_format.
void check_disk_load_format(const std::string& load_format, const std::string& checkpoint_format);

}  // namespace refit

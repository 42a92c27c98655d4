// The CPU carrier: how tensors reach a CPU engine over HTTP in SGLang's
// /update_weights_from_tensor schema.
//
// SGLang's `serialized_named_tensors` has one entry per tensor-parallel rank, each a
// MultiprocessingSerializer pickle (base64 over HTTP) of either a list of (name, tensor)
// (load_format null or "direct") or a FlattenedTensorBucket dict {flattened_tensor,
// metadata} (load_format "flattened_bucket"). The pickled tensors are CUDA IPC handles or
// shared-memory file descriptors: only a process on the same GPU / in the same process
// tree can open them, never a CPU engine across HTTP. refit takes the same two layouts as
// JSON instead, each entry being the JSON value itself or base64 of its UTF-8 text (so
// verl's adapter, which base64-encodes whatever bytes it is given, can carry it):
//
//   load_format "flattened_bucket":
//     {"flattened_tensor": "<base64>" | {"shm": "/dev/shm/NAME", "offset": 0, "nbytes": N},
//      "flattened_dtype": "uint8",               // optional; see below
//      "metadata": [{"name", "shape", "dtype", "start_idx", "end_idx", "numel"}, ...]}
//   load_format null or "direct":
//     [{"name", "dtype", "shape", "data": "<base64, little-endian>"}, ...]
//
// FlattenedTensorBucket's two generations are both read as they are: with a uint8 buffer
// (SGLang's current multi-dtype bucket, the default) start_idx/end_idx/numel count bytes
// and numel = prod(shape) x itemsize; with a typed buffer (the older one-dtype bucket,
// "flattened_dtype": "bfloat16", ...) they count elements, numel = prod(shape), and every
// tensor has the buffer's dtype. Each range must lie inside the buffer, agree with its
// numel and shape, and not overlap another; an entry with no metadata is an empty bucket
// (slime pads ranks with them). Entries are per rank in SGLang; refit takes whole tensors
// once and slices them per rank itself, so the entries' tensors are merged by name and a
// name sent twice must carry the same bytes. Every tensor is copied out of the request
// (or the segment) before the update is validated, so a trainer may reuse its buffer as
// soon as the reply arrives.
//
// A pickle is refused by name: the bytes start with the pickle protocol marker 0x80.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace refit {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// The load formats SGLang's /update_weights_from_tensor knows; "" is null.
enum class TensorLoadFormat { named, direct, flattened_bucket };
// Throws HttpError (400, param load_format) for any other name.
TensorLoadFormat tensor_load_format(const std::string& name);

// Every tensor of `serialized_named_tensors` (the whole JSON list). Throws HttpError 400
// naming the entry and the tensor for anything malformed; nothing has been applied then.
NamedTensors decode_serialized_named_tensors(const nlohmann::json& entries,
                                             TensorLoadFormat format);

// refit's own schema: one {name, dtype, shape, data} object; `where` names it in errors.
Tensor decode_named_tensor(const nlohmann::json& t, const std::string& where);

// "float32", "torch.bfloat16", "bf16", "half", ... to a DType; nullopt if unknown.
std::optional<DType> carrier_dtype(const std::string& name);

}  // namespace refit

// The weight routes' bodies (first byte picks one): /update_weights_from_disk,
// /update_weight_version, and /update_weights_from_tensor with its tensors decoded from
// every carrier (refit's named_tensors, SGLang's serialized_named_tensors as named lists or
// flattened buckets, JSON or base64 of JSON). -malloc_limit_mb catches a declared shape
// allocated before its bytes are checked.
#include "fuzz_request_common.h"
#include "server/weight_carrier.h"
#include "server/weight_update_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace refit;
  if (size == 0) return 0;
  const int route = data[0] % 3;
  const std::string body = fuzz::body_text(data + 1, size - 1);
  REFIT_REQUEST_FUZZ_GUARD({
    const nlohmann::json j = parse_json_body(body);
    if (route == 0) {
      const DiskUpdateRequest r = parse_disk_update(j);
      check_disk_load_format(r.load_format, "hf_folder");
    } else if (route == 1) {
      parse_version_update(j);
    } else {
      const TensorUpdateRequest r = parse_tensor_update(j);
      const TensorLoadFormat format = tensor_load_format(r.load_format);
      if (j.is_object() && j.contains("named_tensors") && j["named_tensors"].is_array()) {
        for (size_t i = 0; i < j["named_tensors"].size(); ++i)
          decode_named_tensor(j["named_tensors"][i], "named_tensors");
      } else if (j.is_object() && j.contains("serialized_named_tensors")) {
        decode_serialized_named_tensors(j["serialized_named_tensors"], format);
      }
    }
  });
  return 0;
}

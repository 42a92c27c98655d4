// libFuzzer target: safetensors header parsing and tensor views.
#include "formats/safetensors.h"
#include "fuzz_common.h"

using namespace refit;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  REFIT_FUZZ_GUARD({
    auto f = SafetensorsFile::parse(ByteSource::from_bytes("fuzz.safetensors", data, size));
    for (const auto& t : f->tensors()) {
      Tensor v = f->tensor(t.name);
      if (v.numel() > 0 && dtype_is_floating(v.dtype()) && v.dtype() != DType::f4_e2m1)
        (void)v.get(std::vector<int64_t>(v.dim(), 0));
    }
  });
  return 0;
}

// libFuzzer target: GGUF parsing, then every accessor and tensor view on what parsed.
#include "formats/gguf.h"
#include "fuzz_common.h"

using namespace refit;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  REFIT_FUZZ_GUARD({
    auto f = GgufFile::parse(ByteSource::from_bytes("fuzz.gguf", data, size));
    const GgufMetadata& md = f->metadata();
    for (const auto& [key, value] : md.entries()) {
      REFIT_FUZZ_GUARD(md.get_string(key));
      REFIT_FUZZ_GUARD(md.get_u32(key));
      REFIT_FUZZ_GUARD(md.get_i32(key));
      REFIT_FUZZ_GUARD(md.get_u64(key));
      REFIT_FUZZ_GUARD(md.get_f32(key));
      REFIT_FUZZ_GUARD(md.get_bool(key));
      REFIT_FUZZ_GUARD(md.get_array_strings(key));
      REFIT_FUZZ_GUARD(md.get_array_f32(key));
      REFIT_FUZZ_GUARD(md.get_array_i32(key));
      (void)value.type_str();
      if (value.type() == GgufValueType::array && value.array_size() > 0) (void)value.at(0);
    }
    for (const auto& t : f->tensors()) {
      REFIT_FUZZ_GUARD(f->tensor(t.name));
      REFIT_FUZZ_GUARD(f->raw(t.name));
      // Dequantizing allocates 4 bytes per value; values are bounded by the file's bytes
      // (at most 32 per 17-byte block), so this stays proportional to the input.
      REFIT_FUZZ_GUARD(f->dequantize(t.name));
    }
  });
  return 0;
}

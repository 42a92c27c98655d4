// libFuzzer target: llama2.c model and tokenizer files. The first byte picks the reader
// (and, for the tokenizer, whether the vocabulary size is given), the rest is the file.
#include "formats/llama2c.h"
#include "fuzz_common.h"

using namespace refit;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0] % 3;
  ByteSource src = ByteSource::from_bytes("fuzz.bin", data + 1, size - 1);
  REFIT_FUZZ_GUARD({
    if (mode == 0) {
      auto m = Llama2cModel::parse(src);
      (void)m->classifier();
      for (const auto& [name, t] : m->tensors()) (void)t.numel();
    } else if (mode == 1) {
      (void)parse_llama2c_tokenizer(src);
    } else {
      (void)parse_llama2c_tokenizer(src, 512);
    }
  });
  return 0;
}

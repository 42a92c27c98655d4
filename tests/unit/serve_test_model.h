// A small Llama-family model with deterministic synthetic weights for the serve_* tests
// (fast enough to run batches of 33 sequences in a unit test).
#pragma once

#include <memory>

#include "models/model.h"
#include "synthetic/synthetic_model.h"

namespace refit::testing {

inline ModelConfig serve_test_config(Architecture arch = Architecture::llama) {
  ModelConfig c;
  c.arch = arch;
  c.dim = 64;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 16;
  c.ffn_dim = 96;
  c.vocab_size = 300;
  c.max_seq_len = 256;
  c.qkv_bias = arch == Architecture::qwen2;
  c.qk_norm = arch == Architecture::qwen3;
  c.rope_style = arch == Architecture::llama ? ops::RopeStyle::interleaved : ops::RopeStyle::neox;
  return c;
}

inline std::unique_ptr<Model> serve_test_model(const ModelConfig& c, DType dtype,
                                               uint64_t seed = 1) {
  auto model = create_model(c, dtype);
  for (auto& [name, tensor] : synthetic_weights(c, dtype, seed)) {
    CheckpointTarget target = model->parameters().target(name);
    if (target.parameter == nullptr) continue;
    if (target.sub_shard)
      target.parameter->load(*target.sub_shard, tensor);
    else
      target.parameter->load(tensor);
  }
  return model;
}

}  // namespace refit::testing

#include "synthetic/demo_model.h"

#include "synthetic/synthetic_model.h"
#include "synthetic/synthetic_vocab.h"

namespace refit {

DemoModel make_demo_model(uint64_t seed, const TensorParallel& tp) {
  const ModelConfig config = synthetic_preset(Architecture::llama, "tiny");
  DemoModel demo;
  demo.model = create_model(config, DType::f32, tp);
  ParameterSet& params = demo.model->parameters();
  for (auto& [name, tensor] : synthetic_weights(config, DType::f32, seed)) {
    CheckpointTarget target = params.target(name);
    if (target.parameter) target.parameter->load(*target.sub_shard, tensor);
  }
  demo.tokenizer = synthetic_tokenizer(config.vocab_size);
  return demo;
}

}  // namespace refit

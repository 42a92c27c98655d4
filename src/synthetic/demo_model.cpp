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
  const SyntheticVocab vocab = synthetic_vocab(config.vocab_size);
  VocabData data;
  data.source = "built-in demo vocabulary";
  data.model = VocabModel::vocab_model_spm;
  data.tokens = vocab.tokens;
  data.scores = vocab.scores;
  for (int32_t t : vocab.types) data.types.push_back(static_cast<TokenType>(t));
  data.bos = vocab.bos_id;
  data.eos = vocab.eos_id;
  data.unk = vocab.unk_id;
  data.add_bos = true;
  demo.tokenizer = std::make_unique<Tokenizer>(std::move(data));
  return demo;
}

}  // namespace refit

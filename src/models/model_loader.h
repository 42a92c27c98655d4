// Builds a LlamaModel from a checkpoint path: a GGUF file, a Hugging Face folder (or a
// single .safetensors beside its config.json), or a llama2.c .bin. Every parameter is
// looked up by its canonical name through a per-format name map, checked for shape and
// converted into the parameter's storage.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "formats/checkpoint.h"
#include "models/llama_model.h"

namespace refit {

struct LoadOptions {
  // Called with (tensors loaded, total tensors) while parameters load.
  std::function<void(size_t, size_t)> progress;
  TensorParallel tensor_parallel;  // this process's rank in the TP group
};

// Reads the configuration a checkpoint describes (no weights loaded).
ModelConfig read_model_config(const Checkpoint& checkpoint);

// Finds checkpoint tensors by canonical (Hugging Face) parameter name, through the
// format's own naming (GGUF "blk.N.attn_q.weight", llama2.c's stacked "wq").
class CheckpointWeights {
 public:
  CheckpointWeights(const Checkpoint& checkpoint, const ModelConfig& config);
  // An f32/f16/bf16 tensor (a zero-copy view where the format allows; quantized GGUF
  // tensors are dequantized to f32), or an undefined tensor when absent.
  Tensor find(const std::string& name) const;
  // Without materialising: a zero-copy view when the format allows (`view` defined),
  // else the declared shape and dtype and a function making the tensor, valid while the
  // checkpoint lives (not tied to this object). False if absent.
  struct Lazy {
    Tensor view;
    Shape shape;
    DType dtype = DType::f32;
    std::function<Tensor()> produce;
  };
  bool find_lazy(const std::string& name, Lazy* out) const;

 private:
  const Checkpoint& checkpoint_;
  std::unordered_map<std::string, std::string> gguf_names_;  // canonical -> GGUF
  std::unordered_map<std::string, int64_t> gguf_permute_heads_;  // q/k rows to un-permute
};

std::unique_ptr<LlamaModel> load_model(const Checkpoint& checkpoint, const LoadOptions& options = {});
std::unique_ptr<LlamaModel> load_model(const std::string& path, const LoadOptions& options = {});

// Applies a kernel layout ("auto" or "", "plain", "transpose", "shuffle16x16",
// "interleave4x16") to every matmul weight whose shape and scheme allow it (not the
// embedding table), recording it on each parameter so every later load re-applies it.
// "auto" picks per weight the layout of the fastest kernel this CPU has for it. Like
// vLLM's process_weights_after_loading, run once.
void apply_weight_layout(LlamaModel& model, const std::string& layout);

// Loads every parameter of `model` from `checkpoint` (all must be present).
void load_weights(LlamaModel& model, const Checkpoint& checkpoint, const LoadOptions& options = {});

}  // namespace refit

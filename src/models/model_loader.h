// Builds a Model from a checkpoint path: a GGUF file, a Hugging Face folder (or a
// single .safetensors beside its config.json), or a llama2.c .bin. Every parameter is
// looked up by its canonical name through a per-format name map, checked for shape and
// converted into the parameter's storage.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "formats/checkpoint.h"
#include "models/model.h"
#include "weights/block_codes.h"
#include "weights/checkpoint_alias.h"

namespace refit {

struct LoadOptions {
  // Called with (tensors loaded, total tensors) while parameters load.
  std::function<void(size_t, size_t)> progress;
  TensorParallel tensor_parallel;  // this process's rank in the TP group
  int64_t max_model_len = 0;       // context to serve; 0: the checkpoint's
};

// `config` serving `max_model_len` positions (0: unchanged); throws when that exceeds the
// context the checkpoint was trained for.
void limit_context(ModelConfig& config, int64_t max_model_len, const std::string& source);

// Reads the configuration a checkpoint describes (no weights loaded).
ModelConfig read_model_config(const Checkpoint& checkpoint);

// What llama.cpp's converter did to a tensor (the architecture's table says), undone on load.
struct GgufChangeToUndo {
  int64_t rope_permute_heads = 0;  // q/k rows permuted for adjacent-pair rope
  float offset = 0.0f;             // stored value = parameter + offset (Gemma norms)
};
Tensor undo_gguf_change(const Tensor& t, const GgufChangeToUndo& change);

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
    // Where set: describes the first non-finite value of what produce() makes ("" when all
    // are finite) from the file's bytes, without making it (GGUF plain, Q8_0 and Q4_0).
    std::function<std::string()> non_finite;
    // Where the file stores the tensor in a block scheme (GGUF Q8_0 / MXFP4, HF MXFP4
    // blocks): its codes, which a parameter in that scheme stores as they are
    // (Parameter::load_block_codes) instead of quantizing what `produce` decodes.
    BlockCodes codes;
  };
  bool find_lazy(const std::string& name, Lazy* out) const;

 private:
  const Checkpoint& checkpoint_;
  std::unordered_map<std::string, std::string> gguf_names_;  // canonical -> GGUF
  std::unordered_map<std::string, GgufChangeToUndo>
      gguf_changes_;  // what the converter did, by name
  // Per-expert tensors: the expert's index in the GGUF tensor stacking all of them.
  std::unordered_map<std::string, int64_t> gguf_experts_;
  // HF stacked forms (models/stacked_experts.h), and per per-expert name its (alias,
  // part) in each of them.
  std::vector<CheckpointAlias> stacked_;
  std::unordered_map<std::string, std::vector<std::pair<size_t, size_t>>> stacked_parts_;
  // An HF per-expert tensor from a stacked form the folder holds; false when none.
  bool find_stacked(const std::string& name, Lazy* out) const;
};

// Expert `expert` of a GGUF tensor stacking every expert along its outermost dim (ggml ne
// [in, out, E]): the [out, in] matrix, a zero-copy view for plain types, else that expert's
// blocks alone dequantized to f32.
Tensor gguf_expert_tensor(const GgufFile& file, const std::string& name, int64_t expert);

std::unique_ptr<Model> load_model(const Checkpoint& checkpoint, const LoadOptions& options = {});
std::unique_ptr<Model> load_model(const std::string& path, const LoadOptions& options = {});

// Applies a kernel layout ("auto" or "", "plain", "transpose", "shuffle16x16",
// "interleave4x16") to every matmul weight whose shape and scheme allow it (not the
// embedding table), recording it on each parameter so every later load re-applies it.
// "auto" picks per weight the layout of the fastest kernel this CPU has for it. Like
// vLLM's process_weights_after_loading, run once.
void apply_weight_layout(Model& model, const std::string& layout);

// Loads every parameter of `model` from `checkpoint` (all must be present).
void load_weights(Model& model, const Checkpoint& checkpoint, const LoadOptions& options = {});

}  // namespace refit

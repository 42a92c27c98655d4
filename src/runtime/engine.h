// Engine: one loaded model with its tokenizer, its weight version and the weight-update
// (refit) transaction. The API the CLI, the Python module and the HTTP server share.
//
// Thread safety: generation holds the weights' read lock; a commit takes the write
// lock, so an update lands between two forward passes and never inside one. generate()
// holds the read lock for the whole request, so one call sees one weight version.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <string>
#include <vector>

#include "models/model.h"
#include "runtime/generation_defaults.h"
#include "runtime/generator.h"
#include "runtime/stop_tokens.h"
#include "tokenizer/tokenizer.h"
#include "weights/weight_update.h"

namespace refit {

class Communicator;

struct CheckpointContents {
  std::vector<std::string> present;  // checkpoint names of this model's parameters
  std::vector<std::string> unknown;  // tensors no parameter takes
};

struct EngineOptions {
  std::string model_path;        // empty: the built-in demo model
  std::string tokenizer_path;    // for formats without a tokenizer (llama2.c)
  int tp = 1;                    // tensor-parallel size (needs a communicator of that size)
  bool expert_parallel = false;  // --ep: mixture-of-experts layers shard by expert
  std::string quant;             // "" (as stored), later: fp8, fp8-block, mxfp4, q8_0
  std::string layout;  // "" or "auto", "plain", "transpose", "shuffle16x16", "interleave4x16"
  int threads = 0;     // 0: all cores
  // Context length served (vLLM --max-model-len, llama.cpp -c); 0: the checkpoint's. At
  // most the checkpoint's; it also picks LongRoPE's short or long factors.
  int64_t max_model_len = 0;
  // Sampling defaults (vLLM's --generation-config): "auto" reads the model folder's
  // generation_config.json, "vllm" ignores it (engine defaults), else a folder holding one.
  std::string generation_config = "auto";
  std::shared_ptr<Communicator> communicator;    // null: single process (tp must be 1)
  std::function<void(size_t, size_t)> progress;  // (tensors loaded, total) while loading
};

// A parameter as the outside world sees it: the stored tensor (read-only, exportable
// through DLPack) and the metadata that explains it.
struct ParameterInfo {
  std::string name;
  Tensor tensor;        // stored form (this rank's shard, after transforms)
  Shape logical_shape;  // full, unsharded, as a trainer sends it
  DType logical_dtype;
  std::vector<std::string> checkpoint_names;  // fused parameters have several
  std::string sharding;                       // e.g. "dim 0, rank 0 of 2" or "replicated"
  std::vector<std::string> transforms;        // e.g. {"transpose"}, {"shuffle_16x16"}
};

class Engine {
 public:
  explicit Engine(const EngineOptions& options);
  ~Engine();

  const ModelConfig& config() const;
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }
  const Model& model() const { return *model_; }
  const std::string& description() const { return description_; }
  // The checkpoint the engine was started on, as given ("" for the demo model); unlike
  // description() it carries no quantization note, so it can be opened again.
  const std::string& model_path() const { return model_path_; }
  // The ids that end generation unless a request sets ignore_eos (every front end stops on
  // these), and the sampling defaults for fields a request leaves unset.
  const StopTokenIds& stop_ids() const { return stop_ids_; }
  const GenerationDefaults& generation_defaults() const { return generation_defaults_; }
  int rank() const;
  int world_size() const;

  // Generation on the current weights; result.weight_version says which.
  GenerateResult generate(const GenerateRequest& request, const TokenCallback& on_token = {});
  // Teacher-forced logits [T, vocab] for `tokens` starting at position 0.
  Tensor logits(const std::vector<int32_t>& tokens);

  std::vector<ParameterInfo> named_parameters() const;

  // ---- refit ----
  uint64_t weight_version() const { return weight_version_.load(); }
  // A transaction: update() validates each tensor immediately (nothing is written);
  // commit() applies all of them in place between forward passes and bumps the version.
  std::unique_ptr<WeightUpdate> begin_update(const UpdateOptions& options = {});
  void commit(WeightUpdate& update);
  // What the latest commit wrote (empty before any).
  UpdateReport last_update_report() const;
  // One-call forms (validate everything, then commit; on any error nothing changes).
  uint64_t update_weights_from_tensors(const std::vector<std::pair<std::string, Tensor>>& tensors,
                                       const UpdateOptions& options = {});
  // `names` empty: every parameter the checkpoint has for this model (all must be present),
  // and a tensor of the checkpoint no parameter takes is refused unless
  // options.ignore_unknown_tensors (then listed in the update's report).
  uint64_t update_weights_from_disk(const std::string& path,
                                    const std::vector<std::string>& names = {},
                                    const UpdateOptions& options = {});
  // The validated, uncommitted transaction update_weights_from_disk commits (for callers
  // that must agree with other ranks before committing: tensor-parallel serving).
  std::unique_ptr<WeightUpdate> stage_update_from_disk(const std::string& path,
                                                       const std::vector<std::string>& names = {},
                                                       const UpdateOptions& options = {});
  // A partial checkpoint (SGLang's update_weights_from_disk loads whatever tensors a folder
  // holds): the checkpoint names of this model's parameters that `path` has, in parameter
  // order, for the `names` of the two calls above, and the tensors it holds that no
  // parameter takes (models/checkpoint_tensor_use.h). Throws when `path` cannot be read or
  // is not the served model (architecture or a hyper-parameter: models/checkpoint_identity.h).
  CheckpointContents checkpoint_contents(const std::string& path) const;
  std::vector<std::string> checkpoint_names_present(const std::string& path) const;

  // ---- memory release (vLLM's sleep level 2, SGLang's release_memory_occupation) ----
  // Gives every parameter's memory back to the OS, keeping its addresses (law L2): the
  // values are gone (they read as zero). Until every checkpoint tensor has been sent again
  // (any update path), weights_released() names what is missing and generation must be
  // refused. Returns the bytes given back.
  size_t release_weights();
  // Checkpoint names still released (empty: the weights are whole).
  std::vector<std::string> released_weights() const;
  bool weights_released() const { return released_count_.load() > 0; }

  // The lock generation steps hold (servers with their own loop take it per step).
  std::shared_mutex& weights_mutex() { return weights_mutex_; }
  Model& mutable_model() { return *model_; }

 private:
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::string description_;
  std::string model_path_;
  StopTokenIds stop_ids_;
  GenerationDefaults generation_defaults_;
  std::atomic<uint64_t> weight_version_{1};
  std::shared_mutex weights_mutex_;
  mutable std::mutex released_mutex_;
  std::set<const SubShard*> released_;  // sub-shards released and not sent again since
  std::atomic<size_t> released_count_{0};
  mutable std::mutex report_mutex_;
  UpdateReport last_report_;
};

}  // namespace refit

#include "runtime/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <mutex>

#include "core/error.h"
#include "core/host_buffer_cache.h"
#include "core/thread_pool.h"
#include "dist/communicator.h"
#include "formats/checkpoint.h"
#include "models/checkpoint_identity.h"
#include "models/checkpoint_tensor_use.h"
#include "models/fp8_checkpoint_tensor.h"
#include "models/model_loader.h"
#include "models/quantize_model.h"
#include "runtime/generation_setup.h"
#include "synthetic/demo_model.h"
#include "tokenizer/vocab_loaders.h"

namespace refit {

Engine::Engine(const EngineOptions& options) {
  if (options.threads > 0) set_num_threads(options.threads);
  TensorParallel tp;
  if (options.communicator) tp.communicator = options.communicator;
  tp.expert_parallel = options.expert_parallel;
  if (options.tp != tp.world())
    fail(
        "--tp {} needs {} processes (start them with mpirun -np {}), but this process group has {}",
        options.tp, options.tp, options.tp, tp.world());
  const QuantScheme requested_quant = parse_quant_scheme(options.quant);
  if (options.model_path.empty()) {
    if (requested_quant.enabled())
      fail("--quant {} needs a model file (-m); the built-in demo model is created already loaded",
           requested_quant.name());
    DemoModel demo = make_demo_model(0, tp);
    model_ = std::move(demo.model);
    tokenizer_ = std::move(demo.tokenizer);
    description_ = "built-in demo model (synthetic weights)";
    GenerationSetup setup = read_generation_setup(nullptr, tokenizer_.get(), model_->config(),
                                                  options.generation_config);
    stop_ids_ = std::move(setup.stop_ids);
    generation_defaults_ = std::move(setup.defaults);
  } else {
    auto checkpoint = Checkpoint::open(options.model_path);
    // A malformed generation_config.json or eos_token_id fails before the weights load.
    read_generation_setup(checkpoint.get(), nullptr, ModelConfig{}, options.generation_config);
    LoadOptions load;
    load.tensor_parallel = tp;
    load.progress = options.progress;
    load.max_model_len = options.max_model_len;
    // Quantized serving: asked for, or the checkpoint's own scheme (GGUF Q8_0/MXFP4, HF FP8;
    // experts in theirs, gpt-oss's MXFP4).
    // The scheme is set on the parameters before the first load; every load quantizes.
    const QuantScheme stored = checkpoint_quant_scheme(*checkpoint);
    QuantScheme quant = requested_quant.enabled() ? requested_quant : stored;
    description_ = options.model_path;
    model_path_ = options.model_path;
    // The weights are read through the file's mapping: a file truncated or rewritten under
    // the load is reported as such (not as whatever its torn bytes looked like).
    try {
      if (quant.enabled() || checkpoint_expert_scheme(*checkpoint).enabled()) {
        ModelConfig config = read_model_config(*checkpoint);
        limit_context(config, options.max_model_len, checkpoint->path());
        model_ = create_model(config, config.weight_dtype, tp);
        // A head (and layers) the file stores quantized (or float) stays so under the file's
        // own method, also when asked for by name (q8_0-w8a8 on a Q8_0 GGUF).
        description_ += " [" + quantize_for_checkpoint(*model_, *checkpoint, quant).str() + "]";
        load_weights(*model_, *checkpoint, load);
      } else {
        model_ = load_model(*checkpoint, load);
      }
    } catch (const Error&) {
      checkpoint->check_unchanged();
      throw;
    }
    checkpoint->check_unchanged();
    if (checkpoint->format() != CheckpointFormat::llama2c || !options.tokenizer_path.empty()) {
      try {
        tokenizer_ = load_tokenizer(options.model_path,
                                    options.tokenizer_path.empty()
                                        ? std::nullopt
                                        : std::optional<std::string>(options.tokenizer_path));
      } catch (const Error&) {
        if (!options.tokenizer_path.empty()) throw;
      }
    }
    GenerationSetup setup = read_generation_setup(checkpoint.get(), tokenizer_.get(),
                                                  model_->config(), options.generation_config);
    stop_ids_ = std::move(setup.stop_ids);
    generation_defaults_ = std::move(setup.defaults);
  }
  // Kernel-specific layouts, applied after loading and recorded on each parameter.
  apply_weight_layout(*model_, options.layout);
}

Engine::~Engine() = default;

const ModelConfig& Engine::config() const { return model_->config(); }
int Engine::rank() const { return model_->tensor_parallel().rank(); }
int Engine::world_size() const { return model_->tensor_parallel().world(); }

GenerateResult Engine::generate(const GenerateRequest& request, const TokenCallback& on_token) {
  std::shared_lock lock(weights_mutex_);
  GenerateResult result = refit::generate(*model_, request, on_token);
  result.weight_version = weight_version_.load();
  return result;
}

Tensor Engine::logits(const std::vector<int32_t>& tokens) {
  std::shared_lock lock(weights_mutex_);
  if (tokens.empty()) fail("logits: no tokens given");
  for (int32_t id : tokens)
    if (id < 0 || id >= config().vocab_size)
      fail("logits: token {} is outside the vocabulary (size {})", id, config().vocab_size);
  KvCache cache = model_->make_cache(static_cast<int64_t>(tokens.size()));
  return model_->forward(tokens, 0, cache, /*all_logits=*/true);
}

std::vector<ParameterInfo> Engine::named_parameters() const {
  std::vector<ParameterInfo> out;
  for (const auto& p : model_->parameters().all()) {
    ParameterInfo info;
    info.name = p->name();
    info.tensor = p->data();
    info.logical_shape = p->logical_shape();
    info.logical_dtype = p->logical_dtype();
    for (const SubShard& s : p->sub_shards()) info.checkpoint_names.push_back(s.checkpoint_name);
    info.sharding = p->sharding_str();
    for (LayoutTransform t : p->transforms()) info.transforms.push_back(layout_transform_name(t));
    if (p->quantized()) {
      // The scales are the parameter's own tensor, exported beside the codes (law L1):
      // "<...>.weight" -> "<...>.weight_scale", [local rows, ceil(K / group)].
      ParameterInfo scale = info;
      const std::string suffix = ".weight";
      scale.name = p->name().ends_with(suffix) ? p->name() + "_scale" : p->name() + ".scale";
      scale.tensor = p->scale();
      scale.logical_shape = p->scale().shape();
      scale.logical_dtype = p->scale().dtype();
      scale.checkpoint_names.clear();  // derived on every load; not sent on its own
      // The scales take the quantization and the tile shuffle, not the codes' interleave.
      scale.transforms = {"quantize:" + p->quantization().name()};
      if (p->scale().layout() == Layout::shuffled_16x16)
        scale.transforms.push_back(layout_transform_name(LayoutTransform::shuffle_16x16));
      info.transforms.insert(info.transforms.begin(), "quantize:" + p->quantization().name());
      out.push_back(std::move(info));
      out.push_back(std::move(scale));
      continue;
    }
    out.push_back(std::move(info));
  }
  return out;
}

std::unique_ptr<WeightUpdate> Engine::begin_update(const UpdateOptions& options) {
  return std::make_unique<WeightUpdate>(model_->parameters(), options);
}

void Engine::commit(WeightUpdate& update) {
  if (update.failed())
    fail("weight update: refusing to commit after a refused tensor ({}); abort it",
         update.failure());
  const std::vector<const SubShard*> written = update.staged_sub_shards();
  std::unique_lock lock(weights_mutex_);
  update.apply();
  ++weight_version_;
  {
    std::lock_guard report(report_mutex_);
    last_report_ = update.report();
  }
  std::lock_guard released(released_mutex_);
  for (const SubShard* s : written) released_.erase(s);
  released_count_ = released_.size();
}

UpdateReport Engine::last_update_report() const {
  std::lock_guard lock(report_mutex_);
  return last_report_;
}

size_t Engine::release_weights() {
  std::unique_lock lock(weights_mutex_);
  std::lock_guard released(released_mutex_);
  size_t bytes = 0;
  for (const auto& p : model_->parameters().all()) {
    for (const Tensor* t : {&p->data(), &p->scale()})
      if (t->defined() && t->storage()) {
        try {
          bytes += t->storage()->discard_contents();
        } catch (const Error&) {
          // Not memory of ours (a view of a mapped file): nothing to give back, but the
          // tensor still counts as released until it is sent again.
        }
      }
    for (const SubShard& s : p->sub_shards()) released_.insert(&s);
  }
  // Freed activations kept for reuse are given back too, or RSS would not fall by them.
  bytes += host_buffer_cache::release_all();
  released_count_ = released_.size();
  ++weight_version_;  // what was served before is gone: nothing may be reused as if current
  return bytes;
}

std::vector<std::string> Engine::released_weights() const {
  std::lock_guard lock(released_mutex_);
  std::vector<std::string> names;
  for (const SubShard* s : released_) names.push_back(s->checkpoint_name);
  std::sort(names.begin(), names.end());
  return names;
}

uint64_t Engine::update_weights_from_tensors(
    const std::vector<std::pair<std::string, Tensor>>& tensors, const UpdateOptions& options) {
  auto update = begin_update(options);
  for (const auto& [name, tensor] : tensors) update->update(name, tensor);
  commit(*update);
  return weight_version();
}

uint64_t Engine::update_weights_from_disk(const std::string& path,
                                          const std::vector<std::string>& names,
                                          const UpdateOptions& options) {
  auto update = stage_update_from_disk(path, names, options);
  commit(*update);
  return weight_version();
}

CheckpointContents Engine::checkpoint_contents(const std::string& path) const {
  std::shared_ptr<Checkpoint> checkpoint = Checkpoint::open(path);
  const ModelConfig source_config = read_model_config(*checkpoint);
  check_checkpoint_is_served_model(*checkpoint, source_config, config());
  CheckpointWeights weights(*checkpoint, source_config);
  CheckpointContents contents;
  for (const std::string& name : model_->parameters().checkpoint_names()) {
    CheckpointWeights::Lazy lazy;  // finding makes nothing: views and producers only
    if (weights.find_lazy(name, &lazy)) contents.present.push_back(name);
  }
  contents.unknown =
      unknown_checkpoint_tensors(*checkpoint, source_config, config(), model_->parameters());
  return contents;
}

std::vector<std::string> Engine::checkpoint_names_present(const std::string& path) const {
  return checkpoint_contents(path).present;
}

std::unique_ptr<WeightUpdate> Engine::stage_update_from_disk(const std::string& path,
                                                             const std::vector<std::string>& names,
                                                             const UpdateOptions& options) {
  // A copy of the files, checked whole when read: the commit writes the parameters one by
  // one, and bytes that a writer could still change or truncate under it would leave the
  // engine half-updated. A copy costs the files' size in memory until the commit ends.
  std::shared_ptr<Checkpoint> checkpoint = Checkpoint::open(path, FileAccess::copied);
  ModelConfig source_config = read_model_config(*checkpoint);
  check_checkpoint_is_served_model(*checkpoint, source_config, config());
  auto update = begin_update(options);
  update->keep_alive(checkpoint);
  if (names.empty()) {  // the whole checkpoint: tensors no parameter takes are refused or listed
    std::vector<std::string> unknown =
        unknown_checkpoint_tensors(*checkpoint, source_config, config(), model_->parameters());
    if (!options.ignore_unknown_tensors) refuse_unknown_tensors(path, unknown);
    update->add_ignored(unknown);
  }
  CheckpointWeights weights(*checkpoint, source_config);
  std::vector<std::string> wanted;
  if (names.empty()) wanted = model_->parameters().checkpoint_names();
  for (const std::string& name : names)  // a stacked form names the per-expert tensors it holds
    if (const CheckpointAlias* alias = model_->parameters().alias(name))
      for (const AliasPart& part : alias->parts) wanted.push_back(part.name);
    else
      wanted.push_back(name);
  for (const std::string& name : wanted) {
    // FP8 codes in the parameter's own scheme: stored as they are, as a fresh load does.
    if (const Parameter* p = model_->parameters().target(name).parameter)
      if (auto fp8 = fp8_codes_to_store(*checkpoint, name, *p)) {
        update->update_codes(name, fp8->codes, fp8->scales, fp8->method);
        continue;
      }
    CheckpointWeights::Lazy lazy;
    if (!weights.find_lazy(name, &lazy)) {
      if (!model_->parameters().target(name).parameter)
        fail("{}: unknown tensor '{}' (no parameter takes it)", path, name);
      fail("{}: the checkpoint has no tensor '{}'", path, name);
    }
    // Q8_0 / MXFP4 blocks in the parameter's own scheme: stored as they are, as a fresh load
    // does. Views over the mapping cost no memory; anything converted is made at commit.
    const CheckpointTarget target = model_->parameters().target(name);
    if (target.parameter &&
        target.parameter->block_codes_unsupported_reason(*target.sub_shard, lazy.codes).empty())
      update->update_block_codes(name, lazy.codes, lazy.non_finite);
    else if (lazy.view.defined())
      update->update(name, lazy.view);
    else
      update->update_lazy(name, lazy.shape, lazy.dtype, lazy.produce, lazy.non_finite);
  }
  return update;
}

}  // namespace refit

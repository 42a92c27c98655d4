// Shared by the L2 refit tests (float and quantized): reference weights, deterministic
// perturbations a "trainer" sends, a fresh model loaded from given weights, and the
// bitwise comparisons the tests assert.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "models/model.h"

namespace refit::testing {

using TensorMap = std::map<std::string, Tensor>;

// The checkpoint's own tensors under canonical names, copied to f32.
TensorMap base_weights(const std::string& path, const Model& model);
// A deterministic perturbation of every tensor, sent as `dtype`.
TensorMap perturbed(const TensorMap& base, uint32_t seed, DType dtype);
// A fresh model loaded from `weights`: quantized with `quant` ("" for none) before
// loading and `layout` applied after, as the engine does.
std::unique_ptr<Model> fresh_model(const ModelConfig& config, const TensorParallel& tp,
                                   const TensorMap& weights, const std::string& quant,
                                   const std::string& layout);
// Storage address of every parameter (and of its scales when quantized).
std::map<std::string, const void*> addresses(const Model& model);
// Every stored byte (codes and scales) of every parameter equal.
void expect_same_bytes(const Model& got, const Model& want, const std::string& what,
                       bool quantized_only = false);
// Teacher-forced logits of a fixed token sequence.
std::vector<float> logits_of(const Model& model);
// Runs fn(rank, communicator) on `world` threads (TP ranks of one process).
void run_ranks(int world, const std::function<void(int, std::shared_ptr<Communicator>)>& fn);

}  // namespace refit::testing

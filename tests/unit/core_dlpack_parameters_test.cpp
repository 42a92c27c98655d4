// Law L1 for everything a layer owns (seed 000 was a bias that could not cross DLPack):
// every parameter of real models — embeddings, fused q/k/v weights and their biases,
// norms, and parameters after layout transforms — exports zero-copy through both DLPack
// structs, read-only, with its shape, strides and dtype.
#include <gtest/gtest.h>

#include "core/dlpack.h"
#include "runtime/engine.h"

namespace refit {
namespace {

const std::string kOracle = std::string(REFIT_SHARED_DIR) + "/oracle";

void expect_every_parameter_exports(Engine& engine) {
  int biases = 0;
  for (const ParameterInfo& p : engine.named_parameters()) {
    SCOPED_TRACE(p.name);
    const Tensor& t = p.tensor;
    DLManagedTensorVersioned* v = to_dlpack_versioned(t);
    EXPECT_EQ(v->dl_tensor.data, t.raw_data());
    EXPECT_NE(v->flags & DLPACK_FLAG_BITMASK_READ_ONLY, 0u) << "engine weights export read-only";
    ASSERT_EQ(v->dl_tensor.ndim, t.dim());
    for (int i = 0; i < v->dl_tensor.ndim; ++i) {
      EXPECT_EQ(v->dl_tensor.shape[i], t.size(i));
      EXPECT_EQ(v->dl_tensor.strides[i], t.stride(i));
    }
    Tensor back = from_dlpack(v);
    EXPECT_EQ(back.raw_data(), t.raw_data());
    EXPECT_EQ(back.dtype(), t.dtype());
    DLManagedTensor* legacy = to_dlpack_legacy(t);
    EXPECT_EQ(legacy->dl_tensor.data, t.raw_data());
    legacy->deleter(legacy);
    if (p.name.ends_with(".bias")) ++biases;
  }
  if (engine.config().qkv_bias) {
    EXPECT_EQ(biases, engine.config().n_layers);  // fused q/k/v biases
  }
}

TEST(DLPackParameters, every_parameter_of_a_qwen2_model_exports_including_biases) {
  EngineOptions options;
  options.model_path = kOracle + "/llamacpp/qwen2-f32/micro-qwen2-f32-s1.gguf";
  Engine engine(options);
  expect_every_parameter_exports(engine);
}

// Gemma 3's sandwich and q/k norms, Phi-3's parameters filled from fused checkpoint tensors.
TEST(DLPackParameters, every_parameter_of_gemma3_and_phi3_exports) {
  for (const char* model : {"tests/data/llamacpp/gemma3-micro/gemma3-micro.gguf",
                            "tests/data/llamacpp/phi3-micro/hf"}) {
    SCOPED_TRACE(model);
    EngineOptions options;
    options.model_path = model;
    Engine engine(options);
    EXPECT_FALSE(engine.named_parameters().empty());
    expect_every_parameter_exports(engine);
  }
}

TEST(DLPackParameters, transformed_parameters_export_too) {
  for (const char* layout : {"transpose", "shuffle16x16"}) {
    EngineOptions options;
    options.model_path = kOracle + "/llamacpp/llama-f32/micro-llama-f32-s1.gguf";
    options.layout = layout;
    Engine engine(options);
    expect_every_parameter_exports(engine);
  }
}

}  // namespace
}  // namespace refit

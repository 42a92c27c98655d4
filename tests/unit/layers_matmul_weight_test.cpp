// A weight computes as its scheme says wherever it sits: the LM head and a Linear layer
// holding the same quantized weight give the same bits (W8A8 included: both quantize the
// activations first), and a W8A8 head is not the f32-activation matmul.
#include <gtest/gtest.h>

#include <cstring>

#include "kernels/matmul_quantized.h"
#include "kernels/quant/quant_scheme.h"
#include "kernels_test_util.h"
#include "layers/embedding.h"
#include "layers/linear.h"

namespace refit {
namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

TEST(MatmulWeight, lm_head_and_linear_with_the_same_quantized_weight_give_the_same_bits) {
  constexpr int64_t kVocab = 128, kDim = 256, kTokens = 3;
  const Tensor w = testing::random_tensor({kVocab, kDim}, 1);
  const Tensor x = testing::random_tensor({kTokens, kDim}, 2);
  const TensorParallel tp;
  for (const char* name : {"q8_0-w8a8", "mxfp4-w8a8", "fp8-channel-w8a8", "fp8-block-w8a8", "q8_0",
                           "mxfp4", "fp8-channel", "none"}) {
    SCOPED_TRACE(name);
    const QuantScheme scheme = parse_quant_scheme(name);
    ParameterSet head_params, linear_params;
    ParallelLmHead head(head_params, "lm_head.weight", kVocab, kDim, DType::f32, tp);
    Linear linear =
        Linear::column(linear_params, "proj", {{"proj", kVocab}}, kDim, false, DType::f32, tp);
    for (Parameter* p : {&head_params.get("lm_head.weight"), &linear.weight()}) {
      if (scheme.enabled()) p->set_quantization(scheme);
      p->load(w);
    }
    const Tensor from_head = head.forward(x), from_linear = linear.forward(x);
    EXPECT_TRUE(same_bits(from_head, from_linear));
    if (!scheme.w8a8) continue;
    // The f32-activation matmul of the same codes is another result: the head above did
    // quantize its activations.
    const Parameter& p = head_params.get("lm_head.weight");
    Tensor float_activations = Tensor::empty({kTokens, kVocab}, DType::f32);
    ops::matmul_quantized(x, Tensor(), p.data(), p.scale(), p.scale_group(), Tensor(),
                          float_activations);
    EXPECT_FALSE(same_bits(from_head, float_activations));
  }
}

}  // namespace
}  // namespace refit

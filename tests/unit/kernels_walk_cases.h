// Case generators for the registry walk (kernels_registry_walk_test.cpp): per op, inputs at
// the limits of its kernels (smallest shapes, odd and tail sizes, constraint boundaries
// met exactly, a larger shape, GQA ratios, windows, positions at the table end), in every
// dtype and layout some row accepts (kernel layouts made by the engine's own code:
// Parameter transforms and quantization, ops::quantize_*), each with reference.h's result.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace refit::testing::walk {

struct Case {
  std::string label;
  // The op's select() arguments (kernels/op_fns.h order); undefined for an absent optional.
  std::vector<Tensor> args;
  // Runs a kernel function of the op's type on these arguments (on fresh outputs, or on a
  // copy of an in-place argument) and returns the result to compare, as f32 on the CPU.
  std::function<Tensor(const void* fn, const std::vector<Tensor>& args)> run;
  Tensor expected;   // reference.h's result
  double tolerance;  // on nmse(result, expected)
};

using Generator = std::function<std::vector<Case>()>;

// One generator per op name (kernels/op_names.h); ops without one are a test failure.
const std::map<std::string, Generator>& generators();

}  // namespace refit::testing::walk

// The built-in demo model of `refit generate` without -m: the `tiny` synthetic preset
// (stories15M-sized) with deterministic weights made in memory, and its synthetic
// SentencePiece vocabulary. It shows the whole path working on a fresh machine; its
// text is not meaningful.
#pragma once

#include <memory>

#include "models/model.h"
#include "tokenizer/tokenizer.h"

namespace refit {

struct DemoModel {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
};

DemoModel make_demo_model(uint64_t seed = 0, const TensorParallel& tp = {});

}  // namespace refit

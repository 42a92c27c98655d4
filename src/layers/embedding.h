// Vocab-parallel token embedding and LM head. Each rank holds a contiguous range of
// vocabulary rows: the embedding looks up the ids it owns (zeros elsewhere) and the
// ranks sum their rows; the LM head computes logits for its rows and the ranks gather
// them. A tied LM head reads the embedding's own parameter; when that is stored quantized
// (a GGUF with a Q8_0/MXFP4 token_embd and no separate output), lookups decode their rows
// and the head runs the quantized matmul.
#pragma once

#include "layers/tensor_parallel.h"
#include "weights/parameter_set.h"

namespace refit {

class VocabParallelEmbedding {
 public:
  VocabParallelEmbedding(ParameterSet& params, const std::string& checkpoint_name, int64_t vocab,
                         int64_t dim, DType dtype, const TensorParallel& tp);
  Tensor forward(const Tensor& ids) const;  // ids i32 [T] -> f32 [T, dim]
  Parameter& weight() const { return *weight_; }
  int64_t vocab_start() const { return vocab_start_; }

 private:
  // Rows `local_ids` of this rank's table into `out` (float or quantized table).
  void lookup(const Tensor& local_ids, Tensor& out) const;

  Parameter* weight_;
  int64_t vocab_, vocab_start_, local_vocab_;
  std::shared_ptr<Communicator> communicator_;
};

class ParallelLmHead {
 public:
  // Untied: its own parameter. Tied: `tied_to` (the embedding's weight).
  ParallelLmHead(ParameterSet& params, const std::string& checkpoint_name, int64_t vocab,
                 int64_t dim, DType dtype, const TensorParallel& tp, Parameter* tied_to = nullptr);
  Tensor forward(const Tensor& x) const;  // f32 [T, dim] -> f32 [T, vocab]

 private:
  Parameter* weight_;
  int64_t vocab_;
  std::shared_ptr<Communicator> communicator_;
};

}  // namespace refit

#include "layers/embedding.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "kernels/ops.h"
#include "kernels/quant/quant_scheme.h"
#include "layers/linear.h"

namespace refit {
namespace {

// Each rank holds ceil(vocab / world) rows; the last rank's rows past the vocabulary
// are zero padding that no checkpoint tensor fills (as vLLM pads its vocab shards), so
// gathered logits have equal parts.
std::unique_ptr<Parameter> vocab_rows(const std::string& name, int64_t vocab, int64_t dim,
                                      DType dtype, const TensorParallel& tp, int64_t* start,
                                      int64_t* local) {
  const int64_t padded = (vocab + tp.world() - 1) / tp.world();
  const int64_t first = std::min<int64_t>(tp.rank() * padded, vocab);
  const int64_t real = std::min<int64_t>(padded, vocab - first);
  *start = first;
  *local = real;
  SubShard s{name, {vocab, dim}, tp.world() > 1 ? 0 : -1, first, real, 0, real};
  return std::make_unique<Parameter>(name, Shape{padded, dim}, dtype, std::vector<SubShard>{s},
                                     tp.rank(), tp.world());
}

}  // namespace

VocabParallelEmbedding::VocabParallelEmbedding(ParameterSet& params, const std::string& name,
                                               int64_t vocab, int64_t dim, DType dtype,
                                               const TensorParallel& tp)
    : vocab_(vocab), communicator_(tp.communicator) {
  weight_ = &params.add(vocab_rows(name, vocab, dim, dtype, tp, &vocab_start_, &local_vocab_));
}

Tensor VocabParallelEmbedding::forward(const Tensor& ids) const {
  const int64_t T = ids.size(0), dim = weight_->local_shape()[1];
  for (int64_t t = 0; t < T; ++t) {
    int32_t id = ids.data<int32_t>()[t];
    if (id < 0 || id >= vocab_) fail("token id {} is outside the vocabulary (size {})", id, vocab_);
  }
  Tensor out = Tensor::empty({T, dim}, DType::f32);
  if (communicator_->world_size() == 1) {
    lookup(ids, out);
    return out;
  }
  // Look up the ids this rank owns; other rows stay zero, and the sum fills them.
  Tensor local_ids = Tensor::empty({T}, DType::i32);
  for (int64_t t = 0; t < T; ++t) {
    int32_t id = ids.data<int32_t>()[t] - static_cast<int32_t>(vocab_start_);
    local_ids.data<int32_t>()[t] = (id >= 0 && id < local_vocab_) ? id : 0;
  }
  lookup(local_ids, out);
  for (int64_t t = 0; t < T; ++t) {
    int32_t id = ids.data<int32_t>()[t] - static_cast<int32_t>(vocab_start_);
    if (id < 0 || id >= local_vocab_)
      std::memset(out.data<float>() + t * dim, 0, dim * sizeof(float));
  }
  communicator_->all_reduce_sum(out.data<float>(), static_cast<size_t>(out.numel()));
  return out;
}

void VocabParallelEmbedding::lookup(const Tensor& local_ids, Tensor& out) const {
  if (!weight_->quantized()) {
    ops::embedding(weight_->data(), local_ids, out);
    return;
  }
  // A quantized table (a tied head stored quantized): each looked-up row is decoded on its
  // own, to exactly the values the scalar dequantize (and the matmul kernels) give.
  const QuantScheme& scheme = weight_->quantization();
  const int64_t dim = out.size(1), rows = weight_->local_shape()[0];
  const int64_t code_bytes = code_row_bytes(scheme, dim);
  const auto scale_bytes =
      static_cast<int64_t>(dtype_nbytes(scheme.scale_dtype(), scheme.scale_cols(dim)));
  const auto* codes = static_cast<const uint8_t*>(weight_->data().raw_data());
  const auto* scales = static_cast<const uint8_t*>(weight_->scale().raw_data());
  for (int64_t t = 0; t < out.size(0); ++t) {
    const int64_t id = local_ids.data<int32_t>()[t];
    REFIT_ASSERT(id >= 0 && id < rows);
    dequantize_rows(scheme, codes + id * code_bytes, scales + id * scale_bytes, 1, dim,
                    out.data<float>() + t * dim);
  }
}

ParallelLmHead::ParallelLmHead(ParameterSet& params, const std::string& name, int64_t vocab,
                               int64_t dim, DType dtype, const TensorParallel& tp,
                               Parameter* tied_to)
    : vocab_(vocab), communicator_(tp.communicator) {
  if (tied_to) {
    weight_ = tied_to;
  } else {
    int64_t start = 0, local = 0;
    weight_ = &params.add(vocab_rows(name, vocab, dim, dtype, tp, &start, &local));
  }
}

Tensor ParallelLmHead::forward(const Tensor& x) const {
  const int64_t T = x.size(0), local = weight_->local_shape()[0];
  Tensor local_logits = Tensor::empty({T, local}, DType::f32);
  // A quantized head (a quantized checkpoint's own output projection) computes as its
  // scheme says, W8A8 included, exactly as a Linear layer with the same weight would.
  matmul_weight(x, *weight_, Tensor(), local_logits);
  const int world = communicator_->world_size();
  if (world == 1) return local_logits;
  // Gather [world][T][local] then interleave into [T][vocab], dropping the padding.
  std::vector<float> gathered(static_cast<size_t>(world * T * local));
  communicator_->all_gather(local_logits.data<float>(), static_cast<size_t>(T * local),
                            gathered.data());
  Tensor logits = Tensor::empty({T, vocab_}, DType::f32);
  for (int r = 0; r < world; ++r) {
    const int64_t first = r * local, count = std::min(local, vocab_ - first);
    if (count <= 0) continue;
    for (int64_t t = 0; t < T; ++t)
      std::memcpy(logits.data<float>() + t * vocab_ + first, gathered.data() + (r * T + t) * local,
                  count * sizeof(float));
  }
  return logits;
}

}  // namespace refit

// Zero-copy exchange of tensors with other frameworks through DLPack (law L1: every
// tensor the engine owns is exportable).
//
// Export keeps the tensor's storage alive until the consumer calls the deleter. Import
// wraps the producer's memory without copying; the refit tensor's storage calls the
// producer's deleter exactly once, when the last view of it goes. If an import is
// refused (unsupported dtype, device or strides), the deleter is called before the
// error is thrown, since the capsule was handed over.
//
// f4_e2m1 crosses as DLPack 1.1 kDLFloat4_e2m1fn with bits 4 and lanes 2: one DLPack
// element is one byte holding two values, so the last dimension is halved.
#pragma once

#include <string>

#include "core/dlpack_abi.h"
#include "core/tensor.h"

namespace refit {

DLDataType to_dlpack_dtype(DType dtype);
// Refuses codes refit has no dtype for, naming them.
DType from_dlpack_dtype(DLDataType dtype);

// DLPack >= 1.0. The read-only flag is set when the tensor is read-only.
DLManagedTensorVersioned* to_dlpack_versioned(const Tensor& tensor);
// Pre-1.0 struct for older consumers (PyTorch 1.13). Refuses the dtypes that have no
// pre-1.0 code (f8, f4, e8m0) with a message pointing at as_bytes().
DLManagedTensor* to_dlpack_legacy(const Tensor& tensor);

Tensor from_dlpack(DLManagedTensorVersioned* managed);
Tensor from_dlpack(DLManagedTensor* managed);

// A u8 view of the same bytes (no copy): a contiguous tensor's raw storage as [nbytes],
// for consumers that cannot represent its dtype.
Tensor as_bytes(const Tensor& tensor);

}  // namespace refit

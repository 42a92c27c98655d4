// Tensors across the Python boundary, zero-copy both ways (law L1).
//
// Export: refit.Tensor wraps an engine tensor and speaks the Python DLPack protocol
// (__dlpack__ / __dlpack_device__), so torch.from_dlpack, numpy.from_dlpack and any
// array-API library see the engine's own memory. PyTorch 1.13 asks with no arguments and
// takes the pre-1.0 DLManagedTensor in a capsule named "dltensor"; newer consumers pass
// max_version >= (1, 0) and get a DLManagedTensorVersioned ("dltensor_versioned") that
// carries the read-only flag. Dtypes that pre-1.0 DLPack cannot name (f8, f4, e8m0) are
// refused for old consumers with refit.ExportError (a BufferError), whose message points
// at Tensor.as_bytes(): a u8 view of the same bytes.
//
// Import: whatever a trainer sends — a torch tensor that requires grad (seed 000's
// BufferError: we detach it ourselves; detach() shares memory), a non-contiguous view, a
// numpy array, any __dlpack__ object or a raw capsule — becomes a refit Tensor over the
// producer's memory. The producer's deleter always runs with the GIL held, whichever
// thread drops the last reference (commits run with the GIL released).
#pragma once

#include <pybind11/pybind11.h>

#include <optional>
#include <string>

#include "core/tensor.h"

namespace refit::python {

namespace py = pybind11;

// A refit tensor as Python sees it. `name` (may be empty) makes error messages specific.
class PyTensor {
 public:
  PyTensor(Tensor tensor, std::string name = {}) : tensor_(std::move(tensor)), name_(std::move(name)) {}
  virtual ~PyTensor() = default;

  const Tensor& tensor() const { return tensor_; }
  const std::string& name() const { return name_; }

  // DLPack protocol. max_version: the consumer's highest supported (major, minor), or
  // none for a pre-1.0 consumer. copy=True exports a private copy; dl_device must be
  // this tensor's device when given.
  py::object dlpack(py::object stream, py::object max_version, py::object dl_device, py::object copy) const;
  py::tuple dlpack_device() const;

  PyTensor as_bytes() const;
  // The address of element 0, as torch's data_ptr() reports it after from_dlpack.
  uintptr_t data_ptr() const;
  std::string repr() const;

 private:
  Tensor tensor_;
  std::string name_;
};

// The DLPack device tuple (device_type, device_id) of a refit device.
py::tuple dlpack_device_tuple(const Device& device);

// Converts a Python object into a refit Tensor sharing its memory. `what` names the
// parameter for error messages. Raises TypeError for things that are not tensors and
// ValueError for tensors that cannot reach this build's devices.
Tensor import_tensor(py::handle object, const std::string& what);

// Exports a refit tensor to torch (when importable) or numpy, zero-copy.
// format: "torch", "numpy", "refit" (the PyTensor itself) or "auto" (torch, else numpy).
py::object export_tensor(const Tensor& tensor, const std::string& format);

// "TypeName: message" of a Python exception, without the traceback what() adds.
std::string brief(const py::error_already_set& e);

// Whether this build can hold tensors on an accelerator (a CUDA backend).
bool build_has_cuda();

}  // namespace refit::python

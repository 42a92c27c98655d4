#include "tensor_interop.h"

#include <fmt/format.h>

#include <cstring>

#include "core/dlpack.h"
#include "errors.h"

namespace refit::python {

namespace {

constexpr const char* kLegacyName = "dltensor";
constexpr const char* kLegacyUsedName = "used_dltensor";
constexpr const char* kVersionedName = "dltensor_versioned";
constexpr const char* kVersionedUsedName = "used_dltensor_versioned";

std::string label(const std::string& name) {
  return name.empty() ? "tensor" : fmt::format("'{}'", name);
}

// Runs a producer's deleter with the GIL held: numpy's and torch's deleters touch Python
// objects, and the last reference to an imported tensor may be dropped on a thread that
// released the GIL (a commit, a generation). After interpreter shutdown the memory is
// leaked rather than handed to a dead interpreter.
template <typename Fn>
void with_gil(Fn&& fn) {
  if (!Py_IsInitialized()) return;
  PyGILState_STATE state = PyGILState_Ensure();
  fn();
  PyGILState_Release(state);
}

// Wraps a producer's managed tensor in one of ours whose deleter takes the GIL first.
DLManagedTensor* gil_guarded(DLManagedTensor* inner) {
  auto* outer = new DLManagedTensor{};
  outer->dl_tensor = inner->dl_tensor;  // shape/strides stay owned by `inner`
  outer->manager_ctx = inner;
  outer->deleter = [](DLManagedTensor* self) {
    auto* producer = static_cast<DLManagedTensor*>(self->manager_ctx);
    if (producer->deleter) with_gil([producer] { producer->deleter(producer); });
    delete self;
  };
  return outer;
}

DLManagedTensorVersioned* gil_guarded(DLManagedTensorVersioned* inner) {
  auto* outer = new DLManagedTensorVersioned{};
  outer->version = inner->version;
  outer->flags = inner->flags;
  outer->dl_tensor = inner->dl_tensor;
  outer->manager_ctx = inner;
  outer->deleter = [](DLManagedTensorVersioned* self) {
    auto* producer = static_cast<DLManagedTensorVersioned*>(self->manager_ctx);
    if (producer->deleter) with_gil([producer] { producer->deleter(producer); });
    delete self;
  };
  return outer;
}

// Takes ownership of the tensor in a capsule (renaming it "used_...", as the DLPack
// protocol asks, so its destructor no longer frees it).
Tensor consume_capsule(py::handle capsule, const std::string& what) {
  const char* name = PyCapsule_GetName(capsule.ptr());
  if (!name) throw py::error_already_set();
  try {
    if (std::strcmp(name, kVersionedName) == 0) {
      auto* managed =
          static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(capsule.ptr(), name));
      if (!managed) throw py::error_already_set();
      if (PyCapsule_SetName(capsule.ptr(), kVersionedUsedName) != 0) throw py::error_already_set();
      return from_dlpack(gil_guarded(managed));
    }
    if (std::strcmp(name, kLegacyName) == 0) {
      auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), name));
      if (!managed) throw py::error_already_set();
      if (PyCapsule_SetName(capsule.ptr(), kLegacyUsedName) != 0) throw py::error_already_set();
      return from_dlpack(gil_guarded(managed));
    }
  } catch (const Error& e) {
    // from_dlpack refused (dtype, device, strides) and has already released the memory.
    throw py::type_error(fmt::format("parameter {}: {}", label(what), e.what()));
  }
  if (std::strcmp(name, kLegacyUsedName) == 0 || std::strcmp(name, kVersionedUsedName) == 0)
    throw py::value_error(fmt::format(
        "parameter {}: this DLPack capsule was already consumed (a capsule can be imported once)",
        label(what)));
  throw py::type_error(fmt::format("parameter {}: a PyCapsule named '{}' is not a DLPack tensor",
                                   label(what), name));
}

std::string device_from_dlpack_tuple(py::handle device_tuple) {
  auto t = device_tuple.cast<py::tuple>();
  const int type = t[0].cast<int>();
  const int index = t.size() > 1 ? t[1].cast<int>() : 0;
  switch (type) {
    case kDLCPU:
      return "cpu";
    case kDLCUDA:
      return fmt::format("cuda:{}", index);
    case kDLCUDAHost:
      return "cuda_host";
    case kDLCUDAManaged:
      return fmt::format("cuda_managed:{}", index);
    case kDLROCM:
      return fmt::format("rocm:{}", index);
    case kDLROCMHost:
      return "rocm_host";
    default:
      return fmt::format("DLPack device type {}", type);
  }
}

}  // namespace

std::string brief(const py::error_already_set& e) {
  // what() appends a traceback; messages we build need only "Type: message".
  std::string type = py::str(e.type().attr("__name__"));
  return type + ": " + std::string(py::str(e.value()));
}

namespace {

bool host_accessible(const std::string& device) {
  return device == "cpu" || device == "cuda_host" || device == "rocm_host";
}

// The refusal for a tensor this build cannot reach. Checked before anything is exported,
// so the producer never hands over memory we would only give back.
void check_reachable(const std::string& device, const std::string& what) {
  if (host_accessible(device)) return;
  if (!build_has_cuda())
    throw py::value_error(fmt::format(
        "parameter {}: the tensor is on {}, but this refit build is CPU-only (no CUDA backend); "
        "send a CPU tensor (tensor.cpu())",
        label(what), device));
  if (device.rfind("cuda", 0) != 0)
    throw py::value_error(
        fmt::format("parameter {}: tensors on {} are not supported", label(what), device));
  // A CUDA build can hold tensors on the GPU, but an engine's weights still live on the
  // CPU (docs/cuda.md), so a GPU tensor is refused before its memory is handed over.
  throw py::value_error(
      fmt::format("parameter {}: the tensor is on {}, but this engine's weights live on the cpu; "
                  "send a CPU tensor "
                  "(tensor.cpu())",
                  label(what), device));
}

bool is_torch_tensor(py::handle object) {
  py::dict modules = py::module_::import("sys").attr("modules");
  if (!modules.contains("torch")) return false;  // torch not imported: cannot be a torch tensor
  py::object torch = modules["torch"];
  return py::isinstance(object, torch.attr("Tensor"));
}

Tensor import_torch(py::handle object, const std::string& what) {
  py::object device = object.attr("device");
  const std::string type = device.attr("type").cast<std::string>();
  check_reachable(type == "cpu" ? "cpu" : py::str(device).cast<std::string>(), what);
  // Seed 000: a tensor that requires grad (an nn.Parameter, a trainer's weight) refuses
  // DLPack export. detach() is a view of the same memory without the autograd graph, so
  // the import stays zero-copy and the trainer never has to do it.
  py::object detached = object.attr("detach")();
  py::object capsule;
  try {
    capsule = detached.attr("__dlpack__")();
  } catch (py::error_already_set& e) {
    // e.g. a sparse tensor, a conjugated complex view.
    throw py::type_error(fmt::format("parameter {}: cannot import this torch tensor ({} {}): {}",
                                     label(what), py::str(object.attr("dtype")).cast<std::string>(),
                                     py::str(object.attr("layout")).cast<std::string>(), brief(e)));
  }
  return consume_capsule(capsule, what);
}

Tensor import_dlpack_object(py::handle object, const std::string& what) {
  if (py::hasattr(object, "__dlpack_device__"))
    check_reachable(device_from_dlpack_tuple(object.attr("__dlpack_device__")()), what);
  py::object capsule;
  try {
    // DLPack >= 1.0 producers give the versioned struct (with its read-only flag) when asked.
    capsule = object.attr("__dlpack__")(py::arg("max_version") = py::make_tuple(1, 1));
  } catch (py::error_already_set& e) {
    if (!e.matches(PyExc_TypeError)) {
      throw py::type_error(fmt::format(
          "parameter {}: the {} refused DLPack export: {}", label(what),
          py::str(py::type::of(object).attr("__name__")).cast<std::string>(), brief(e)));
    }
    // A pre-1.0 producer (numpy 1.24) does not know max_version.
    try {
      capsule = object.attr("__dlpack__")();
    } catch (py::error_already_set& e2) {
      throw py::type_error(fmt::format(
          "parameter {}: the {} refused DLPack export: {}", label(what),
          py::str(py::type::of(object).attr("__name__")).cast<std::string>(), brief(e2)));
    }
  }
  return consume_capsule(capsule, what);
}

PyObject* make_capsule(DLManagedTensor* managed) {
  PyObject* capsule = PyCapsule_New(managed, kLegacyName, [](PyObject* self) {
    // An unconsumed capsule still owns the tensor; a consumed one was renamed.
    if (!PyCapsule_IsValid(self, kLegacyName)) return;
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(self, kLegacyName));
    if (m && m->deleter) m->deleter(m);
    PyErr_Restore(type, value, traceback);
  });
  if (!capsule) {
    managed->deleter(managed);
    throw py::error_already_set();
  }
  return capsule;
}

PyObject* make_capsule(DLManagedTensorVersioned* managed) {
  PyObject* capsule = PyCapsule_New(managed, kVersionedName, [](PyObject* self) {
    if (!PyCapsule_IsValid(self, kVersionedName)) return;
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    auto* m = static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(self, kVersionedName));
    if (m && m->deleter) m->deleter(m);
    PyErr_Restore(type, value, traceback);
  });
  if (!capsule) {
    managed->deleter(managed);
    throw py::error_already_set();
  }
  return capsule;
}

}  // namespace

bool build_has_cuda() {
#if defined(REFIT_PYTHON_HAS_CUDA) && REFIT_PYTHON_HAS_CUDA
  return true;
#else
  return false;
#endif
}

py::tuple dlpack_device_tuple(const Device& device) {
  int type = kDLCPU;
  switch (device.type) {
    case DeviceType::cpu:
      type = kDLCPU;
      break;
    case DeviceType::cuda:
      type = kDLCUDA;
      break;
    case DeviceType::rocm:
      type = kDLROCM;
      break;
  }
  return py::make_tuple(type, device.type == DeviceType::cpu ? 0 : device.index);
}

py::tuple PyTensor::dlpack_device() const { return dlpack_device_tuple(tensor_.device()); }

py::object PyTensor::dlpack(py::object stream, py::object max_version, py::object dl_device,
                            py::object copy) const {
  if (!stream.is_none() && tensor_.device().type == DeviceType::cpu && stream.cast<int64_t>() != -1)
    throw py::value_error("__dlpack__: stream must be None for a CPU tensor");
  if (!dl_device.is_none() && !dl_device.equal(dlpack_device()))
    throw ExportRefused(
        fmt::format("{} lives on {}; refit does not copy across devices in __dlpack__",
                    label(name_), tensor_.device().str()));
  const bool make_copy = !copy.is_none() && copy.cast<bool>();
  Tensor t = make_copy ? tensor_.clone() : tensor_;
  bool versioned = false;
  if (!max_version.is_none()) {
    auto version = max_version.cast<py::tuple>();
    versioned = version.size() >= 1 && version[0].cast<int>() >= 1;
  }
  if (versioned) {
    DLManagedTensorVersioned* managed;
    try {
      managed = to_dlpack_versioned(t);
    } catch (const Error& e) {
      throw ExportRefused(fmt::format("{}: {}", label(name_), e.what()));
    }
    if (make_copy) managed->flags |= DLPACK_FLAG_BITMASK_IS_COPIED;
    return py::reinterpret_steal<py::object>(make_capsule(managed));
  }
  DLManagedTensor* managed;
  try {
    managed = to_dlpack_legacy(t);
  } catch (const Error& e) {
    throw ExportRefused(fmt::format(
        "{} is {}, which pre-1.0 DLPack (what PyTorch 1.13's torch.from_dlpack asks for) cannot "
        "represent; use .as_bytes() for a zero-copy u8 view of the same bytes, or a DLPack >= 1.0 "
        "consumer. ({})",
        label(name_), dtype_name(t.dtype()), e.what()));
  }
  return py::reinterpret_steal<py::object>(make_capsule(managed));
}

PyTensor PyTensor::as_bytes() const {
  return PyTensor(refit::as_bytes(tensor_), name_.empty() ? std::string() : name_ + " (bytes)");
}

uintptr_t PyTensor::data_ptr() const {
  return tensor_.numel() > 0 ? reinterpret_cast<uintptr_t>(tensor_.raw_data())
                             : reinterpret_cast<uintptr_t>(tensor_.storage()->data());
}

std::string PyTensor::repr() const {
  return fmt::format("refit.Tensor({}{}{})", name_.empty() ? "" : "'" + name_ + "', ",
                     tensor_.str(), tensor_.read_only() ? ", read-only" : "");
}

Tensor import_tensor(py::handle object, const std::string& what) {
  if (py::isinstance<PyTensor>(object)) return object.cast<const PyTensor&>().tensor();
  if (is_torch_tensor(object)) return import_torch(object, what);
  if (py::hasattr(object, "__dlpack__")) return import_dlpack_object(object, what);
  if (PyCapsule_CheckExact(object.ptr())) return consume_capsule(object, what);
  throw py::type_error(
      fmt::format("parameter {}: expected a tensor (torch.Tensor, numpy.ndarray, refit.Tensor or "
                  "any object with "
                  "__dlpack__), got {}",
                  label(what), py::str(py::type::of(object).attr("__name__")).cast<std::string>()));
}

py::object export_tensor(const Tensor& tensor, const std::string& format) {
  py::object wrapped = py::cast(PyTensor(tensor));
  if (format == "refit") return wrapped;
  if (format == "torch" || format == "auto") {
    try {
      py::module_ torch = py::module_::import("torch");
      return torch.attr("from_dlpack")(wrapped);
    } catch (py::error_already_set& e) {
      if (format == "torch" || !e.matches(PyExc_ImportError)) throw;
    }
  }
  if (format == "numpy" || format == "auto") {
    py::module_ numpy = py::module_::import("numpy");
    return numpy.attr("from_dlpack")(wrapped);
  }
  throw py::value_error(
      fmt::format("format must be 'auto', 'torch', 'numpy' or 'refit', got '{}'", format));
}

}  // namespace refit::python

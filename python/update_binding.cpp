#include "update_binding.h"

#include <fmt/format.h>
#include <pybind11/stl.h>

#include "errors.h"
#include "tensor_interop.h"

namespace py = pybind11;

namespace refit::python {
namespace {

UpdateOptions update_options(bool check_finite, bool ignore_unknown_tensors) {
  UpdateOptions options;
  options.check_finite = check_finite;
  options.ignore_unknown_tensors = ignore_unknown_tensors;
  return options;
}

// What a commit wrote, as a dict (the HTTP routes' "report", with every name).
py::dict report_dict(const UpdateReport& r) {
  py::dict d;
  d["tensors_written"] = r.tensors.size();
  d["tensor_names"] = r.tensors;
  d["bytes"] = r.bytes;
  d["parameters_touched"] = r.parameters;
  d["ignored"] = r.ignored;
  d["check_finite"] = r.checked_finite;
  d["validate_seconds"] = r.validate_seconds;
  d["commit_seconds"] = r.commit_seconds;
  return d;
}

// (name, tensor) pairs from a list/iterable of pairs or a mapping (a state_dict).
std::vector<std::pair<std::string, py::object>> named_items(py::handle tensors) {
  py::object items = py::reinterpret_borrow<py::object>(tensors);
  if (py::hasattr(items, "items") && py::hasattr(items, "keys")) items = items.attr("items")();
  std::vector<std::pair<std::string, py::object>> out;
  for (py::handle item : py::iter(items)) {
    py::tuple pair;
    try {
      pair = py::reinterpret_borrow<py::object>(item).cast<py::tuple>();
    } catch (const py::cast_error&) {
      throw py::type_error(
          "weight update: expected (name, tensor) pairs or a dict of name -> tensor");
    }
    if (pair.size() != 2 || !py::isinstance<py::str>(pair[0]))
      throw py::type_error("weight update: expected (name, tensor) pairs with a str name");
    out.emplace_back(pair[0].cast<std::string>(), py::reinterpret_borrow<py::object>(pair[1]));
  }
  return out;
}

// The transaction as Python holds it. Keeps the engine alive (the WeightUpdate refers
// to its parameters). A tensor refused while importing (a CUDA tensor, a list) fails the
// transaction just like one the engine refuses, so a commit can never apply half of
// what the trainer meant to send.
class PyWeightUpdate {
 public:
  PyWeightUpdate(py::object engine_object, UpdateOptions options)
      : engine_object_(std::move(engine_object)), engine_(engine_object_.cast<Engine*>()) {
    update_ = engine_->begin_update(options);
  }
  ~PyWeightUpdate() {
    if (update_ && !update_->finished())
      update_->abort();  // drops staged references; nothing was written
  }

  void update(const std::string& name, py::handle object) {
    if (update_->finished())
      throw UpdateRefused("weight update: the transaction has already been committed or aborted");
    Tensor tensor;
    try {
      tensor = import_tensor(object, name);
    } catch (py::builtin_exception& e) {
      if (failure_.empty()) failure_ = e.what();
      throw;
    } catch (py::error_already_set& e) {
      if (failure_.empty()) failure_ = brief(e);
      throw;
    }
    py::gil_scoped_release release;  // validation may scan every value (check_finite)
    as_update_error([&] { update_->update(name, tensor); });
  }

  void update_many(py::handle tensors) {
    for (auto& [name, object] : named_items(tensors)) update(name, object);
  }

  uint64_t commit() {
    if (!failure_.empty())
      throw UpdateRefused(fmt::format(
          "weight update: refusing to commit after a refused tensor ({}); abort it", failure_));
    py::gil_scoped_release release;
    as_update_error([&] { engine_->commit(*update_); });
    return engine_->weight_version();
  }

  void abort() {
    if (update_->finished())
      throw UpdateRefused("weight update: the transaction has already been committed or aborted");
    update_->abort();
  }

  size_t size() const { return update_->size(); }
  bool failed() const { return !failure_.empty() || update_->failed(); }
  std::string failure() const { return failure_.empty() ? update_->failure() : failure_; }
  bool finished() const { return update_->finished(); }
  py::dict report() const { return report_dict(update_->report()); }

 private:
  py::object engine_object_;
  Engine* engine_;
  std::unique_ptr<WeightUpdate> update_;
  std::string failure_;
};

uint64_t update_from_tensors(Engine& engine, py::handle tensors, bool check_finite,
                             bool ignore_unknown_tensors) {
  // Import everything first (with the GIL): a refusal here leaves the engine untouched.
  std::vector<std::pair<std::string, Tensor>> imported;
  for (auto& [name, object] : named_items(tensors))
    imported.emplace_back(name, import_tensor(object, name));
  if (imported.empty()) throw py::value_error("update_weights_from_tensors: no tensors given");
  py::gil_scoped_release release;
  return as_update_error([&] {
    return engine.update_weights_from_tensors(imported,
                                              update_options(check_finite, ignore_unknown_tensors));
  });
}

uint64_t update_from_disk(Engine& engine, py::handle path, py::object names, bool check_finite,
                          bool ignore_unknown_tensors) {
  const std::string file = py::str(py::module_::import("os").attr("fspath")(path));
  std::vector<std::string> wanted;
  if (!names.is_none()) {
    if (py::isinstance<py::str>(names))
      throw py::type_error("update_weights_from_disk: names must be a list of names");
    wanted = names.cast<std::vector<std::string>>();
    if (wanted.empty())
      throw py::value_error("update_weights_from_disk: names is empty (pass None for all)");
  }
  py::gil_scoped_release release;
  return as_update_error([&] {
    return engine.update_weights_from_disk(file, wanted,
                                           update_options(check_finite, ignore_unknown_tensors));
  });
}

}  // namespace

void bind_updates(py::module_& m, py::class_<Engine>& engine_class) {
  py::class_<PyWeightUpdate>(
      m, "WeightUpdate",
      "A weight-update transaction: update(name, tensor)* then commit() or abort(). Each tensor "
      "is validated at once (nothing is written); commit() writes them all in place between "
      "two forward passes and bumps the weight version. As a context manager it commits on a "
      "clean exit and aborts on an exception.")
      .def("update", &PyWeightUpdate::update, py::arg("name"), py::arg("tensor"),
           "Validates and stages `tensor` for checkpoint name `name` (zero-copy; it must stay "
           "unchanged until "
           "commit). Raises refit.UpdateError / TypeError / ValueError naming the parameter; the "
           "transaction "
           "then cannot commit.")
      .def("update_many", &PyWeightUpdate::update_many, py::arg("tensors"))
      .def("commit", &PyWeightUpdate::commit,
           "Applies every staged tensor; returns the new weight version.")
      .def("abort", &PyWeightUpdate::abort)
      .def_property_readonly("failed", &PyWeightUpdate::failed)
      .def_property_readonly("failure", &PyWeightUpdate::failure)
      .def_property_readonly("finished", &PyWeightUpdate::finished)
      .def_property_readonly("report", &PyWeightUpdate::report,
                             "What is staged (before commit) or was written (after): "
                             "tensors_written, tensor_names, bytes, parameters_touched, ignored, "
                             "check_finite, validate_seconds, commit_seconds.")
      .def("__len__", &PyWeightUpdate::size)
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyWeightUpdate& u, py::handle type, py::handle, py::handle) {
        if (u.finished()) return false;
        if (type.is_none())
          u.commit();
        else
          u.abort();
        return false;
      });

  engine_class
      .def(
          "begin_update",
          [](py::object self, bool check_finite, bool ignore_unknown_tensors) {
            return std::make_unique<PyWeightUpdate>(
                self, update_options(check_finite, ignore_unknown_tensors));
          },
          py::arg("check_finite") = true, py::arg("ignore_unknown_tensors") = false)
      .def(
          "last_update_report", [](const Engine& e) { return report_dict(e.last_update_report()); },
          "What the latest commit wrote (see WeightUpdate.report).")
      .def("update_weights_from_tensors", &update_from_tensors, py::arg("tensors"),
           py::arg("check_finite") = true, py::arg("ignore_unknown_tensors") = false,
           "Validates every (name, tensor) pair (a list of pairs or a dict), then writes them all "
           "in place; "
           "on any refusal nothing changes. Accepts torch tensors that require grad, "
           "non-contiguous views and "
           "f32/f16/bf16. NaN/inf values are refused unless check_finite=False; a name no "
           "parameter takes is refused unless ignore_unknown_tensors=True (then listed in "
           "last_update_report()['ignored']). Returns the new weight version.")
      .def("update_weights_from_disk", &update_from_disk, py::arg("path"),
           py::arg("names") = py::none(), py::arg("check_finite") = true,
           py::arg("ignore_unknown_tensors") = false,
           "Loads the named tensors (None: all) from a checkpoint into the existing storage. "
           "Returns the new "
           "weight version.");
}

}  // namespace refit::python

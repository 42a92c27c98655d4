// Weight sync from a torch.distributed trainer, in-process: refit._refit.WeightSync, what
// refit.LLM's init_weights_update_group / update_weights_from_distributed (and OpenRLHF's
// init_process_group / update_weight) are built on. The same C++ as the server's
// /init_weights_update_group family (server/weight_sync_endpoints.cpp): WeightSyncGroups
// joins the trainer's gloo group and receives its broadcasts; the Engine's update
// transaction validates and stages what came; refit/llm.py commits it between two
// scheduler steps (Scheduler.run_exclusive), so a failure at any point before the commit
// leaves the engine on its old weights, bit for bit.
//
//   sync = _refit.WeightSync(engine)
//   sync.init(master_address, master_port, rank, world_size, group_name, backend, timeout)
//   staged = sync.receive(names, dtypes, shapes, group_name, flattened_bucket, check_finite,
//                         ignore_unknown_tensors)
//   staged.commit()        # (between steps) -> the new weight version; or staged.abort()
//   sync.destroy(group_name)
//
// The GIL is released while joining and receiving (both block on the trainer), and the
// operations of one WeightSync run one at a time (they talk to the trainer in order).
// Errors: refit.Error for what the group did (unreachable master, a timeout, the trainer
// gone mid-broadcast: the group is then broken and must be joined again), refit.UpdateError
// for received tensors the engine refuses (unknown name, wrong shape: the group stays in
// step), ValueError for arguments (backend "nccl" on this CPU build, a malformed update:
// the group is left, since its broadcasts cannot be received).
#include "weight_sync_binding.h"

#include <fmt/format.h>
#include <pybind11/stl.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "errors.h"
#include "parallel/weight_sync.h"
#include "runtime/engine.h"

namespace py = pybind11;

namespace refit::python {
namespace {

// A received, validated, staged update: commit() writes it (call it between steps),
// abort() or garbage collection drops it. Keeps the engine and the received tensors alive.
class PyReceivedUpdate {
 public:
  PyReceivedUpdate(py::object engine, std::unique_ptr<WeightUpdate> update,
                   std::vector<std::pair<std::string, Tensor>> tensors, double seconds)
      : engine_object_(std::move(engine)),
        engine_(engine_object_.cast<Engine*>()),
        update_(std::move(update)),
        tensors_(std::move(tensors)),
        seconds_(seconds) {}
  ~PyReceivedUpdate() {
    if (update_ && !update_->finished()) update_->abort();
  }

  uint64_t commit() {
    if (update_->finished())
      throw UpdateRefused("weight update: the received update was already committed or aborted");
    {
      py::gil_scoped_release release;
      as_update_error([&] { engine_->commit(*update_); });
    }
    tensors_.clear();
    return engine_->weight_version();
  }
  void abort() {
    if (!update_->finished()) update_->abort();
    tensors_.clear();
  }
  size_t size() const { return update_->size(); }
  bool finished() const { return update_->finished(); }
  double seconds() const { return seconds_; }

 private:
  py::object engine_object_;
  Engine* engine_;
  std::unique_ptr<WeightUpdate> update_;
  std::vector<std::pair<std::string, Tensor>> tensors_;  // what update_ stages (zero-copy)
  double seconds_;
};

std::string show(py::handle v) { return py::repr(v).cast<std::string>(); }

class PyWeightSync {
 public:
  explicit PyWeightSync(py::object engine)
      : engine_object_(std::move(engine)), engine_(engine_object_.cast<Engine&>()) {
    if (engine_.world_size() > 1)
      throw py::value_error(
          fmt::format("WeightSync: this engine is rank {} of {}; in-process weight sync is for "
                      "one-process engines (the "
                      "server's /init_weights_update_group serves tensor-parallel ones)",
                      engine_.rank(), engine_.world_size()));
  }

  std::string init(const std::string& master_address, int master_port, int rank, int world_size,
                   const std::string& group_name, const std::string& backend,
                   py::object timeout_seconds) {
    if (backend == "nccl")
      throw py::value_error(
          "init_weights_update_group: backend 'nccl' needs GPUs and NCCL; this refit runs on CPUs "
          "and joins 'gloo' "
          "groups: create the trainer's group with backend='gloo' and pass backend='gloo'");
    if (backend != "gloo")
      throw py::value_error(fmt::format(
          "init_weights_update_group: unknown backend '{}' (this refit supports 'gloo')", backend));
    if (master_address.empty())
      throw py::value_error("init_weights_update_group: master_address is empty");
    if (master_port < 1 || master_port > 65535)
      throw py::value_error(fmt::format(
          "init_weights_update_group: master_port must be in 1..65535, got {}", master_port));
    if (group_name.empty())
      throw py::value_error("init_weights_update_group: group_name must not be empty");
    if (world_size < 2 || rank < 1 || rank >= world_size)
      throw py::value_error(
          fmt::format("init_weights_update_group: rank_offset {} does not fit a group of "
                      "world_size {} (rank 0 is the "
                      "trainer's; this engine is one rank: rank_offset in 1..world_size-1)",
                      rank, world_size));
    if (!built_with_gloo())
      throw Error(
          "init_weights_update_group: this refit was built without gloo (libgloo-dev): it cannot "
          "join a "
          "torch.distributed group");
    TorchGroupOptions o;
    o.master_address = master_address;
    o.master_port = master_port;
    o.rank = rank;
    o.world_size = world_size;
    o.group_name = group_name;
    o.backend = backend;
    if (!timeout_seconds.is_none()) {
      const double t = timeout_seconds.cast<double>();
      if (!(t > 0))
        throw py::value_error(
            fmt::format("init_weights_update_group: timeout must be positive, got {}", t));
      o.timeout = std::chrono::milliseconds(static_cast<int64_t>(t * 1000.0 + 0.5));
    }
    py::gil_scoped_release release;
    std::lock_guard lock(mutex_);
    try {
      return groups_.init(o);
    } catch (const Error& e) {
      fail("init_weights_update_group: failed to join group '{}' at {}:{} as rank {} of {}: {}",
           group_name, master_address, master_port, rank, world_size, e.what());
    }
  }

  std::unique_ptr<PyReceivedUpdate> receive(py::handle names, py::handle dtypes, py::handle shapes,
                                            const std::string& group_name, bool flattened_bucket,
                                            bool check_finite, bool ignore_unknown_tensors) {
    DistributedUpdate u;
    u.group_name = group_name;
    u.flattened_bucket = flattened_bucket;
    try {
      parse(names, dtypes, shapes, u);
    } catch (const std::exception& e) {
      // The trainer broadcasts what it announced, but nothing of this can be received:
      // leave the group rather than pair its broadcasts with a later update's tensors.
      bool left = false;
      {
        py::gil_scoped_release release;
        std::lock_guard lock(mutex_);
        if (groups_.has(group_name)) {
          groups_.destroy(group_name);
          left = true;
        }
      }
      throw py::value_error(fmt::format(
          "update_weights_from_distributed: refused, the weights are unchanged: {}{}", e.what(),
          left ? fmt::format("; the engine left group '{}' since it could not receive this "
                             "update's broadcasts: "
                             "init_weights_update_group again (and the trainer a new group)",
                             group_name)
               : std::string()));
    }
    py::gil_scoped_release release;
    std::lock_guard lock(mutex_);
    if (!groups_.has(group_name))
      fail(
          "update_weights_from_distributed: no weight update group '{}' (join it with "
          "init_weights_update_group "
          "first)",
          group_name);
    const auto started = std::chrono::steady_clock::now();
    std::vector<std::pair<std::string, Tensor>> tensors;
    try {
      tensors = groups_.receive(u);
    } catch (const Error& e) {
      fail(
          "update_weights_from_distributed: receiving {} tensor(s) from group '{}' failed, the "
          "weights are "
          "unchanged: {}; the group is broken: init_weights_update_group('{}', ...) again (it "
          "replaces the broken "
          "group) or destroy_weights_update_group('{}')",
          u.names.size(), group_name, e.what(), group_name, group_name);
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    UpdateOptions options;
    options.check_finite = check_finite;
    options.ignore_unknown_tensors = ignore_unknown_tensors;
    std::unique_ptr<WeightUpdate> update = engine_.begin_update(options);
    try {
      for (const auto& [name, t] : tensors) update->update(name, t);
    } catch (const Error& e) {
      update->abort();
      throw UpdateRefused(
          fmt::format("update_weights_from_distributed: weight update refused, the weights are "
                      "unchanged: {} (every broadcast "
                      "was received: group '{}' stays usable)",
                      e.what(), group_name));
    }
    py::gil_scoped_acquire acquire;
    return std::make_unique<PyReceivedUpdate>(engine_object_, std::move(update), std::move(tensors),
                                              seconds);
  }

  void destroy(const std::string& group_name) {
    py::gil_scoped_release release;
    std::lock_guard lock(mutex_);
    try {
      groups_.destroy(group_name);
    } catch (const Error& e) {
      fail("destroy_weights_update_group: {}", e.what());
    }
  }

  bool has(const std::string& group_name) {
    py::gil_scoped_release release;
    std::lock_guard lock(mutex_);
    return groups_.has(group_name);
  }

 private:
  // The most one update can carry: every parameter in f64, plus slack (as the server).
  int64_t max_update_bytes() const {
    int64_t values = 0;
    for (const ParameterInfo& p : engine_.named_parameters()) {
      int64_t n = 1;
      for (int64_t d : p.logical_shape) n *= d;
      values += n;
    }
    return values * 8 + (int64_t{64} << 20);
  }

  void parse(py::handle names_in, py::handle dtypes_in, py::handle shapes_in,
             DistributedUpdate& u) const {
    auto list = [](py::handle v, const char* what) {
      if (py::isinstance<py::str>(v) || !py::isinstance<py::sequence>(v))
        throw py::value_error(fmt::format("{} must be a list, got {}", what, show(v)));
      return py::reinterpret_borrow<py::sequence>(v);
    };
    const py::sequence names = list(names_in, "names"), dtypes = list(dtypes_in, "dtypes"),
                       shapes = list(shapes_in, "shapes");
    if (names.size() == 0) throw py::value_error("names must not be empty");
    if (dtypes.size() != names.size() || shapes.size() != names.size())
      throw py::value_error(
          fmt::format("names, dtypes and shapes must have one entry per tensor: {}, {} and {}",
                      names.size(), dtypes.size(), shapes.size()));
    const int64_t max_bytes = max_update_bytes();
    int64_t total = 0;
    for (size_t i = 0; i < names.size(); ++i) {
      if (!py::isinstance<py::str>(names[i]))
        throw py::value_error(fmt::format("names[{}] must be a str, got {}", i, show(names[i])));
      const std::string name = names[i].cast<std::string>();
      if (!py::isinstance<py::str>(dtypes[i]))
        throw py::value_error(
            fmt::format("dtypes[{}] must be a dtype name, got {}", i, show(dtypes[i])));
      const std::string dtype = dtypes[i].cast<std::string>();
      const std::optional<DType> dt = dtype_from_torch_name(dtype);
      if (!dt)
        throw py::value_error(
            fmt::format("dtypes[{}]: unknown dtype '{}' for '{}'", i, dtype, name));
      py::handle shape_in = shapes[i];
      if (py::isinstance<py::str>(shape_in) || !py::isinstance<py::sequence>(shape_in) ||
          py::len(shape_in) > 16)
        throw py::value_error(fmt::format("shapes[{}] must be a list of at most 16 sizes, got {}",
                                          i, show(shape_in)));
      Shape shape;
      int64_t numel = 1;
      for (py::handle d : py::reinterpret_borrow<py::sequence>(shape_in)) {
        if (!py::isinstance<py::int_>(d) || py::isinstance<py::bool_>(d) || d.cast<int64_t>() < 0)
          throw py::value_error(
              fmt::format("shapes[{}] must hold non-negative integers, got {}", i, show(shape_in)));
        const int64_t n = d.cast<int64_t>();
        if (n > 0 && numel > max_bytes / n)
          throw py::value_error(fmt::format("shapes[{}] {} is too large", i, show(shape_in)));
        numel *= n;
        shape.push_back(n);
      }
      total += static_cast<int64_t>(dtype_nbytes(*dt, numel));
      if (total > max_bytes)
        throw py::value_error(fmt::format(
            "the update announces more than {} bytes, beyond any update of this model", max_bytes));
      u.names.push_back(name);
      u.dtypes.push_back(*dt);
      u.shapes.push_back(std::move(shape));
    }
  }

  py::object engine_object_;  // keeps the Engine alive
  Engine& engine_;
  std::mutex mutex_;  // one operation at a time (taken with the GIL released)
  WeightSyncGroups groups_;
};

}  // namespace

void bind_weight_sync(py::module_& m) {
  py::class_<PyReceivedUpdate>(
      m, "ReceivedUpdate",
      "A weight update received from a torch.distributed group, validated and staged: "
      "commit() writes it in place (between scheduler steps) and returns the new weight "
      "version; abort() (or dropping it) leaves the weights as they were.")
      .def("commit", &PyReceivedUpdate::commit)
      .def("abort", &PyReceivedUpdate::abort)
      .def_property_readonly("finished", &PyReceivedUpdate::finished)
      .def_property_readonly("receive_seconds", &PyReceivedUpdate::seconds)
      .def("__len__", &PyReceivedUpdate::size);

  py::class_<PyWeightSync>(
      m, "WeightSync",
      "The torch.distributed weight-update groups one Engine has joined (SGLang's "
      "init_weights_update_group family, in-process). The GIL is released while joining and "
      "receiving.")
      .def(py::init<py::object>(), py::arg("engine"))
      .def("init", &PyWeightSync::init, py::arg("master_address"), py::arg("master_port"),
           py::arg("rank"), py::arg("world_size"), py::arg("group_name"),
           py::arg("backend") = "gloo", py::arg("timeout") = py::none(),
           "Joins the trainer's group as `rank` (replacing a group of the same name); returns its "
           "description. "
           "timeout: seconds (None: 30 minutes, torch's default).")
      .def("receive", &PyWeightSync::receive, py::arg("names"), py::arg("dtypes"),
           py::arg("shapes"), py::arg("group_name"), py::arg("flattened_bucket") = false,
           py::arg("check_finite") = true, py::arg("ignore_unknown_tensors") = false,
           "Receives the trainer's broadcasts of these tensors (root 0; one per tensor, or one "
           "flattened bucket) "
           "and stages them in a transaction: a ReceivedUpdate to commit between steps.")
      .def("destroy", &PyWeightSync::destroy, py::arg("group_name"))
      .def("has", &PyWeightSync::has, py::arg("group_name"));
  m.attr("has_gloo") = built_with_gloo();
}

}  // namespace refit::python

#include "kernels/registry.h"

#include <fmt/format.h>

#include <algorithm>
#include <mutex>

#include "core/error.h"

namespace refit {

namespace {

// Backends that handed over their rows (register_backend_kernels), and the global
// registry once it exists. A function-local static: a backend registers from its own
// static initialiser, which may run before or after this file's.
struct BackendRows {
  std::mutex mutex;
  std::vector<void (*)(KernelRegistry&)> pending;
  KernelRegistry* global = nullptr;
};
BackendRows& backend_rows() {
  static BackendRows rows;
  return rows;
}

}  // namespace

KernelRegistry& KernelRegistry::global() {
  static KernelRegistry* registry = [] {
    auto* r = new KernelRegistry();
    register_cpu_kernels(*r);
    // Rows for other device types (DeviceType::cuda: chosen only for tensors stored on a
    // GPU, law L3), from the backends this program was linked with.
    BackendRows& rows = backend_rows();
    std::lock_guard lock(rows.mutex);
    for (auto add : rows.pending) add(*r);
    rows.pending.clear();
    rows.global = r;
    return r;
  }();
  return *registry;
}

void register_backend_kernels(void (*add_rows)(KernelRegistry&)) {
  BackendRows& rows = backend_rows();
  std::lock_guard lock(rows.mutex);
  if (rows.global)
    add_rows(*rows.global);
  else
    rows.pending.push_back(add_rows);
}

void KernelRegistry::add(Kernel kernel) {
  REFIT_ASSERT(kernel.fn != nullptr);
  kernels_.push_back(std::move(kernel));
  // Highest priority first, so select() takes the first that accepts.
  std::stable_sort(kernels_.begin(), kernels_.end(), [](const Kernel& a, const Kernel& b) {
    if (a.op != b.op) return a.op < b.op;
    return a.priority > b.priority;
  });
}

namespace {

std::string describe_arg(const Tensor* t) {
  if (!t || !t->defined()) return "undefined";
  return fmt::format("{} {} {} {}", t->device().str(), dtype_name(t->dtype()),
                     layout_name(t->layout()), shape_str(t->shape()));
}

std::string list_dtypes(const std::vector<DType>& dtypes) {
  if (dtypes.empty()) return "any";
  std::vector<std::string_view> names;
  for (DType d : dtypes) names.push_back(dtype_name(d));
  return fmt::format("{}", fmt::join(names, "|"));
}

std::string list_layouts(const std::vector<Layout>& layouts) {
  if (layouts.empty()) return "strided";
  std::vector<std::string_view> names;
  for (Layout l : layouts) names.push_back(layout_name(l));
  return fmt::format("{}", fmt::join(names, "|"));
}

// Whether `args` pass `kernel`'s argument rules (count, presence, device, dtype, layout),
// its constraint aside. The reason is written to `why` only when asked for: select() runs
// this for every kernel it passes over on every call, and formatting is the cost there.
bool rules_match(const Kernel& kernel, std::span<const Tensor* const> args, std::string* why) {
  if (args.size() != kernel.args.size()) {
    if (why) *why = fmt::format("takes {} arguments, got {}", kernel.args.size(), args.size());
    return false;
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const ArgRule& rule = kernel.args[i];
    const Tensor* t = args[i];
    if (!t || !t->defined()) {
      if (rule.optional) continue;
      if (why) *why = fmt::format("argument '{}' is required", rule.name);
      return false;
    }
    if (t->device().type != kernel.device) {
      if (why)
        *why = fmt::format("runs on {}, argument '{}' is on {}", device_type_name(kernel.device),
                           rule.name, t->device().str());
      return false;
    }
    if (!rule.dtypes.empty() &&
        std::find(rule.dtypes.begin(), rule.dtypes.end(), t->dtype()) == rule.dtypes.end()) {
      if (why)
        *why = fmt::format("argument '{}' must be {}, got {}", rule.name, list_dtypes(rule.dtypes),
                           dtype_name(t->dtype()));
      return false;
    }
    const bool layout_ok = rule.layouts.empty()
                               ? t->layout() == Layout::strided
                               : std::find(rule.layouts.begin(), rule.layouts.end(), t->layout()) !=
                                     rule.layouts.end();
    if (!layout_ok) {
      if (why)
        *why = fmt::format("argument '{}' must have layout {}, got {}", rule.name,
                           list_layouts(rule.layouts), layout_name(t->layout()));
      return false;
    }
  }
  return true;
}

}  // namespace

std::string KernelRegistry::rejection_reason(const Kernel& kernel,
                                             std::span<const Tensor* const> args) {
  if (!kernel.selectable) return "reference row: run by name only, never chosen by dispatch";
  std::string why;
  if (!rules_match(kernel, args, &why)) return why;
  if (kernel.constraint) return kernel.constraint(args);
  return {};
}

const Kernel& KernelRegistry::select(std::string_view op,
                                     std::span<const Tensor* const> args) const {
  // Mixed devices are an error whatever the kernels: no op silently moves data.
  const Tensor* first = nullptr;
  for (const Tensor* t : args) {
    if (!t || !t->defined()) continue;
    if (!first) {
      first = t;
    } else if (!(t->device() == first->device())) {
      std::string listing;
      for (size_t i = 0; i < args.size(); ++i)
        listing += fmt::format("\n  arg {}: {}", i, describe_arg(args[i]));
      throw DispatchError(fmt::format("{}: arguments are on different devices ({} and {}):{}", op,
                                      first->device().str(), t->device().str(), listing));
    }
  }
  // The common case, every call of every op: the first kernel whose rules match and whose
  // constraint accepts, without formatting a reason for each kernel passed over.
  for (const Kernel& k : kernels_)
    if (k.op == op && k.selectable && rules_match(k, args, nullptr) &&
        (!k.constraint || k.constraint(args).empty()))
      return k;
  std::string rejected;
  bool any = false;
  for (const Kernel& k : kernels_) {
    if (k.op != op) continue;
    any = true;
    std::string reason = rejection_reason(k, args);
    if (reason.empty()) return k;
    rejected += fmt::format("\n  {} (priority {}): {}", k.name, k.priority, reason);
  }
  std::string listing;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string name = "?";
    for (const Kernel& k : kernels_)
      if (k.op == op && i < k.args.size()) {
        name = k.args[i].name;
        break;
      }
    listing += fmt::format("\n  {}: {}", name, describe_arg(args[i]));
  }
  if (!any) throw DispatchError(fmt::format("{}: no kernels registered for this op", op));
  throw DispatchError(fmt::format("{}: no kernel accepts these arguments:{}\ncandidates:{}", op,
                                  listing, rejected));
}

std::vector<const Kernel*> KernelRegistry::kernels(std::string_view op) const {
  std::vector<const Kernel*> out;
  for (const Kernel& k : kernels_)
    if (op.empty() || k.op == op) out.push_back(&k);
  return out;
}

std::string KernelRegistry::table() const {
  size_t op_width = 2, name_width = 6;
  for (const Kernel& k : kernels_) {
    op_width = std::max(op_width, k.op.size());
    name_width = std::max(name_width, k.name.size());
  }
  std::string out = fmt::format(
      "{:<{}}  {:<{}}  {:<6} {:>4}  {}\n", "op", op_width, "kernel", name_width, "device", "prio",
      "arguments (name:dtypes/layouts) [constraints]; prio ref: reference row, by name only");
  for (const Kernel& k : kernels_) {
    std::vector<std::string> args;
    for (const ArgRule& a : k.args)
      args.push_back(fmt::format("{}{}:{}/{}", a.name, a.optional ? "?" : "", list_dtypes(a.dtypes),
                                 list_layouts(a.layouts)));
    out += fmt::format("{:<{}}  {:<{}}  {:<6} {:>4}  {}{}\n", k.op, op_width, k.name, name_width,
                       device_type_name(k.device),
                       k.selectable ? fmt::format("{}", k.priority) : "ref", fmt::join(args, " "),
                       k.constraint_text.empty() ? "" : "  [" + k.constraint_text + "]");
  }
  return out;
}

}  // namespace refit

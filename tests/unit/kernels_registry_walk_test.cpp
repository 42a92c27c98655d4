// Every row of the kernel registry, run directly, against reference.h: in the spirit of
// llama.cpp's tests/test-backend-ops.cpp, which runs each op's cases on every backend and
// compares by normalised mean squared error. Here the "backends" are the registry's rows:
// for each (op, kernel) row, every generated case the row accepts (its ArgRules and
// constraint) runs through the row's own function, not only through whatever dispatch
// picks, under every SIMD target this CPU has. The test fails when
//   * an op (kernels/op_names.h, or any op with a registered row) has no case generator,
//     or no CPU kernel;
//   * a row accepts none of the generated cases (a kernel added without coverage);
//   * a result differs from the reference beyond the case's tolerance;
//   * a selectable CPU row is never what dispatch picks for any case (a row shadowed by
//     a higher one for every input it takes).
// Rows for a device this machine lacks are reported as skipped, with the reason.
// The f32 matmul rows depend on REFIT_BATCH_INVARIANT (one family per mode), so the
// table of the other mode is walked too.
#include <gtest/gtest.h>

#include <iostream>
#include <set>
#include <string>

#include "core/error.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/serve_kernels.h"
#include "kernels/op_names.h"
#include "kernels/registry.h"
#include "kernels_test_util.h"
#include "kernels_walk_cases.h"

namespace refit {
namespace {

using testing::walk::Case;
using testing::walk::generators;

std::vector<const Tensor*> pointers(const std::vector<Tensor>& args) {
  std::vector<const Tensor*> out;
  for (const Tensor& t : args) out.push_back(&t);
  return out;
}

// Why no case can run on `device` here ("" when one can): allocating there is the test.
std::string device_missing(DeviceType device) {
  if (device == DeviceType::cpu) return {};
  try {
    Tensor probe = Tensor::empty({1}, DType::f32, Device{device, 0});
    return {};
  } catch (const std::exception& e) {
    return e.what();
  }
}

// The case's arguments on `device` (the same values).
std::vector<Tensor> on_device(const std::vector<Tensor>& args, DeviceType device) {
  if (device == DeviceType::cpu) return args;
  std::vector<Tensor> out;
  for (const Tensor& t : args)
    out.push_back(t.defined() ? t.contiguous().to(Device{device, 0}) : Tensor());
  return out;
}

bool known_op(const std::string& op) {
  for (const char* name : op_names::kAllOps)
    if (op == name) return true;
  return false;
}

// The cases of every op, generated once.
const std::map<std::string, std::vector<Case>>& all_cases() {
  static const std::map<std::string, std::vector<Case>> cases = [] {
    std::map<std::string, std::vector<Case>> out;
    for (const auto& [op, generate] : generators()) out[op] = generate();
    return out;
  }();
  return cases;
}

// Walks every row of `registry`; `which` names the table in messages.
void walk(const KernelRegistry& registry, const std::string& which) {
  std::set<std::string> reached;
  for (const Kernel* k : registry.kernels()) {
    SCOPED_TRACE(which + ": " + k->name);
    auto found = all_cases().find(k->op);
    if (found == all_cases().end()) {
      ADD_FAILURE() << "op '" << k->op
                    << "' has no case generator (tests/unit/kernels_walk_cases.cpp)";
      continue;
    }
    if (std::string missing = device_missing(k->device); !missing.empty()) {
      // Not gtest's "[  SKIPPED ]": ctest would report the whole walk as skipped.
      std::cout << "[   WALK   ] " << which << ": " << k->name << " not walked ("
                << device_type_name(k->device) << "): " << missing << "\n";
      continue;
    }
    if (k->cpu_lacks) {
      if (std::string lacks = k->cpu_lacks(); !lacks.empty()) {
        std::cout << "[   WALK   ] " << which << ": " << k->name << " not walked: this CPU lacks "
                  << lacks << "\n";
        continue;
      }
    }
    // The row's own rules and constraint, whether or not dispatch may choose it.
    Kernel probe = *k;
    probe.selectable = true;
    int accepted = 0;
    std::string last_reason;
    testing::for_each_isa([&] {
      for (const Case& c : found->second) {
        const std::vector<Tensor> args = on_device(c.args, k->device);
        const std::vector<const Tensor*> ptrs = pointers(args);
        const std::string why = KernelRegistry::rejection_reason(probe, ptrs);
        if (!why.empty()) {
          last_reason = c.label + ": " + why;
          continue;
        }
        ++accepted;
        SCOPED_TRACE(c.label);
        const Tensor result = c.run(k->fn, args);
        const double err = testing::nmse(result, c.expected);
        EXPECT_LE(err, c.tolerance) << k->name << " on " << c.label;
        if (k->selectable && registry.select(k->op, ptrs).name == k->name) reached.insert(k->name);
      }
    });
    std::cout << "[   WALK   ] " << which << ": " << k->name << ": " << accepted << " case runs\n";
    EXPECT_GT(accepted, 0) << k->name << " accepts none of the " << found->second.size()
                           << " cases of '" << k->op << "' (last refusal: " << last_reason
                           << "): add cases at its limits";
    if (k->selectable && k->device == DeviceType::cpu) {
      EXPECT_TRUE(reached.count(k->name))
          << k->name << " accepts cases but dispatch never chooses it: a higher row "
          << "takes every input it does (make it a reference row or give it a niche)";
    }
  }
}

TEST(KernelRegistryWalk, EveryOpHasCasesAndACpuKernelAndEveryRegisteredOpIsListed) {
  for (const char* op : op_names::kAllOps) {
    EXPECT_TRUE(generators().count(op)) << "op '" << op << "' has no case generator";
    bool cpu = false;
    for (const Kernel* k : KernelRegistry::global().kernels(op))
      cpu |= k->device == DeviceType::cpu && k->selectable;
    EXPECT_TRUE(cpu) << "op '" << op << "' has no selectable CPU kernel";
  }
  for (const Kernel* k : KernelRegistry::global().kernels())
    EXPECT_TRUE(known_op(k->op)) << k->name << ": op '" << k->op
                                 << "' is not in kernels/op_names.h kAllOps";
  for (const auto& [op, generate] : generators())
    EXPECT_TRUE(known_op(op)) << "generator for unknown op " << op;
}

TEST(KernelRegistryWalk, EveryRowOfTheGlobalTableMatchesTheReference) {
  walk(KernelRegistry::global(),
       batch_invariant_f32_matmul() ? "batch-invariant table" : "REFIT_BATCH_INVARIANT=0 table");
}

TEST(KernelRegistryWalk, EveryRowOfTheOtherBatchInvarianceModeMatchesTheReference) {
  KernelRegistry other;
  register_cpu_kernels(other, !batch_invariant_f32_matmul());
  walk(other,
       batch_invariant_f32_matmul() ? "REFIT_BATCH_INVARIANT=0 table" : "batch-invariant table");
}

}  // namespace
}  // namespace refit

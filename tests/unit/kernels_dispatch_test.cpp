// Law L3, replaying seed 003: a GPU matmul kernel is registered (a test double, with a
// higher priority than any CPU kernel) and CPU tensors are passed in. Dispatch must look
// at the tensors, so the CPU kernel runs and gives the right answer; tensors on the
// "GPU" reach the GPU kernel; mixed devices and impossible combinations are refused
// with a message naming the op, the arguments and every candidate.
#include <gtest/gtest.h>

#include "core/error.h"
#include "kernels/ops.h"
#include "kernels/registry.h"

namespace refit {
namespace {

int g_fake_gpu_calls = 0;
void fake_gpu_matmul(const Tensor&, const Tensor&, const Tensor&, Tensor&) { ++g_fake_gpu_calls; }

void register_fake_gpu_matmul() {
  static bool done = false;
  if (done) return;
  done = true;
  Kernel k;
  k.op = "matmul";
  k.name = "matmul.test_double.cuda_any";
  k.device = DeviceType::cuda;
  k.priority = 1000;  // outranks every CPU kernel: only the device can rule it out
  k.args = {{"x", {DType::f32}, {}},
            {"w", {}, {}},
            {"bias", {DType::f32}, {}, true},
            {"out", {DType::f32}, {}}};
  k.fn = reinterpret_cast<const void*>(&fake_gpu_matmul);
  KernelRegistry::global().add(k);
}

// A tensor whose storage claims to live on cuda:0 (host memory; only the tag matters to
// dispatch, and the fake kernel never touches the bytes).
Tensor fake_cuda_tensor(Shape shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  auto* memory = new float[n]();
  auto storage =
      Storage::wrap(memory, n * sizeof(float), Device::cuda(0), [memory] { delete[] memory; });
  return Tensor::from_storage(storage, DType::f32, shape);
}

TEST(Dispatch, Seed003CpuTensorsNeverReachAGpuKernel) {
  register_fake_gpu_matmul();
  g_fake_gpu_calls = 0;
  Tensor x = Tensor::from_floats({2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6});
  Tensor w = Tensor::from_floats({2, 3}, std::vector<float>{1, 0, 0, 0, 1, 1});
  Tensor bias = Tensor::from_floats({2}, std::vector<float>{10, 20});
  Tensor out = Tensor::empty({2, 2}, DType::f32);
  const Tensor* args[] = {&x, &w, &bias, &out};
  const Kernel& chosen = KernelRegistry::global().select("matmul", args);
  EXPECT_EQ(chosen.device, DeviceType::cpu) << chosen.name;
  ops::matmul(x, w, bias, out);
  EXPECT_EQ(g_fake_gpu_calls, 0);
  EXPECT_EQ(out.to_floats(), (std::vector<float>{11, 25, 14, 31}));
}

TEST(Dispatch, GpuTensorsReachTheGpuKernel) {
  register_fake_gpu_matmul();
  g_fake_gpu_calls = 0;
  Tensor x = fake_cuda_tensor({2, 3}), w = fake_cuda_tensor({2, 3}), out = fake_cuda_tensor({2, 2});
  ops::matmul(x, w, Tensor(), out);
  EXPECT_EQ(g_fake_gpu_calls, 1);
}

TEST(Dispatch, MixedDevicesAreRefusedNamingEveryArgument) {
  register_fake_gpu_matmul();
  Tensor x = Tensor::empty({2, 3}, DType::f32);
  Tensor w = fake_cuda_tensor({2, 3});
  Tensor out = Tensor::empty({2, 2}, DType::f32);
  try {
    ops::matmul(x, w, Tensor(), out);
    FAIL() << "mixed devices must be refused";
  } catch (const DispatchError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("matmul"), std::string::npos) << msg;
    EXPECT_NE(msg.find("different devices"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cuda:0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cpu"), std::string::npos) << msg;
  }
}

TEST(Dispatch, NoAcceptingKernelListsEveryCandidateWithItsReason) {
  Tensor x = Tensor::empty({2, 4}, DType::f32);
  Tensor w = Tensor::empty({2, 4}, DType::i16);  // no matmul kernel takes i16 weights
  Tensor out = Tensor::empty({2, 2}, DType::f32);
  const Tensor* args[] = {&x, &w, nullptr, &out};
  try {
    KernelRegistry::global().select("matmul", args);
    FAIL() << "i16 weights must be refused";
  } catch (const DispatchError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("matmul: no kernel accepts"), std::string::npos) << msg;
    EXPECT_NE(msg.find("i16"), std::string::npos) << msg;
    for (const Kernel* k : KernelRegistry::global().kernels("matmul"))
      EXPECT_NE(msg.find(k->name), std::string::npos)
          << "candidate " << k->name << " missing: " << msg;
  }
}

TEST(Dispatch, SelectionIsAPureFunctionOfTheTensors) {
  KernelRegistry local;
  auto noop = reinterpret_cast<const void*>(&fake_gpu_matmul);
  local.add({"op", "low", DeviceType::cpu, 1, {{"a", {DType::f32}, {}}}, nullptr, "", noop});
  local.add({"op",
             "high_div16",
             DeviceType::cpu,
             5,
             {{"a", {DType::f32}, {}}},
             [](std::span<const Tensor* const> a) -> std::string {
               return a[0]->size(-1) % 16 == 0 ? "" : "last dim must be divisible by 16";
             },
             "dim % 16 == 0",
             noop});
  Tensor ok = Tensor::empty({32}, DType::f32), odd = Tensor::empty({17}, DType::f32);
  const Tensor* a1[] = {&ok};
  const Tensor* a2[] = {&odd};
  EXPECT_EQ(local.select("op", a1).name, "high_div16");
  EXPECT_EQ(local.select("op", a2).name, "low");
  EXPECT_EQ(local.select("op", a1).name, "high_div16");  // same tensors, same answer
  EXPECT_NE(local.table().find("dim % 16 == 0"), std::string::npos);
}

// That every op has a CPU kernel, and every row its cases, is derived from the registry
// and kernels/op_names.h in kernels_registry_walk_test.cpp.

}  // namespace
}  // namespace refit

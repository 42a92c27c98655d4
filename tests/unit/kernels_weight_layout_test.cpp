// preferred_weight_layout (kernels/weight_layout.h): the layout a loader stores a weight in
// comes from the registered kernels and this CPU's features, not from asking a CPU kernel.
#include <gtest/gtest.h>

#include "kernels/cpu/matmul_int8_dot.h"
#include "kernels/weight_layout.h"

namespace refit {
namespace {

void no_op() {}

// A registry with one kernel of op "probe" that reads shuffled_16x16 bf16 weights fast
// from f32 activations, when `usable` says so and K >= 64.
KernelRegistry probe_registry(bool* usable) {
  KernelRegistry registry;
  Kernel k;
  k.op = "probe";
  k.name = "probe.cpu.shuffled";
  k.args = {{"x", {DType::f32}, {Layout::strided}}, {"w", {DType::bf16}, {Layout::shuffled_16x16}}};
  k.fn = reinterpret_cast<const void*>(&no_op);
  k.prefers_weight_layout = Kernel::WeightLayoutPreference{[usable] { return *usable; }, 64};
  registry.add(k);
  Kernel plain = k;
  plain.name = "probe.cpu.plain";
  plain.args[1].layouts = {Layout::strided};
  plain.prefers_weight_layout.reset();
  registry.add(plain);
  return registry;
}

TEST(PreferredWeightLayout, AnsweredFromTheRegisteredKernelAndWhetherItCanRun) {
  bool usable = true;
  const KernelRegistry registry = probe_registry(&usable);
  EXPECT_EQ(preferred_weight_layout(registry, "probe", DType::f32, DType::bf16, {32, 128}),
            Layout::shuffled_16x16);
  EXPECT_EQ(preferred_weight_layout(registry, "probe", DType::f32, DType::bf16, {32, 32}),
            Layout::strided)
      << "narrower than the kernel asks";
  EXPECT_EQ(preferred_weight_layout(registry, "probe", DType::f32, DType::f16, {32, 128}),
            Layout::strided)
      << "a weight dtype the kernel does not read";
  EXPECT_EQ(preferred_weight_layout(registry, "probe", DType::i8, DType::bf16, {32, 128}),
            Layout::strided)
      << "activations the kernel does not read";
  EXPECT_EQ(preferred_weight_layout(registry, "probe", DType::f32, DType::bf16, {32, 128},
                                    DeviceType::cuda),
            Layout::strided);
  EXPECT_EQ(preferred_weight_layout(registry, "other_op", DType::f32, DType::bf16, {32, 128}),
            Layout::strided);
  usable = false;
  EXPECT_EQ(preferred_weight_layout(registry, "probe", DType::f32, DType::bf16, {32, 128}),
            Layout::strided)
      << "the kernel cannot run on this machine";
}

TEST(PreferredWeightLayout, Q8_0W8A8IsInterleavedWhereTheVnniKernelRuns) {
  const QuantScheme q8_0_w8a8 = parse_quant_scheme("q8_0-w8a8");
  const Layout expected =
      cpu::int8dot::avx512_vnni_usable() ? Layout::interleaved_4x16 : Layout::strided;
  EXPECT_EQ(preferred_weight_layout(q8_0_w8a8, DType::f32, {64, 1024}), expected);
  EXPECT_EQ(preferred_weight_layout(q8_0_w8a8, DType::f32, {64, 512}), expected);
  EXPECT_EQ(preferred_weight_layout(q8_0_w8a8, DType::f32, {64, 256}), Layout::strided)
      << "shorter than one run of 16 blocks: the same bytes interleaved";
}

TEST(PreferredWeightLayout, EveryOtherWeightStaysPlain) {
  for (const char* scheme :
       {"q8_0", "mxfp4", "mxfp4-w8a8", "fp8-channel", "fp8-channel-w8a8", "fp8-block"})
    EXPECT_EQ(preferred_weight_layout(parse_quant_scheme(scheme), DType::f32, {256, 1024}),
              Layout::strided)
        << scheme;
  for (DType dtype : {DType::f32, DType::bf16, DType::f16})
    EXPECT_EQ(preferred_weight_layout(QuantScheme{}, dtype, {256, 1024}), Layout::strided)
        << dtype_name(dtype);
}

}  // namespace
}  // namespace refit

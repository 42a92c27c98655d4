// Law L1: every tensor crosses DLPack zero-copy with the right dtype code, device,
// shape and strides, and comes back as the same memory; refusals name the problem and
// still honour the producer's deleter exactly once.
#include <gtest/gtest.h>

#include "core/dlpack.h"
#include "core/error.h"

namespace refit {
namespace {

// A 3-d tensor of `dtype` filled with distinct representable values, then viewed
// non-contiguously with an offset: [1:4, ::2 of dim 1, all of the last dim].
Tensor strided_sample(DType dtype) {
  Tensor base = Tensor::empty({5, 6, 4}, dtype);
  int64_t k = 0;
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t j = 0; j < 6; ++j)
      for (int64_t l = 0; l < 4; ++l, ++k) {
        double v =
            dtype == DType::boolean ? k % 2 : (dtype == DType::f4_e2m1 ? (k % 7) * 0.5 : k % 100);
        if (dtype == DType::e8m0) v = std::ldexp(1.0, int(k % 20) - 10);
        base.set({i, j, l}, v);
      }
  return base.slice(0, 1, 4).slice(1, 0, 6, 2);
}

TEST(DLPack, VersionedRoundTripEveryDtypeWithStridesAndOffset) {
  for (DType dtype : kAllDTypes) {
    Tensor t = strided_sample(dtype);
    ASSERT_FALSE(t.is_contiguous());
    DLManagedTensorVersioned* m = to_dlpack_versioned(t);
    EXPECT_EQ(m->version.major, 1u);
    EXPECT_EQ(m->dl_tensor.device.device_type, kDLCPU);
    EXPECT_EQ(m->dl_tensor.ndim, 3);
    EXPECT_EQ(m->dl_tensor.data, t.raw_data());  // zero-copy
    Tensor back = from_dlpack(m);
    EXPECT_EQ(back.dtype(), dtype) << dtype_name(dtype);
    EXPECT_EQ(back.shape(), t.shape()) << dtype_name(dtype);
    EXPECT_EQ(back.strides(), t.strides()) << dtype_name(dtype);
    EXPECT_EQ(back.raw_data(), t.raw_data()) << dtype_name(dtype);
    EXPECT_EQ(back.to_floats(), t.to_floats()) << dtype_name(dtype);
  }
}

TEST(DLPack, DtypeCodesFollowDLPack11) {
  auto code = [](DType d) { return to_dlpack_dtype(d); };
  EXPECT_EQ(code(DType::f8_e4m3fn).code, 10);
  EXPECT_EQ(code(DType::f8_e5m2).code, 12);
  EXPECT_EQ(code(DType::e8m0).code, 14);
  EXPECT_EQ(code(DType::f4_e2m1).code, 17);
  EXPECT_EQ(code(DType::f4_e2m1).bits, 4);
  EXPECT_EQ(code(DType::f4_e2m1).lanes, 2);
  EXPECT_EQ(code(DType::bf16).code, kDLBfloat);
  EXPECT_EQ(code(DType::boolean).code, kDLBool);
  Tensor packed = Tensor::empty({3, 8}, DType::f4_e2m1);
  DLManagedTensorVersioned* m = to_dlpack_versioned(packed);
  EXPECT_EQ(m->dl_tensor.shape[1], 4);  // 4 bytes of 2 values each
  EXPECT_EQ(m->dl_tensor.strides[0], 4);
  m->deleter(m);
}

TEST(DLPack, LegacyRoundTripForPreV1Dtypes) {
  for (DType dtype : kAllDTypes) {
    Tensor t = strided_sample(dtype);
    switch (dtype) {
      case DType::f8_e4m3fn:
      case DType::f8_e5m2:
      case DType::e8m0:
      case DType::f4_e2m1: {
        try {
          to_dlpack_legacy(t);
          ADD_FAILURE() << "legacy export of " << dtype_name(dtype) << " should be refused";
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find(std::string(dtype_name(dtype))), std::string::npos);
          EXPECT_NE(std::string(e.what()).find("as_bytes"), std::string::npos);
        }
        // The offered alternative works: the same bytes as u8.
        Tensor bytes = as_bytes(t.contiguous());
        Tensor back = from_dlpack(to_dlpack_legacy(bytes));
        EXPECT_EQ(back.raw_data(), bytes.raw_data());
        EXPECT_EQ(back.numel(), static_cast<int64_t>(t.contiguous().nbytes()));
        break;
      }
      default: {
        Tensor back = from_dlpack(to_dlpack_legacy(t));
        EXPECT_EQ(back.raw_data(), t.raw_data());
        EXPECT_EQ(back.to_floats(), t.to_floats()) << dtype_name(dtype);
      }
    }
  }
}

TEST(DLPack, ReadOnlyFlagFollowsTheEngine) {
  Tensor t = Tensor::empty({4}, DType::f32);
  DLManagedTensorVersioned* m = to_dlpack_versioned(t);
  EXPECT_EQ(m->flags & DLPACK_FLAG_BITMASK_READ_ONLY, 0u);
  m->deleter(m);
  t.set_read_only(true);
  m = to_dlpack_versioned(t);
  EXPECT_NE(m->flags & DLPACK_FLAG_BITMASK_READ_ONLY, 0u);
  Tensor back = from_dlpack(m);
  EXPECT_TRUE(back.read_only());
  EXPECT_THROW(back.set({0}, 1.0), Error);
}

// A producer-side capsule that counts deleter calls.
struct Producer {
  std::vector<float> memory = std::vector<float>(24, 2.0f);
  int64_t shape[2] = {4, 6};
  int64_t strides[2] = {6, 1};
  int deletes = 0;
  DLManagedTensorVersioned versioned{};
  DLManagedTensor legacy{};
  DLTensor tensor() {
    return DLTensor{memory.data(), {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, shape, strides, 0};
  }
  DLManagedTensorVersioned* make_versioned() {
    versioned.version = {1, 0};
    versioned.manager_ctx = this;
    versioned.deleter = [](DLManagedTensorVersioned* s) {
      ++static_cast<Producer*>(s->manager_ctx)->deletes;
    };
    versioned.dl_tensor = tensor();
    return &versioned;
  }
  DLManagedTensor* make_legacy() {
    legacy.manager_ctx = this;
    legacy.deleter = [](DLManagedTensor* s) { ++static_cast<Producer*>(s->manager_ctx)->deletes; };
    legacy.dl_tensor = tensor();
    return &legacy;
  }
};

TEST(DLPack, ImportCallsTheProducersDeleterExactlyOnce) {
  Producer p;
  {
    Tensor t = from_dlpack(p.make_versioned());
    Tensor view = t.transpose(0, 1);
    EXPECT_EQ(t.data<float>(), p.memory.data());
    EXPECT_EQ(view.get({5, 3}), 2.0);
    EXPECT_EQ(p.deletes, 0);
  }
  EXPECT_EQ(p.deletes, 1);
  {
    Tensor t = from_dlpack(p.make_legacy());
    t.set({0, 0}, 7.0);
    EXPECT_EQ(p.memory[0], 7.0f);  // writes reach the producer's memory
  }
  EXPECT_EQ(p.deletes, 2);
}

TEST(DLPack, RefusedImportsNameTheProblemAndStillRelease) {
  auto expect_refused = [](Producer& p, const char* needle) {
    int before = p.deletes;
    try {
      from_dlpack(&p.versioned);
      ADD_FAILURE() << "expected refusal mentioning " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_EQ(p.deletes, before + 1);
  };
  Producer p;
  p.make_versioned();
  p.versioned.dl_tensor.dtype = {kDLComplex, 64, 1};
  expect_refused(p, "complex");
  p.make_versioned();
  p.versioned.dl_tensor.dtype = {kDLFloat8_e4m3fnuz, 8, 1};
  expect_refused(p, "code 11");
  p.make_versioned();
  p.versioned.dl_tensor.device = {kDLVulkan, 0};
  expect_refused(p, "device type 7");
  p.make_versioned();
  p.versioned.version = {2, 0};
  expect_refused(p, "major version 2");
  p.make_versioned();
  p.strides[0] = -6;
  expect_refused(p, "negative stride");
}

TEST(DLPack, MappedFileTensorsExportReadOnly) {
  auto storage = Storage::wrap(nullptr, 0, Device::cpu(), nullptr, /*writable=*/false);
  Tensor t = Tensor::from_storage(storage, DType::f32, {0});
  DLManagedTensorVersioned* m = to_dlpack_versioned(t);
  EXPECT_NE(m->flags & DLPACK_FLAG_BITMASK_READ_ONLY, 0u);
  m->deleter(m);
}

}  // namespace
}  // namespace refit

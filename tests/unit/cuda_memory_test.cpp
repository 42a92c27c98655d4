// The device-memory hook in core (DeviceAllocator, core/storage.h) and what Storage and
// Tensor do with it: allocation on a device, contiguous same-dtype copies between the
// CPU and a device, and clear refusals (naming both devices) for everything else.
//
// The hook is tested in every build with a host-memory allocator registered for rocm (a
// device type no build provides, so no other test sees it). The real CUDA allocator is
// tested when this is a -DREFIT_CUDA=ON build and a GPU is present; otherwise those
// tests skip, saying why.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/storage.h"
#include "core/tensor.h"

namespace refit {
namespace {

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Device memory simulated in host memory, counting what the core asks of it.
class HostBackedAllocator final : public DeviceAllocator {
 public:
  int allocations = 0, frees = 0, copies = 0, memsets = 0;
  std::string name() const override { return "test double"; }
  int device_count() const override { return 2; }
  std::string unavailable_reason() const override { return ""; }
  void* allocate(size_t nbytes, int index) override {
    if (index < 0 || index >= 2) fail("rocm:{} does not exist", index);
    ++allocations;
    void* p = std::malloc(nbytes);
    std::memset(p, 0xAB, nbytes);  // garbage, so a missing memset would show
    return p;
  }
  void free(void* ptr, int) noexcept override {
    ++frees;
    std::free(ptr);
  }
  void memset(void* ptr, int value, size_t nbytes, int) override {
    ++memsets;
    std::memset(ptr, value, nbytes);
  }
  void copy(void* dst, Device, const void* src, Device, size_t nbytes) override {
    ++copies;
    std::memcpy(dst, src, nbytes);
  }
};

class FakeDeviceMemory : public ::testing::Test {
 protected:
  void SetUp() override { previous_ = register_device_allocator(DeviceType::rocm, &allocator_); }
  void TearDown() override { register_device_allocator(DeviceType::rocm, previous_); }
  HostBackedAllocator allocator_;
  DeviceAllocator* previous_ = nullptr;
};

const Device kRocm{DeviceType::rocm, 0};

TEST_F(FakeDeviceMemory, AllocationGoesThroughTheAllocatorZeroedAndIsFreedOnce) {
  {
    Tensor t = Tensor::empty({3, 5}, DType::f32, kRocm);
    EXPECT_EQ(t.device(), kRocm);
    EXPECT_EQ(allocator_.allocations, 1);
    EXPECT_EQ(allocator_.memsets, 1);
    EXPECT_EQ(t.to_floats(), std::vector<float>(15, 0.0f));  // zeroed, read back via copy
    EXPECT_EQ(allocator_.frees, 0);
  }
  EXPECT_EQ(allocator_.frees, 1);
}

TEST_F(FakeDeviceMemory, RoundTripThroughTheDeviceIsExact) {
  std::vector<float> values = {1.5f, -2.0f, 3.25f, 1e-30f, -0.0f, 7.0f};
  Tensor host = Tensor::from_floats({2, 3}, values);
  Tensor device = host.to(kRocm);
  EXPECT_EQ(device.device(), kRocm);
  EXPECT_NE(device.storage()->data(), host.storage()->data());
  Tensor back = device.to(Device::cpu());
  EXPECT_EQ(back.device(), Device::cpu());
  EXPECT_EQ(std::memcmp(back.raw_data(), host.raw_data(), host.nbytes()), 0);
  EXPECT_EQ(host.to(Device::cpu()).storage(), host.storage());  // same device: no copy
}

TEST_F(FakeDeviceMemory, CopyFromKeepsTheDestinationAddress) {
  Tensor device = Tensor::empty({4}, DType::f32, kRocm);
  void* address = device.storage()->data();
  device.copy_from(Tensor::from_floats({4}, std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(device.storage()->data(), address);
  EXPECT_EQ(device.to_floats(), (std::vector<float>{1, 2, 3, 4}));
  Tensor twin = device.clone();  // device -> device
  EXPECT_EQ(twin.device(), kRocm);
  EXPECT_EQ(twin.to_floats(), (std::vector<float>{1, 2, 3, 4}));
  // A contiguous slice is a plain block copy too.
  Tensor host = Tensor::empty({2}, DType::f32);
  host.copy_from(device.slice(0, 1, 3));
  EXPECT_EQ(host.to_floats(), (std::vector<float>{2, 3}));
}

TEST_F(FakeDeviceMemory, NonContiguousOrConvertingCopiesAreRefusedNamingBothDevices) {
  Tensor host = Tensor::from_floats({2, 3}, std::vector<float>{1, 2, 3, 4, 5, 6});
  Tensor device_t = Tensor::empty({3, 2}, DType::f32, kRocm);
  std::string msg = error_of([&] { device_t.copy_from(host.transpose(0, 1)); });
  EXPECT_NE(msg.find("contiguous"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rocm:0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cpu"), std::string::npos) << msg;

  Tensor device_bf16 = Tensor::empty({2, 3}, DType::bf16, kRocm);
  msg = error_of([&] { device_bf16.copy_from(host); });
  EXPECT_NE(msg.find("same dtype"), std::string::npos) << msg;
  EXPECT_NE(msg.find("bf16"), std::string::npos) << msg;
  msg = error_of([&] { (void)device_t.to(DType::f16); });  // conversion on the device
  EXPECT_NE(msg.find("rocm:0"), std::string::npos) << msg;
  EXPECT_EQ(allocator_.copies, 0);  // nothing was copied by a refused call
}

TEST_F(FakeDeviceMemory, HostElementAccessOnADeviceTensorIsRefused) {
  Tensor t = Tensor::empty({2}, DType::f32, kRocm);
  std::string msg = error_of([&] { (void)t.get({0}); });
  EXPECT_NE(msg.find("rocm:0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("CPU"), std::string::npos) << msg;
  msg = error_of([&] { t.set({0}, 1.0); });
  EXPECT_NE(msg.find("rocm:0"), std::string::npos) << msg;
}

TEST_F(FakeDeviceMemory, TheAllocatorsErrorsReachTheCaller) {
  std::string msg = error_of([] {
    (void)Tensor::empty({2}, DType::f32, Device{DeviceType::rocm, 5});
  });
  EXPECT_NE(msg.find("rocm:5 does not exist"), std::string::npos) << msg;
}

TEST(DeviceMemory, CpuAllocatorCannotBeReplaced) {
  HostBackedAllocator allocator;
  EXPECT_THROW(register_device_allocator(DeviceType::cpu, &allocator), Error);
  EXPECT_EQ(device_allocator(DeviceType::cpu), nullptr);
}

TEST(DeviceMemory, DeviceWithoutABackendGivesAClearError) {
  ASSERT_EQ(device_allocator(DeviceType::rocm), nullptr);  // no build has a rocm backend
  std::string msg = error_of([] {
    (void)Tensor::empty({2}, DType::f32, Device{DeviceType::rocm, 0});
  });
  EXPECT_NE(msg.find("no allocator for device rocm:0"), std::string::npos) << msg;
  // A tensor that only claims to be on rocm (foreign memory) cannot be copied either.
  std::vector<float> memory(2);
  Tensor foreign = Tensor::from_storage(
      Storage::wrap(memory.data(), 8, Device{DeviceType::rocm, 0}, [] {}), DType::f32, {2});
  msg = error_of([&] { (void)foreign.to(Device::cpu()); });
  EXPECT_NE(msg.find("no rocm backend"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rocm:0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cpu"), std::string::npos) << msg;
}

TEST(DeviceMemory, CudaAllocationMatchesTheBuild) {
#ifdef REFIT_HAVE_CUDA
  DeviceAllocator* cuda = device_allocator(DeviceType::cuda);
  ASSERT_NE(cuda, nullptr) << "a REFIT_CUDA build registers its allocator";
  EXPECT_NE(cuda->name().find("cuda"), std::string::npos);
  if (cuda->device_count() > 0) GTEST_SKIP() << "a GPU is present: CudaMemory tests cover it";
  // No GPU: allocation fails with the runtime's reason instead of crashing.
  std::string msg = error_of([] { (void)Tensor::empty({2}, DType::f32, Device::cuda(0)); });
  EXPECT_NE(msg.find("cuda:0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("no CUDA device is usable"), std::string::npos) << msg;
  EXPECT_FALSE(cuda->unavailable_reason().empty());
#else
  EXPECT_EQ(device_allocator(DeviceType::cuda), nullptr);
  std::string msg = error_of([] { (void)Tensor::empty({2}, DType::f32, Device::cuda(0)); });
  EXPECT_NE(msg.find("no allocator for device cuda:0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("REFIT_CUDA=ON"), std::string::npos) << msg;
#endif
}

// ---- the real CUDA allocator (REFIT_CUDA=ON build with a GPU) ----

#define SKIP_WITHOUT_CUDA_DEVICE()                                                               \
  do {                                                                                           \
    DeviceAllocator* cuda = device_allocator(DeviceType::cuda);                                  \
    if (!cuda) GTEST_SKIP() << "no CUDA backend in this build (configure with -DREFIT_CUDA=ON)"; \
    if (cuda->device_count() == 0)                                                               \
      GTEST_SKIP() << "no CUDA device: " << cuda->unavailable_reason();                          \
  } while (0)

TEST(CudaMemory, RoundTripHostDeviceHostIsBitwiseExact) {
  SKIP_WITHOUT_CUDA_DEVICE();
  std::vector<float> values(1000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.37f - 100.0f;
  Tensor host = Tensor::from_floats({10, 100}, values);
  Tensor gpu = host.to(Device::cuda(0));
  EXPECT_EQ(gpu.device(), Device::cuda(0));
  EXPECT_EQ(gpu.to_floats(), values);
  Tensor twin = gpu.clone();  // device to device
  EXPECT_EQ(twin.device(), Device::cuda(0));
  EXPECT_NE(twin.storage()->data(), gpu.storage()->data());
  EXPECT_EQ(twin.to(Device::cpu()).to_floats(), values);
  Tensor bf16 = host.to(DType::bf16).to(Device::cuda(0));  // any dtype moves as bytes
  Tensor bf16_back = bf16.to(Device::cpu());
  EXPECT_EQ(std::memcmp(bf16_back.raw_data(), host.to(DType::bf16).raw_data(), bf16.nbytes()), 0);
}

TEST(CudaMemory, NewDeviceTensorsAreZeroed) {
  SKIP_WITHOUT_CUDA_DEVICE();
  Tensor t = Tensor::empty({257}, DType::f32, Device::cuda(0));
  EXPECT_EQ(t.to_floats(), std::vector<float>(257, 0.0f));
}

TEST(CudaMemory, MissingDeviceIndexAndStridedCopiesAreRefused) {
  SKIP_WITHOUT_CUDA_DEVICE();
  const int count = device_allocator(DeviceType::cuda)->device_count();
  std::string msg = error_of([&] { (void)Tensor::empty({2}, DType::f32, Device::cuda(count)); });
  EXPECT_NE(msg.find("out of range"), std::string::npos) << msg;
  Tensor gpu = Tensor::empty({2, 3}, DType::f32, Device::cuda(0));
  Tensor host = Tensor::empty({3, 2}, DType::f32);
  msg = error_of([&] { host.copy_from(gpu.transpose(0, 1)); });
  EXPECT_NE(msg.find("cuda:0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("contiguous"), std::string::npos) << msg;
}

}  // namespace
}  // namespace refit

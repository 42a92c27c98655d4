#include "core/storage.h"

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

#ifdef REFIT_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#endif

namespace refit {

// ---- device allocators (the hook non-CPU backends plug into) ----
namespace {

constexpr size_t kDeviceTypes = 3;  // cpu, cuda, rocm (core/device.h)

struct AllocatorTable {
  std::array<std::atomic<DeviceAllocator*>, kDeviceTypes> by_type{};
  AllocatorTable() {
#ifdef REFIT_HAVE_CUDA
    by_type[static_cast<size_t>(DeviceType::cuda)] = &cuda::device_allocator();
#endif
  }
};

std::array<std::atomic<DeviceAllocator*>, kDeviceTypes>& allocator_table() {
  static AllocatorTable table;
  return table.by_type;
}

}  // namespace

DeviceAllocator* device_allocator(DeviceType type) {
  if (type == DeviceType::cpu) return nullptr;  // host memory needs no backend
  return allocator_table()[static_cast<size_t>(type)].load();
}

DeviceAllocator* register_device_allocator(DeviceType type, DeviceAllocator* allocator) {
  if (type == DeviceType::cpu) fail("register_device_allocator: cpu memory is built in");
  return allocator_table()[static_cast<size_t>(type)].exchange(allocator);
}

std::shared_ptr<Storage> Storage::allocate(size_t nbytes, Device device) {
  size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  if (rounded == 0) rounded = kAlignment;
  if (device.type != DeviceType::cpu) {
    DeviceAllocator* allocator = device_allocator(device.type);
    if (!allocator)
      fail("Storage::allocate: no allocator for device {} in this build{}", device.str(),
           device.type == DeviceType::cuda ? " (configure with -DREFIT_CUDA=ON)" : "");
    void* p = allocator->allocate(rounded, device.index);
    std::shared_ptr<Storage> s(new Storage());
    s->data_ = p;
    s->nbytes_ = nbytes;
    s->device_ = device;
    s->release_ = [allocator, p, index = device.index] { allocator->free(p, index); };
    allocator->memset(p, 0, rounded, device.index);  // zero-initialised like host storage
    return s;
  }
  std::shared_ptr<Storage> s(new Storage());
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (!p) fail("Storage::allocate: out of memory allocating {} bytes", nbytes);
  std::memset(p, 0, rounded);
  s->data_ = p;
  s->nbytes_ = nbytes;
  s->device_ = device;
  s->release_ = [p] { std::free(p); };
  return s;
}

std::shared_ptr<Storage> Storage::wrap(void* data, size_t nbytes, Device device,
                                       std::function<void()> release, bool writable) {
  std::shared_ptr<Storage> s(new Storage());
  s->data_ = data;
  s->nbytes_ = nbytes;
  s->device_ = device;
  s->writable_ = writable;
  s->release_ = std::move(release);
  return s;
}

std::shared_ptr<Storage> Storage::view_of_mapping(std::shared_ptr<MappedFile> file, size_t offset,
                                                  size_t nbytes) {
  if (offset > file->size() || nbytes > file->size() - offset)
    throw FormatError(fmt::format("{}: region [{}, {}) lies outside the file ({} bytes)",
                                  file->path(), offset, offset + nbytes, file->size()));
  std::shared_ptr<Storage> s(new Storage());
  s->data_ = const_cast<uint8_t*>(file->data() + offset);
  s->nbytes_ = nbytes;
  s->device_ = Device::cpu();
  s->writable_ = false;
  s->file_ = std::move(file);
  return s;
}

Storage::~Storage() {
  if (release_) release_();
}

}  // namespace refit

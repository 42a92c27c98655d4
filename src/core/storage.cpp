#include "core/storage.h"

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "core/bulk_bytes.h"
#include "core/error.h"
#include "core/fresh_pages.h"
#include "core/host_buffer_cache.h"
#include "core/mapped_file.h"

namespace refit {

// ---- device allocators (the hook non-CPU backends plug into) ----
namespace {

constexpr size_t kDeviceTypes = 3;  // cpu, cuda, rocm (core/device.h)

// Empty until a backend registers itself (src/backends/cuda/cuda_registration.cpp does
// while the program starts). A function-local static, so a backend's static initialiser
// may register before or after this file's statics are built.
std::array<std::atomic<DeviceAllocator*>, kDeviceTypes>& allocator_table() {
  static std::array<std::atomic<DeviceAllocator*>, kDeviceTypes> by_type{};
  return by_type;
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

namespace {
constexpr size_t kHugePage = fresh_pages::kAlignment;
constexpr size_t kHugeThreshold = size_t{4} << 20;  // below this, rounding up would waste too much
// Weights from this size up: a 1-4 MiB weight read once per token on 4 KiB pages takes a TLB
// miss every 4 KiB. The 110M model (its attention and down_proj weights are 1.2-3.5 MiB, 43%
// of its bytes) decoded 3% faster, one token and eight at a time, with them on 2 MiB pages
// (Zen 3, two engines alternating in one process); the rounding costs it 33 MiB.
constexpr size_t kHugeWeightThreshold = size_t{1} << 20;
// set_poison_overwritten's setting, first from the environment.
std::atomic<bool> poison_overwritten{[] {
  const char* v = std::getenv("REFIT_POISON_OVERWRITTEN");
  return v && *v && std::string(v) != "0";
}()};

}  // namespace

bool set_poison_overwritten(bool on) { return poison_overwritten.exchange(on); }

std::shared_ptr<Storage> Storage::allocate(size_t nbytes, Device device, StorageUse use) {
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
  // Large buffers (weights, KV caches) are asked to live on 2 MiB pages: decode streams
  // every weight byte once per token, and with 4 KiB pages each 4 KiB costs a TLB miss.
  // Linux's default transparent-huge-page mode ("madvise") grants them only on request.
  // Those are also the sizes worth reusing (host_buffer_cache.h): a kept one is already
  // mapped and faulted in. A new one comes from the kernel already zero (fresh_pages.h),
  // and is left untouched: its pages are backed as they are first written.
  const bool huge = rounded >= (use == StorageUse::weights ? kHugeWeightThreshold : kHugeThreshold);
  if (huge) rounded = (rounded + kHugePage - 1) / kHugePage * kHugePage;
  void* p = huge ? host_buffer_cache::take(rounded) : nullptr;
  const bool fresh = huge && !p;
  if (!p) {
    p = huge ? fresh_pages::map(rounded) : std::aligned_alloc(kAlignment, rounded);
    if (!p) fail("Storage::allocate: out of memory allocating {} bytes", nbytes);
  }
  if (use != StorageUse::overwritten) {
    if (!fresh) bulk_fill(p, 0, rounded);
  } else if (poison_overwritten.load(std::memory_order_relaxed)) {
    bulk_fill(p, 0xFF, rounded);
  }
  s->data_ = p;
  s->nbytes_ = nbytes;
  s->device_ = device;
  if (huge)
    s->release_ = [p, rounded] {
      if (!host_buffer_cache::keep(p, rounded)) fresh_pages::unmap(p, rounded);
    };
  else
    s->release_ = [p] { std::free(p); };
  s->owned_ = true;
  return s;
}

size_t Storage::discard_contents() {
  if (device_.type != DeviceType::cpu || !owned_)
    fail("Storage::discard_contents: only owned, writable host memory can be given back ({})",
         device_.str());
  if (nbytes_ == 0) return 0;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data_);
  const uintptr_t end = begin + nbytes_;
  const uintptr_t inner_begin = (begin + page - 1) / page * page;
  const uintptr_t inner_end = end / page * page;
  if (inner_end <= inner_begin) {
    std::memset(data_, 0, nbytes_);
    return 0;
  }
  std::memset(data_, 0, inner_begin - begin);
  std::memset(reinterpret_cast<void*>(inner_end), 0, end - inner_end);
#if defined(__linux__)
  // Pages never written (fresh_pages.h) were never memory: only the backed ones count.
  const size_t resident =
      fresh_pages::resident_bytes(reinterpret_cast<void*>(inner_begin), inner_end - inner_begin);
  if (madvise(reinterpret_cast<void*>(inner_begin), inner_end - inner_begin, MADV_DONTNEED) != 0) {
    std::memset(reinterpret_cast<void*>(inner_begin), 0, inner_end - inner_begin);
    return 0;
  }
  return resident;
#else
  std::memset(reinterpret_cast<void*>(inner_begin), 0, inner_end - inner_begin);
  return 0;
#endif
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

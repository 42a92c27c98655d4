// A block of memory on one device. Its address never changes for its lifetime: refit
// writes new weights *into* storages (law L2), so captured kernel graphs stay valid.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "core/device.h"

namespace refit {

class MappedFile;  // core/mapped_file.h

// Memory on a device other than the CPU, provided by a backend (src/backends/cuda/
// registers one for DeviceType::cuda when built with REFIT_CUDA=ON). Core never includes
// a backend header: Storage and Tensor reach device memory only through this interface,
// so the default build has no GPU code and simply finds no allocator.
class DeviceAllocator {
 public:
  virtual ~DeviceAllocator() = default;
  // "cuda (CUDA runtime 13.0)": shown in errors and by `refit kernels`.
  virtual std::string name() const = 0;
  // Devices usable now; 0 (never an exception) when the driver or the device is missing.
  virtual int device_count() const = 0;
  // Why device_count() is 0 ("" otherwise), e.g. the driver's error string.
  virtual std::string unavailable_reason() const = 0;
  // nbytes on device `index`; throws refit::Error naming the device when it cannot.
  virtual void* allocate(size_t nbytes, int index) = 0;
  virtual void free(void* ptr, int index) noexcept = 0;
  virtual void memset(void* ptr, int value, size_t nbytes, int index) = 0;
  // Copies nbytes between host and device or device and device (either side may be the
  // CPU; the other is on this allocator's device type). Returns when dst holds the bytes.
  virtual void copy(void* dst, Device dst_device, const void* src, Device src_device,
                    size_t nbytes) = 0;
};

// The allocator for a device type, or nullptr when this build has none. A backend
// registers its own while the program starts (the CUDA one from a static initialiser that
// the build links whole into every program, src/backends/cuda/cuda_registration.cpp), so
// core names no backend. register_device_allocator() returns the previous one (tests
// install a host-memory double and put the old one back); cpu cannot be replaced.
DeviceAllocator* device_allocator(DeviceType type);
DeviceAllocator* register_device_allocator(DeviceType type, DeviceAllocator* allocator);

// What a host buffer holds, for where its pages come from and whether it starts zeroed.
// Weights are read in full on every forward pass, so a weight of 1 MiB and up sits on
// 2 MiB pages (rounded up to whole pages); other buffers only from 4 MiB up, where the
// rounding wastes little.
enum class StorageUse {
  general,  // zeroed
  weights,  // zeroed; 2 MiB pages from 1 MiB up
  // Not zeroed: an output its producer writes in full before anything reads it (a
  // matmul's output, a copy). Zeroing those was ~1% of a prefill and of a serving step.
  overwritten,
};

// Overwritten host buffers filled with 0xFF bytes (NaN in every float format) instead of
// left as they come: an element a producer fails to write then shows up as NaN. The unit
// tests run with it on (REFIT_POISON_OVERWRITTEN=1, set by CMake); returns the old setting.
bool set_poison_overwritten(bool on);

class Storage {
 public:
  static constexpr size_t kAlignment = 64;

  // Owned, kAlignment-aligned memory, zero-initialised unless `use` is overwritten (host
  // memory; device memory is always zeroed). Non-CPU devices use their
  // DeviceAllocator; without one (a build without that backend) this throws naming it.
  static std::shared_ptr<Storage> allocate(size_t nbytes, Device device = Device::cpu(),
                                           StorageUse use = StorageUse::general);
  // Foreign memory: `release` is called exactly once when the last reference goes.
  static std::shared_ptr<Storage> wrap(void* data, size_t nbytes, Device device,
                                       std::function<void()> release, bool writable = true);
  // A read-only region [offset, offset + nbytes) of a mapped file; keeps the mapping alive.
  static std::shared_ptr<Storage> view_of_mapping(std::shared_ptr<MappedFile> file, size_t offset,
                                                  size_t nbytes);

  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  bool writable() const { return writable_; }

  // Hands this owned host storage's pages back to the operating system while keeping its
  // address (law L2: nothing that captured the pointer is invalidated): the whole pages
  // inside it are madvise(MADV_DONTNEED)-ed, the partial pages at its ends zeroed, so the
  // memory reads as zeros and is faulted back in on the next touch. Returns the bytes
  // given back: those of the pages that were backed by memory (a large storage's pages are
  // backed only once written). Only for memory this process allocated (not a file mapping
  // or a wrap).
  size_t discard_contents();

 private:
  Storage() = default;
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  bool writable_ = true;
  bool owned_ = false;  // host memory allocate() made (discard_contents() may give it back)
  std::function<void()> release_;
  std::shared_ptr<MappedFile> file_;  // keeps a mapping alive for views over it
};

}  // namespace refit

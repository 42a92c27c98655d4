// A block of memory on one device. Its address never changes for its lifetime: refit
// writes new weights *into* storages (law L2), so captured kernel graphs stay valid.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "core/device.h"
#include "core/mapped_file.h"

namespace refit {

class Storage {
 public:
  static constexpr size_t kAlignment = 64;

  // Owned, zero-initialised, kAlignment-aligned memory.
  static std::shared_ptr<Storage> allocate(size_t nbytes, Device device = Device::cpu());
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

 private:
  Storage() = default;
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  bool writable_ = true;
  std::function<void()> release_;
  std::shared_ptr<MappedFile> file_;  // keeps a mapping alive for views over it
};

}  // namespace refit

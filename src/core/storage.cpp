#include "core/storage.h"

#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace refit {

std::shared_ptr<Storage> Storage::allocate(size_t nbytes, Device device) {
  if (device.type != DeviceType::cpu)
    fail("Storage::allocate: no allocator for device {} in this build", device.str());
  std::shared_ptr<Storage> s(new Storage());
  size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  if (rounded == 0) rounded = kAlignment;
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

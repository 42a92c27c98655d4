#include "server/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace refit {

std::string shm_segment_path(const std::string& name) {
  std::string base = name;
  if (base.starts_with("/dev/shm/"))
    base = base.substr(9);
  else if (base.starts_with("/"))
    base = base.substr(1);
  bool ok = !base.empty() && base.size() <= 255 && base[0] != '.';
  for (char c : base)
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-');
  if (!ok)
    fail(
        "shared-memory segment '{}': not a segment name (want 'NAME', '/NAME' or '/dev/shm/NAME' "
        "with NAME of "
        "letters, digits, '.', '_' and '-', not starting with '.')",
        name);
  return "/dev/shm/" + base;
}

std::unique_ptr<ShmSegment> ShmSegment::open(const std::string& name, int64_t offset,
                                             int64_t nbytes) {
  const std::string path = shm_segment_path(name);
  if (offset < 0) fail("shared-memory segment {}: offset {} is negative", path, offset);
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    fail("shared-memory segment {}: cannot open it read-only: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("shared-memory segment {}: not a regular shared-memory file", path);
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const uint64_t start = static_cast<uint64_t>(offset);
  if (start > size) {
    ::close(fd);
    fail("shared-memory segment {}: offset {} is past its end ({} bytes)", path, offset, size);
  }
  const uint64_t want = nbytes < 0 ? size - start : static_cast<uint64_t>(nbytes);
  if (want > size - start) {  // start <= size, so no overflow
    ::close(fd);
    fail("shared-memory segment {}: bytes [{}, {}) asked for, but it holds {} bytes", path, offset,
         start + want, size);
  }
  auto seg = std::unique_ptr<ShmSegment>(new ShmSegment());
  seg->path_ = path;
  seg->size_ = want;
  if (want > 0) {
    // mmap offsets must be page-aligned: map from the page holding `start`.
    const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    const uint64_t aligned = start / page * page;
    seg->mapping_size_ = static_cast<size_t>(start + want - aligned);
    void* p =
        ::mmap(nullptr, seg->mapping_size_, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(aligned));
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      fail("shared-memory segment {}: cannot map {} bytes: {}", path, want, std::strerror(err));
    }
    seg->mapping_ = p;
    seg->guard_ = std::make_unique<GuardedRegion>(p, seg->mapping_size_);
    seg->data_ = static_cast<const uint8_t*>(p) + (start - aligned);
  }
  ::close(fd);  // the mapping stays valid
  return seg;
}

ShmSegment::~ShmSegment() {
  guard_.reset();  // before the pages go
  if (mapping_) ::munmap(mapping_, mapping_size_);
}

}  // namespace refit

#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <system_error>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/fresh_pages.h"
#include "core/thread_pool.h"

namespace refit {
namespace {

int64_t mtime_ns(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

[[noreturn]] void changed(const std::string& path, const std::string& how) {
  throw FormatError(fmt::format(
      "{}: changed while it was read ({}); write a checkpoint to a new path, then rename it", path,
      how));
}

// What differs between the file as opened and as it is now, or "" when nothing does.
std::string difference(int fd, size_t size, int64_t mtime) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return fmt::format("cannot stat it: {}", std::strerror(errno));
  if (static_cast<size_t>(st.st_size) != size)
    return fmt::format("{} bytes when opened, {} now", size, static_cast<uint64_t>(st.st_size));
  if (mtime_ns(st) != mtime) return "modified in place";
  return "";
}

std::atomic<MappedFile::OpenedHook> g_opened_hook{nullptr};

}  // namespace

void MappedFile::set_opened_hook_for_testing(OpenedHook hook) { g_opened_hook.store(hook); }

std::shared_ptr<MappedFile> MappedFile::open(const std::string& path, FileAccess access) {
  // O_NONBLOCK: opening a FIFO (or a tty) would otherwise wait for a writer, holding the
  // caller forever; fstat below then refuses it. A regular file reads the same either way.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) throw FormatError(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw FormatError(
        fmt::format("{}: not a regular file (a FIFO, socket or device is never read)", path));
  }
  std::shared_ptr<MappedFile> file(new MappedFile());
  file->fd_ = fd;  // closed by the destructor from here on
  file->path_ = path;
  file->access_ = access;
  file->size_ = static_cast<size_t>(st.st_size);
  file->mtime_ns_ = mtime_ns(st);
  if (OpenedHook hook = g_opened_hook.load()) hook(path);
  if (file->size_ == 0) {
    if (access == FileAccess::copied) {
      ::close(fd);
      file->fd_ = -1;
    }
    return file;
  }
  if (access == FileAccess::copied) {
    file->copy_contents(fd);
    ::close(fd);
    file->fd_ = -1;
    return file;
  }
  void* p = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED)
    throw FormatError(fmt::format("{}: cannot map: {}", path, std::strerror(errno)));
  file->data_ = static_cast<const uint8_t*>(p);
  file->mapped_bytes_ = file->size_;
  file->guard_ = std::make_unique<GuardedRegion>(p, file->size_);
  return file;
}

// pread never faults: a file that shrinks ends the reads early, and one that is rewritten
// shows in its modification time, both checked once the copy is whole. The time goes to the
// first write to each fresh page (the kernel clears it in the faulting thread) and to the
// copy out of the page cache, so the 64 MiB chunks are read by as many threads as the pool
// has, each its own: a refit from disk of a 2.2 GB file spent 62% of its time here on one
// thread. They are threads of their own, not the pool's: a refit staged while the engine
// serves must not hold the pool's kernels up for the whole read. 2 MiB pages where the
// kernel grants them: 512 times fewer faults.
void MappedFile::copy_contents(int fd) {
  // Fresh zero pages on a 2 MiB boundary, advised onto huge pages (the destructor's munmap
  // gives them back like a file mapping).
  void* p = fresh_pages::map(size_);
  if (!p)
    throw FormatError(fmt::format("{}: cannot allocate {} bytes to read it into: {}", path_, size_,
                                  std::strerror(errno)));
  data_ = static_cast<const uint8_t*>(p);
  mapped_bytes_ = size_;
  auto* out = static_cast<uint8_t*>(p);
  constexpr size_t kChunk = size_t{64} << 20;
  const size_t chunks = (size_ + kChunk - 1) / kChunk;
  std::atomic<size_t> next{0};
  // Bytes [begin, end) in full, or throws: a read error, or the file ended early.
  auto read_range = [&](size_t begin, size_t end) {
    for (size_t done = begin; done < end;) {
      const ssize_t got = ::pread(fd, out + done, end - done, static_cast<off_t>(done));
      if (got < 0) {
        if (errno == EINTR) continue;
        throw FormatError(fmt::format("{}: cannot read: {}", path_, std::strerror(errno)));
      }
      if (got == 0) {
        // Readers of later chunks meet the end first, wherever it is: its size says where.
        struct stat st {};
        changed(path_, ::fstat(fd, &st) == 0
                           ? fmt::format("{} bytes when opened, {} now", size_,
                                         static_cast<uint64_t>(st.st_size))
                           : fmt::format("{} bytes when opened, it ended before {}", size_, end));
      }
      done += static_cast<size_t>(got);
    }
  };
  auto reader = [&](std::exception_ptr& error) {
    try {
      for (size_t c; (c = next.fetch_add(1)) < chunks;)
        read_range(c * kChunk, std::min(size_, (c + 1) * kChunk));
    } catch (...) {
      error = std::current_exception();
      next.store(chunks);  // the others stop at their next chunk
    }
  };
  const size_t helpers =
      chunks > 1 ? std::min<size_t>(static_cast<size_t>(num_threads()), chunks) - 1 : 0;
  std::vector<std::exception_ptr> errors(helpers + 1);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < helpers; ++t) {
    try {
      threads.emplace_back(reader, std::ref(errors[t + 1]));
    } catch (const std::system_error&) {
      break;  // no thread to be had: the readers that started read the rest
    }
  }
  reader(errors[0]);
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  const std::string diff = difference(fd, size_, mtime_ns_);
  if (!diff.empty()) changed(path_, diff);
  ::mprotect(p, size_, PROT_READ);  // as read-only as a mapping of the file would be
}

void MappedFile::check_unchanged() const {
  if (access_ == FileAccess::copied || fd_ < 0) return;
  if (guard_ && guard_->torn()) {
    // A fault inside the mapping: pages past a new end of the file, or pages the kernel
    // could not read (an I/O error) — either way, what was read there is not the file.
    struct stat st {};
    if (::fstat(fd_, &st) == 0 && static_cast<size_t>(st.st_size) < size_)
      changed(path_, fmt::format("truncated from {} to {} bytes under the read", size_,
                                 static_cast<uint64_t>(st.st_size)));
    changed(path_,
            "some of its pages could not be read: an I/O error, or a truncation undone since");
  }
  const std::string diff = difference(fd_, size_, mtime_ns_);
  if (!diff.empty()) changed(path_, diff);
}

MappedFile::~MappedFile() {
  guard_.reset();  // before the pages go: no fault can be absorbed into a freed range
  if (data_) ::munmap(const_cast<uint8_t*>(data_), mapped_bytes_);
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace refit

#include "benchmarks/memory_bandwidth.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/stream_read.h"

namespace refit {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Page-aligned, never zero-initialised by the allocator: the caller touches it (on the pool,
// so each thread's first touch places its pages as the measurement will use them). Large
// buffers sit on 2 MiB pages as the weights do (Storage::allocate): the limits must be
// measured with the page size of the bytes they bound, or decode, streaming from 2 MiB
// pages, can beat a "limit" measured on 4 KiB ones (it did: 105% of the read limit).
struct AlignedBuffer {
  explicit AlignedBuffer(size_t n) : bytes(n) {
    constexpr size_t kHugePage = size_t{2} << 20;
    const bool huge = n >= 2 * kHugePage;
    const size_t rounded =
        huge ? (n + kHugePage - 1) / kHugePage * kHugePage : std::max<size_t>(n, 1);
    void* p = nullptr;
    if (posix_memalign(&p, huge ? kHugePage : 4096, rounded) != 0) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (huge) madvise(p, rounded, MADV_HUGEPAGE);  // advice only
#endif
    data.reset(static_cast<uint8_t*>(p));
  }
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> data;
  size_t bytes;
};

// Where thread p's contiguous share of `total` bytes begins (p = shares: the end), at a
// cache line, so that no line is read or written by two threads.
uint64_t share_start(uint64_t total, int64_t shares, int64_t p) {
  return p >= shares ? total : total * uint64_t(p) / uint64_t(shares) / 64 * 64;
}

void parallel_fill(AlignedBuffer& b, uint8_t value) {
  parallel_for(
      static_cast<int64_t>(b.bytes),
      [&](int64_t s, int64_t e, int) {
        std::memset(b.data.get() + s, value, static_cast<size_t>(e - s));
      },
      int64_t{1} << 20);
}

std::vector<std::filesystem::path> regular_files(const std::string& path) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  if (path.empty()) return files;
  if (fs::is_directory(path)) {
    for (const auto& entry : fs::directory_iterator(path))
      if (entry.is_regular_file()) files.push_back(entry.path());
    std::sort(files.begin(), files.end());
  } else if (fs::is_regular_file(path)) {
    files.emplace_back(path);
  }
  return files;
}

}  // namespace

int64_t stream_array_bytes() {
  int64_t llc = 0;
  for (int index = 0; index < 8; ++index) {
    const std::string dir =
        "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
    std::ifstream level_file(dir + "level"), size_file(dir + "size");
    int level = 0;
    std::string size;
    if (!(level_file >> level) || !(size_file >> size) || size.empty()) continue;
    int64_t bytes = std::atoll(size.c_str());
    if (size.back() == 'K')
      bytes <<= 10;
    else if (size.back() == 'M')
      bytes <<= 20;
    if (level >= 2) llc = std::max(llc, bytes);
  }
  return std::clamp<int64_t>(4 * llc, int64_t{256} << 20, int64_t{2} << 30);
}

StreamResult measure_stream(int64_t array_bytes, int reps) {
  if (array_bytes <= 0) array_bytes = stream_array_bytes();
  StreamResult r;
  r.threads = num_threads();
  r.array_bytes = array_bytes;
  r.reps = std::max(reps, 1);
  const size_t n = static_cast<size_t>(array_bytes);
  AlignedBuffer a(n), b(n);
  parallel_fill(a, 1);
  parallel_fill(b, 2);
  // One contiguous share per thread, each done in one call, the same cut every pass: the
  // pool would otherwise cut the arrays into pieces sized by timing, and glibc's memcpy
  // picks non-temporal stores (no read-for-ownership of the destination) only for copies
  // above a size threshold, so the copy figure would move with the cut (it fell from ~40
  // to ~28 GB/s). Whole shares keep the fastest copy, the strictest limit.
  const int64_t shares = std::max(num_threads(), 1);

  double best_copy = 1e300;
  for (int i = 0; i <= r.reps; ++i) {  // pass 0 is untimed, as in STREAM
    const auto start = std::chrono::steady_clock::now();
    parallel_for(shares, [&](int64_t p0, int64_t p1, int) {
      for (int64_t p = p0; p < p1; ++p) {
        const uint64_t s = share_start(n, shares, p), e = share_start(n, shares, p + 1);
        std::memcpy(a.data.get() + s, b.data.get() + s, e - s);
      }
    });
    const double t = seconds_since(start);
    if (i > 0) best_copy = std::min(best_copy, t);
  }
  r.copy_gbs = 2.0 * static_cast<double>(array_bytes) / best_copy * 1e-9;

  // Read-only: full-width vector loads into independent sums, the way decode streams its
  // weights (measure_read_gbs: one stream per thread and 16 side by side, the faster
  // pattern's best pass, so that no decode kernel can read faster than the "limit" by
  // reading in a pattern it did not try).
  r.read_gbs = measure_read_gbs({{a.data.get(), n}}, r.reps);
  return r;
}

double measure_read_gbs(const std::vector<ByteRegion>& regions, int reps) {
  uint64_t total = 0;
  for (const ByteRegion& r : regions) total += r.bytes;
  if (total == 0) return 0;
  const int64_t shares = std::max(num_threads(), 1);
  // Reads global bytes [s, e) of the regions laid end to end.
  auto read_range = [&](uint64_t s, uint64_t e, bool streams) {
    uint64_t sum = 0, offset = 0;
    for (const ByteRegion& r : regions) {
      const uint64_t lo = std::max(s, offset), hi = std::min(e, offset + r.bytes);
      if (lo < hi) {
        const auto* p = static_cast<const uint8_t*>(r.data) + (lo - offset);
        sum += streams ? cpu::read_sweep_streams(p, hi - lo) : cpu::read_sweep(p, hi - lo);
      }
      offset += r.bytes;
      if (offset >= e) break;
    }
    return sum;
  };
  std::vector<uint64_t> sink(static_cast<size_t>(shares) * 8,
                             0);  // each thread's sum on its own line
  double best = 1e300;
  for (const bool streams : {false, true})
    for (int i = 0; i <= std::max(reps, 1); ++i) {  // pass 0 is untimed
      const auto start = std::chrono::steady_clock::now();
      parallel_for(shares, [&](int64_t p0, int64_t p1, int idx) {
        for (int64_t p = p0; p < p1; ++p) {
          const uint64_t s = share_start(total, shares, p), e = share_start(total, shares, p + 1);
          sink[static_cast<size_t>(idx) * 8] += read_range(s, e, streams);
        }
      });
      const double t = seconds_since(start);
      if (i > 0) best = std::min(best, t);
    }
  volatile uint64_t keep = 0;
  for (uint64_t v : sink) keep = keep + v;
  (void)keep;
  return static_cast<double>(total) / best * 1e-9;
}

double measure_memcpy_gbs(size_t bytes, int reps) {
  AlignedBuffer src(bytes), dst(bytes);
  parallel_fill(src, 3);
  parallel_fill(dst, 4);
  double best = 1e300;
  for (int i = 0; i < std::max(reps, 1); ++i) {
    const auto start = std::chrono::steady_clock::now();
    std::memcpy(dst.data.get(), src.data.get(), bytes);
    best = std::min(best, seconds_since(start));
  }
  volatile uint8_t keep = dst.data.get()[bytes / 2];
  (void)keep;
  return static_cast<double>(bytes) / best * 1e-9;
}

ProcMemory read_proc_memory() {
  ProcMemory m;
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return m;
  char line[256];
  while (std::fgets(line, sizeof line, f)) {
    long long kb = 0;
    if (std::sscanf(line, "VmRSS: %lld", &kb) == 1)
      m.rss_kb = kb;
    else if (std::sscanf(line, "VmHWM: %lld", &kb) == 1)
      m.hwm_kb = kb;
    else if (std::sscanf(line, "RssAnon: %lld", &kb) == 1)
      m.rss_anon_kb = kb;
    else if (std::sscanf(line, "RssFile: %lld", &kb) == 1)
      m.rss_file_kb = kb;
  }
  std::fclose(f);
  return m;
}

bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  if (!f) return false;
  f << "5";
  f.flush();
  return static_cast<bool>(f);
}

PeakMemorySampler::PeakMemorySampler(int period_us) : period_us_(std::max(period_us, 50)) {
  sample();
  thread_ = std::thread([this] {
    while (running_.load(std::memory_order_relaxed)) {
      sample();
      std::this_thread::sleep_for(std::chrono::microseconds(period_us_));
    }
  });
}

PeakMemorySampler::~PeakMemorySampler() { stop(); }

void PeakMemorySampler::stop() {
  if (thread_.joinable()) {
    running_.store(false);
    thread_.join();
    sample();
  }
}

void PeakMemorySampler::sample() {
  const ProcMemory m = read_proc_memory();
  int64_t v = peak_rss_kb_.load();
  while (m.rss_kb > v && !peak_rss_kb_.compare_exchange_weak(v, m.rss_kb)) {
  }
  v = peak_anon_kb_.load();
  while (m.rss_anon_kb > v && !peak_anon_kb_.compare_exchange_weak(v, m.rss_anon_kb)) {
  }
}

double page_cached_fraction(const std::string& path) {
  const long page = sysconf(_SC_PAGESIZE);
  uint64_t pages = 0, resident = 0;
  for (const auto& file : regular_files(path)) {
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat st {};
    if (::fstat(fd, &st) == 0 && st.st_size > 0) {
      void* p = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
      if (p != MAP_FAILED) {
        const size_t n = (static_cast<size_t>(st.st_size) + page - 1) / page;
        std::vector<unsigned char> vec(n);
        if (::mincore(p, static_cast<size_t>(st.st_size), vec.data()) == 0) {
          pages += n;
          for (unsigned char c : vec) resident += c & 1;
        }
        ::munmap(p, static_cast<size_t>(st.st_size));
      }
    }
    ::close(fd);
  }
  return pages == 0 ? 0.0 : static_cast<double>(resident) / static_cast<double>(pages);
}

uint64_t warm_page_cache(const std::string& path) {
  uint64_t total = 0;
  std::vector<char> buf(size_t{8} << 20);
  for (const auto& file : regular_files(path)) {
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    for (;;) {
      const ssize_t got = ::read(fd, buf.data(), buf.size());
      if (got <= 0) break;
      total += static_cast<uint64_t>(got);
    }
    ::close(fd);
  }
  return total;
}

}  // namespace refit

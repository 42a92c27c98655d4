// Memory-bandwidth and resident-memory measurements for the benchmarks (`refit bench`).
//
// Decode reads every weight once per token, so its speed cannot exceed
// bandwidth / weight bytes; a weight update copies every byte once, so memcpy of the same
// bytes bounds it. Both limits are measured in the same process as the thing they bound,
// on the same thread pool, so the comparison does not depend on a number from elsewhere.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace refit {

struct StreamResult {
  double copy_gbs = 0;  // STREAM "Copy" a[i] = b[i], counted as read + write bytes
  double read_gbs = 0;  // read-only pass (a sum), the access pattern of decode's weights
  // The same read-only pass over the bytes a decode step reads, in place (measure_read_gbs
  // on the weights); 0 where not measured. See there for why it is measured too.
  double weights_read_gbs = 0;
  int threads = 0;          // refit pool threads used
  int64_t array_bytes = 0;  // bytes of each array
  int reps = 0;
};

// STREAM-style bandwidth on refit's thread pool: best rate over `reps` timed passes after one
// untimed pass (STREAM reports the best rate and drops the first iteration). array_bytes 0:
// stream_array_bytes().
StreamResult measure_stream(int64_t array_bytes = 0, int reps = 5);
// STREAM's rule: each array at least 4x the last-level cache (read from sysfs; at least
// 256 MiB, at most 2 GiB). Large L3s are real: a Sapphire Rapids VM reports 300 MiB.
int64_t stream_array_bytes();

// A span of bytes to read (a weight's codes, its scales).
struct ByteRegion {
  const void* data = nullptr;
  size_t bytes = 0;
};

// Read-only rate (GB/s) of the given bytes in place, on the pool: all regions as one
// sequence cut into one contiguous share per thread, read with full-width loads as one
// stream and as 16 side by side, the best timed pass of the faster pattern after an
// untimed one (measure_stream's read figure is this over its array). Over a model's
// weights it bounds decode on the very pages decode reads: on a VM, buffers allocated one
// after another read at rates up to ~30% apart (AMD Zen 5 VM: 42-55 GB/s for three 512 MiB
// buffers in one process, each steady within 2% when read again), so a limit measured on
// the STREAM arrays alone moves with where they, and the weights, happened to land.
// Returns 0 for no bytes.
double measure_read_gbs(const std::vector<ByteRegion>& regions, int reps = 5);

// One plain std::memcpy of `bytes` between two preallocated, touched buffers on the calling
// thread: the baseline a single-threaded weight update compares against. Best of `reps`.
// Returns GB/s counting the bytes once (the convention of the refit figures).
double measure_memcpy_gbs(size_t bytes, int reps = 3);

// /proc/self/status memory counters, in KiB (0 where the kernel does not report one).
struct ProcMemory {
  int64_t rss_kb = 0;       // VmRSS: anonymous + file-backed (mapped page cache) + shmem
  int64_t hwm_kb = 0;       // VmHWM: peak VmRSS since start or the last reset
  int64_t rss_anon_kb = 0;  // RssAnon: heap and other private memory
  int64_t rss_file_kb = 0;  // RssFile: mapped file pages (an mmapped checkpoint)
};
ProcMemory read_proc_memory();

// Resets VmHWM to the current VmRSS (writes "5" to /proc/self/clear_refs). False when the
// kernel refuses (old kernel, restricted /proc): the caller then reports the peak since start.
bool reset_peak_rss();

// Samples /proc/self/status on a background thread (every `period_us`) while alive, so the
// peak of RssAnon can be reported too (the kernel keeps a peak only for the total, which
// also counts the page cache of a mapped checkpoint).
class PeakMemorySampler {
 public:
  explicit PeakMemorySampler(int period_us = 500);
  ~PeakMemorySampler();
  PeakMemorySampler(const PeakMemorySampler&) = delete;
  PeakMemorySampler& operator=(const PeakMemorySampler&) = delete;
  // Stops sampling (idempotent) and takes a last sample.
  void stop();
  int64_t peak_rss_kb() const { return peak_rss_kb_.load(); }
  int64_t peak_anon_kb() const { return peak_anon_kb_.load(); }

 private:
  void sample();
  std::atomic<bool> running_{true};
  std::atomic<int64_t> peak_rss_kb_{0}, peak_anon_kb_{0};
  std::thread thread_;
  int period_us_;
};

// Fraction of the files under `path` (a file, or a folder's regular files, not recursive)
// that is in the page cache (mincore over a read-only mapping). 0 for an empty path.
double page_cached_fraction(const std::string& path);
// Reads every regular file under `path` once (sequential read into a scratch buffer), so a
// benchmark that needs a page-cached checkpoint starts from one. Returns the bytes read.
uint64_t warm_page_cache(const std::string& path);

}  // namespace refit

#include "benchmarks/refit_bench.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>

#include "benchmarks/memory_bandwidth.h"
#include "benchmarks/token_bench.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/checkpoint.h"
#include "models/model_loader.h"

namespace refit {
namespace {

uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

std::vector<double> gbs_samples(const RefitBenchSource& s) {
  std::vector<double> v;
  for (uint64_t ns : s.samples_ns) v.push_back(double(s.bytes) / double(ns));  // bytes/ns == GB/s
  return v;
}

// Runs `update` reps times after one untimed call, recording time and peak extra memory.
template <typename Fn>
void time_updates(RefitBenchSource& s, int reps, Fn&& update) {
  update();  // warm-up: first-touch of staging allocations, page tables of the mapping
  s.hwm_reset_worked = reset_peak_rss();
  for (int i = 0; i < reps; ++i) {
    reset_peak_rss();
    const ProcMemory before = read_proc_memory();
    PeakMemorySampler sampler;
    const uint64_t start = now_ns();
    update();
    const uint64_t elapsed = now_ns() - start;
    sampler.stop();
    const ProcMemory after = read_proc_memory();
    s.samples_ns.push_back(elapsed);
    const int64_t peak_total = s.hwm_reset_worked ? after.hwm_kb : sampler.peak_rss_kb();
    s.peak_extra_rss_kb = std::max(s.peak_extra_rss_kb, peak_total - before.rss_kb);
    s.peak_extra_anon_kb =
        std::max(s.peak_extra_anon_kb, sampler.peak_anon_kb() - before.rss_anon_kb);
  }
}

}  // namespace

double RefitBenchSource::best_gbs() const {
  const auto v = gbs_samples(*this);
  return v.empty() ? 0 : *std::max_element(v.begin(), v.end());
}
double RefitBenchSource::avg_gbs() const { return bench_mean(gbs_samples(*this)); }
double RefitBenchSource::stddev_gbs() const { return bench_stddev(gbs_samples(*this)); }

std::vector<std::pair<std::string, Tensor>> load_update_tensors(const Engine& engine,
                                                                const std::string& path) {
  auto checkpoint = Checkpoint::open(path);
  CheckpointWeights weights(*checkpoint, read_model_config(*checkpoint));
  std::vector<std::pair<std::string, Tensor>> out;
  for (const std::string& name : engine.model().parameters().checkpoint_names()) {
    Tensor t = weights.find(name);
    if (!t.defined()) fail("{}: the checkpoint has no tensor '{}'", path, name);
    out.emplace_back(name, t.clone());  // owned memory, independent of the mapping
  }
  return out;
}

uint64_t update_tensor_bytes(const Engine& engine, const std::string& path) {
  auto checkpoint = Checkpoint::open(path);
  CheckpointWeights weights(*checkpoint, read_model_config(*checkpoint));
  uint64_t bytes = 0;
  for (const std::string& name : engine.model().parameters().checkpoint_names()) {
    CheckpointWeights::Lazy lazy;
    if (!weights.find_lazy(name, &lazy)) fail("{}: the checkpoint has no tensor '{}'", path, name);
    if (lazy.view.defined()) {
      bytes += lazy.view.nbytes();
    } else {
      int64_t n = 1;
      for (int64_t d : lazy.shape) n *= d;
      bytes += dtype_nbytes(lazy.dtype, n);
    }
  }
  return bytes;
}

uint64_t available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return 0;
}

RefitBenchSource bench_refit_from_disk(Engine& engine, const std::string& path, int reps,
                                       const UpdateOptions& options) {
  RefitBenchSource s;
  s.name = "disk";
  s.detail = path;
  s.bytes = update_tensor_bytes(engine, path);
  warm_page_cache(path);
  s.page_cached = page_cached_fraction(path);
  time_updates(s, reps, [&] { engine.update_weights_from_disk(path, {}, options); });
  return s;
}

RefitBenchSource bench_refit_from_tensors(
    Engine& engine, const std::vector<std::pair<std::string, Tensor>>& tensors, int reps,
    const UpdateOptions& options) {
  RefitBenchSource s;
  s.name = "tensors";
  s.detail = "in-memory tensors";
  for (const auto& [name, t] : tensors) s.bytes += t.nbytes();
  time_updates(s, reps, [&] { engine.update_weights_from_tensors(tensors, options); });
  return s;
}

RefitBenchResult run_refit_bench(Engine& engine, const std::string& path, int reps,
                                 const UpdateOptions& options, uint64_t memory_available) {
  if (reps < 1) fail("bench: -r must be at least 1 (got {})", reps);
  RefitBenchResult r;
  r.model = engine.description();
  r.n_threads = num_threads();
  r.check_finite = options.check_finite;
  for (const auto& p : engine.model().parameters().all()) {
    r.parameter_bytes += p->data().nbytes();
    r.largest_parameter_bytes = std::max<uint64_t>(r.largest_parameter_bytes, p->data().nbytes());
  }
  r.sources.push_back(bench_refit_from_disk(engine, path, reps, options));
  // The in-memory tensors stay whole while the update stages up to a copy of every
  // parameter: a quantized mixture of experts dequantized to f32 would not fit (the 8-layer
  // gpt-oss GGUF's 28 GB got the run killed by the OOM killer on a 24 GB machine).
  const uint64_t needed = r.sources.front().bytes;  // update_tensor_bytes(engine, path)
  if (memory_available == 0) memory_available = available_memory_bytes();
  if (memory_available > 0 && needed + r.parameter_bytes > memory_available) {
    r.tensors_skipped = fmt::format(
        "its tensors would take {:.1f} GB and the update up to {:.1f} GB more, with {:.1f} GB "
        "of memory available",
        double(needed) * 1e-9, double(r.parameter_bytes) * 1e-9, double(memory_available) * 1e-9);
  } else {
    const auto tensors = load_update_tensors(engine, path);
    r.sources.push_back(bench_refit_from_tensors(engine, tensors, reps, options));
  }
  // The baseline copies the same bytes where a source and a destination of that size fit
  // (a quantized checkpoint's bytes are counted dequantized, up to 8x its file), else as
  // many as a quarter of the available memory: the copy rate does not change past the caches.
  r.memcpy_bytes = r.sources.front().bytes;
  if (memory_available > 0) r.memcpy_bytes = std::min(r.memcpy_bytes, memory_available / 4);
  r.memcpy_gbs = measure_memcpy_gbs(static_cast<size_t>(r.memcpy_bytes), std::max(reps, 3));
  return r;
}

}  // namespace refit

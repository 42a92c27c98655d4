// Weight-update (refit) throughput: how fast a whole model's weights go into a running
// engine, from a page-cached safetensors folder (Engine::update_weights_from_disk) and from
// tensors already in memory (Engine::update_weights_from_tensors), beside a plain memcpy of
// the same bytes measured in the same process. With the peak resident memory the update
// adds, which issue 5 bounds by the largest single parameter.
//
// Bytes are the bytes of the incoming checkpoint tensors (each counted once; a quantized
// file's as the f32 they are read as); GB/s = 1e9 bytes per second. Each source gets one untimed
// warm-up update, then `reps` timed ones, each a complete transaction (validate every tensor, then
// commit).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/engine.h"

namespace refit {

struct RefitBenchSource {
  std::string name;                  // "disk" or "tensors"
  std::string detail;                // what it read from
  uint64_t bytes = 0;                // incoming tensor bytes per update
  std::vector<uint64_t> samples_ns;  // one per timed update
  // Peak over the timed updates, minus the level just before each (KiB). VmHWM counts every
  // resident page, including a mapped checkpoint's page cache; RssAnon only private memory
  // (staging buffers, conversions), sampled every 0.5 ms.
  int64_t peak_extra_rss_kb = 0;
  int64_t peak_extra_anon_kb = 0;
  bool hwm_reset_worked = false;  // /proc/self/clear_refs accepted the peak reset
  double page_cached = -1;        // disk: fraction of the files in the page cache before
  double best_gbs() const;
  double avg_gbs() const;
  double stddev_gbs() const;
};

struct RefitBenchResult {
  std::string model;             // what the engine serves
  uint64_t parameter_bytes = 0;  // stored bytes of every parameter
  uint64_t largest_parameter_bytes = 0;
  int n_threads = 0;
  bool check_finite = true;  // the updates scanned every value for NaN/inf
  double memcpy_gbs = 0;     // one std::memcpy of `bytes` (best of reps), one thread
  uint64_t memcpy_bytes = 0;
  std::vector<RefitBenchSource> sources;
  // Why the in-memory source did not run ("" when it did): its tensors would not fit.
  std::string tensors_skipped;
};

// Every checkpoint tensor the engine's parameters take, read from `path` and copied into
// owned memory (as a trainer would hold them), under their checkpoint names.
std::vector<std::pair<std::string, Tensor>> load_update_tensors(const Engine& engine,
                                                                const std::string& path);

// The bytes load_update_tensors(engine, path) would hold, found without reading the tensors
// (a quantized checkpoint's tensors come out dequantized to f32: an MXFP4 mixture of
// experts' ~4.25 bits a weight become 32).
uint64_t update_tensor_bytes(const Engine& engine, const std::string& path);

// The memory the system can still give (MemAvailable), 0 where it does not say.
uint64_t available_memory_bytes();

// Times update_weights_from_disk(path) `reps` times (after warming the page cache and one
// untimed update).
RefitBenchSource bench_refit_from_disk(Engine& engine, const std::string& path, int reps,
                                       const UpdateOptions& options = {});
// Times update_weights_from_tensors(tensors) `reps` times (after one untimed update).
RefitBenchSource bench_refit_from_tensors(
    Engine& engine, const std::vector<std::pair<std::string, Tensor>>& tensors, int reps,
    const UpdateOptions& options = {});

// Both sources and the memcpy baseline for `engine` with weights from `path`. The in-memory
// source is skipped, with the reason in tensors_skipped, when its tensors and a staged copy
// of every parameter would not fit in `memory_available` bytes (0: available_memory_bytes();
// where that is unknown too, it runs).
RefitBenchResult run_refit_bench(Engine& engine, const std::string& path, int reps,
                                 const UpdateOptions& options = {}, uint64_t memory_available = 0);

}  // namespace refit

// Prompt-processing and token-generation speed, measured the way llama.cpp's llama-bench
// measures it (tools/llama-bench/llama-bench.cpp), so the two compare row by row:
//   * random token ids (BOS first, then uniform ids; llama-bench uses std::rand() % n_vocab),
//   * a pp test runs the whole prompt as one batch (llama-bench's default n_batch 2048 covers
//     pp512 in one llama_decode) and keeps only the last position's logits,
//   * a tg test runs n_gen single-token forward passes from an empty cache, feeding a random
//     token each time: no sampling inside the timing,
//   * one untimed warm-up (the whole prompt for pp, one token for tg), then `reps` timed runs,
//     each from an empty cache; a sample's t/s is (n_prompt + n_gen) / its time, and avg/stddev
//     are over the samples' t/s (sample stddev, n - 1),
//   * with a depth (llama-bench's -d), the cache first holds that many prompt tokens (filled
//     once, untimed; each timed run writes only the positions after it), and the test runs
//     from there: "pp512 @ d4096" times a 512-token prompt attending to 4096 earlier ones,
//     "tg16 @ d4096" 16 tokens generated after them.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "benchmarks/memory_bandwidth.h"
#include "models/model.h"

namespace refit {

// What llama-bench reports about the model (llama_model_desc / _size / _n_params).
struct BenchModelInfo {
  std::string filename;
  std::string type;         // "llama 1B F16": architecture, size class, weight dtype or scheme
  uint64_t size_bytes = 0;  // bytes of every stored parameter (codes + scales if quantized)
  uint64_t n_params = 0;    // elements of every stored parameter
  // Bytes one decode step must read: every parameter except the embedding table when the
  // LM head is untied (a lookup reads one row of it). The KV cache is extra and small at tg128.
  uint64_t decode_bytes_per_token = 0;
  DType weight_dtype = DType::f32;
};
BenchModelInfo bench_model_info(const Model& model, const std::string& filename);
// The bytes of decode_bytes_per_token that a step reads in full (every parameter's codes and
// scales, without an untied embedding table), in place: what measure_read_gbs reads to
// bound decode on its own pages.
std::vector<ByteRegion> decode_read_regions(const Model& model);

struct TokenBenchResult {
  int n_prompt = 0;
  int n_gen = 0;
  int n_depth = 0;  // tokens already in the cache when the test starts (llama-bench -d)
  int n_threads = 0;
  int n_batch = 0;        // largest batch one forward pass took (n_prompt, or 1 for tg)
  std::string test_time;  // RFC 3339, UTC, when the test started
  std::vector<uint64_t> samples_ns;
  // Process CPU time (user + system) over the timed runs. On a shared machine the share of
  // the requested threads the test really got, cpu_ns / (sum of samples_ns * n_threads),
  // says how far the figures are from an idle machine's (1.0: the cores were ours).
  uint64_t cpu_ns = 0;
  // The weights' read rate (GB/s) from a pass just before each timed run and one after the
  // last (reps + 1 values; empty unless run_token_bench was given a read pass). On a VM whose
  // memory bandwidth swings within seconds, a run compared with the passes on either side of
  // it sees the same machine; a best-of-many rate taken before and after all runs does not.
  std::vector<double> read_gbs_beside;

  std::string name() const;  // "pp512", "tg128", "pp512+tg128", "tg128 @ d4096", as llama-bench
  double cpu_share() const;
  std::vector<double> samples_ts() const;
  double avg_ts() const;
  double stddev_ts() const;
  uint64_t avg_ns() const;
  uint64_t stddev_ns() const;
  // Median over the timed runs of (t/s x bytes_per_token) / (the mean of the read rates
  // before and after that run): the share of the weights-read limit each run reached at its
  // own moment. 0 without read_gbs_beside.
  double paired_read_fraction(uint64_t bytes_per_token) const;
};

// Runs one test (n_prompt and/or n_gen > 0) on `model` with the pool's current thread count.
// Throws, naming the problem, when run_token_bench could not run this test (checked first
// by it; `refit bench` checks every planned test before printing anything).
void check_token_bench(const Model& model, int n_prompt, int n_gen, int reps, int n_depth = 0);

// `seed` seeds the random token ids; `n_depth` tokens fill the cache first (see above).
// `read_pass`, when given, runs before each timed run and after the last, untimed, and its
// GB/s go to read_gbs_beside. Throws when the test does not fit the context length.
TokenBenchResult run_token_bench(const Model& model, int n_prompt, int n_gen, int reps,
                                 uint32_t seed = 0, int n_depth = 0,
                                 const std::function<double()>& read_pass = {});

// Mean and sample standard deviation as llama-bench computes them (0 for fewer than two).
double bench_mean(const std::vector<double>& v);
double bench_stddev(const std::vector<double>& v);

}  // namespace refit

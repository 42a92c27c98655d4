// Output of `refit bench` in llama-bench's formats, so rows compare one to one:
//   markdown: | model | size | params | backend | threads | test | t/s |
//   json:     an array of objects with llama-bench's field names (build_commit, cpu_info,
//             model_filename, model_type, model_size, model_n_params, n_batch, n_threads,
//             n_prompt, n_gen, test_time, avg_ns, stddev_ns, avg_ts, stddev_ts, samples_ns,
//             samples_ts, ...), plus refit's own fields prefixed "refit_" (the bandwidth limit).
// The bandwidth limit and the refit throughput get their own markdown lines and tables.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "benchmarks/memory_bandwidth.h"
#include "benchmarks/refit_bench.h"
#include "benchmarks/token_bench.h"

namespace refit {

// Decode speed limit from a bandwidth: bandwidth / bytes read per generated token.
double decode_limit_ts(double gbs, uint64_t bytes_per_token);

std::string bench_cpu_info();  // /proc/cpuinfo "model name", or ""

nlohmann::ordered_json token_bench_json(const TokenBenchResult& r, const BenchModelInfo& model,
                                        const std::optional<StreamResult>& stream);
std::string token_bench_markdown_header();
std::string token_bench_markdown_row(const TokenBenchResult& r, const BenchModelInfo& model);
// Lines after the table: the STREAM figures, the decode limit and each tg test's fraction.
std::string bandwidth_markdown(const StreamResult& stream, const BenchModelInfo& model,
                               const std::vector<TokenBenchResult>& results);

std::string refit_bench_markdown(const RefitBenchResult& r);
nlohmann::ordered_json refit_bench_json(const RefitBenchResult& r);

}  // namespace refit

#include "benchmarks/bench_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include "kernels/cpu/cpu_isa.h"

namespace refit {
namespace {

// llama-bench's markdown columns: width > 0 right-aligns, < 0 left-aligns.
struct Column {
  const char* name;
  int width;
};
constexpr Column kColumns[] = {{"model", -30}, {"size", 10}, {"params", 10}, {"backend", -10},
                               {"threads", 7}, {"test", 13}, {"t/s", 20}};

// Pads by display columns (UTF-8 code points), so "±" takes one column whatever fmt's own
// width rules are (llama-bench's printf pads by bytes and adds one column for it).
std::string cell(const std::string& value, int width) {
  size_t columns = 0;
  for (unsigned char c : value) columns += (c & 0xC0) != 0x80;
  const size_t want = static_cast<size_t>(width < 0 ? -width : width);
  const std::string pad(columns < want ? want - columns : 0, ' ');
  return width < 0 ? " " + value + pad + " |" : " " + pad + value + " |";
}

std::string size_str(uint64_t bytes) {
  if (bytes < 1024ull * 1024 * 1024)
    return fmt::format("{:.2f} MiB", double(bytes) / 1024.0 / 1024.0);
  return fmt::format("{:.2f} GiB", double(bytes) / 1024.0 / 1024.0 / 1024.0);
}

std::string params_str(uint64_t n) {
  if (n < 1000ull * 1000 * 1000) return fmt::format("{:.2f} M", double(n) / 1e6);
  return fmt::format("{:.2f} B", double(n) / 1e9);
}

std::string mib(int64_t kb) { return fmt::format("{:.1f} MiB", double(kb) / 1024.0); }

}  // namespace

double decode_limit_ts(double gbs, uint64_t bytes_per_token) {
  return bytes_per_token == 0 ? 0 : gbs * 1e9 / double(bytes_per_token);
}

std::string bench_cpu_info() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  }
  return "";
}

nlohmann::ordered_json token_bench_json(const TokenBenchResult& r, const BenchModelInfo& model,
                                        const std::optional<StreamResult>& stream) {
  nlohmann::ordered_json j;
  j["build_commit"] = "refit";
  j["build_number"] = 0;
  j["cpu_info"] = bench_cpu_info();
  j["gpu_info"] = "";
  j["backends"] = "CPU";
  j["model_filename"] = model.filename;
  j["model_type"] = model.type;
  j["model_size"] = model.size_bytes;
  j["model_n_params"] = model.n_params;
  j["n_batch"] = r.n_batch;
  j["n_ubatch"] = r.n_batch;
  j["n_threads"] = r.n_threads;
  j["type_k"] = "f32";  // refit's KV cache
  j["type_v"] = "f32";
  j["n_gpu_layers"] = 0;
  j["use_mmap"] = true;
  j["embeddings"] = false;
  j["n_prompt"] = r.n_prompt;
  j["n_gen"] = r.n_gen;
  j["n_depth"] = r.n_depth;
  j["test_time"] = r.test_time;
  j["avg_ns"] = r.avg_ns();
  j["stddev_ns"] = r.stddev_ns();
  j["avg_ts"] = r.avg_ts();
  j["stddev_ts"] = r.stddev_ts();
  j["samples_ns"] = r.samples_ns;
  j["samples_ts"] = r.samples_ts();
  j["refit_cpu_isa"] = cpu::cpu_isa_name();
  j["refit_cpu_share"] = r.cpu_share();
  j["refit_decode_bytes_per_token"] = model.decode_bytes_per_token;
  if (stream) {
    j["refit_stream_copy_gbs"] = stream->copy_gbs;
    j["refit_stream_read_gbs"] = stream->read_gbs;
    if (stream->weights_read_gbs > 0) j["refit_weights_read_gbs"] = stream->weights_read_gbs;
    if (r.n_gen > 0 && r.n_prompt == 0 && r.n_depth == 0) {
      const double limit = decode_limit_ts(stream->copy_gbs, model.decode_bytes_per_token);
      j["refit_decode_limit_ts"] = limit;
      j["refit_decode_fraction"] = limit > 0 ? r.avg_ts() / limit : 0.0;
      if (stream->weights_read_gbs > 0) {
        const double own = decode_limit_ts(stream->weights_read_gbs, model.decode_bytes_per_token);
        j["refit_decode_limit_weights_read_ts"] = own;
        j["refit_decode_fraction_weights_read"] = own > 0 ? r.avg_ts() / own : 0.0;
      }
      if (!r.read_gbs_beside.empty()) {
        j["refit_weights_read_beside_gbs"] = r.read_gbs_beside;
        j["refit_decode_fraction_weights_read_paired"] =
            r.paired_read_fraction(model.decode_bytes_per_token);
      }
    }
  }
  return j;
}

std::string token_bench_markdown_header() {
  std::string head = "|", rule = "|";
  for (const Column& c : kColumns) {
    head += cell(c.name, c.width);
    const int w = c.width < 0 ? -c.width : c.width;
    // Appended piece by piece: GCC 12 warns (-Wrestrict, a false positive) on the
    // equivalent chain of operator+ temporaries.
    rule += ' ';
    rule.append(size_t(w - 1), '-');
    rule += c.width > 0 ? ':' : '-';
    rule += " |";
  }
  return head + "\n" + rule + "\n";
}

std::string token_bench_markdown_row(const TokenBenchResult& r, const BenchModelInfo& model) {
  std::string row = "|";
  row += cell(model.type, kColumns[0].width);
  row += cell(size_str(model.size_bytes), kColumns[1].width);
  row += cell(params_str(model.n_params), kColumns[2].width);
  row += cell("CPU", kColumns[3].width);
  row += cell(std::to_string(r.n_threads), kColumns[4].width);
  row += cell(r.name(), kColumns[5].width);
  row += cell(fmt::format("{:.2f} ± {:.2f}", r.avg_ts(), r.stddev_ts()), kColumns[6].width);
  return row + "\n";
}

std::string bandwidth_markdown(const StreamResult& s, const BenchModelInfo& model,
                               const std::vector<TokenBenchResult>& results) {
  std::string out = fmt::format(
      "\nmemory bandwidth (STREAM-style, {} threads, 2 x {} MiB arrays, best of {} passes): copy "
      "{:.2f} GB/s "
      "(read + write bytes), read-only {:.2f} GB/s\n",
      s.threads, s.array_bytes >> 20, s.reps, s.copy_gbs, s.read_gbs);
  const double limit_copy = decode_limit_ts(s.copy_gbs, model.decode_bytes_per_token);
  const double limit_read = decode_limit_ts(s.read_gbs, model.decode_bytes_per_token);
  const double limit_own = decode_limit_ts(s.weights_read_gbs, model.decode_bytes_per_token);
  if (limit_own > 0)
    out += fmt::format(
        "the weights themselves, read-only in place (the pages decode reads, best of {} passes): "
        "{:.2f} GB/s\n",
        s.reps, s.weights_read_gbs);
  out += fmt::format(
      "decode limit = bandwidth / weight bytes per token ({:.3f} GB): {:.2f} t/s (copy), {:.2f} "
      "t/s (read){}\n",
      double(model.decode_bytes_per_token) * 1e-9, limit_copy, limit_read,
      limit_own > 0 ? fmt::format(", {:.2f} t/s (weights read)", limit_own) : std::string());
  std::string shares;
  for (const TokenBenchResult& r : results)
    shares +=
        fmt::format("{}{} {:.0f}%", shares.empty() ? "" : ", ", r.name(), 100.0 * r.cpu_share());
  if (!shares.empty())
    out += fmt::format(
        "CPU share of the timed runs (process CPU time / wall time / threads; 100% = the cores "
        "were ours): {}\n",
        shares);
  for (const TokenBenchResult& r : results) {
    // At a depth a step also reads the cache's keys and values: not in the weights' limit.
    if (r.n_gen == 0 || r.n_prompt != 0 || r.n_depth != 0 || limit_copy <= 0) continue;
    out += fmt::format(
        "{}: {:.2f} t/s = {:.0f}% of the copy limit, {:.0f}% of the read limit{}\n", r.name(),
        r.avg_ts(), 100.0 * r.avg_ts() / limit_copy, 100.0 * r.avg_ts() / limit_read,
        limit_own > 0
            ? fmt::format(", {:.0f}% of the weights-read limit", 100.0 * r.avg_ts() / limit_own)
            : std::string());
    if (!r.read_gbs_beside.empty()) {
      const auto [lo, hi] = std::minmax_element(r.read_gbs_beside.begin(), r.read_gbs_beside.end());
      out += fmt::format(
          "{}: {:.0f}% of the weights read beside each run (median over {} runs of t/s x bytes "
          "per token / the mean of the read passes just before and after it; {:.2f}-{:.2f} "
          "GB/s)\n",
          r.name(), 100.0 * r.paired_read_fraction(model.decode_bytes_per_token),
          r.samples_ns.size(), *lo, *hi);
    }
  }
  return out;
}

std::string refit_bench_markdown(const RefitBenchResult& r) {
  std::string out = fmt::format(
      "refit (weight update) of {}: {:.3f} GB of parameters, largest {:.1f} MiB, {} threads, "
      "finiteness check {}\n\n",
      r.model, double(r.parameter_bytes) * 1e-9, double(r.largest_parameter_bytes) / 1048576.0,
      r.n_threads, r.check_finite ? "on" : "off");
  out +=
      "| source                         |       GB |    GB/s (avg ± sd) |  best GB/s | % of memcpy "
      "| peak extra RSS | peak extra anon |\n";
  out +=
      "| ------------------------------ | -------: | -----------------: | ---------: | ----------: "
      "| -------------: | --------------: |\n";
  for (const RefitBenchSource& s : r.sources) {
    std::string what = s.name == "disk"
                           ? fmt::format("disk ({:.0f}% page-cached)", 100.0 * s.page_cached)
                           : std::string("in-memory tensors");
    out += fmt::format(
        "| {:<30} | {:>8.3f} | {:>18} | {:>10.2f} | {:>10.0f}% | {:>14} | {:>15} |\n", what,
        double(s.bytes) * 1e-9, fmt::format("{:.2f} ± {:.2f}", s.avg_gbs(), s.stddev_gbs()),
        s.best_gbs(), r.memcpy_gbs > 0 ? 100.0 * s.avg_gbs() / r.memcpy_gbs : 0.0,
        mib(s.peak_extra_rss_kb), mib(s.peak_extra_anon_kb));
  }
  out += fmt::format("| {:<30} | {:>8.3f} | {:>18} | {:>10.2f} | {:>10}% | {:>14} | {:>15} |\n",
                     !r.sources.empty() && r.memcpy_bytes < r.sources.front().bytes
                         ? "memcpy (1 thread, fewer bytes)"
                         : "memcpy (1 thread, same bytes)",
                     double(r.memcpy_bytes) * 1e-9, "", r.memcpy_gbs, 100, "", "");
  if (!r.tensors_skipped.empty())
    out += fmt::format("\nin-memory tensors: skipped: {}\n", r.tensors_skipped);
  return out;
}

nlohmann::ordered_json refit_bench_json(const RefitBenchResult& r) {
  nlohmann::ordered_json j;
  j["model"] = r.model;
  j["parameter_bytes"] = r.parameter_bytes;
  j["largest_parameter_bytes"] = r.largest_parameter_bytes;
  j["n_threads"] = r.n_threads;
  j["check_finite"] = r.check_finite;
  j["memcpy_bytes"] = r.memcpy_bytes;
  j["memcpy_gbs"] = r.memcpy_gbs;
  j["sources"] = nlohmann::ordered_json::array();
  for (const RefitBenchSource& s : r.sources) {
    nlohmann::ordered_json o;
    o["source"] = s.name;
    o["detail"] = s.detail;
    o["bytes"] = s.bytes;
    o["samples_ns"] = s.samples_ns;
    o["avg_gbs"] = s.avg_gbs();
    o["stddev_gbs"] = s.stddev_gbs();
    o["best_gbs"] = s.best_gbs();
    o["fraction_of_memcpy"] = r.memcpy_gbs > 0 ? s.avg_gbs() / r.memcpy_gbs : 0.0;
    o["peak_extra_rss_bytes"] = s.peak_extra_rss_kb * 1024;
    o["peak_extra_anon_bytes"] = s.peak_extra_anon_kb * 1024;
    o["peak_rss_reset"] = s.hwm_reset_worked;
    if (s.page_cached >= 0) o["page_cached_fraction"] = s.page_cached;
    j["sources"].push_back(std::move(o));
  }
  if (!r.tensors_skipped.empty()) j["tensors_skipped"] = r.tensors_skipped;
  return j;
}

}  // namespace refit

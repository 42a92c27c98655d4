#include "benchmarks/token_bench.h"

#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <ctime>
#include <numeric>
#include <random>
#include <unordered_set>

#include "core/error.h"
#include "core/thread_pool.h"
#include "models/tensor_table.h"

namespace refit {
namespace {

uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

uint64_t process_cpu_ns() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto ns = [](const timeval& t) {
    return uint64_t(t.tv_sec) * 1'000'000'000ull + uint64_t(t.tv_usec) * 1000ull;
  };
  return ns(u.ru_utime) + ns(u.ru_stime);
}

std::string rfc3339_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%FT%TZ", &tm);
  return buf;
}

// llama.cpp's model-size classes are per architecture and layer count; the parameter count
// rounded to the nearest B (or M below a billion) gives the same label for the common
// shapes (TinyLlama-1.1B: "1B").
std::string size_class(uint64_t n_params) {
  if (n_params >= 1'000'000'000ull) return fmt::format("{}B", std::llround(double(n_params) / 1e9));
  return fmt::format("{}M", std::llround(double(n_params) / 1e6));
}

// llama_model_ftype_name spelling.
std::string ftype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "all F32";
    case DType::f16:
      return "F16";
    case DType::bf16:
      return "BF16";
    default:
      return std::string(dtype_name(t));
  }
}

// A decode step reads every parameter in full except the embedding table when the LM head
// is untied: a lookup reads one row of it.
bool lookup_only(const Model& model, const Parameter& p) {
  return !model.config().tied_embeddings && p.name() == "model.embed_tokens.weight";
}

}  // namespace

std::vector<ByteRegion> decode_read_regions(const Model& model) {
  std::vector<ByteRegion> regions;
  for (const auto& p : model.parameters().all()) {
    if (lookup_only(model, *p) || p->data().device().type != DeviceType::cpu) continue;
    regions.push_back({p->data().raw_data(), p->data().nbytes()});
    if (p->quantized()) regions.push_back({p->scale().raw_data(), p->scale().nbytes()});
  }
  return regions;
}

BenchModelInfo bench_model_info(const Model& model, const std::string& filename) {
  BenchModelInfo info;
  info.filename = filename;
  info.weight_dtype = model.weight_dtype();
  const ModelConfig& c = model.config();
  std::string quant;  // the scheme of the quantized parameters, if any
  // A decode step reads k of a mixture's E experts: their stacked parameters count k/E.
  std::unordered_set<std::string> expert_tensors;
  for (const TensorSpec& s : model_tensor_specs(c))
    if (s.expert >= 0) expert_tensors.insert(s.hf_name);
  for (const auto& p : model.parameters().all()) {
    // A quantized parameter reads its scales beside its codes.
    const uint64_t bytes = p->data().nbytes() + (p->quantized() ? p->scale().nbytes() : 0);
    if (p->quantized() && quant.empty()) quant = p->quantization().name();
    info.size_bytes += bytes;
    info.n_params += static_cast<uint64_t>(p->data().numel());
    const bool expert =
        !p->sub_shards().empty() && expert_tensors.count(p->sub_shards()[0].checkpoint_name);
    info.decode_bytes_per_token +=
        lookup_only(model, *p) ? bytes / static_cast<uint64_t>(std::max<int64_t>(c.vocab_size, 1))
        : expert               ? bytes * static_cast<uint64_t>(c.n_experts_used) /
                       static_cast<uint64_t>(std::max<int64_t>(c.n_experts, 1))
                 : bytes;
  }
  // Quantized at load: the scheme in llama.cpp's spelling ("Q8_0", "MXFP4", "FP8-TENSOR").
  for (char& ch : quant) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  info.type = fmt::format("{} {} {}", architecture_name(c.arch), size_class(info.n_params),
                          quant.empty() ? ftype_name(info.weight_dtype) : quant);
  return info;
}

double bench_mean(const std::vector<double>& v) {
  if (v.empty()) return 0;
  return std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
}

double bench_stddev(const std::vector<double>& v) {
  if (v.size() <= 1) return 0;
  const double mean = bench_mean(v);
  double sq = 0;
  for (double x : v) sq += (x - mean) * (x - mean);
  return std::sqrt(sq / double(v.size() - 1));
}

std::string TokenBenchResult::name() const {
  const std::string depth = n_depth > 0 ? fmt::format(" @ d{}", n_depth) : std::string();
  if (n_prompt > 0 && n_gen == 0) return fmt::format("pp{}{}", n_prompt, depth);
  if (n_gen > 0 && n_prompt == 0) return fmt::format("tg{}{}", n_gen, depth);
  return fmt::format("pp{}+tg{}{}", n_prompt, n_gen, depth);
}

std::vector<double> TokenBenchResult::samples_ts() const {
  std::vector<double> ts;
  for (uint64_t ns : samples_ns) ts.push_back(1e9 * double(n_prompt + n_gen) / double(ns));
  return ts;
}

double TokenBenchResult::cpu_share() const {
  const double wall = double(std::accumulate(samples_ns.begin(), samples_ns.end(), uint64_t{0}));
  return wall > 0 && n_threads > 0 ? double(cpu_ns) / (wall * n_threads) : 0.0;
}

double TokenBenchResult::avg_ts() const { return bench_mean(samples_ts()); }
double TokenBenchResult::stddev_ts() const { return bench_stddev(samples_ts()); }

uint64_t TokenBenchResult::avg_ns() const {
  std::vector<double> v(samples_ns.begin(), samples_ns.end());
  return static_cast<uint64_t>(bench_mean(v));
}

uint64_t TokenBenchResult::stddev_ns() const {
  std::vector<double> v(samples_ns.begin(), samples_ns.end());
  return static_cast<uint64_t>(bench_stddev(v));
}

double TokenBenchResult::paired_read_fraction(uint64_t bytes_per_token) const {
  if (read_gbs_beside.size() != samples_ns.size() + 1 || samples_ns.empty()) return 0.0;
  const std::vector<double> ts = samples_ts();
  std::vector<double> shares;
  for (size_t i = 0; i < ts.size(); ++i) {
    const double read = 0.5 * (read_gbs_beside[i] + read_gbs_beside[i + 1]);
    if (read > 0) shares.push_back(ts[i] * double(bytes_per_token) * 1e-9 / read);
  }
  if (shares.empty()) return 0.0;
  std::sort(shares.begin(), shares.end());
  const size_t n = shares.size();
  return n % 2 ? shares[n / 2] : 0.5 * (shares[n / 2 - 1] + shares[n / 2]);
}

void check_token_bench(const Model& model, int n_prompt, int n_gen, int reps, int n_depth) {
  const ModelConfig& c = model.config();
  if (n_prompt < 0 || n_gen < 0 || n_depth < 0)
    fail("bench: -p, -n and -d must not be negative (got {}, {} and {})", n_prompt, n_gen, n_depth);
  if (n_prompt == 0 && n_gen == 0) fail("bench: a test needs -p or -n above 0");
  if (reps < 1) fail("bench: -r must be at least 1 (got {})", reps);
  if (int64_t{n_depth} + n_prompt + n_gen > c.max_seq_len)
    fail("bench: {} prompt + {} generated tokens{} exceed the model's context length {}", n_prompt,
         n_gen, n_depth > 0 ? fmt::format(" after a depth of {}", n_depth) : std::string(),
         c.max_seq_len);
}

TokenBenchResult run_token_bench(const Model& model, int n_prompt, int n_gen, int reps,
                                 uint32_t seed, int n_depth,
                                 const std::function<double()>& read_pass) {
  check_token_bench(model, n_prompt, n_gen, reps, n_depth);
  const ModelConfig& c = model.config();
  TokenBenchResult r;
  r.n_prompt = n_prompt;
  r.n_gen = n_gen;
  r.n_depth = n_depth;
  r.n_threads = num_threads();
  r.n_batch = n_prompt > 0 ? n_prompt : 1;
  r.test_time = rfc3339_now();

  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> random_id(0, static_cast<int32_t>(c.vocab_size - 1));
  const int32_t bos = (c.bos_id >= 0 && c.bos_id < c.vocab_size) ? c.bos_id : random_id(rng);
  KvCache cache = model.make_cache(n_depth + n_prompt + n_gen);

  // Each run starts where the depth ends: position n_depth onwards overwrites whatever an
  // earlier run left, and attention only reads positions below the current one, so the
  // depth's entries stay as the one untimed fill left them.
  std::vector<int32_t> prompt(static_cast<size_t>(n_prompt));
  auto run_prompt = [&](int64_t start_pos, int n) {
    prompt.resize(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) prompt[size_t(i)] = i == 0 ? bos : random_id(rng);
    Tensor logits = model.forward(prompt, start_pos, cache, /*all_logits=*/false);
    (void)logits;
  };
  auto run_gen = [&](int64_t start_pos, int n) {
    int32_t token = bos;
    for (int i = 0; i < n; ++i) {
      int32_t one[1] = {token};
      Tensor logits = model.forward(one, start_pos + i, cache, /*all_logits=*/false);
      (void)logits;
      token = random_id(rng);
    }
  };

  if (n_depth > 0) run_prompt(0, n_depth);
  if (n_prompt > 0) run_prompt(n_depth, n_prompt);  // warm-up, as llama-bench: the whole prompt
  if (n_gen > 0) run_gen(n_depth, 1);               // and one generated token
  // The read passes run between the timed runs; their CPU time is taken out of cpu_ns.
  uint64_t cpu_ns = 0;
  for (int rep = 0; rep < reps; ++rep) {
    if (read_pass) r.read_gbs_beside.push_back(read_pass());
    const uint64_t cpu_start = process_cpu_ns();
    const uint64_t start = now_ns();
    if (n_prompt > 0) run_prompt(n_depth, n_prompt);
    if (n_gen > 0) run_gen(n_depth + n_prompt, n_gen);
    r.samples_ns.push_back(now_ns() - start);
    cpu_ns += process_cpu_ns() - cpu_start;
  }
  if (read_pass) r.read_gbs_beside.push_back(read_pass());
  r.cpu_ns = cpu_ns;
  return r;
}

}  // namespace refit

// `refit bench` machinery: llama-bench-compatible timing and output (statistics, test
// names, markdown columns, JSON field names), the STREAM-style bandwidth, resident-memory
// readings, and the refit-throughput benchmark on a tiny synthetic checkpoint.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "benchmarks/bench_report.h"
#include "benchmarks/memory_bandwidth.h"
#include "benchmarks/refit_bench.h"
#include "benchmarks/token_bench.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "formats_test_util.h"
#include "kernels/cpu/stream_read.h"
#include "models/decoder_model.h"
#include "models/quantize_model.h"
#include "synthetic/demo_model.h"
#include "synthetic/synthetic_checkpoint.h"
#include "synthetic/synthetic_model.h"

namespace refit {
namespace {

using testing::TempDir;

// stdout only, or stdout and stderr together (for the error messages).
std::pair<int, std::string> run_cli(const std::string& args, bool with_stderr = false) {
  std::string out;
  FILE* p = ::popen(
      (std::string(REFIT_BINARY) + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null")).c_str(),
      "r");
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int rc = ::pclose(p);
  return {WEXITSTATUS(rc), out};
}

TEST(BenchStats, mean_and_sample_stddev_as_llama_bench) {
  EXPECT_DOUBLE_EQ(bench_mean({1, 2, 3, 4}), 2.5);
  EXPECT_NEAR(bench_stddev({1, 2, 3, 4}), std::sqrt(5.0 / 3.0), 1e-12);
  EXPECT_EQ(bench_stddev({7}), 0.0);
  EXPECT_EQ(bench_mean({}), 0.0);
}

TEST(BenchStats, tokens_per_second_counts_prompt_and_generated_tokens) {
  TokenBenchResult r;
  r.n_prompt = 512;
  r.samples_ns = {1'000'000'000, 2'000'000'000};
  EXPECT_EQ(r.name(), "pp512");
  ASSERT_EQ(r.samples_ts().size(), 2u);
  EXPECT_DOUBLE_EQ(r.samples_ts()[0], 512.0);
  EXPECT_DOUBLE_EQ(r.samples_ts()[1], 256.0);
  EXPECT_DOUBLE_EQ(r.avg_ts(), 384.0);
  EXPECT_EQ(r.avg_ns(), 1'500'000'000u);
  r.n_prompt = 0;
  r.n_gen = 128;
  EXPECT_EQ(r.name(), "tg128");
  r.n_prompt = 16;
  EXPECT_EQ(r.name(), "pp16+tg128");
  r.n_depth = 4096;  // llama-bench's spelling of a test at a depth
  EXPECT_EQ(r.name(), "pp16+tg128 @ d4096");
  r.n_prompt = 0;
  EXPECT_EQ(r.name(), "tg128 @ d4096");
}

TEST(TokenBench, runs_the_requested_repetitions_on_the_demo_model) {
  DemoModel demo = make_demo_model();
  TokenBenchResult pp = run_token_bench(*demo.model, 8, 0, 3);
  EXPECT_EQ(pp.samples_ns.size(), 3u);
  EXPECT_EQ(pp.name(), "pp8");
  EXPECT_EQ(pp.n_batch, 8);
  EXPECT_EQ(pp.n_threads, num_threads());
  EXPECT_GT(pp.avg_ts(), 0.0);
  EXPECT_GT(pp.cpu_share(), 0.0);
  TokenBenchResult tg = run_token_bench(*demo.model, 0, 4, 2);
  EXPECT_EQ(tg.samples_ns.size(), 2u);
  EXPECT_EQ(tg.n_batch, 1);
  EXPECT_FALSE(tg.test_time.empty());
  EXPECT_EQ(tg.test_time.back(), 'Z');
}

// The read pass runs once before each timed run and once after the last, and a run's share
// is taken against the mean of the two passes beside it.
TEST(TokenBench, read_passes_beside_each_run_and_their_paired_share) {
  DemoModel demo = make_demo_model();
  double next = 10.0;
  int calls = 0;
  TokenBenchResult tg = run_token_bench(*demo.model, 0, 4, 3, 0, 0, [&] {
    ++calls;
    return next += 10.0;
  });
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(tg.read_gbs_beside, (std::vector<double>{20.0, 30.0, 40.0, 50.0}));
  EXPECT_EQ(tg.samples_ns.size(), 3u);
  EXPECT_TRUE(run_token_bench(*demo.model, 0, 2, 2).read_gbs_beside.empty());

  TokenBenchResult r;
  r.n_gen = 10;
  // 10 t/s, 5 t/s and 20 t/s at 1 GB a token: 10, 5 and 20 GB/s read by decode, against
  // passes of 20, 10, 10, 30 GB/s: run means 15, 10 and 20 -> shares 2/3, 1/2, 1.
  r.samples_ns = {1'000'000'000, 2'000'000'000, 500'000'000};
  EXPECT_DOUBLE_EQ(r.paired_read_fraction(1'000'000'000), 0.0);  // no passes: no share
  r.read_gbs_beside = {20.0, 10.0, 10.0, 30.0};
  EXPECT_DOUBLE_EQ(r.paired_read_fraction(1'000'000'000), 2.0 / 3.0);
  r.read_gbs_beside.pop_back();  // not one pass more than runs: not paired
  EXPECT_DOUBLE_EQ(r.paired_read_fraction(1'000'000'000), 0.0);
}

TEST(TokenBench, runs_after_a_depth_that_fills_the_cache_first) {
  DemoModel demo = make_demo_model();
  const int ctx = static_cast<int>(demo.model->config().max_seq_len);
  // The depth and the test together may fill the whole context, not one position more.
  TokenBenchResult pp = run_token_bench(*demo.model, 8, 0, 2, 0, ctx - 8);
  EXPECT_EQ(pp.n_depth, ctx - 8);
  EXPECT_EQ(pp.name(), fmt::format("pp8 @ d{}", ctx - 8));
  EXPECT_EQ(pp.samples_ns.size(), 2u);
  TokenBenchResult tg = run_token_bench(*demo.model, 0, 3, 1, 0, ctx - 3);
  EXPECT_EQ(tg.name(), fmt::format("tg3 @ d{}", ctx - 3));
  EXPECT_THROW(run_token_bench(*demo.model, 8, 0, 1, 0, ctx - 7), Error);
  EXPECT_THROW(run_token_bench(*demo.model, 0, 3, 1, 0, ctx - 2), Error);
  EXPECT_THROW(run_token_bench(*demo.model, 8, 0, 1, 0, -1), Error);
}

TEST(TokenBench, refuses_tests_that_cannot_run) {
  DemoModel demo = make_demo_model();
  const int64_t ctx = demo.model->config().max_seq_len;
  EXPECT_THROW(run_token_bench(*demo.model, static_cast<int>(ctx), 1, 1), Error);
  EXPECT_THROW(run_token_bench(*demo.model, 0, 0, 1), Error);
  EXPECT_THROW(run_token_bench(*demo.model, 4, 0, 0), Error);
  EXPECT_THROW(run_token_bench(*demo.model, -1, 4, 1), Error);
}

TEST(TokenBench, model_info_sizes_and_decode_bytes) {
  DemoModel demo = make_demo_model();  // tied: the embedding is the LM head, read in full
  const BenchModelInfo info = bench_model_info(*demo.model, "demo");
  EXPECT_EQ(info.size_bytes, demo.model->parameters().total_bytes());
  EXPECT_EQ(info.decode_bytes_per_token, info.size_bytes);
  EXPECT_EQ(info.type.rfind("llama ", 0), 0u) << info.type;

  ModelConfig untied = synthetic_preset(Architecture::llama, "tiny");
  untied.tied_embeddings = false;
  DecoderModel model(untied, DType::f16);
  const BenchModelInfo u = bench_model_info(model, "untied");
  const uint64_t embed = model.parameters().get("model.embed_tokens.weight").data().nbytes();
  EXPECT_EQ(u.decode_bytes_per_token, u.size_bytes - embed + embed / uint64_t(untied.vocab_size));
  EXPECT_NE(u.type.find(" F16"), std::string::npos) << u.type;
}

TEST(TokenBench, quantized_model_counts_scales_and_names_the_scheme) {
  ModelConfig config = synthetic_preset(Architecture::llama, "tiny");
  DecoderModel model(config, DType::bf16);
  const uint64_t float_bytes = bench_model_info(model, "bf16").size_bytes;
  quantize_linear_weights(model, parse_quant_scheme("q8_0"));
  const BenchModelInfo q = bench_model_info(model, "q8_0");
  uint64_t codes = 0, scales = 0;
  for (const auto& p : model.parameters().all()) {
    codes += p->data().nbytes();
    if (p->quantized()) scales += p->scale().nbytes();
  }
  ASSERT_GT(scales, 0u);
  EXPECT_EQ(q.size_bytes, codes + scales);  // an f16 scale per 32 codes is read too
  EXPECT_LT(q.size_bytes, float_bytes);
  EXPECT_NE(q.type.find(" Q8_0"), std::string::npos) << q.type;
}

TEST(BenchReport, markdown_header_is_llama_benchs) {
  EXPECT_EQ(token_bench_markdown_header(),
            "| model                          |       size |     params | backend    | threads |   "
            "       test |"
            "                  t/s |\n"
            "| ------------------------------ | ---------: | ---------: | ---------- | ------: | "
            "------------: |"
            " -------------------: |\n");
}

TEST(BenchReport, markdown_row_and_json_fields) {
  BenchModelInfo info;
  info.type = "llama 1B F16";
  info.size_bytes = 2200000000ull;
  info.n_params = 1100000000ull;
  info.decode_bytes_per_token = 2000000000ull;
  info.filename = "/tmp/m.gguf";
  TokenBenchResult r;
  r.n_gen = 128;
  r.n_threads = 2;
  r.n_batch = 1;
  r.samples_ns = {16'000'000'000, 16'000'000'000};
  const std::string row = token_bench_markdown_row(r, info);
  EXPECT_EQ(row,
            "| llama 1B F16                   |   2.05 GiB |     1.10 B | CPU        |       2 |   "
            "      tg128 |"
            "          8.00 ± 0.00 |\n");

  StreamResult s;
  s.copy_gbs = 20.0;
  s.read_gbs = 25.0;
  const nlohmann::ordered_json j = token_bench_json(r, info, s);
  for (const char* key :
       {"build_commit",   "build_number", "cpu_info",   "gpu_info",       "backends",
        "model_filename", "model_type",   "model_size", "model_n_params", "n_batch",
        "n_ubatch",       "n_threads",    "type_k",     "type_v",         "n_gpu_layers",
        "use_mmap",       "embeddings",   "n_prompt",   "n_gen",          "test_time",
        "avg_ns",         "stddev_ns",    "avg_ts",     "stddev_ts",      "samples_ns",
        "samples_ts"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["n_gen"], 128);
  EXPECT_EQ(j["model_size"], 2200000000ull);
  EXPECT_DOUBLE_EQ(j["avg_ts"].get<double>(), 8.0);
  EXPECT_DOUBLE_EQ(j["refit_decode_limit_ts"].get<double>(), 10.0);  // 20 GB/s / 2 GB
  EXPECT_DOUBLE_EQ(j["refit_decode_fraction"].get<double>(), 0.8);
  const std::string lines = bandwidth_markdown(s, info, {r});
  EXPECT_NE(lines.find("tg128: 8.00 t/s = 80% of the copy limit"), std::string::npos) << lines;
  EXPECT_EQ(lines.find("weights"), std::string::npos) << lines;  // not measured: not reported
  EXPECT_FALSE(j.contains("refit_decode_fraction_weights_read"));

  // With the weights' own read rate: its limit and each decode's fraction of it.
  s.weights_read_gbs = 32.0;
  const nlohmann::ordered_json own = token_bench_json(r, info, s);
  EXPECT_DOUBLE_EQ(own["refit_weights_read_gbs"].get<double>(), 32.0);
  EXPECT_DOUBLE_EQ(own["refit_decode_limit_weights_read_ts"].get<double>(),
                   16.0);  // 32 GB/s / 2 GB
  EXPECT_DOUBLE_EQ(own["refit_decode_fraction_weights_read"].get<double>(), 0.5);
  const std::string own_lines = bandwidth_markdown(s, info, {r});
  EXPECT_NE(own_lines.find("16.00 t/s (weights read)"), std::string::npos) << own_lines;
  EXPECT_NE(
      own_lines.find("80% of the copy limit, 64% of the read limit, 50% of the weights-read limit"),
      std::string::npos)
      << own_lines;
  EXPECT_EQ(own_lines.find("beside each run"), std::string::npos) << own_lines;
  EXPECT_FALSE(own.contains("refit_decode_fraction_weights_read_paired"));

  // With a read pass beside each run: 8 t/s x 2 GB = 16 GB/s against passes of 20 and 12,
  // then 12 and 20 GB/s (means 16 and 16): 100% each.
  r.read_gbs_beside = {20.0, 12.0, 20.0};
  const nlohmann::ordered_json paired = token_bench_json(r, info, s);
  EXPECT_DOUBLE_EQ(paired["refit_decode_fraction_weights_read_paired"].get<double>(), 1.0);
  EXPECT_EQ(paired["refit_weights_read_beside_gbs"].size(), 3u);
  const std::string paired_lines = bandwidth_markdown(s, info, {r});
  EXPECT_NE(paired_lines.find("tg128: 100% of the weights read beside each run (median over 2 "
                              "runs"),
            std::string::npos)
      << paired_lines;
  EXPECT_NE(paired_lines.find("12.00-20.00 GB/s"), std::string::npos) << paired_lines;
}

TEST(MemoryBandwidth, stream_and_memcpy_report_positive_rates) {
  const StreamResult s = measure_stream(int64_t{16} << 20, 2);
  EXPECT_GT(s.copy_gbs, 0.0);
  EXPECT_GT(s.read_gbs, 0.0);
  EXPECT_EQ(s.threads, num_threads());
  EXPECT_GT(measure_memcpy_gbs(size_t{8} << 20, 2), 0.0);
}

// Both read patterns behind the read limit touch every byte: the same checksum, and a
// change to any one byte (first, last, a stream boundary) shows in both.
TEST(MemoryBandwidth, read_sweeps_cover_every_byte) {
  std::vector<uint8_t> buf(size_t{1} << 20);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<uint8_t>(i * 131 + i / 977);
  const uint64_t one = cpu::read_sweep(buf.data(), buf.size());
  EXPECT_EQ(cpu::read_sweep_streams(buf.data(), buf.size()), one);
  for (size_t at : {size_t{0}, buf.size() / 16, buf.size() / 16 - 1, buf.size() - 1}) {
    buf[at] ^= 1;
    EXPECT_NE(cpu::read_sweep(buf.data(), buf.size()), one) << at;
    EXPECT_NE(cpu::read_sweep_streams(buf.data(), buf.size()), one) << at;
    buf[at] ^= 1;
  }
  // A length that is not a multiple of the stream layout: the tail bytes still count.
  const size_t odd = buf.size() - 37;
  const uint64_t before = cpu::read_sweep_streams(buf.data(), odd);
  buf[odd - 1] ^= 0x10;
  EXPECT_NE(cpu::read_sweep_streams(buf.data(), odd), before);
}

// The weights' read pass covers exactly the bytes decode reads in full: every parameter's
// codes and scales, without an untied embedding table (of which decode reads one row).
TEST(MemoryBandwidth, decode_read_regions_are_the_decode_bytes_read_in_full) {
  ModelConfig config = synthetic_preset(Architecture::llama, "tiny");
  config.tied_embeddings = false;
  DecoderModel model(config, DType::bf16);
  quantize_linear_weights(model, parse_quant_scheme("q8_0"));
  const BenchModelInfo info = bench_model_info(model, "q8_0");
  const std::vector<ByteRegion> regions = decode_read_regions(model);
  uint64_t bytes = 0;
  for (const ByteRegion& r : regions) bytes += r.bytes;
  const uint64_t embed = model.parameters().get("model.embed_tokens.weight").data().nbytes();
  EXPECT_EQ(bytes, info.decode_bytes_per_token - embed / uint64_t(config.vocab_size));
  const Parameter& q = model.parameters().get("model.layers.0.self_attn.o_proj.weight");
  ASSERT_TRUE(q.quantized());
  int found = 0;
  for (const ByteRegion& r : regions)
    found += (r.data == q.data().raw_data()) + (r.data == q.scale().raw_data());
  EXPECT_EQ(found, 2);  // read in place: its codes and its scales

  EXPECT_GT(measure_read_gbs(regions, 1), 0.0);
  EXPECT_EQ(measure_read_gbs({}, 1), 0.0);
}

TEST(MemoryBandwidth, stream_arrays_follow_streams_four_times_the_cache_rule) {
  const int64_t bytes = stream_array_bytes();
  EXPECT_GE(bytes, int64_t{256} << 20);
  EXPECT_LE(bytes, int64_t{2} << 30);
}

TEST(MemoryBandwidth, resident_memory_sees_a_touched_allocation) {
  const ProcMemory before = read_proc_memory();
  ASSERT_GT(before.rss_kb, 0);
  PeakMemorySampler sampler(100);
  {
    std::vector<char> block(size_t{64} << 20);
    std::memset(block.data(), 1, block.size());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let the sampler see it
    EXPECT_GE(read_proc_memory().rss_anon_kb - before.rss_anon_kb, 60 * 1024);
  }
  sampler.stop();
  EXPECT_GE(sampler.peak_anon_kb() - before.rss_anon_kb, 60 * 1024);
}

TEST(MemoryBandwidth, page_cache_warming_reads_every_file) {
  TempDir dir;
  dir.write("a.bin", std::string(100000, 'a'));
  dir.write("b.bin", std::string(5000, 'b'));
  EXPECT_EQ(warm_page_cache(dir.path.string()), 105000u);
  EXPECT_DOUBLE_EQ(page_cached_fraction(dir.path.string()), 1.0);
  EXPECT_EQ(page_cached_fraction(""), 0.0);
}

TEST(RefitBench, measures_both_sources_and_leaves_the_target_weights) {
  TempDir dir;
  const ModelConfig config = synthetic_preset(Architecture::llama, "tiny");
  SyntheticCheckpointOptions a, b;
  a.weight_dtype = b.weight_dtype = DType::f16;
  a.seed = 1;
  b.seed = 2;
  write_synthetic_hf(dir.file("a"), config, a);
  write_synthetic_hf(dir.file("b"), config, b);
  EngineOptions options;
  options.model_path = dir.file("a");
  Engine engine(options);
  const uint64_t version = engine.weight_version();

  const RefitBenchResult r = run_refit_bench(engine, dir.file("b"), 2);
  ASSERT_EQ(r.sources.size(), 2u);
  EXPECT_EQ(r.sources[0].name, "disk");
  EXPECT_EQ(r.sources[1].name, "tensors");
  EXPECT_DOUBLE_EQ(r.sources[0].page_cached, 1.0);
  for (const RefitBenchSource& s : r.sources) {
    EXPECT_EQ(s.samples_ns.size(), 2u);
    EXPECT_EQ(s.bytes, r.sources[0].bytes);
    EXPECT_GT(s.avg_gbs(), 0.0);
  }
  EXPECT_EQ(r.memcpy_bytes, r.sources[0].bytes);
  EXPECT_GT(r.memcpy_gbs, 0.0);
  EXPECT_EQ(engine.weight_version(), version + 2 * 3);  // warm-up + 2 timed, per source

  // The engine now holds b's weights: equal to a fresh engine on b.
  EngineOptions fresh_options;
  fresh_options.model_path = dir.file("b");
  Engine fresh(fresh_options);
  const auto got = engine.named_parameters(), want = fresh.named_parameters();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(
        std::memcmp(got[i].tensor.raw_data(), want[i].tensor.raw_data(), got[i].tensor.nbytes()), 0)
        << got[i].name;

  const std::string md = refit_bench_markdown(r);
  EXPECT_NE(md.find("memcpy (1 thread, same bytes)"), std::string::npos) << md;
  const auto j = refit_bench_json(r);
  EXPECT_EQ(j["sources"].size(), 2u);
}

// The in-memory source's size is known before its tensors are read (a quantized file's come
// out as f32), and where they and a staged copy of the parameters would not fit, it is
// skipped with the sizes said, instead of the run dying of the OOM killer.
TEST(RefitBench, sizes_the_in_memory_tensors_first_and_skips_them_when_they_do_not_fit) {
  TempDir dir;
  const ModelConfig config = synthetic_preset(Architecture::llama, "tiny");
  SyntheticCheckpointOptions q8;
  q8.gguf_q8_0 = true;
  write_synthetic_gguf(dir.file("q8.gguf"), config, q8);
  EngineOptions options;
  options.model_path = dir.file("q8.gguf");
  Engine engine(options);
  uint64_t held = 0;
  for (const auto& [name, t] : load_update_tensors(engine, dir.file("q8.gguf"))) {
    EXPECT_EQ(t.dtype(), t.dim() == 2 ? DType::f32 : t.dtype()) << name;
    held += t.nbytes();
  }
  EXPECT_EQ(update_tensor_bytes(engine, dir.file("q8.gguf")), held);

  const RefitBenchResult r = run_refit_bench(engine, dir.file("q8.gguf"), 1, {}, held);
  ASSERT_EQ(r.sources.size(), 1u);  // held bytes leave no room for the staged parameters
  EXPECT_EQ(r.sources[0].name, "disk");
  EXPECT_NE(r.tensors_skipped.find(fmt::format("{:.1f} GB", double(held) * 1e-9)),
            std::string::npos)
      << r.tensors_skipped;
  EXPECT_NE(refit_bench_markdown(r).find("in-memory tensors: skipped: its tensors would take"),
            std::string::npos);
  EXPECT_EQ(refit_bench_json(r)["tensors_skipped"], r.tensors_skipped);

  const RefitBenchResult room =
      run_refit_bench(engine, dir.file("q8.gguf"), 1, {}, held + r.parameter_bytes);
  EXPECT_EQ(room.sources.size(), 2u);
  EXPECT_TRUE(room.tensors_skipped.empty());
  EXPECT_GT(available_memory_bytes(), 0u);
}

TEST(BenchCli, json_rows_use_llama_bench_field_names) {
  TempDir dir;
  const std::string model = dir.file("tiny.gguf");
  auto [rc, text] = run_cli("synth --preset tiny --dtype f16 --format gguf -q -o '" + model + "'");
  ASSERT_EQ(rc, 0) << text;
  std::tie(rc, text) =
      run_cli("bench -m '" + model + "' -p 8 -n 4 -r 2 -t 1 -o json --no-bandwidth");
  ASSERT_EQ(rc, 0) << text;
  const auto rows = nlohmann::json::parse(text);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["n_prompt"], 8);
  EXPECT_EQ(rows[0]["n_gen"], 0);
  EXPECT_EQ(rows[1]["n_prompt"], 0);
  EXPECT_EQ(rows[1]["n_gen"], 4);
  for (const auto& row : rows) {
    EXPECT_EQ(row["n_threads"], 1);
    EXPECT_EQ(row["samples_ns"].size(), 2u);
    EXPECT_EQ(row["model_filename"], model);
    EXPECT_EQ(row["model_type"].get<std::string>().rfind("llama ", 0), 0u);
  }
  std::tie(rc, text) = run_cli("bench -m '" + model + "' -p 8 -n 0 -r 1 -o md --no-bandwidth");
  ASSERT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("|           pp8 |"), std::string::npos) << text;
  std::tie(rc, text) = run_cli("bench -m '" + model + "' -p 0 -n 0");
  EXPECT_NE(rc, 0);
}

TEST(BenchCli, depth_list_runs_every_test_at_each_depth_of_a_longer_context) {
  TempDir dir;
  const std::string model = dir.file("tiny-long.gguf");
  // synth --context: a checkpoint declaring a longer context, for depths past 2048.
  auto [rc, text] =
      run_cli("synth --preset tiny --dtype f16 --context 2304 --format gguf -q -o '" + model + "'");
  ASSERT_EQ(rc, 0) << text;
  std::tie(rc, text) =
      run_cli("bench -m '" + model + "' -p 8 -n 2 -d 0,2200 -r 1 -t 1 -o json --no-bandwidth");
  ASSERT_EQ(rc, 0) << text;
  const auto rows = nlohmann::json::parse(text);
  ASSERT_EQ(rows.size(), 4u);
  const int depths[] = {0, 0, 2200, 2200}, prompts[] = {8, 0, 8, 0};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(rows[i]["n_depth"], depths[i]) << i;
    EXPECT_EQ(rows[i]["n_prompt"], prompts[i]) << i;
  }
  std::tie(rc, text) = run_cli("bench -m '" + model + "' -p 8 -n 0 -d 2200 -r 1 --no-bandwidth");
  ASSERT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("|   pp8 @ d2200 |"), std::string::npos) << text;
  // Refused before any output, naming the depth and the context.
  std::tie(rc, text) =
      run_cli("bench -m '" + model + "' -p 8 -n 0 -d 0,2200 --pg 100,8 -r 1 --no-bandwidth", true);
  EXPECT_NE(rc, 0);
  EXPECT_EQ(text.find("| model"), std::string::npos) << text;
  EXPECT_NE(text.find("100 prompt + 8 generated tokens after a depth of 2200 exceed the model's "
                      "context length 2304"),
            std::string::npos)
      << text;
  std::tie(rc, text) = run_cli("bench -m '" + model + "' -p 8 -d -5", true);
  EXPECT_NE(rc, 0);
  EXPECT_NE(text.find("-d -5 is negative"), std::string::npos) << text;
}

}  // namespace
}  // namespace refit

// Checkpoint files that another process truncates, rewrites or replaces while refit reads
// them: no read crashes the process (a truncated mapping used to end it with SIGBUS), every
// read that saw a change is refused naming the file, and a refit either commits one whole
// checkpoint or leaves the engine bitwise as it was.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "formats/checkpoint.h"
#include "formats_test_util.h"
#include "runtime/engine.h"
#include "server/shm_segment.h"
#include "synthetic/synthetic_checkpoint.h"
#include "synthetic/synthetic_model.h"

namespace refit {
namespace {

namespace fs = std::filesystem;
using testing::expect_format_error;
using testing::TempDir;

constexpr size_t kFileBytes = size_t{1} << 20;

std::string pattern(size_t n, uint8_t seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + seed) % 251 + 1);
  return s;
}

std::string contents(const MappedFile& f) {
  return std::string(reinterpret_cast<const char*>(f.data()), f.size());
}

// What the opened-file hook does to the next file whose path ends with `suffix`, once.
struct HookAction {
  std::string suffix;
  enum { truncate_half, replace_by_rename } what = truncate_half;
  std::string replacement;  // for replace_by_rename: a file moved over the opened one
  int fired = 0;
};
HookAction g_action;

void on_file_opened(const std::string& path) {
  if (g_action.fired || !path.ends_with(g_action.suffix)) return;
  ++g_action.fired;
  if (g_action.what == HookAction::truncate_half)
    ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(fs::file_size(path) / 2)), 0);
  else
    fs::rename(g_action.replacement, path);
}

// Installs the hook for one test and removes it however the test ends.
struct ChangeFileWhenOpened {
  // Truncates the file to half its size.
  explicit ChangeFileWhenOpened(std::string suffix) {
    install({std::move(suffix), HookAction::truncate_half, "", 0});
  }
  // Moves `replacement` over the file.
  ChangeFileWhenOpened(std::string suffix, std::string replacement) {
    install({std::move(suffix), HookAction::replace_by_rename, std::move(replacement), 0});
  }
  static void install(HookAction action) {
    g_action = std::move(action);
    MappedFile::set_opened_hook_for_testing(on_file_opened);
  }
  ~ChangeFileWhenOpened() { MappedFile::set_opened_hook_for_testing(nullptr); }
};

TEST(FileChange, mapped_read_of_a_truncated_file_sees_zeros_and_is_refused) {
  TempDir dir;
  const std::string path = dir.write("weights.bin", pattern(kFileBytes, 7));
  auto file = MappedFile::open(path);
  file->check_unchanged();
  ASSERT_EQ(::truncate(path.c_str(), 4096), 0);
  // Every byte is readable: the pages past the new end read as zeros instead of SIGBUS.
  const std::string seen = contents(*file);
  EXPECT_EQ(seen.substr(0, 4096), pattern(kFileBytes, 7).substr(0, 4096));
  EXPECT_EQ(seen.substr(4096), std::string(kFileBytes - 4096, '\0'));
  expect_format_error([&] { file->check_unchanged(); },
                      {path, "changed while it was read", "truncated from 1048576 to 4096 bytes"});
}

TEST(FileChange, mapped_file_shrunk_before_it_is_read_is_refused) {
  TempDir dir;
  const std::string path = dir.write("weights.bin", pattern(kFileBytes, 7));
  auto file = MappedFile::open(path);
  ASSERT_EQ(::truncate(path.c_str(), 100000), 0);
  // A reader that stays before the new end never faults: the size still tells.
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(file->data()), 100000),
            pattern(kFileBytes, 7).substr(0, 100000));
  expect_format_error([&] { file->check_unchanged(); },
                      {path, "changed while it was read", "1048576 bytes when opened, 100000 now"});
}

TEST(FileChange, a_rewrite_in_place_is_refused) {
  TempDir dir;
  const std::string path = dir.write("weights.bin", pattern(kFileBytes, 7));
  auto file = MappedFile::open(path);
  {
    std::fstream out(path, std::ios::in | std::ios::out | std::ios::binary);
    const std::string other = pattern(kFileBytes, 9);
    out.write(other.data(), static_cast<std::streamsize>(other.size()));
  }
  // A timestamp clearly apart from the first, whatever the file system's clock granularity.
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  struct timespec times[2] = {st.st_atim, st.st_mtim};
  times[1].tv_sec += 5;
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  expect_format_error([&] { file->check_unchanged(); },
                      {path, "changed while it was read", "modified in place"});
}

TEST(FileChange, a_copy_is_a_snapshot_that_later_changes_cannot_reach) {
  TempDir dir;
  const std::string original = pattern(kFileBytes, 7);
  const std::string path = dir.write("weights.bin", original);
  auto file = MappedFile::open(path, FileAccess::copied);
  ASSERT_EQ(::truncate(path.c_str(), 0), 0);
  dir.write("weights.bin", pattern(kFileBytes / 2, 9));
  EXPECT_EQ(contents(*file), original);
  file->check_unchanged();  // the copy was checked whole when it was made
}

TEST(FileChange, a_file_truncated_while_it_is_copied_is_refused) {
  TempDir dir;
  const std::string path = dir.write("weights.bin", pattern(kFileBytes, 7));
  ChangeFileWhenOpened change("weights.bin");
  expect_format_error([&] { MappedFile::open(path, FileAccess::copied); },
                      {path, "changed while it was read", "1048576 bytes when opened"});
  EXPECT_EQ(g_action.fired, 1);
}

// Files of more than one 64 MiB chunk are copied by several threads, each its own chunks:
// the copy is still the file byte for byte, and a truncation is still refused.
constexpr size_t kLargeFileBytes = (size_t{2} << 26) + 4099;

TEST(FileChange, a_copy_read_in_chunks_by_several_threads_is_the_file) {
  TempDir dir;
  const std::string original = pattern(kLargeFileBytes, 3);
  const std::string path = dir.write("weights.bin", original);
  auto file = MappedFile::open(path, FileAccess::copied);
  EXPECT_TRUE(contents(*file) == original);
}

TEST(FileChange, a_large_file_truncated_while_it_is_copied_is_refused) {
  TempDir dir;
  const std::string path = dir.write("weights.bin", pattern(kLargeFileBytes, 3));
  ChangeFileWhenOpened change("weights.bin");
  expect_format_error([&] { MappedFile::open(path, FileAccess::copied); },
                      {path, "changed while it was read",
                       std::to_string(kLargeFileBytes) + " bytes when opened, " +
                           std::to_string(kLargeFileBytes / 2) + " now"});
  EXPECT_EQ(g_action.fired, 1);
}

TEST(FileChange, a_file_replaced_by_rename_during_a_read_keeps_its_old_bytes_whole) {
  TempDir dir;
  const std::string original = pattern(kFileBytes, 7);
  const std::string path = dir.write("weights.bin", original);
  auto file = MappedFile::open(path);
  std::string seen(reinterpret_cast<const char*>(file->data()), kFileBytes / 2);
  fs::rename(dir.write("next.bin", pattern(kFileBytes, 9)), path);  // half-way through
  seen.append(reinterpret_cast<const char*>(file->data()) + kFileBytes / 2, kFileBytes / 2);
  EXPECT_EQ(seen, original) << "never a mix of the old file and its replacement";
  file->check_unchanged();  // the old file itself did not change
}

TEST(FileChange, a_file_replaced_by_rename_before_it_is_copied_is_copied_whole) {
  TempDir dir;
  const std::string original = pattern(kFileBytes, 7);
  const std::string path = dir.write("weights.bin", original);
  const std::string next = dir.write("next.bin", pattern(kFileBytes, 9));
  ChangeFileWhenOpened change("weights.bin", next);
  auto file = MappedFile::open(path, FileAccess::copied);
  EXPECT_EQ(g_action.fired, 1);
  EXPECT_EQ(contents(*file), original) << "the file that was opened, not a mix";
}

TEST(FileChange, a_checkpoint_truncated_under_a_read_names_its_file) {
  TempDir dir;
  ModelConfig config = synthetic_preset(Architecture::llama, "tiny");
  SyntheticCheckpointOptions options;
  options.weight_dtype = DType::f16;
  write_synthetic_hf(dir.file("ckpt"), config, options);
  const std::string weights = dir.file("ckpt/model.safetensors");
  auto checkpoint = Checkpoint::open(dir.file("ckpt"));
  ASSERT_EQ(::truncate(weights.c_str(), static_cast<off_t>(fs::file_size(weights) / 2)), 0);
  for (const CheckpointTensor& t : checkpoint->tensors())
    (void)checkpoint->tensor(t.name).clone();  // reads every byte: zeros past the end
  expect_format_error([&] { checkpoint->check_unchanged(); },
                      {weights, "changed while it was read", "truncated from"});
}

TEST(FileChange, a_shared_memory_segment_shrunk_under_its_read_is_torn_not_fatal) {
  const std::string name = "refit_file_change_" + std::to_string(::getpid());
  const std::string path = "/dev/shm/" + name;
  std::ofstream(path, std::ios::binary).write(pattern(kFileBytes, 3).data(), kFileBytes);
  auto segment = ShmSegment::open(name, 0, -1);
  EXPECT_FALSE(segment->torn());
  ASSERT_EQ(::truncate(path.c_str(), 4096), 0);  // the trainer frees its bucket early
  std::string seen(reinterpret_cast<const char*>(segment->data()), segment->size());
  EXPECT_EQ(seen.substr(4096), std::string(kFileBytes - 4096, '\0'));
  EXPECT_TRUE(segment->torn());
  fs::remove(path);
}

TEST(FileChangeDeathTest, sigbus_outside_guarded_mappings_still_ends_the_process) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  TempDir dir;
  const std::string guarded = dir.write("guarded.bin", pattern(kFileBytes, 1));
  const std::string other = dir.write("other.bin", pattern(kFileBytes, 2));
  EXPECT_EXIT(
      {
        auto file = MappedFile::open(guarded);  // installs the handler
        int fd = ::open(other.c_str(), O_RDONLY);
        auto* p = static_cast<volatile const char*>(
            ::mmap(nullptr, kFileBytes, PROT_READ, MAP_PRIVATE, fd, 0));
        if (::ftruncate(::open(other.c_str(), O_RDWR), 0) != 0) std::_Exit(3);
        std::_Exit(p[kFileBytes - 1] + 100);  // faults: not refit's mapping, so not absorbed
      },
      ::testing::KilledBySignal(SIGBUS), "");
}

// --- refit from disk against files that change ------------------------------------------

struct Snapshot {
  std::vector<std::string> bytes;  // every parameter's stored bytes
  uint64_t version = 0;
  std::vector<int32_t> greedy;
};

std::vector<int32_t> greedy_tokens(Engine& engine) {
  GenerateRequest request;
  request.prompt = {1, 450, 4996, 17354};
  request.max_tokens = 8;
  return engine.generate(request).tokens;
}

Snapshot snapshot(Engine& engine) {
  Snapshot s;
  for (const ParameterInfo& p : engine.named_parameters())
    s.bytes.emplace_back(static_cast<const char*>(p.tensor.raw_data()), p.tensor.nbytes());
  s.version = engine.weight_version();
  s.greedy = greedy_tokens(engine);
  return s;
}

void expect_same_weights(const Snapshot& got, const Snapshot& want, const std::string& what) {
  ASSERT_EQ(got.bytes.size(), want.bytes.size());
  for (size_t i = 0; i < got.bytes.size(); ++i)
    ASSERT_TRUE(got.bytes[i] == want.bytes[i]) << what << ": parameter " << i << " differs";
  EXPECT_EQ(got.greedy, want.greedy) << what;
}

class EngineFileChange : public ::testing::Test {
 protected:
  // Three checkpoints of one model (seeds 1, 2, 3), written once; each test changes copies.
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    const ModelConfig config = synthetic_preset(Architecture::llama, "tiny");
    for (int seed : {1, 2, 3}) {
      SyntheticCheckpointOptions options;
      options.weight_dtype = DType::f16;
      options.seed = static_cast<uint64_t>(seed);
      write_synthetic_hf(dir_->file("seed" + std::to_string(seed)), config, options);
    }
  }
  static void TearDownTestSuite() { delete dir_; }

  // A private copy of checkpoint `seed`, free to damage.
  std::string copy_of(int seed, const std::string& name) {
    const std::string to = scratch_.file(name);
    fs::copy(dir_->file("seed" + std::to_string(seed)), to, fs::copy_options::recursive);
    return to;
  }
  static std::unique_ptr<Engine> engine_on(const std::string& path) {
    EngineOptions options;
    options.model_path = path;
    return std::make_unique<Engine>(options);
  }
  static std::string original(int seed) { return dir_->file("seed" + std::to_string(seed)); }

  static TempDir* dir_;
  TempDir scratch_;
};
TempDir* EngineFileChange::dir_ = nullptr;

TEST_F(EngineFileChange, a_load_from_a_file_truncated_under_it_fails_with_an_error) {
  const std::string a = copy_of(1, "a");
  ChangeFileWhenOpened change("a/model.safetensors");
  expect_format_error([&] { engine_on(a); },
                      {a + "/model.safetensors", "changed while it was read"});
  EXPECT_EQ(g_action.fired, 1);
}

TEST_F(EngineFileChange,
       a_refit_from_a_file_truncated_while_it_is_read_leaves_the_engine_as_it_was) {
  auto engine = engine_on(original(1));
  const Snapshot before = snapshot(*engine);
  const std::string b = copy_of(2, "b");
  ChangeFileWhenOpened change("b/model.safetensors");
  expect_format_error([&] { engine->update_weights_from_disk(b); },
                      {b + "/model.safetensors", "changed while it was read"});
  EXPECT_EQ(g_action.fired, 1);
  const Snapshot after = snapshot(*engine);
  EXPECT_EQ(after.version, before.version);
  expect_same_weights(after, before, "after a refused refit");
}

TEST_F(EngineFileChange, a_file_truncated_and_rewritten_between_stage_and_commit_cannot_reach_it) {
  auto engine = engine_on(original(1));
  const std::string b = copy_of(2, "b");
  auto staged = engine->stage_update_from_disk(b, {});
  // The trainer rewrites the checkpoint in place after refit staged it: truncated (a mapped
  // read in the commit would fault), then filled with another checkpoint's bytes.
  const std::string weights = b + "/model.safetensors";
  ASSERT_EQ(::truncate(weights.c_str(), 4096), 0);
  fs::copy_file(original(3) + "/model.safetensors", weights, fs::copy_options::overwrite_existing);
  engine->commit(*staged);
  // One whole checkpoint: the one that was staged.
  auto fresh = engine_on(original(2));
  expect_same_weights(snapshot(*engine), snapshot(*fresh), "commit after the files changed");
}

TEST_F(EngineFileChange,
       a_checkpoint_replaced_by_rename_while_it_is_read_gives_one_whole_checkpoint) {
  auto engine = engine_on(original(1));
  const std::string b = copy_of(2, "b");
  const std::string c = copy_of(3, "c");
  ChangeFileWhenOpened change("b/model.safetensors", c + "/model.safetensors");
  engine->update_weights_from_disk(b);
  EXPECT_EQ(g_action.fired, 1);
  auto fresh = engine_on(original(2));
  expect_same_weights(snapshot(*engine), snapshot(*fresh), "refit across a rename");
}

}  // namespace
}  // namespace refit

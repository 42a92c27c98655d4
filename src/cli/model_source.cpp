#include "cli/model_source.h"

#include <fmt/format.h>
#include <unistd.h>

#include "core/error.h"
#include "models/demo_model.h"
#include "models/model_loader.h"
#include "tokenizer/vocab_loaders.h"

namespace refit::cli {

LoadedModel load_model_for_cli(const std::string& path, const std::string& tokenizer_path,
                               bool show_progress) {
  LoadedModel out;
  if (path.empty()) {
    DemoModel demo = make_demo_model();
    out.model = std::move(demo.model);
    out.tokenizer = std::move(demo.tokenizer);
    out.description = "built-in demo model (synthetic weights)";
    return out;
  }
  out.checkpoint = Checkpoint::open(path);
  out.description = path;
  out.file_bytes = out.checkpoint->total_bytes();
  LoadOptions options;
  const bool bar = show_progress && isatty(STDERR_FILENO) && out.file_bytes > (64u << 20);
  int last_percent = -1;
  if (bar)
    options.progress = [&](size_t done, size_t total) {
      int percent = total ? static_cast<int>(100.0 * done / total) : 100;
      if (percent == last_percent) return;
      last_percent = percent;
      int filled = percent / 4;
      fmt::print(stderr, "\rloading {} [{}{}] {:3d}%", path, std::string(filled, '#'),
                 std::string(25 - filled, ' '), percent);
      if (percent == 100) fmt::print(stderr, "\n");
    };
  out.model = load_model(*out.checkpoint, options);
  const bool carries_tokenizer = out.checkpoint->format() != CheckpointFormat::llama2c ||
                                 !tokenizer_path.empty();
  if (carries_tokenizer || !tokenizer_path.empty()) {
    try {
      out.tokenizer = load_tokenizer(path, tokenizer_path.empty() ? std::nullopt
                                                                  : std::optional<std::string>(tokenizer_path));
    } catch (const Error& e) {
      // A model without a usable vocabulary can still run on token ids.
      if (!tokenizer_path.empty()) throw;
      if (show_progress) fmt::print(stderr, "refit: note: no tokenizer loaded ({})\n", e.what());
    }
  }
  return out;
}

}  // namespace refit::cli

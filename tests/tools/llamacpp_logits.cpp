// Reference runs for tests/data/llamacpp/: llama.cpp's logits at every position of a prompt given
// as token ids plus 24 greedy steps, in the format of ../shared/oracle/llamacpp/README.md ("File
// formats"). The whole prompt is one llama_decode batch; each generated id is fed back alone. F32
// KV cache, flash attention off, 2 threads, CPU only: the settings under which the numpy forward
// reproduces llama.cpp.
//
//   llamacpp_logits MODEL.gguf N_CTX OUT_DIR NAME ID...
//   writes OUT_DIR/NAME.tokens.txt and OUT_DIR/NAME.logits.f32
//
// Built against a llama.cpp build (see tests/data/llamacpp/README.md for the g++ line); it is a
// test tool, not part of refit's build.

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "llama.h"

namespace {

constexpr int kGenerated = 24;

// The lowest id wins ties, as in the reference pack.
llama_token argmax(const float* row, int n_vocab) {
  llama_token best = 0;
  for (int i = 1; i < n_vocab; ++i) {
    if (row[i] > row[best]) best = i;
  }
  return best;
}

// llama_token_to_piece(lstrip 0, special) of every id, concatenated, with bytes outside printable
// ASCII (and '"', '\\') escaped as \xHH.
std::string pieces(const llama_vocab* vocab, const std::vector<llama_token>& ids,
                   bool special = true) {
  std::string raw;
  for (llama_token id : ids) {
    char buf[256];
    const int n = llama_token_to_piece(vocab, id, buf, sizeof(buf), 0, special);
    if (n > 0) raw.append(buf, n);
  }
  std::string out;
  for (unsigned char c : raw) {
    if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') {
      char esc[8];
      std::snprintf(esc, sizeof(esc), "\\x%02X", c);
      out += esc;
    } else {
      out += char(c);
    }
  }
  return out;
}

std::string join(const std::vector<llama_token>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? " " : "") + std::to_string(ids[i]);
  return out;
}

bool decode(llama_context* ctx, const std::vector<llama_token>& ids, int pos0) {
  llama_batch batch = llama_batch_init(int(ids.size()), 0, 1);
  for (size_t i = 0; i < ids.size(); ++i) {
    batch.token[i] = ids[i];
    batch.pos[i] = pos0 + int(i);
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = true;  // a logits row for every position
  }
  batch.n_tokens = int(ids.size());
  const bool ok = llama_decode(ctx, batch) == 0;
  llama_batch_free(batch);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s MODEL.gguf N_CTX OUT_DIR NAME ID...\n", argv[0]);
    return 2;
  }
  const std::string model_path = argv[1], out_dir = argv[3], name = argv[4];
  const int n_ctx = std::atoi(argv[2]);
  std::vector<llama_token> prompt;
  for (int i = 5; i < argc; ++i) prompt.push_back(std::atoi(argv[i]));

  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  llama_model* model = llama_model_load_from_file(model_path.c_str(), mp);
  if (!model) return 1;

  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = n_ctx;
  cp.n_threads = cp.n_threads_batch = 2;
  cp.type_k = cp.type_v = GGML_TYPE_F32;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) return 1;

  const llama_vocab* vocab = llama_model_get_vocab(model);
  const int n_vocab = llama_vocab_n_tokens(vocab);
  std::vector<float> logits;  // [n_positions][n_vocab]
  auto take_rows = [&](int n) {
    for (int i = 0; i < n; ++i) {
      const float* row = llama_get_logits_ith(ctx, i);
      logits.insert(logits.end(), row, row + n_vocab);
    }
  };

  if (!decode(ctx, prompt, 0)) return 1;
  take_rows(int(prompt.size()));
  std::vector<llama_token> generated;
  for (int k = 0; k < kGenerated; ++k) {
    const llama_token next = argmax(logits.data() + logits.size() - n_vocab, n_vocab);
    generated.push_back(next);
    // the last generated id is fed too, so it has a row (not used for generation)
    if (!decode(ctx, {next}, int(prompt.size()) + k)) return 1;
    take_rows(1);
  }

  const std::string base = out_dir + "/" + name;
  FILE* f = std::fopen((base + ".logits.f32").c_str(), "wb");
  if (!f || std::fwrite(logits.data(), sizeof(float), logits.size(), f) != logits.size()) return 1;
  std::fclose(f);

  const size_t slash = model_path.find_last_of('/');
  f = std::fopen((base + ".tokens.txt").c_str(), "w");
  if (!f) return 1;
  std::fprintf(f, "model: %s\n",
               model_path.substr(slash == std::string::npos ? 0 : slash + 1).c_str());
  // the prompt was given as ids: its text is the pieces without the special tokens
  std::fprintf(f, "prompt: \"%s\"\n", pieces(vocab, prompt, false).c_str());
  std::fprintf(f, "n_vocab: %d\n", n_vocab);
  std::fprintf(f, "n_prompt: %zu\n", prompt.size());
  std::fprintf(f, "n_gen: %d\n", kGenerated);
  std::fprintf(f, "n_positions: %zu\n", prompt.size() + generated.size());
  std::fprintf(f, "prompt_ids: %s\n", join(prompt).c_str());
  std::fprintf(f, "generated_ids: %s\n", join(generated).c_str());
  std::fprintf(f, "prompt_pieces: \"%s\"\n", pieces(vocab, prompt).c_str());
  std::fprintf(f, "generated_pieces: \"%s\"\n", pieces(vocab, generated).c_str());
  std::fprintf(f,
               "settings: kv_cache=f32 flash_attn=off prompt_mode=one-batch threads=2 n_ctx=%d "
               "n_ctx_seq=%u\n",
               n_ctx, llama_n_ctx_seq(ctx));
  std::fclose(f);

  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}

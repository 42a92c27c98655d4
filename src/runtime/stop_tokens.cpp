#include "runtime/stop_tokens.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <optional>
#include <set>
#include <string_view>

#include "core/error.h"
#include "formats/gguf.h"

namespace refit {

void StopTokenIds::add(const std::string& origin, const std::vector<int32_t>& new_ids) {
  if (new_ids.empty()) return;
  std::vector<int32_t> unique = new_ids;
  std::sort(unique.begin(), unique.end());
  unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
  origins.emplace_back(origin, unique);
  ids.insert(ids.end(), unique.begin(), unique.end());
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
}

bool StopTokenIds::contains(int32_t id) const {
  return std::binary_search(ids.begin(), ids.end(), id);
}

std::string StopTokenIds::str() const {
  if (ids.empty()) return "none";
  std::string from;
  for (const auto& [origin, group] : origins) from += (from.empty() ? "" : "; ") + origin;
  return fmt::format("{} ({})", fmt::join(ids, ", "), from);
}

std::vector<int32_t> json_token_ids(const nlohmann::json& value, const std::string& source,
                                    const std::string& field) {
  std::vector<int32_t> out;
  auto one = [&](const nlohmann::json& v) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
      throw FormatError(fmt::format(
          "{}: '{}' must be a token id or a list of token ids (non-negative integers), got {}",
          source, field, value.dump()));
    out.push_back(static_cast<int32_t>(v.get<int64_t>()));
  };
  if (value.is_null()) return out;
  if (value.is_array())
    for (const auto& v : value) one(v);
  else
    one(value);
  return out;
}

namespace {

// The texts llama.cpp auto-detects (llama-vocab.cpp, "auto-detect special tokens by text" and
// "maintain a list of tokens that cause end-of-generation"), each list in llama.cpp's order.
constexpr std::string_view kEogTexts[] = {"<|eot_id|>",
                                          "<|im_end|>",
                                          "<|end|>",
                                          "<|return|>",
                                          "<|call|>",
                                          "<|flush|>",
                                          "<|calls|>",
                                          "<end_of_turn>",
                                          "<|endoftext|>",
                                          "</s>",
                                          "<|eom_id|>",
                                          "<EOT>",
                                          "_<EOT>",
                                          "[EOT]",
                                          "[EOS]",
                                          "<|end_of_text|>",
                                          "<end_of_utterance>",
                                          "<eos>",
                                          "<turn|>",
                                          "<|tool_response>"};
constexpr std::string_view kFimPadTexts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>",
                                             "[PAD]"};
constexpr std::string_view kFimRepTexts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                                             "<REPO>", "<reponame>"};
constexpr std::string_view kFimSepTexts[] = {"<|file_sep|>"};

template <size_t N>
bool one_of(const std::string& text, const std::string_view (&list)[N]) {
  return std::find(std::begin(list), std::end(list), text) != std::end(list);
}

}  // namespace

std::vector<int32_t> gguf_end_of_generation_ids(const GgufMetadata& m) {
  const std::vector<std::string>* tokens = m.find_array_strings("tokenizer.ggml.tokens");
  if (!tokens) return {};
  const int64_t n = static_cast<int64_t>(tokens->size());
  // A key naming an id inside the vocabulary; llama.cpp ignores (and warns about) others.
  auto key_id = [&](const char* key) -> std::optional<int32_t> {
    auto id = m.get_u32(key);
    if (id && static_cast<int64_t>(*id) < n) return static_cast<int32_t>(*id);
    return std::nullopt;
  };
  // The first token (in id order) with one of `texts`; llama.cpp walks a hash map, so which of
  // several candidates it takes is unspecified, but each FIM list rarely has two in a vocab.
  auto by_text = [&](const auto& texts) -> std::optional<int32_t> {
    for (int64_t id = 0; id < n; ++id)
      if (one_of((*tokens)[id], texts)) return static_cast<int32_t>(id);
    return std::nullopt;
  };
  std::set<int32_t> eog;
  // The FIM pad, repo and file-separator tokens: by key, else the first by text.
  auto fim = [&](const char* key, const auto& texts) {
    if (auto id = key_id(key))
      eog.insert(*id);
    else if (auto found = by_text(texts))
      eog.insert(*found);
  };
  fim("tokenizer.ggml.fim_pad_token_id", kFimPadTexts);
  fim("tokenizer.ggml.fim_rep_token_id", kFimRepTexts);
  fim("tokenizer.ggml.fim_sep_token_id", kFimSepTexts);
  for (int64_t id = 0; id < n; ++id)
    if (one_of((*tokens)[id], kEogTexts)) eog.insert(static_cast<int32_t>(id));
  // llama.cpp's sanity checks: eos, eot and eom always end generation. (An eot or eom found by
  // text is one of kEogTexts already.)
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                          "tokenizer.ggml.eom_token_id"})
    if (auto id = key_id(key)) eog.insert(*id);

  auto find_text = [&](std::string_view text) -> std::optional<int32_t> {
    for (int32_t id : eog)
      if ((*tokens)[id] == text) return id;
    return std::nullopt;
  };
  // gpt-oss (o200k_harmony) and solar-open end a message with "<|end|>" but a turn with
  // "<|return|>" or "<|call|>": there "<|end|>" is not an end of generation.
  const bool has_call = find_text("<|call|>") || find_text("<|calls|>");
  if (auto end = find_text("<|end|>");
      end && ((find_text("<|return|>") && has_call) || (has_call && find_text("<|flush|>"))))
    eog.erase(*end);
  // Gemma 4 and PaddleOCR: "</s>" is an ordinary token beside "<|tool_response>".
  if (auto s = find_text("</s>"); s && find_text("<|tool_response>")) eog.erase(*s);
  return {eog.begin(), eog.end()};
}

}  // namespace refit

// Vocabulary loaders: each turns one file format's tokenizer description into VocabData.
// They only translate; validation of ids and lengths happens in Vocab. The file readers
// themselves (bounds checks, JSON parsing) live in formats/.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>

#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

namespace refit {

class GgufMetadata;
struct Llama2cTokenizerData;

// GGUF `tokenizer.ggml.*` keys: model ("llama" = SPM, "gpt2" = byte-level BPE), tokens,
// scores, token_type, merges, pre, special ids, add_bos/add_eos/add_space_prefix.
VocabData vocab_from_gguf(const GgufMetadata& metadata);

// llama2.c tokenizer.bin: pieces store spaces as ASCII ' ' and BOS/EOS as "\n<s>\n" /
// "\n</s>\n"; they are rewritten to SentencePiece's ▁ / "<s>" / "</s>" so the SPM algorithm
// sees the same vocabulary a GGUF conversion has.
VocabData vocab_from_llama2c(const Llama2cTokenizerData& data, const std::string& source);

// Hugging Face tokenizer.json (model BPE: byte-level, or SentencePiece-style with
// byte_fallback; its normalizer, pre-tokenizer and post-processor) plus tokenizer_config.json
// (may be null) for BOS/EOS and add_bos_token / add_eos_token.
VocabData vocab_from_hf(const nlohmann::json& tokenizer_json,
                        const nlohmann::json& tokenizer_config, const std::string& source);

// Opens whatever `model_path` is and returns its tokenizer:
//  * a GGUF file (vocabulary-only or a whole model),
//  * a llama2.c model .bin together with `tokenizer_path` (its tokenizer .bin; the vocabulary
//    size comes from the model header), or a tokenizer .bin alone,
//  * an HF folder (or a tokenizer.json path) with tokenizer.json,
//  * `tokenizer_path` may also name a GGUF, tokenizer.json or folder that overrides the
//    model's own vocabulary.
// Throws FormatError naming the file when the format is unknown or malformed.
std::unique_ptr<Tokenizer> load_tokenizer(
    const std::string& model_path, const std::optional<std::string>& tokenizer_path = std::nullopt);

// What `refit tokenize` does, as a function so the vocabulary tests run exactly the CLI's
// code path: encode `text` (BOS/EOS as the vocabulary says unless no_bos; special tokens
// parsed only when parse_special) and format the ids space-separated.
std::string tokenize_for_cli(const Tokenizer& tokenizer, const std::string& text, bool no_bos,
                             bool parse_special);
// `refit tokenize --decode`: parse space/comma-separated ids and decode them to text.
std::string detokenize_for_cli(const Tokenizer& tokenizer, const std::string& ids_text);

}  // namespace refit

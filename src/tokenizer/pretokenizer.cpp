#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pretokenizer.h"

#include <pcre2.h>

#include "core/error.h"

namespace refit {

namespace {

// Hugging Face's GPT-2 pattern (llama.cpp drops the final `|\s+`; with isolated splitting
// the unmatched whitespace becomes its own piece either way).
constexpr const char* kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Llama 3 / cl100k. PCRE2 supports the scoped case-insensitive group directly, so the
// original tokenizer.json pattern is used rather than llama.cpp's hand-expanded one.
constexpr const char* kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Qwen2: Llama 3 with single digits.
constexpr const char* kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// o200k (GPT-4o, gpt-oss's o200k_harmony): words split at a lower-to-upper case change, an
// optional contraction of any case kept with its word, digits in runs of at most three, and
// "/" or line breaks kept after punctuation. PCRE2 runs the tokenizer.json pattern as written,
// so llama.cpp's lookahead expansion of it is not needed.
constexpr const char* kO200k =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// DeepSeek LLM's cased-letter class, written with code points: the published pattern
// spells these characters literally, and several of them (U+1FBE, U+2126, U+212A, the ends
// of U+1F5F-U+1F7D, U+1FD0-U+1FD3, U+1FD6-U+1FDB) change under Unicode normalisation, which
// would silently corrupt the ranges if this file were ever normalised.
constexpr const char* kDeepseekLetters =
    R"(\s?[\x{41}-\x{5A}\x{61}-\x{7A}\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF})"
    R"(\x{1C4}-\x{293}\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386})"
    R"(\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F})"
    R"(\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA})"
    R"(\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15})"
    R"(\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B})"
    R"(\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4})"
    R"(\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4})"
    R"(\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124})"
    R"(\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F})"
    R"(\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4})"
    R"(\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F})"
    R"(\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17})"
    R"(\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB})"
    R"(\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)";
constexpr const char* kDeepseekPunct =
    R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)";
constexpr const char* kDeepseekCjk = R"([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";

// BLOOM / Poro: anything up to whitespace or one of . , ! ? … 。 ， 、 । ۔ ،
constexpr const char* kBloom =
    R"( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{964}\x{6D4}\x{60C})]+)";

bool is_one_of(const std::string& name, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (name == n) return true;
  return false;
}

}  // namespace

PreTokenizerPreset pre_tokenizer_preset(const std::string& name, const std::string& source) {
  PreTokenizerPreset p;
  if (name.empty() || name == "default") {
    p.regexes = {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"};
  } else if (is_one_of(name, {"llama3", "llama-v3", "llama-bpe", "falcon3"})) {
    p.regexes = {kLlama3};
    p.ignore_merges = true;
    p.add_bos = true;
  } else if (is_one_of(name, {"dbrx", "smaug-bpe", "chatglm-bpe"})) {
    p.regexes = {kLlama3};
  } else if (name == "deepseek-llm") {
    p.regexes = {"[\r\n]", kDeepseekLetters, kDeepseekPunct, R"(\s+$)", kDeepseekCjk, R"(\p{N}+)"};
    p.clean_spaces = false;
  } else if (name == "deepseek-coder") {
    p.regexes = {"[\r\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kDeepseekCjk, R"(\p{N})"};
    p.clean_spaces = false;
  } else if (name == "deepseek-v3") {
    p.regexes = {
        R"(\p{N}{1,3})", R"([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)",
        R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"};
    p.clean_spaces = false;
  } else if (name == "falcon") {
    p.regexes = {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"};
  } else if (is_one_of(name, {"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone",
                              "minerva-7b"})) {
    p.regexes = {R"(\p{N})", kGpt2};
    p.clean_spaces = !is_one_of(name, {"command-r", "smollm"});
  } else if (is_one_of(name, {"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v1-en",
                              "jina-v2-es", "jina-v2-de", "jina-v2-code", "roberta-bpe", "mpt",
                              "olmo", "jais"})) {
    p.regexes = {kGpt2};
  } else if (is_one_of(name, {"qwen2", "stablelm2", "deepseek-r1-qwen", "megrez"})) {
    p.regexes = {kQwen2};
    p.clean_spaces = name == "stablelm2";
  } else if (is_one_of(name, {"poro-chat", "bloom", "gpt3-finnish"})) {
    p.regexes = {kBloom};
    p.clean_spaces = name != "poro-chat";
  } else if (name == "viking") {
    p.regexes = {kBloom, R"(\p{N})"};
    p.clean_spaces = false;
  } else if (is_one_of(name, {"gpt-4o", "o200k", "llama4", "kanana2", "talkie"})) {
    // llama.cpp writes "gpt-4o" for o200k_base and o200k_harmony (gpt-oss).
    p.regexes = {kO200k};
    p.clean_spaces = false;
  } else if (name == "tekken") {
    p.regexes = {
        R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)"};
    p.ignore_merges = true;
    p.add_bos = true;
    p.clean_spaces = false;
  } else {
    throw FormatError(fmt::format(
        "{}: unknown pre-tokenizer '{}' (tokenizer.ggml.pre); known: default, llama-bpe, qwen2, "
        "deepseek-llm, deepseek-coder, deepseek-v3, falcon, starcoder, gpt-2, gpt-4o, ...",
        source, name));
  }
  return p;
}

const char* gpt2_pre_tokenizer_regex() { return kGpt2; }

const char* o200k_pre_tokenizer_regex() { return kO200k; }

struct RegexSplitter::Compiled {
  pcre2_code* code = nullptr;
  std::string pattern;
  ~Compiled() { pcre2_code_free(code); }
};

RegexSplitter::RegexSplitter(const std::vector<std::string>& patterns) {
  for (const auto& pattern : patterns) {
    auto compiled = std::make_unique<Compiled>();
    compiled->pattern = pattern;
    int error_code = 0;
    PCRE2_SIZE error_offset = 0;
    compiled->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error_code,
                                   &error_offset, nullptr);
    if (!compiled->code) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error_code, message, sizeof(message));
      throw Error(fmt::format("pre-tokenizer regex does not compile at offset {}: {} (pattern: {})",
                              error_offset, reinterpret_cast<const char*>(message), pattern));
    }
    // JIT is an optimisation only: pcre2_match falls back to the interpreter without it.
    pcre2_jit_compile(compiled->code, PCRE2_JIT_COMPLETE);
    regexes_.push_back(std::move(compiled));
  }
}

RegexSplitter::~RegexSplitter() = default;

std::vector<std::string_view> RegexSplitter::split(std::string_view text) const {
  std::vector<std::string_view> pieces;
  if (text.empty()) return pieces;
  pieces.push_back(text);
  for (const auto& regex : regexes_) {
    pcre2_match_data* match = pcre2_match_data_create_from_pattern(regex->code, nullptr);
    if (!match) throw Error("pre-tokenizer: out of memory creating PCRE2 match data");
    std::vector<std::string_view> next;
    next.reserve(pieces.size() * 2);
    for (std::string_view piece : pieces) {
      auto subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
      size_t start = 0;    // where the next search begins
      size_t emitted = 0;  // end of what has been pushed
      while (start <= piece.size()) {
        int rc = pcre2_match(regex->code, subject, piece.size(), start, 0, match, nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
          pcre2_match_data_free(match);
          PCRE2_UCHAR message[256];
          pcre2_get_error_message(rc, message, sizeof(message));
          throw Error(fmt::format("pre-tokenizer regex failed: {} (pattern: {})",
                                  reinterpret_cast<const char*>(message), regex->pattern));
        }
        const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
        size_t begin = ovector[0], end = ovector[1];
        if (end == begin) {
          // An empty match splits nothing; step over one code unit sequence and go on.
          start = begin + 1;
          while (start < piece.size() && (static_cast<uint8_t>(piece[start]) & 0xC0) == 0x80)
            ++start;
          continue;
        }
        if (begin > emitted) next.push_back(piece.substr(emitted, begin - emitted));
        next.push_back(piece.substr(begin, end - begin));
        emitted = start = end;
      }
      if (emitted < piece.size()) next.push_back(piece.substr(emitted));
    }
    pcre2_match_data_free(match);
    pieces = std::move(next);
  }
  return pieces;
}

}  // namespace refit

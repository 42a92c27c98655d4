#include "formats/checkpoint.h"

#include <fmt/format.h>

#include <cstring>
#include <filesystem>

namespace refit {

namespace fs = std::filesystem;

const char* checkpoint_format_name(CheckpointFormat f) {
  switch (f) {
    case CheckpointFormat::gguf:
      return "gguf";
    case CheckpointFormat::safetensors:
      return "safetensors";
    case CheckpointFormat::hf_folder:
      return "hf_folder";
    case CheckpointFormat::llama2c:
      return "llama2c";
  }
  return "unknown";
}

namespace {
constexpr size_t kMaxShownString = 160;  // long strings (chat templates) are cut in summaries

std::string shorten(const std::string& s) {
  if (s.size() <= kMaxShownString) return s;
  return fmt::format("{}... ({} bytes)", printable(s, kMaxShownString), s.size());
}

nlohmann::ordered_json gguf_value_json(const GgufValue& v) {
  switch (v.type()) {
    case GgufValueType::string:
      return shorten(v.as_string());
    case GgufValueType::boolean:
      return v.as_bool();
    // An f32 printed through double shows float noise (1e-5 as 9.99999974e-06): round-trip
    // it through its shortest float text instead.
    case GgufValueType::f32:
      return std::stod(fmt::format("{}", static_cast<float>(v.as_f64())));
    case GgufValueType::f64:
      return v.as_f64();
    case GgufValueType::array:
      return fmt::format("<{} of {}>", v.type_str(), v.array_size());
    case GgufValueType::i8:
    case GgufValueType::i16:
    case GgufValueType::i32:
    case GgufValueType::i64:
      return v.as_i64();
    default:
      return v.as_u64();
  }
}

// A special token named in tokenizer_config.json: a string or {"content": "..."}.
std::string token_text(const nlohmann::json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string())
    return j["content"].get<std::string>();
  return "";
}

std::optional<int64_t> json_int(const nlohmann::json& j, const char* key) {
  if (j.is_object() && j.contains(key) && j[key].is_number_integer()) return j[key].get<int64_t>();
  return std::nullopt;
}

// What a checkpoint file (not a folder) holds, from its first bytes: GGUF's magic, or
// safetensors' 8-byte header length (that the file can hold) before the JSON header, or
// the .safetensors extension; anything else is read as a llama2.c model.
CheckpointFormat detect_file_format(const ByteSource& src, const std::string& path) {
  const uint8_t* p = src.data();
  uint64_t st_len = 0;
  if (src.size() >= 8) std::memcpy(&st_len, p, 8);
  if (src.size() >= 4 && std::memcmp(p, "GGUF", 4) == 0) return CheckpointFormat::gguf;
  if ((src.size() > 8 && st_len <= src.size() - 8 && p[8] == '{') ||
      fs::path(path).extension() == ".safetensors")
    return CheckpointFormat::safetensors;
  return CheckpointFormat::llama2c;
}
}  // namespace

std::unique_ptr<Checkpoint> Checkpoint::open(const std::string& path, FileAccess access) {
  if (path.find('\0') != std::string::npos)
    throw FormatError("a checkpoint path holds a NUL byte: the system would open a shorter one");
  auto c = std::unique_ptr<Checkpoint>(new Checkpoint());
  c->path_ = path;
  // Only folders and regular files, told apart without opening anything (stat follows
  // links): opening a FIFO would wait for a writer. MappedFile checks again on its
  // descriptor, for a path replaced in between.
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (fs::exists(status) && !fs::is_directory(status) && !fs::is_regular_file(status))
    throw FormatError(fmt::format(
        "{}: not a checkpoint: a checkpoint is a regular file or a folder, not a {}", path,
        fs::is_fifo(status)     ? "FIFO"
        : fs::is_socket(status) ? "socket"
                                : "device"));
  if (fs::is_directory(status)) {
    c->format_ = CheckpointFormat::hf_folder;
    c->hf_ = HfFolder::open(path, access);
    c->describe_hf();
    return c;
  }
  ByteSource src = ByteSource::map_file(path, access);
  c->format_ = detect_file_format(src, path);
  if (c->format_ == CheckpointFormat::gguf) {
    c->gguf_ = GgufFile::parse(std::move(src));
    c->describe_gguf();
  } else if (c->format_ == CheckpointFormat::safetensors) {
    c->safetensors_ = SafetensorsFile::parse(std::move(src));
    c->describe_safetensors(*c->safetensors_);
  } else if (src.size() >= 4 && std::memcmp(src.data(), "24ka", 4) == 0) {
    // "ak42" as a little-endian word: a llama2.c file by its magic; errors say what is wrong
    c->llama2c_ = Llama2cModel::parse(std::move(src));
    c->describe_llama2c();
  } else {
    // No format's magic: a legacy llama2.c model is known by its header alone. When that
    // does not describe a model, the error says so without the numbers read, which are
    // only the file's first bytes (of /etc/shadow, say) and no business of a client.
    try {
      c->llama2c_ = Llama2cModel::parse(std::move(src));
    } catch (const FormatError&) {
      throw FormatError(fmt::format(
          "{}: not a checkpoint refit reads (safetensors / GGUF / HF folder / llama2.c): no "
          "format's magic, and its first bytes are not a llama2.c header describing a model of "
          "its size",
          path));
    }
    c->describe_llama2c();
  }
  return c;
}

uint64_t Checkpoint::total_bytes() const {
  uint64_t n = 0;
  for (const auto& t : tensors_) n += t.nbytes;
  return n;
}

Tensor Checkpoint::tensor(std::string_view name) const {
  switch (format_) {
    case CheckpointFormat::gguf:
      return gguf_->tensor(name);
    case CheckpointFormat::safetensors:
      return safetensors_->tensor(name);
    case CheckpointFormat::hf_folder:
      return hf_->tensor(name);
    case CheckpointFormat::llama2c:
      return llama2c_->tensor(name);
  }
  return {};
}

void Checkpoint::check_unchanged() const {
  if (gguf_) gguf_->source().check_unchanged();
  if (safetensors_) safetensors_->source().check_unchanged();
  if (llama2c_) llama2c_->source().check_unchanged();
  if (hf_)
    for (const auto& shard : hf_->shards()) shard->source().check_unchanged();
}

void Checkpoint::describe_gguf() {
  const GgufMetadata& md = gguf_->metadata();
  architecture_ = gguf_->architecture().value_or("");
  hparams_["gguf.version"] = gguf_->version();
  hparams_["gguf.alignment"] = gguf_->alignment();
  for (const auto& [key, value] : md.entries())
    if (key.rfind("tokenizer.", 0) != 0) hparams_[key] = gguf_value_json(value);

  if (const GgufValue* tokens = md.find("tokenizer.ggml.tokens")) {
    vocab_.present = true;
    vocab_.source = "GGUF metadata";
    vocab_.model = md.get_string("tokenizer.ggml.model").value_or("");
    vocab_.pre = md.get_string("tokenizer.ggml.pre").value_or("");
    const auto* strings = md.find_array_strings("tokenizer.ggml.tokens");
    (void)tokens;
    vocab_.size = static_cast<int64_t>(strings->size());
    if (const GgufValue* merges = md.find("tokenizer.ggml.merges"))
      if (merges->type() == GgufValueType::array) vocab_.n_merges = merges->array_size();
    auto text_of = [&](std::optional<uint32_t> id) {
      return id && *id < strings->size() ? (*strings)[*id] : std::string();
    };
    auto bos = md.get_u32("tokenizer.ggml.bos_token_id");
    auto eos = md.get_u32("tokenizer.ggml.eos_token_id");
    if (bos) vocab_.bos_id = *bos;
    if (eos) vocab_.eos_id = *eos;
    vocab_.bos_text = text_of(bos);
    vocab_.eos_text = text_of(eos);
  }
  for (const auto& t : gguf_->tensors())
    tensors_.push_back({t.name, std::string(ggml_type_name(t.type)), t.shape, t.nbytes});
}

void Checkpoint::describe_safetensors(const SafetensorsFile& f) {
  for (const auto& [k, v] : f.metadata()) hparams_[k] = shorten(v);
  for (const auto& t : f.tensors())
    tensors_.push_back({t.name, std::string(dtype_name(t.dtype)), t.shape, t.nbytes()});
}

void Checkpoint::describe_hf() {
  const auto& cfg = hf_->config();
  architecture_ = hf_->architecture();
  for (const auto& [k, v] : cfg.items()) hparams_[k] = v;
  for (const auto& name : hf_->tensor_names()) {
    const auto& t = hf_->tensor_info(name);
    tensors_.push_back({t.name, std::string(dtype_name(t.dtype)), t.shape, t.nbytes()});
  }
  const auto& tc = hf_->tokenizer_config();
  vocab_.bos_id = json_int(cfg, "bos_token_id");
  vocab_.eos_id = json_int(cfg, "eos_token_id");
  // A list (Llama 3.1) names the model's eos first; `refit inspect` lists every stop id.
  if (!vocab_.eos_id && cfg.contains("eos_token_id") && cfg["eos_token_id"].is_array() &&
      !cfg["eos_token_id"].empty() && cfg["eos_token_id"][0].is_number_integer())
    vocab_.eos_id = cfg["eos_token_id"][0].get<int64_t>();
  if (!tc.is_null()) {
    vocab_.bos_text = tc.contains("bos_token") ? token_text(tc["bos_token"]) : "";
    vocab_.eos_text = tc.contains("eos_token") ? token_text(tc["eos_token"]) : "";
  }
  if (auto tj = hf_->tokenizer_json_path()) {
    nlohmann::json j = read_json_file(*tj, 256u << 20);
    vocab_.present = true;
    vocab_.source = "tokenizer.json";
    if (j.is_object() && j.contains("model") && j["model"].is_object()) {
      const auto& m = j["model"];
      if (m.contains("type") && m["type"].is_string()) vocab_.model = m["type"].get<std::string>();
      if (m.contains("vocab") && (m["vocab"].is_object() || m["vocab"].is_array()))
        vocab_.size = static_cast<int64_t>(m["vocab"].size());
      if (m.contains("merges") && m["merges"].is_array())
        vocab_.n_merges = static_cast<int64_t>(m["merges"].size());
    }
    if (j.is_object() && j.contains("added_tokens") && j["added_tokens"].is_array())
      for (const auto& a : j["added_tokens"])
        if (json_int(a, "id") && *json_int(a, "id") >= vocab_.size)
          vocab_.size = *json_int(a, "id") + 1;
  } else if (auto n = json_int(cfg, "vocab_size")) {
    vocab_.source = "config.json vocab_size (the folder has no tokenizer files)";
    vocab_.size = *n;
  }
}

void Checkpoint::describe_llama2c() {
  const Llama2cConfig& c = llama2c_->config();
  architecture_ = "llama";
  hparams_["llama2c.version"] = c.version;
  hparams_["dim"] = c.dim;
  hparams_["hidden_dim"] = c.hidden_dim;
  hparams_["n_layers"] = c.n_layers;
  hparams_["n_heads"] = c.n_heads;
  hparams_["n_kv_heads"] = c.n_kv_heads;
  hparams_["vocab_size"] = c.vocab_size;
  hparams_["seq_len"] = c.seq_len;
  hparams_["head_size"] = c.head_size();
  hparams_["shared_classifier"] = c.shared_classifier;
  for (const auto& [name, t] : llama2c_->tensors())
    tensors_.push_back({name, "f32", t.shape(), t.nbytes()});

  // The tokenizer is a separate file; llama2.c's convention puts it next to the model.
  const fs::path dir = fs::path(path_).parent_path();
  vocab_.size = c.vocab_size;
  vocab_.source = "llama2.c header (no tokenizer .bin found alongside)";
  for (const std::string& cand :
       {fmt::format("tok{}.bin", c.vocab_size), std::string("tokenizer.bin")}) {
    fs::path p = dir / cand;
    if (!fs::exists(p)) continue;
    Llama2cTokenizerData tok;
    try {
      tok = read_llama2c_tokenizer(p.string(), c.vocab_size);
    } catch (const FormatError& e) {
      // A stray or mismatched tokenizer next to the model does not make the model unreadable.
      vocab_.source = fmt::format("none usable ({})", e.what());
      continue;
    }
    vocab_.present = true;
    vocab_.source = p.string();
    vocab_.model = "llama2c (SentencePiece BPE with scores, byte fallback)";
    vocab_.size = static_cast<int64_t>(tok.pieces.size());
    vocab_.bos_id = 1;
    vocab_.eos_id = 2;
    vocab_.bos_text = tok.pieces.size() > 1 ? tok.pieces[1] : "";
    vocab_.eos_text = tok.pieces.size() > 2 ? tok.pieces[2] : "";
    break;
  }
}

}  // namespace refit

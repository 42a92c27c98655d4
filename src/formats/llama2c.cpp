#include "formats/llama2c.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

namespace refit {

namespace {
constexpr uint32_t kMagicAk42 = 0x616b3432;  // "ak42" as written by export.py (little-endian)
constexpr size_t kV1HeaderBytes = 256;

struct PlannedTensor {
  std::string name;
  Shape shape;
};
}  // namespace

std::shared_ptr<Llama2cModel> Llama2cModel::open(const std::string& path) {
  return parse(ByteSource::map_file(path));
}

std::shared_ptr<Llama2cModel> Llama2cModel::parse(ByteSource source) {
  auto model = std::shared_ptr<Llama2cModel>(new Llama2cModel());
  model->source_ = std::move(source);
  model->source_.parse_checked([&] { model->parse_file(); });
  return model;
}

void Llama2cModel::parse_file() {
  const std::string& path = source_.path();
  ByteReader r(source_.data(), source_.size(), path);
  Llama2cConfig& c = config_;
  size_t header_bytes = 28;
  uint32_t first = r.read<uint32_t>("the llama2.c header");
  if (first == kMagicAk42) {
    int32_t version = r.read<int32_t>("the llama2.c version");
    if (version != 1)
      format_fail(path,
                  "llama2.c checkpoint version {} is not supported (legacy and version 1 "
                  "are; version 2 is runq.c's int8 format)",
                  version);
    c.version = 1;
    header_bytes = kV1HeaderBytes;
  } else {
    r.seek(0, "the llama2.c header");
  }
  int32_t fields[7];
  for (auto& f : fields) f = r.read<int32_t>("the llama2.c header");
  c.dim = fields[0];
  c.hidden_dim = fields[1];
  c.n_layers = fields[2];
  c.n_heads = fields[3];
  c.n_kv_heads = fields[4];
  c.seq_len = fields[6];
  if (c.version == 0) {
    // export.py writes -vocab_size when the classifier is a separate tensor.
    if (fields[5] == INT32_MIN) format_fail(path, "vocab_size {} is invalid", fields[5]);
    c.shared_classifier = fields[5] > 0;
    c.vocab_size = std::abs(fields[5]);
  } else {
    c.vocab_size = fields[5];
    uint8_t shared = r.read<uint8_t>("the shared-classifier flag");
    if (shared > 1) format_fail(path, "shared-classifier flag is {}, not 0 or 1", shared);
    c.shared_classifier = shared == 1;
    if (source_.size() < kV1HeaderBytes)
      format_fail(path, "truncated: the version 1 header needs {} bytes, the file has {}",
                  kV1HeaderBytes, source_.size());
  }
  const std::pair<const char*, int32_t> named[] = {
      {"dim", c.dim},         {"hidden_dim", c.hidden_dim}, {"n_layers", c.n_layers},
      {"n_heads", c.n_heads}, {"n_kv_heads", c.n_kv_heads}, {"vocab_size", c.vocab_size},
      {"seq_len", c.seq_len}};
  for (const auto& [name, v] : named)
    if (v <= 0 || v > kMaxDim)
      format_fail(path, "header field {} = {} is out of range (1..{}); is this a llama2.c model?",
                  name, v, kMaxDim);
  if (c.dim % c.n_heads != 0)
    format_fail(path, "dim {} is not a multiple of n_heads {}", c.dim, c.n_heads);
  if (c.n_kv_heads > c.n_heads || c.n_heads % c.n_kv_heads != 0)
    format_fail(path, "n_heads {} is not a multiple of n_kv_heads {}", c.n_heads, c.n_kv_heads);

  const int64_t L = c.n_layers, D = c.dim, H = c.hidden_dim, V = c.vocab_size;
  const int64_t KV = c.kv_dim(), S = c.seq_len, HS2 = c.head_size() / 2;
  std::vector<PlannedTensor> plan;
  if (c.version == 0) {
    plan = {{"token_embedding_table", {V, D}},
            {"rms_att_weight", {L, D}},
            {"wq", {L, D, D}},
            {"wk", {L, KV, D}},
            {"wv", {L, KV, D}},
            {"wo", {L, D, D}},
            {"rms_ffn_weight", {L, D}},
            {"w1", {L, H, D}},
            {"w2", {L, D, H}},
            {"w3", {L, H, D}},
            {"rms_final_weight", {D}},
            {"freq_cis_real", {S, HS2}},
            {"freq_cis_imag", {S, HS2}}};
  } else {
    plan = {{"rms_att_weight", {L, D}}, {"rms_ffn_weight", {L, D}},
            {"rms_final_weight", {D}},  {"token_embedding_table", {V, D}},
            {"wq", {L, D, D}},          {"wk", {L, KV, D}},
            {"wv", {L, KV, D}},         {"wo", {L, D, D}},
            {"w1", {L, H, D}},          {"w2", {L, D, H}},
            {"w3", {L, H, D}}};
  }
  if (!c.shared_classifier) plan.push_back({"wcls", {V, D}});

  // Every field is at most 2^20, so each product below fits easily in 64 bits; the sum is
  // checked against the file size before any view is made.
  uint64_t offset = header_bytes;
  std::vector<uint64_t> offsets;
  for (const auto& t : plan) {
    uint64_t n = 1;
    for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
    offsets.push_back(offset);
    offset += 4 * n;
  }
  if (offset != source_.size())
    format_fail(path,
                "the header (dim {}, hidden {}, layers {}, heads {}, kv heads {}, vocab {}{}, "
                "seq_len {}) implies {} bytes, the file has {}",
                c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size,
                c.shared_classifier ? "" : " unshared", c.seq_len, offset, source_.size());
  for (size_t i = 0; i < plan.size(); ++i) {
    Tensor t =
        source_.view(offsets[i], (i + 1 < plan.size() ? offsets[i + 1] : offset) - offsets[i],
                     DType::f32, plan[i].shape);
    tensors_.emplace_back(plan[i].name, std::move(t));
  }
}

const Tensor* Llama2cModel::find_tensor(std::string_view name) const {
  for (const auto& [n, t] : tensors_)
    if (n == name) return &t;
  return nullptr;
}

const Tensor& Llama2cModel::tensor(std::string_view name) const {
  const Tensor* t = find_tensor(name);
  if (!t) format_fail(path(), "no tensor named '{}' in a llama2.c checkpoint", name);
  return *t;
}

const Tensor& Llama2cModel::classifier() const {
  return config_.shared_classifier ? tensor("token_embedding_table") : tensor("wcls");
}

Llama2cTokenizerData read_llama2c_tokenizer(const std::string& path,
                                            std::optional<int32_t> vocab_size) {
  const ByteSource source = ByteSource::map_file(path);
  Llama2cTokenizerData out;
  source.parse_checked([&] { out = parse_llama2c_tokenizer(source, vocab_size); });
  return out;
}

Llama2cTokenizerData parse_llama2c_tokenizer(const ByteSource& source,
                                             std::optional<int32_t> vocab_size) {
  const std::string& path = source.path();
  ByteReader r(source.data(), source.size(), path);
  Llama2cTokenizerData out;
  out.max_token_length = r.read<uint32_t>("max_token_length");
  if (out.max_token_length == 0 || out.max_token_length > (1u << 16))
    format_fail(path, "max_token_length {} is out of range (1..65536)", out.max_token_length);
  if (vocab_size) {
    if (*vocab_size <= 0) format_fail(path, "vocabulary size {} is not positive", *vocab_size);
    // Each token needs at least a score and a length.
    r.check_count(static_cast<uint64_t>(*vocab_size), 8, "token");
    out.pieces.reserve(*vocab_size);
    out.scores.reserve(*vocab_size);
  }
  for (int64_t i = 0; vocab_size ? i < *vocab_size : r.remaining() > 0; ++i) {
    float score = r.read<float>(fmt::format("the score of token {}", i));
    int32_t len = r.read<int32_t>(fmt::format("the length of token {}", i));
    if (len < 0 || static_cast<uint32_t>(len) > out.max_token_length)
      format_fail(path, "token {} has length {} (max_token_length is {})", i, len,
                  out.max_token_length);
    const uint8_t* bytes =
        r.bytes(static_cast<uint64_t>(len), fmt::format("the bytes of token {}", i));
    if (!std::isfinite(score)) format_fail(path, "token {} has a non-finite score", i);
    out.pieces.emplace_back(reinterpret_cast<const char*>(bytes), static_cast<size_t>(len));
    out.scores.push_back(score);
  }
  if (r.remaining() > 0)
    format_fail(path, "{} unexpected bytes after the last of {} tokens", r.remaining(),
                out.pieces.size());
  return out;
}

}  // namespace refit

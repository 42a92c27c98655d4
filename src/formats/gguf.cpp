// GGUF parsing (see gguf.h for the layout). Order of checks: every count against the bytes
// that remain (so no allocation or loop is driven by a number the file cannot back), every
// string for UTF-8, every tensor's shape, type, size and offset, then the tensors against
// each other (no overlap) and against the file's end.
#include "formats/gguf.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace refit {

namespace {
constexpr uint32_t kMaxNesting = 8;  // arrays of arrays deeper than this are refused

size_t scalar_width(GgufValueType t) {
  switch (t) {
    case GgufValueType::u8:
    case GgufValueType::i8:
    case GgufValueType::boolean:
      return 1;
    case GgufValueType::u16:
    case GgufValueType::i16:
      return 2;
    case GgufValueType::u32:
    case GgufValueType::i32:
    case GgufValueType::f32:
      return 4;
    case GgufValueType::u64:
    case GgufValueType::i64:
    case GgufValueType::f64:
      return 8;
    default:
      return 0;  // string, array
  }
}
}  // namespace

class GgufParser {
 public:
  GgufParser(GgufFile& file)
      : file_(file), r_(file.source_.data(), file.source_.size(), file.source_.path()) {}

  void run() {
    const std::string& path = file_.source_.path();
    const uint8_t* magic = r_.bytes(4, "the GGUF magic");
    if (std::memcmp(magic, "GGUF", 4) != 0)
      format_fail(path, "not a GGUF file (magic is '{}', expected 'GGUF')",
                  printable(std::string_view(reinterpret_cast<const char*>(magic), 4)));
    file_.version_ = r_.read<uint32_t>("the GGUF version");
    if (file_.version_ == 1) format_fail(path, "GGUF version 1 is not supported (only 2 and 3)");
    if (file_.version_ != 2 && file_.version_ != 3)
      format_fail(path, "unknown GGUF version {} (supported: 2, 3)", file_.version_);
    const uint64_t n_tensors = r_.read<uint64_t>("the tensor count");
    const uint64_t n_kv = r_.read<uint64_t>("the metadata count");

    // Smallest possible records: a key/value is a length, a type and a 1-byte value; a
    // tensor info is a name length, n_dims, type and offset.
    r_.check_count(n_kv, 8 + 4 + 1, "metadata");
    file_.metadata_.path_ = path;
    file_.metadata_.entries_.reserve(n_kv);
    for (uint64_t i = 0; i < n_kv; ++i) {
      std::string key = read_string("a metadata key");
      if (key.empty()) format_fail(path, "metadata entry {} has an empty key", i);
      auto type = read_type(fmt::format("metadata key '{}'", printable(key)));
      GgufValue value = read_value(type, 0, key);
      auto [it, inserted] = file_.metadata_.index_.emplace(key, file_.metadata_.entries_.size());
      if (!inserted) format_fail(path, "duplicate metadata key '{}'", printable(key));
      file_.metadata_.entries_.emplace_back(std::move(key), std::move(value));
    }

    if (const GgufValue* a = file_.metadata_.find("general.alignment")) {
      if (a->type() != GgufValueType::u32)
        format_fail(path, "general.alignment should be u32, the file stores {}", a->type_str());
      uint64_t al = a->as_u64();
      if (al == 0 || (al & (al - 1)) != 0)
        format_fail(path, "general.alignment {} is not a power of two", al);
      file_.alignment_ = static_cast<uint32_t>(al);
    }

    r_.check_count(n_tensors, 8 + 4 + 4 + 8, "tensor");
    file_.tensors_.reserve(n_tensors);
    for (uint64_t i = 0; i < n_tensors; ++i) read_tensor_info(i);

    // The data section starts at the next multiple of the alignment after the header.
    uint64_t header_end = r_.offset();
    uint64_t data = (header_end + file_.alignment_ - 1) / file_.alignment_ * file_.alignment_;
    file_.data_offset_ = data;
    const uint64_t size = file_.source_.size();
    if (n_tensors > 0 && data > size)
      format_fail(path,
                  "data section would start at {} (header ends at {}, alignment {}), past "
                  "the end of the file ({} bytes)",
                  data, header_end, file_.alignment_, size);
    check_tensor_ranges();
  }

 private:
  std::string read_string(std::string_view what) {
    uint64_t len = r_.read<uint64_t>(what);
    if (len > r_.remaining())
      format_fail(r_.path(), "{} at offset {} claims {} bytes, only {} remain", what,
                  r_.offset() - 8, len, r_.remaining());
    const uint8_t* p = r_.bytes(len, what);
    std::string s(reinterpret_cast<const char*>(p), len);
    if (!is_valid_utf8(s))
      format_fail(r_.path(), "{} at offset {} is not valid UTF-8: '{}'", what, r_.offset() - len,
                  printable(s));
    return s;
  }

  GgufValueType read_type(const std::string& owner) {
    uint32_t t = r_.read<uint32_t>("a metadata value type");
    if (t > static_cast<uint32_t>(GgufValueType::f64))
      format_fail(r_.path(), "{} has unknown value type {}", owner, t);
    return static_cast<GgufValueType>(t);
  }

  GgufValue read_value(GgufValueType type, uint32_t depth, const std::string& key) {
    GgufValue v;
    v.type_ = type;
    auto what = [&] { return fmt::format("the value of '{}'", printable(key)); };
    switch (type) {
      case GgufValueType::u8:
        v.bits_ = r_.read<uint8_t>(what());
        break;
      case GgufValueType::i8:
        v.bits_ = static_cast<uint64_t>(int64_t{r_.read<int8_t>(what())});
        break;
      case GgufValueType::u16:
        v.bits_ = r_.read<uint16_t>(what());
        break;
      case GgufValueType::i16:
        v.bits_ = static_cast<uint64_t>(int64_t{r_.read<int16_t>(what())});
        break;
      case GgufValueType::u32:
        v.bits_ = r_.read<uint32_t>(what());
        break;
      case GgufValueType::i32:
        v.bits_ = static_cast<uint64_t>(int64_t{r_.read<int32_t>(what())});
        break;
      case GgufValueType::u64:
        v.bits_ = r_.read<uint64_t>(what());
        break;
      case GgufValueType::i64:
        v.bits_ = static_cast<uint64_t>(r_.read<int64_t>(what()));
        break;
      case GgufValueType::f32: {
        double d = r_.read<float>(what());
        std::memcpy(&v.bits_, &d, 8);
        break;
      }
      case GgufValueType::f64: {
        double d = r_.read<double>(what());
        std::memcpy(&v.bits_, &d, 8);
        break;
      }
      case GgufValueType::boolean: {
        uint8_t b = r_.read<uint8_t>(what());
        if (b > 1)
          format_fail(r_.path(), "bool value of '{}' is {}, not 0 or 1", printable(key), b);
        v.bits_ = b;
        break;
      }
      case GgufValueType::string:
        v.string_ = read_string(what());
        break;
      case GgufValueType::array:
        read_array(v, depth, key);
        break;
    }
    return v;
  }

  void read_array(GgufValue& v, uint32_t depth, const std::string& key) {
    if (depth >= kMaxNesting)
      format_fail(r_.path(), "metadata key '{}' nests arrays more than {} deep", printable(key),
                  kMaxNesting);
    v.array_type_ = read_type(fmt::format("array element of '{}'", printable(key)));
    uint64_t count = r_.read<uint64_t>("an array length");
    std::string what = fmt::format("array '{}' element", printable(key));
    if (size_t w = scalar_width(v.array_type_)) {
      r_.check_count(count, w, what);
      const uint8_t* p = r_.bytes(count * w, what);
      if (v.array_type_ == GgufValueType::boolean)
        for (uint64_t i = 0; i < count; ++i)
          if (p[i] > 1)
            format_fail(r_.path(), "bool element {} of '{}' is {}, not 0 or 1", i, printable(key),
                        p[i]);
      v.raw_.assign(p, p + count * w);
    } else if (v.array_type_ == GgufValueType::string) {
      r_.check_count(count, 8, what);
      v.strings_.reserve(count);
      for (uint64_t i = 0; i < count; ++i) v.strings_.push_back(read_string(what));
    } else {  // array of arrays: each needs at least a type and a count
      r_.check_count(count, 12, what);
      v.elements_.reserve(count);
      for (uint64_t i = 0; i < count; ++i) {
        GgufValue e;
        e.type_ = GgufValueType::array;
        read_array(e, depth + 1, key);
        v.elements_.push_back(std::move(e));
      }
    }
  }

  void read_tensor_info(uint64_t index) {
    const std::string& path = file_.source_.path();
    GgufTensorInfo t;
    t.name = read_string("a tensor name");
    const std::string name = printable(t.name);
    if (t.name.empty()) format_fail(path, "tensor {} has an empty name", index);
    uint32_t n_dims = r_.read<uint32_t>("a tensor's n_dims");
    if (n_dims > GgufFile::kMaxDims)
      format_fail(path, "tensor '{}' has {} dimensions (at most {})", name, n_dims,
                  GgufFile::kMaxDims);
    uint64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t ne = r_.read<uint64_t>("a tensor dimension");
      if (ne > static_cast<uint64_t>(INT64_MAX) || mul_overflows(numel, ne, &numel) ||
          numel > static_cast<uint64_t>(INT64_MAX))
        format_fail(path, "tensor '{}' dimension {} = {} makes the element count overflow", name, d,
                    ne);
      t.ne.push_back(ne);
    }
    uint32_t type_id = r_.read<uint32_t>("a tensor type");
    const GgmlTypeTraits* traits = ggml_type_traits(type_id);
    if (!traits) format_fail(path, "tensor '{}' has unknown ggml type id {}", name, type_id);
    t.type = traits->type;
    if (!t.ne.empty() && t.ne[0] % static_cast<uint64_t>(traits->block_size) != 0)
      format_fail(path, "tensor '{}' of type {}: ne[0] = {} is not a multiple of the block size {}",
                  name, traits->name, t.ne[0], traits->block_size);
    auto nbytes = ggml_nbytes(t.type, numel);
    if (!nbytes)
      format_fail(path, "tensor '{}' of type {} with {} elements has no valid byte size", name,
                  traits->name, numel);
    t.nbytes = *nbytes;
    t.offset = r_.read<uint64_t>("a tensor data offset");
    if (t.offset % file_.alignment_ != 0)
      format_fail(path, "tensor '{}' data offset {} is not a multiple of the alignment {}", name,
                  t.offset, file_.alignment_);
    t.shape.assign(t.ne.rbegin(), t.ne.rend());
    auto [it, inserted] = file_.tensor_index_.emplace(t.name, file_.tensors_.size());
    if (!inserted) format_fail(path, "duplicate tensor name '{}'", name);
    file_.tensors_.push_back(std::move(t));
  }

  void check_tensor_ranges() {
    const std::string& path = file_.source_.path();
    const uint64_t size = file_.source_.size();
    std::vector<const GgufTensorInfo*> by_offset;
    by_offset.reserve(file_.tensors_.size());
    for (const auto& t : file_.tensors_) {
      uint64_t begin, end;
      if (add_overflows(file_.data_offset_, t.offset, &begin) ||
          add_overflows(begin, t.nbytes, &end) || end > size)
        format_fail(path,
                    "tensor '{}' ({} bytes at data offset {}) runs past the end of the file "
                    "({} bytes, data starts at {})",
                    printable(t.name), t.nbytes, t.offset, size, file_.data_offset_);
      by_offset.push_back(&t);
    }
    std::sort(by_offset.begin(), by_offset.end(),
              [](const auto* a, const auto* b) { return a->offset < b->offset; });
    for (size_t i = 1; i < by_offset.size(); ++i) {
      const auto* prev = by_offset[i - 1];
      const auto* cur = by_offset[i];
      if (prev->offset + prev->nbytes > cur->offset && prev->nbytes > 0 && cur->nbytes > 0)
        format_fail(path, "tensors '{}' [{}, {}) and '{}' [{}, {}) overlap", printable(prev->name),
                    prev->offset, prev->offset + prev->nbytes, printable(cur->name), cur->offset,
                    cur->offset + cur->nbytes);
    }
  }

  GgufFile& file_;
  ByteReader r_;
};

// ---- GgufFile ----

int64_t GgufTensorInfo::numel() const {
  int64_t n = 1;
  for (uint64_t d : ne) n *= static_cast<int64_t>(d);
  return n;
}

int64_t GgmlTensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t GgmlTensorView::row_bytes() const {
  uint64_t cols = shape.empty() ? 1 : static_cast<uint64_t>(shape.back());
  return static_cast<int64_t>(ggml_nbytes(type, cols).value_or(0));
}

std::shared_ptr<GgufFile> GgufFile::open(const std::string& path) {
  return parse(ByteSource::map_file(path));
}

std::shared_ptr<GgufFile> GgufFile::parse(ByteSource source) {
  auto file = std::shared_ptr<GgufFile>(new GgufFile());
  file->source_ = std::move(source);
  file->source_.parse_checked([&] { GgufParser(*file).run(); });
  return file;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensorInfo& GgufFile::tensor_info(std::string_view name) const {
  const GgufTensorInfo* t = find_tensor(name);
  if (!t)
    format_fail(path(), "no tensor named '{}' ({} tensors in the file)", name, tensors_.size());
  return *t;
}

Tensor GgufFile::tensor(std::string_view name) const {
  const GgufTensorInfo& t = tensor_info(name);
  const auto& traits = ggml_type_traits(t.type);
  if (!traits.dtype)
    format_fail(path(), "tensor '{}' is quantized ({}); use raw() or dequantize()", name,
                traits.name);
  return source_.view(data_offset_ + t.offset, t.nbytes, *traits.dtype, t.shape);
}

GgmlTensorView GgufFile::raw(std::string_view name) const {
  const GgufTensorInfo& t = tensor_info(name);
  GgmlTensorView v;
  v.type = t.type;
  v.shape = t.shape;
  v.bytes =
      source_.view(data_offset_ + t.offset, t.nbytes, DType::u8, {static_cast<int64_t>(t.nbytes)});
  return v;
}

Tensor GgufFile::dequantize(std::string_view name) const {
  const GgufTensorInfo& t = tensor_info(name);
  if (!ggml_type_traits(t.type).can_dequantize)
    format_fail(path(), "tensor '{}': no f32 conversion for ggml type {}", name,
                ggml_type_name(t.type));
  Tensor out = Tensor::empty(t.shape, DType::f32);
  dequantize_row(t.type, source_.data() + data_offset_ + t.offset, t.nbytes, out.data<float>(),
                 t.numel());
  return out;
}

}  // namespace refit

#include "formats/gguf_writer.h"

#include <cstring>
#include <type_traits>

#include "core/error.h"
#include "formats/file_sink.h"

namespace refit {

GgufWriter::GgufWriter(uint32_t alignment) : alignment_(alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0)
    fail("GGUF writer: alignment {} is not a power of two", alignment);
  if (alignment != GgufFile::kDefaultAlignment) add_u32("general.alignment", alignment);
}

GgufWriter::~GgufWriter() = default;

template <typename T>
void GgufWriter::put(T v) {
  static_assert(std::is_trivially_copyable_v<T>);
  uint8_t bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));  // x86-64 and aarch64 are little-endian, like GGUF
  kv_bytes_.insert(kv_bytes_.end(), bytes, bytes + sizeof(T));
}

void GgufWriter::put_string(std::string_view s) {
  put<uint64_t>(s.size());
  kv_bytes_.insert(kv_bytes_.end(), s.begin(), s.end());
}

void GgufWriter::begin_kv(std::string_view key, GgufValueType type) {
  if (sink_) fail("GGUF writer: metadata '{}' added after the header was written", key);
  if (key.empty()) fail("GGUF writer: empty metadata key");
  if (!keys_.insert(std::string(key)).second)
    fail("GGUF writer: metadata key '{}' added twice", key);
  put_string(key);
  put<uint32_t>(static_cast<uint32_t>(type));
  ++n_kv_;
}

void GgufWriter::add_u8(std::string_view k, uint8_t v) {
  begin_kv(k, GgufValueType::u8);
  put(v);
}
void GgufWriter::add_i8(std::string_view k, int8_t v) {
  begin_kv(k, GgufValueType::i8);
  put(v);
}
void GgufWriter::add_u16(std::string_view k, uint16_t v) {
  begin_kv(k, GgufValueType::u16);
  put(v);
}
void GgufWriter::add_i16(std::string_view k, int16_t v) {
  begin_kv(k, GgufValueType::i16);
  put(v);
}
void GgufWriter::add_u32(std::string_view k, uint32_t v) {
  begin_kv(k, GgufValueType::u32);
  put(v);
}
void GgufWriter::add_i32(std::string_view k, int32_t v) {
  begin_kv(k, GgufValueType::i32);
  put(v);
}
void GgufWriter::add_u64(std::string_view k, uint64_t v) {
  begin_kv(k, GgufValueType::u64);
  put(v);
}
void GgufWriter::add_i64(std::string_view k, int64_t v) {
  begin_kv(k, GgufValueType::i64);
  put(v);
}
void GgufWriter::add_f32(std::string_view k, float v) {
  begin_kv(k, GgufValueType::f32);
  put(v);
}
void GgufWriter::add_f64(std::string_view k, double v) {
  begin_kv(k, GgufValueType::f64);
  put(v);
}
void GgufWriter::add_bool(std::string_view k, bool v) {
  begin_kv(k, GgufValueType::boolean);
  put<uint8_t>(v ? 1 : 0);
}
void GgufWriter::add_string(std::string_view k, std::string_view v) {
  begin_kv(k, GgufValueType::string);
  put_string(v);
}

template <typename T>
void GgufWriter::add_array(std::string_view key, GgufValueType elem, std::span<const T> values) {
  begin_kv(key, GgufValueType::array);
  put<uint32_t>(static_cast<uint32_t>(elem));
  put<uint64_t>(values.size());
  const auto* bytes = reinterpret_cast<const uint8_t*>(values.data());
  kv_bytes_.insert(kv_bytes_.end(), bytes, bytes + values.size_bytes());
}

void GgufWriter::add_array_strings(std::string_view key, std::span<const std::string> values) {
  begin_kv(key, GgufValueType::array);
  put<uint32_t>(static_cast<uint32_t>(GgufValueType::string));
  put<uint64_t>(values.size());
  for (const std::string& s : values) put_string(s);
}
void GgufWriter::add_array_f32(std::string_view k, std::span<const float> v) {
  add_array(k, GgufValueType::f32, v);
}
void GgufWriter::add_array_i32(std::string_view k, std::span<const int32_t> v) {
  add_array(k, GgufValueType::i32, v);
}
void GgufWriter::add_array_u32(std::string_view k, std::span<const uint32_t> v) {
  add_array(k, GgufValueType::u32, v);
}
void GgufWriter::add_array_i64(std::string_view k, std::span<const int64_t> v) {
  add_array(k, GgufValueType::i64, v);
}
void GgufWriter::add_array_u8(std::string_view k, std::span<const uint8_t> v) {
  add_array(k, GgufValueType::u8, v);
}

uint64_t GgufWriter::add_tensor(std::string_view name, GgmlType type, const Shape& shape) {
  if (sink_) fail("GGUF writer: tensor '{}' added after the header was written", name);
  if (name.empty()) fail("GGUF writer: empty tensor name");
  if (!tensor_names_.insert(std::string(name)).second)
    fail("GGUF writer: tensor '{}' added twice", name);
  if (shape.empty() || shape.size() > GgufFile::kMaxDims)
    fail("GGUF writer: tensor '{}' has {} dimensions (GGUF allows 1 to {})", name, shape.size(),
         GgufFile::kMaxDims);
  uint64_t numel = 1;
  for (int64_t d : shape) {
    if (d <= 0)
      fail("GGUF writer: tensor '{}' has a non-positive dimension in {}", name, shape_str(shape));
    numel *= static_cast<uint64_t>(d);
  }
  const GgmlTypeTraits& traits = ggml_type_traits(type);
  if (shape.back() % traits.block_size != 0)
    fail(
        "GGUF writer: tensor '{}' of type {} needs rows that are a multiple of {} values, its "
        "shape is {}",
        name, traits.name, traits.block_size, shape_str(shape));
  std::optional<uint64_t> nbytes = ggml_nbytes(type, numel);
  if (!nbytes) fail("GGUF writer: tensor '{}' {} is too large", name, shape_str(shape));
  data_bytes_ = (data_bytes_ + alignment_ - 1) / alignment_ * alignment_;
  tensors_.push_back({std::string(name), type, shape, data_bytes_, *nbytes});
  data_bytes_ += *nbytes;
  return *nbytes;
}

std::vector<uint8_t> GgufWriter::header_bytes() const {
  std::vector<uint8_t> out;
  auto put_raw = [&](const void* p, size_t n) {
    const size_t at = out.size();
    out.resize(at + n);
    std::memcpy(out.data() + at, p, n);
  };
  auto put64 = [&](uint64_t v) { put_raw(&v, 8); };
  auto put32 = [&](uint32_t v) { put_raw(&v, 4); };
  put_raw("GGUF", 4);
  put32(kVersion);
  put64(tensors_.size());
  put64(n_kv_);
  out.insert(out.end(), kv_bytes_.begin(), kv_bytes_.end());
  for (const TensorDecl& t : tensors_) {
    put64(t.name.size());
    put_raw(t.name.data(), t.name.size());
    put32(static_cast<uint32_t>(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) put64(static_cast<uint64_t>(*it));
    put32(static_cast<uint32_t>(t.type));
    put64(t.offset);
  }
  out.resize((out.size() + alignment_ - 1) / alignment_ * alignment_, 0);
  return out;
}

void GgufWriter::open(const std::string& path) {
  if (sink_) fail("GGUF writer: open('{}') while {} is still open", path, sink_->path());
  std::vector<uint8_t> header = header_bytes();
  sink_ = std::make_unique<FileSink>(path);
  sink_->write(header.data(), header.size());
  data_start_ = sink_->offset();
  next_ = 0;
}

void GgufWriter::write_tensor(std::string_view name, const void* data, size_t nbytes) {
  if (!sink_) fail("GGUF writer: write_tensor('{}') before open()", name);
  if (next_ >= tensors_.size())
    fail("{}: tensor '{}' written, but all {} declared tensors are already written", sink_->path(),
         name, tensors_.size());
  const TensorDecl& t = tensors_[next_];
  if (t.name != name)
    fail("{}: tensor '{}' written where '{}' (#{}) comes next", sink_->path(), name, t.name, next_);
  if (nbytes != t.nbytes)
    fail("{}: tensor '{}' is {} bytes, declared {} ({} {})", sink_->path(), name, nbytes, t.nbytes,
         ggml_type_name(t.type), shape_str(t.shape));
  sink_->pad_to(alignment_);
  REFIT_ASSERT(sink_->offset() == data_start_ + t.offset);
  sink_->write(data, nbytes);
  ++next_;
}

void GgufWriter::write_tensor(std::string_view name, const Tensor& tensor) {
  if (next_ < tensors_.size() && tensors_[next_].name == name) {
    const TensorDecl& t = tensors_[next_];
    std::optional<GgmlType> type = ggml_type_of(tensor.dtype());
    if (!type || *type != t.type || tensor.shape() != t.shape)
      fail("GGUF writer: tensor '{}' is {}{}, declared {} {}", name, dtype_name(tensor.dtype()),
           shape_str(tensor.shape()), ggml_type_name(t.type), shape_str(t.shape));
  }
  Tensor c = tensor.contiguous();
  write_tensor(name, c.raw_data(), c.nbytes());
}

void GgufWriter::finish() {
  if (!sink_) fail("GGUF writer: finish() without open()");
  if (next_ != tensors_.size())
    fail("{}: only {} of {} declared tensors were written (next: '{}')", sink_->path(), next_,
         tensors_.size(), tensors_[next_].name);
  sink_->pad_to(alignment_);  // as gguf-py: the last tensor is padded too
  sink_->finish();
  sink_.reset();
}

}  // namespace refit

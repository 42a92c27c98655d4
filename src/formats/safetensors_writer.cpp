#include "formats/safetensors_writer.h"

#include <nlohmann/json.hpp>
#include <unordered_set>

#include "core/error.h"
#include "formats/file_sink.h"

namespace refit {

std::string_view safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "F32";
    case DType::f64:
      return "F64";
    case DType::f16:
      return "F16";
    case DType::bf16:
      return "BF16";
    case DType::f8_e4m3fn:
      return "F8_E4M3";
    case DType::f8_e5m2:
      return "F8_E5M2";
    case DType::e8m0:
      return "F8_E8M0";
    case DType::i8:
      return "I8";
    case DType::u8:
      return "U8";
    case DType::i16:
      return "I16";
    case DType::i32:
      return "I32";
    case DType::i64:
      return "I64";
    case DType::boolean:
      return "BOOL";
    case DType::f4_e2m1:
      break;
  }
  fail("safetensors has no dtype for {} (store packed f4 values as U8)", dtype_name(dtype));
}

uint64_t SafetensorsEntry::nbytes() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return dtype_nbytes(dtype, n);
}

SafetensorsWriter::SafetensorsWriter(const std::string& path, std::vector<SafetensorsEntry> entries,
                                     std::map<std::string, std::string> metadata)
    : entries_(std::move(entries)) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) {
    nlohmann::json meta = nlohmann::json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = std::move(meta);
  }
  std::unordered_set<std::string> seen;
  uint64_t offset = 0;
  for (const SafetensorsEntry& e : entries_) {
    if (e.name.empty() || e.name == "__metadata__")
      fail("{}: '{}' cannot be a tensor name", path, e.name);
    if (!seen.insert(e.name).second) fail("{}: tensor '{}' is listed twice", path, e.name);
    for (int64_t d : e.shape)
      if (d < 0)
        fail("{}: tensor '{}' has a negative dimension in {}", path, e.name, shape_str(e.shape));
    const uint64_t n = e.nbytes();
    header[e.name] = {{"dtype", std::string(safetensors_dtype_name(e.dtype))},
                      {"shape", e.shape},
                      {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the reference implementation pads with spaces
  sink_ = std::make_unique<FileSink>(path);
  const uint64_t n = text.size();
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));  // little-endian
  sink_->write(len, 8);
  sink_->write(text.data(), text.size());
}

SafetensorsWriter::~SafetensorsWriter() = default;

void SafetensorsWriter::write(std::string_view name, const void* data, size_t nbytes) {
  if (!sink_) fail("safetensors writer: write('{}') after finish()", name);
  if (next_ >= entries_.size())
    fail("{}: tensor '{}' written, but all {} declared tensors are already written", sink_->path(),
         name, entries_.size());
  const SafetensorsEntry& e = entries_[next_];
  if (e.name != name)
    fail("{}: tensor '{}' written where '{}' (#{}) comes next", sink_->path(), name, e.name, next_);
  if (nbytes != e.nbytes())
    fail("{}: tensor '{}' is {} bytes, declared {} ({}{})", sink_->path(), name, nbytes, e.nbytes(),
         dtype_name(e.dtype), shape_str(e.shape));
  sink_->write(data, nbytes);
  ++next_;
}

void SafetensorsWriter::write(std::string_view name, const Tensor& tensor) {
  if (next_ < entries_.size()) {
    const SafetensorsEntry& e = entries_[next_];
    if (e.name == name && (tensor.dtype() != e.dtype || tensor.shape() != e.shape))
      fail("{}: tensor '{}' is {}{}, declared {}{}", sink_ ? sink_->path() : "", name,
           dtype_name(tensor.dtype()), shape_str(tensor.shape()), dtype_name(e.dtype),
           shape_str(e.shape));
  }
  Tensor c = tensor.contiguous();
  write(name, c.raw_data(), c.nbytes());
}

void SafetensorsWriter::finish() {
  if (!sink_) fail("safetensors writer: finish() called twice");
  if (next_ != entries_.size())
    fail("{}: only {} of {} declared tensors were written (next: '{}')", sink_->path(), next_,
         entries_.size(), entries_[next_].name);
  sink_->finish();
  sink_.reset();
}

void write_safetensors(const std::string& path,
                       std::span<const std::pair<std::string, Tensor>> tensors,
                       std::map<std::string, std::string> metadata) {
  std::vector<SafetensorsEntry> entries;
  entries.reserve(tensors.size());
  for (const auto& [name, t] : tensors) entries.push_back({name, t.dtype(), t.shape()});
  SafetensorsWriter writer(path, std::move(entries), std::move(metadata));
  for (const auto& [name, t] : tensors) writer.write(name, t);
  writer.finish();
}

}  // namespace refit

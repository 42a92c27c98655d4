#include "formats/safetensors.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "formats/json_depth.h"

namespace refit {

std::optional<DType> safetensors_dtype(std::string_view name) {
  static const std::pair<std::string_view, DType> kNames[] = {
      {"BF16", DType::bf16},
      {"F16", DType::f16},
      {"F32", DType::f32},
      {"F64", DType::f64},
      {"I8", DType::i8},
      {"U8", DType::u8},
      {"I16", DType::i16},
      {"I32", DType::i32},
      {"I64", DType::i64},
      {"BOOL", DType::boolean},
      {"F8_E4M3", DType::f8_e4m3fn},
      {"F8_E5M2", DType::f8_e5m2},
      {"F8_E8M0", DType::e8m0},
  };
  for (const auto& [n, t] : kNames)
    if (n == name) return t;
  return std::nullopt;
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path, FileAccess access) {
  return parse(ByteSource::map_file(path, access));
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::parse(ByteSource source) {
  auto file = std::shared_ptr<SafetensorsFile>(new SafetensorsFile());
  file->source_ = std::move(source);
  file->source_.parse_checked([&] { file->parse_header(); });
  return file;
}

namespace {
uint64_t json_u64(const std::string& path, const nlohmann::json& v, std::string_view what,
                  std::string_view tensor) {
  if (!v.is_number_unsigned())
    format_fail(path, "tensor '{}': {} must be a non-negative integer, got {}", printable(tensor),
                what, printable(v.dump()));
  return v.get<uint64_t>();
}
}  // namespace

void SafetensorsFile::parse_header() {
  const std::string& path = source_.path();
  ByteReader r(source_.data(), source_.size(), path);
  const uint64_t n = r.read<uint64_t>("the safetensors header length");
  if (n < 2) format_fail(path, "header length {} is too small for a JSON object", n);
  if (n > kMaxHeaderBytes)
    format_fail(path, "header length {} exceeds the {} byte limit", n, kMaxHeaderBytes);
  if (n > r.remaining())
    format_fail(path, "header length {} runs past the end of the file ({} bytes)", n,
                source_.size());
  const char* text = reinterpret_cast<const char*>(r.bytes(n, "the JSON header"));
  data_offset_ = 8 + n;
  const uint64_t data_size = source_.size() - data_offset_;

  nlohmann::json header;
  try {
    // Reject duplicate tensor names (the parser would silently keep the last one).
    std::unordered_map<std::string, int> seen;
    auto on_event = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
      if (depth == 1 && event == nlohmann::json::parse_event_t::key) {
        const auto& key = parsed.get_ref<const std::string&>();
        if (++seen[key] > 1) format_fail(path, "duplicate tensor name '{}'", printable(key));
      }
      return true;
    };
    header = parse_json_limited(text, text + n, path + " header", on_event);
  } catch (const nlohmann::json::exception& e) {
    format_fail(path, "header is not valid JSON: {}", e.what());
  }
  if (!header.is_object())
    format_fail(path, "header must be a JSON object, got {}", header.type_name());

  tensors_.reserve(header.size());
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) format_fail(path, "__metadata__ must be an object");
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string())
          format_fail(path, "__metadata__ value of '{}' must be a string, got {}", printable(k),
                      v.type_name());
        metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    const std::string pname = printable(name);
    if (name.empty()) format_fail(path, "a tensor has an empty name");
    if (!entry.is_object()) format_fail(path, "tensor '{}': entry must be an object", pname);
    for (const char* field : {"dtype", "shape", "data_offsets"})
      if (!entry.contains(field)) format_fail(path, "tensor '{}': missing '{}'", pname, field);
    const auto& jd = entry["dtype"];
    if (!jd.is_string()) format_fail(path, "tensor '{}': dtype must be a string", pname);
    const std::string dname = jd.get<std::string>();
    auto dtype = safetensors_dtype(dname);
    if (!dtype)
      format_fail(path, "tensor '{}': unknown or unsupported dtype '{}'", pname, printable(dname));

    SafetensorsTensorInfo t;
    t.name = name;
    t.dtype = *dtype;
    const auto& js = entry["shape"];
    if (!js.is_array()) format_fail(path, "tensor '{}': shape must be an array", pname);
    if (js.size() > 8)
      format_fail(path, "tensor '{}': {} dimensions is too many", pname, js.size());
    uint64_t numel = 1;
    for (const auto& d : js) {
      uint64_t dim = json_u64(path, d, "a shape dimension", name);
      if (mul_overflows(numel, dim, &numel) || numel > static_cast<uint64_t>(INT64_MAX))
        format_fail(path, "tensor '{}': shape {} overflows", pname, printable(js.dump()));
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    const auto& jo = entry["data_offsets"];
    if (!jo.is_array() || jo.size() != 2)
      format_fail(path, "tensor '{}': data_offsets must be [begin, end]", pname);
    t.begin = json_u64(path, jo[0], "data_offsets[0]", name);
    t.end = json_u64(path, jo[1], "data_offsets[1]", name);
    if (t.begin > t.end)
      format_fail(path, "tensor '{}': data_offsets [{}, {}] has begin after end", pname, t.begin,
                  t.end);
    if (t.end > data_size)
      format_fail(path, "tensor '{}': data_offsets [{}, {}] run past the data section ({} bytes)",
                  pname, t.begin, t.end, data_size);
    uint64_t bits;
    if (mul_overflows(numel, static_cast<uint64_t>(dtype_bits(t.dtype)), &bits))
      format_fail(path, "tensor '{}': shape {} overflows", pname, shape_str(t.shape));
    const uint64_t want = (bits + 7) / 8;
    if (want != t.nbytes())
      format_fail(path, "tensor '{}': shape {} of {} needs {} bytes, data_offsets give {}", pname,
                  shape_str(t.shape), dname, want, t.nbytes());
    tensors_.push_back(std::move(t));
  }

  std::sort(tensors_.begin(), tensors_.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (i > 0 && tensors_[i - 1].end > tensors_[i].begin)
      format_fail(path, "tensors '{}' [{}, {}) and '{}' [{}, {}) overlap",
                  printable(tensors_[i - 1].name), tensors_[i - 1].begin, tensors_[i - 1].end,
                  printable(tensors_[i].name), tensors_[i].begin, tensors_[i].end);
    index_.emplace(tensors_[i].name, i);
  }
}

const SafetensorsTensorInfo* SafetensorsFile::find_tensor(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const SafetensorsTensorInfo& SafetensorsFile::tensor_info(std::string_view name) const {
  const auto* t = find_tensor(name);
  if (!t)
    format_fail(path(), "no tensor named '{}' ({} tensors in the file)", name, tensors_.size());
  return *t;
}

Tensor SafetensorsFile::tensor(std::string_view name) const {
  const auto& t = tensor_info(name);
  return source_.view(data_offset_ + t.begin, t.nbytes(), t.dtype, t.shape);
}

}  // namespace refit

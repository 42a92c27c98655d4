#include "server/weight_carrier.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <memory>

#include "core/bulk_bytes.h"
#include "core/error.h"
#include "server/api_types.h"
#include "server/base64.h"
#include "server/shm_segment.h"

namespace refit {

using nlohmann::json;

namespace {

constexpr const char* kField = "serialized_named_tensors";

[[noreturn]] void bad(const std::string& where, const std::string& what) {
  throw HttpError{400, where + ": " + what, "invalid_request_error", kField, {}};
}

// Why a pickle cannot be read here, and what to send instead.
[[noreturn]] void refuse_pickle(const std::string& where) {
  bad(where,
      "this is a Python pickle (SGLang's MultiprocessingSerializer output). Its tensors are CUDA "
      "IPC handles or "
      "shared-memory file descriptors, which only a process on the same GPU or in the same process "
      "tree can "
      "open; they cannot cross to a CPU engine over HTTP. Send refit's CPU carrier instead: for "
      "load_format "
      "'flattened_bucket' {\"flattened_tensor\": <base64 bytes> or {\"shm\": \"/dev/shm/NAME\", "
      "\"offset\", "
      "\"nbytes\"}, \"metadata\": [{name, shape, dtype, start_idx, end_idx, numel}, ...]}, for "
      "load_format null a "
      "list of {name, dtype, shape, data (base64)}; python/refit/weight_bucket.py builds both from "
      "torch tensors");
}

// An entry as JSON: the value itself, or base64 of JSON text. A pickle is refused by its
// protocol marker (0x80), whether sent as base64 or as a latin-1 string.
json entry_json(const json& e, const std::string& where) {
  if (e.is_object() || e.is_array()) return e;
  if (!e.is_string())
    bad(where,
        fmt::format("must be a JSON object or list, or base64 of one, not {}", e.type_name()));
  const std::string& s = e.get_ref<const std::string&>();
  if (s.starts_with("\xC2\x80")) refuse_pickle(where);
  std::string bytes;
  try {
    bytes = base64_decode(s);
  } catch (const Error& err) {
    bad(where,
        fmt::format("a string entry must be base64 (of refit's JSON carrier): {}", err.what()));
  }
  if (!bytes.empty() && static_cast<unsigned char>(bytes[0]) == 0x80) refuse_pickle(where);
  const size_t first = bytes.find_first_not_of(" \t\r\n");
  if (first == std::string::npos || (bytes[first] != '{' && bytes[first] != '['))
    bad(where, fmt::format("decodes to {} bytes that are neither a pickle nor refit's JSON carrier",
                           bytes.size()));
  try {
    return parse_json_body(bytes);  // the body's depth limit holds inside an entry too
  } catch (const HttpError& err) {
    bad(where, fmt::format("decodes to text that is not a valid request: {}", err.message));
  }
}

int64_t nonnegative_int(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key)) bad(where, fmt::format("'{}' is missing", key));
  const json& v = j[key];
  const bool negative = v.is_number_integer() && !v.is_number_unsigned() && v.get<int64_t>() < 0;
  if (!v.is_number_integer() || negative)
    bad(where, fmt::format("'{}' must be a non-negative integer, not {}", key, v.dump()));
  if (v.is_number_unsigned() && v.get<uint64_t>() > (uint64_t{1} << 62))
    bad(where, fmt::format("'{}' is too large", key));
  return v.get<int64_t>();
}

Shape parse_shape(const json& t, const std::string& where) {
  if (!t.contains("shape") || !t["shape"].is_array())
    bad(where, "'shape' must be a list of non-negative integers");
  Shape shape;
  int64_t elements = 1;
  for (const json& d : t["shape"]) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0)
      bad(where, fmt::format("'shape' entries must be non-negative integers, not {}", d.dump()));
    const int64_t n = d.get<int64_t>();
    // 2^56 elements: their bytes (at up to 64 bits each) and bits stay within int64.
    if (n > 0 && elements > (int64_t{1} << 56) / n) bad(where, "'shape' has too many elements");
    elements *= n;
    shape.push_back(n);
  }
  return shape;
}

DType parse_dtype(const json& t, const std::string& where, const char* key = "dtype") {
  if (!t.contains(key) || !t[key].is_string())
    bad(where, fmt::format("'{}' must be a dtype name string", key));
  const std::string name = t[key].get<std::string>();
  auto dt = carrier_dtype(name);
  if (!dt || dtype_bits(*dt) < 8) bad(where, fmt::format("unknown dtype '{}'", name));
  return *dt;
}

int64_t elements_of(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_text(const Shape& shape) {
  return "[" + fmt::format("{}", fmt::join(shape, ", ")) + "]";
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && a.nbytes() == b.nbytes() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

// The bytes of a bucket's flattened tensor: inline base64, or a shared-memory segment.
struct Buffer {
  std::string inline_bytes;
  std::unique_ptr<ShmSegment> segment;
  const uint8_t* data = nullptr;
  size_t size = 0;
};

Buffer bucket_buffer(const json& b, const std::string& where) {
  if (!b.contains("flattened_tensor")) bad(where, "'flattened_tensor' is missing");
  const json& ft = b["flattened_tensor"];
  Buffer buf;
  if (ft.is_string()) {
    try {
      buf.inline_bytes = base64_decode(ft.get<std::string>());
    } catch (const Error& err) {
      bad(where, fmt::format("'flattened_tensor' is not base64: {}", err.what()));
    }
    buf.data = reinterpret_cast<const uint8_t*>(buf.inline_bytes.data());
    buf.size = buf.inline_bytes.size();
  } else if (ft.is_object() && ft.contains("shm") && ft["shm"].is_string()) {
    const int64_t offset =
        ft.contains("offset") ? nonnegative_int(ft, "offset", where + " flattened_tensor") : 0;
    const int64_t nbytes =
        ft.contains("nbytes") ? nonnegative_int(ft, "nbytes", where + " flattened_tensor") : -1;
    try {
      buf.segment = ShmSegment::open(ft["shm"].get<std::string>(), offset, nbytes);
    } catch (const Error& err) {
      bad(where, err.what());
    }
    buf.data = buf.segment->data();
    buf.size = buf.segment->size();
  } else {
    bad(where,
        "'flattened_tensor' must be base64 bytes or {\"shm\": NAME, \"offset\", \"nbytes\"}");
  }
  return buf;
}

NamedTensors decode_bucket(const json& b, const std::string& where) {
  if (!b.is_object())
    bad(where,
        "load_format 'flattened_bucket' takes {flattened_tensor, metadata} objects; this entry is "
        "a list "
        "(named tensors go with load_format null)");
  if (!b.contains("metadata") || !b["metadata"].is_array()) bad(where, "'metadata' must be a list");
  const json& metadata = b["metadata"];
  if (metadata.empty()) return {};  // an empty bucket: a rank with nothing to send
  const DType unit_dtype =
      b.contains("flattened_dtype") ? parse_dtype(b, where, "flattened_dtype") : DType::u8;
  const bool bytes_indexed = unit_dtype == DType::u8;
  const size_t unit = dtype_nbytes(unit_dtype, 1);
  Buffer buf = bucket_buffer(b, where);
  if (buf.size % unit != 0)
    bad(where, fmt::format("the flattened tensor's {} bytes are not a whole number of {} elements",
                           buf.size, dtype_name(unit_dtype)));
  const int64_t units = static_cast<int64_t>(buf.size / unit);
  const char* unit_name = bytes_indexed ? "bytes" : "elements";

  struct Entry {
    std::string name;
    Shape shape;
    DType dtype;
    int64_t start, end;
  };
  std::vector<Entry> entries;
  for (size_t i = 0; i < metadata.size(); ++i) {
    const json& m = metadata[i];
    if (!m.is_object() || !m.contains("name") || !m["name"].is_string())
      bad(fmt::format("{} metadata[{}]", where, i),
          "needs 'name' (string), shape, dtype, start_idx, end_idx, numel");
    Entry e;
    e.name = m["name"].get<std::string>();
    const std::string at = fmt::format("{} tensor '{}'", where, e.name);
    e.dtype = parse_dtype(m, at);
    e.shape = parse_shape(m, at);
    e.start = nonnegative_int(m, "start_idx", at);
    e.end = nonnegative_int(m, "end_idx", at);
    if (e.end < e.start) bad(at, fmt::format("end_idx {} is before start_idx {}", e.end, e.start));
    if (e.end > units)
      bad(at, fmt::format("range [{}, {}) lies outside the flattened tensor ({} {})", e.start,
                          e.end, units, unit_name));
    const int64_t span = e.end - e.start;
    if (m.contains("numel") && nonnegative_int(m, "numel", at) != span)
      bad(at, fmt::format("numel {} is not end_idx - start_idx = {}", m["numel"].dump(), span));
    const int64_t elements = elements_of(e.shape);
    if (bytes_indexed) {
      const int64_t need = static_cast<int64_t>(dtype_nbytes(e.dtype, elements));
      if (span != need)
        bad(at, fmt::format("its range holds {} bytes, but {} {} is prod(shape) = {} elements x {} "
                            "bytes = {} bytes",
                            span, dtype_name(e.dtype), shape_text(e.shape), elements,
                            dtype_bits(e.dtype) / 8, need));
    } else {
      if (e.dtype != unit_dtype)
        bad(at, fmt::format("dtype {} differs from the flattened tensor's {} (a one-dtype bucket "
                            "holds one dtype)",
                            dtype_name(e.dtype), dtype_name(unit_dtype)));
      if (span != elements)
        bad(at, fmt::format("its range holds {} elements, but shape {} has prod(shape) = {}", span,
                            shape_text(e.shape), elements));
    }
    entries.push_back(std::move(e));
  }
  // Two tensors sharing bytes would make one silently the other: refuse overlaps.
  std::vector<const Entry*> by_start;
  for (const Entry& e : entries)
    if (e.end > e.start) by_start.push_back(&e);
  std::sort(by_start.begin(), by_start.end(),
            [](const Entry* a, const Entry* b) { return a->start < b->start; });
  for (size_t i = 1; i < by_start.size(); ++i)
    if (by_start[i]->start < by_start[i - 1]->end)
      bad(where,
          fmt::format("tensors '{}' [{}, {}) and '{}' [{}, {}) overlap in the flattened tensor",
                      by_start[i - 1]->name, by_start[i - 1]->start, by_start[i - 1]->end,
                      by_start[i]->name, by_start[i]->start, by_start[i]->end));
  NamedTensors out;
  for (const Entry& e : entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype, Device::cpu(), StorageUse::overwritten);
    if (t.nbytes() > 0)
      bulk_copy(t.raw_data(), buf.data + static_cast<size_t>(e.start) * unit, t.nbytes());
    out.emplace_back(e.name, std::move(t));
  }
  if (buf.segment && buf.segment->torn())
    bad(where,
        fmt::format("shared-memory segment {} shrank while it was read", buf.segment->path()));
  return out;
}

NamedTensors decode_named_list(const json& list, const std::string& where) {
  if (!list.is_array())
    bad(where,
        "load_format null/'direct' takes a list of {name, dtype, shape, data}; this entry is an "
        "object "
        "(a {flattened_tensor, metadata} bucket goes with load_format 'flattened_bucket')");
  NamedTensors out;
  for (size_t k = 0; k < list.size(); ++k) {
    const json& t = list[k];
    Tensor x = decode_named_tensor(t, fmt::format("{}[{}]", where, k));
    out.emplace_back(t["name"].get<std::string>(), std::move(x));
  }
  return out;
}

}  // namespace

std::optional<DType> carrier_dtype(const std::string& raw) {
  std::string name = raw.starts_with("torch.") ? raw.substr(6) : raw;
  static const std::map<std::string, std::string> aliases = {{"float32", "f32"},
                                                             {"float", "f32"},
                                                             {"float16", "f16"},
                                                             {"half", "f16"},
                                                             {"bfloat16", "bf16"},
                                                             {"float64", "f64"},
                                                             {"double", "f64"},
                                                             {"float8_e4m3fn", "f8_e4m3fn"},
                                                             {"float8_e5m2", "f8_e5m2"},
                                                             {"uint8", "u8"},
                                                             {"int8", "i8"},
                                                             {"int16", "i16"},
                                                             {"int32", "i32"},
                                                             {"int64", "i64"},
                                                             {"bool", "boolean"}};
  if (auto it = aliases.find(name); it != aliases.end()) name = it->second;
  return dtype_from_name(name);
}

TensorLoadFormat tensor_load_format(const std::string& name) {
  if (name.empty()) return TensorLoadFormat::named;
  if (name == "direct") return TensorLoadFormat::direct;
  if (name == "flattened_bucket") return TensorLoadFormat::flattened_bucket;
  throw HttpError{400,
                  fmt::format("load_format '{}' is not one /update_weights_from_tensor knows "
                              "(SGLang's: null, 'direct', "
                              "'flattened_bucket')",
                              name),
                  "invalid_request_error",
                  "load_format",
                  {}};
}

Tensor decode_named_tensor(const json& t, const std::string& where) {
  if (!t.is_object() || !t.contains("name") || !t["name"].is_string() || !t.contains("data") ||
      !t["data"].is_string())
    throw HttpError{400,
                    where + " needs name (string), shape (list), data (base64 string) and dtype",
                    "invalid_request_error",
                    where,
                    {}};
  const std::string at = fmt::format("{} ('{}')", where, t["name"].get<std::string>());
  auto fail_here = [&](const std::string& what) -> void {
    throw HttpError{400, at + ": " + what, "invalid_request_error", where, {}};
  };
  // refit's schema always defaulted the dtype to f32; keep that.
  const std::string dtype_name_given =
      t.contains("dtype") && t["dtype"].is_string() ? t["dtype"].get<std::string>() : "f32";
  auto dt = carrier_dtype(dtype_name_given);
  if (!dt || dtype_bits(*dt) < 8) fail_here(fmt::format("unknown dtype '{}'", dtype_name_given));
  Shape shape;
  try {
    shape = parse_shape(t, at);
  } catch (const HttpError& e) {
    throw HttpError{400, e.message, "invalid_request_error", where, {}};
  }
  // The declared size is checked against the bytes the request carries before anything is
  // allocated: a shape is a few bytes of JSON and may claim gigabytes.
  const size_t need = dtype_nbytes(*dt, elements_of(shape));
  const std::string& text = t["data"].get_ref<const std::string&>();
  if (need > text.size() / 4 * 3 + 2)  // base64 carries at most 3 bytes per 4 characters
    fail_here(fmt::format("{} {} needs {} bytes, the data has at most {}", dtype_name_given,
                          shape_text(shape), need, text.size() / 4 * 3 + 2));
  std::string bytes;
  try {
    bytes = base64_decode(text);
  } catch (const Error& e) {
    fail_here(e.what());
  }
  if (bytes.size() != need)
    fail_here(fmt::format("{} {} needs {} bytes, the data has {}", dtype_name_given,
                          shape_text(shape), need, bytes.size()));
  Tensor out = Tensor::empty(shape, *dt, Device::cpu(), StorageUse::overwritten);
  if (!bytes.empty()) bulk_copy(out.raw_data(), bytes.data(), bytes.size());
  return out;
}

NamedTensors decode_serialized_named_tensors(const json& entries, TensorLoadFormat format) {
  if (!entries.is_array() || entries.empty())
    throw HttpError{400,
                    "'serialized_named_tensors' must be a non-empty list (SGLang sends one entry "
                    "per tensor-parallel rank)",
                    "invalid_request_error",
                    kField,
                    {}};
  NamedTensors out;
  std::map<std::string, std::pair<size_t, size_t>> seen;  // name -> (entry, index in out)
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string where = fmt::format("{}[{}]", kField, i);
    const json entry = entry_json(entries[i], where);
    NamedTensors part = format == TensorLoadFormat::flattened_bucket
                            ? decode_bucket(entry, where)
                            : decode_named_list(entry, where);
    for (auto& [name, tensor] : part) {
      if (auto it = seen.find(name); it != seen.end()) {
        if (!same_bytes(out[it->second.second].second, tensor))
          bad(where, fmt::format("tensor '{}' differs from the one in {}[{}]: refit takes each "
                                 "whole tensor once and "
                                 "slices it for its ranks itself, so every entry must carry the "
                                 "same bytes for a name",
                                 name, kField, it->second.first));
        continue;
      }
      seen.emplace(name, std::make_pair(i, out.size()));
      out.emplace_back(name, std::move(tensor));
    }
  }
  if (out.empty()) bad(kField, "no tensors: every entry is an empty bucket");
  return out;
}

}  // namespace refit

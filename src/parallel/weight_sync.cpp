#include "parallel/weight_sync.h"

#include <cstring>

#include "core/error.h"
#include "parallel/command_wire.h"

namespace refit {

std::optional<DType> dtype_from_torch_name(const std::string& given) {
  std::string name = given;
  if (name.rfind("torch.", 0) == 0) name = name.substr(6);
  static const std::pair<const char*, DType> kTorch[] = {{"float32", DType::f32},
                                                         {"float", DType::f32},
                                                         {"float64", DType::f64},
                                                         {"double", DType::f64},
                                                         {"float16", DType::f16},
                                                         {"half", DType::f16},
                                                         {"bfloat16", DType::bf16},
                                                         {"float8_e4m3fn", DType::f8_e4m3fn},
                                                         {"float8_e5m2", DType::f8_e5m2},
                                                         {"int8", DType::i8},
                                                         {"uint8", DType::u8},
                                                         {"int16", DType::i16},
                                                         {"short", DType::i16},
                                                         {"int32", DType::i32},
                                                         {"int", DType::i32},
                                                         {"int64", DType::i64},
                                                         {"long", DType::i64},
                                                         {"bool", DType::boolean}};
  for (const auto& [n, t] : kTorch)
    if (name == n) return t;
  const std::optional<DType> own = dtype_from_name(name);
  // Sub-byte refit dtypes have no torch counterpart a trainer could broadcast.
  if (own && dtype_bits(*own) % 8 == 0) return own;
  return std::nullopt;
}

// ---- the command payload (RankGroup): parallel/command_wire.h ----

std::string DistributedUpdate::encode() const {
  WireWriter w;
  w.str(group_name);
  w.i64(flattened_bucket ? 1 : 0);
  w.i64(static_cast<int64_t>(options.bits()));
  w.i64(static_cast<int64_t>(names.size()));
  for (size_t i = 0; i < names.size(); ++i) {
    w.str(names[i]);
    w.i64(static_cast<int64_t>(dtypes[i]));
    w.i64(static_cast<int64_t>(shapes[i].size()));
    for (int64_t d : shapes[i]) w.i64(d);
  }
  return w.take();
}

DistributedUpdate DistributedUpdate::decode(const std::string& payload) {
  WireReader c(payload, "weight sync");
  DistributedUpdate u;
  u.group_name = c.str();
  u.flattened_bucket = c.i64() != 0;
  u.options = UpdateOptions::from_bits(static_cast<uint64_t>(c.i64()));
  const int64_t n = c.count(int64_t{1} << 24, "tensor count");
  for (int64_t i = 0; i < n; ++i) {
    u.names.push_back(c.str());
    const int64_t dt = c.i64();
    bool known = false;
    for (DType t : kAllDTypes) known = known || static_cast<int64_t>(t) == dt;
    if (!known) fail("weight sync: unknown dtype code {} in a command", dt);
    u.dtypes.push_back(static_cast<DType>(dt));
    Shape shape(static_cast<size_t>(c.count(16, "rank")));
    for (int64_t& d : shape) d = c.i64();
    u.shapes.push_back(std::move(shape));
  }
  return u;
}

// ---- groups ----

std::string WeightSyncGroups::init(const TorchGroupOptions& options) {
  groups_.erase(options.group_name);  // a re-init replaces (closes) the old group first
  auto joined = TorchProcessGroup::join(options);
  std::string description = joined->describe();
  groups_[options.group_name] = std::move(joined);
  return description;
}

TorchProcessGroup& WeightSyncGroups::group(const std::string& name) {
  auto it = groups_.find(name);
  if (it == groups_.end()) {
    std::string known;
    for (const auto& [n, g] : groups_) known += (known.empty() ? "'" : ", '") + n + "'";
    fail("no weight update group '{}' (init it with /init_weights_update_group; joined: {})", name,
         known.empty() ? "none" : known);
  }
  return *it->second;
}

void WeightSyncGroups::destroy(const std::string& name) {
  group(name);  // throws naming the known groups
  groups_.erase(name);
}

std::vector<std::pair<std::string, Tensor>> WeightSyncGroups::receive(const DistributedUpdate& u) {
  TorchProcessGroup& g = group(u.group_name);
  std::vector<std::pair<std::string, Tensor>> out;
  out.reserve(u.names.size());
  for (size_t i = 0; i < u.names.size(); ++i)
    out.emplace_back(u.names[i], Tensor::empty(u.shapes[i], u.dtypes[i]));
  if (!u.flattened_bucket) {
    for (auto& [name, t] : out) g.broadcast(t.raw_data(), t.nbytes(), 0);
    return out;
  }
  size_t total = 0;
  for (const auto& [name, t] : out) total += t.nbytes();
  std::vector<uint8_t> bucket(total);
  g.broadcast(bucket.data(), bucket.size(), 0);
  size_t at = 0;
  for (auto& [name, t] : out) {
    std::memcpy(t.raw_data(), bucket.data() + at, t.nbytes());
    at += t.nbytes();
  }
  return out;
}

}  // namespace refit

#include "models/compressed_tensors.h"

#include <fmt/format.h>

#include <regex>
#include <set>

#include "core/error.h"

namespace refit {
namespace {

using json = nlohmann::json;

const char* const kSupported =
    "refit reads compressed-tensors FP8: weights {type float, num_bits 8, strategy tensor, "
    "channel or block 128x128}, input_activations null, {dynamic true, strategy token} or "
    "{dynamic false, strategy tensor} (static input_scale; not with block weights), "
    "format float-quantized or naive-quantized";

std::string str_or(const json& j, const char* key, const std::string& fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_string()) fail("{} must be a string, got {}", key, j[key].dump());
  return j[key].get<std::string>();
}

bool bool_or(const json& j, const char* key, bool fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_boolean()) fail("{} must be true or false, got {}", key, j[key].dump());
  return j[key].get<bool>();
}

bool present(const json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return false;
  if ((j[key].is_object() || j[key].is_array()) && j[key].empty()) return false;
  return !(j[key].is_boolean() && !j[key].get<bool>());
}

// The keys of a QuantizationArgs; anything else would be a field refit does not know.
void check_keys(const json& args, const std::string& what) {
  static const std::set<std::string> known = {
      "num_bits", "type",     "symmetric", "group_size",      "strategy",    "block_structure",
      "dynamic",  "actorder", "observer",  "observer_kwargs", "scale_dtype", "zp_dtype"};
  for (const auto& [key, value] : args.items())
    if (!known.count(key))
      fail("{}.{} is not a compressed-tensors field refit knows ({})", what, key, kSupported);
}

// QuantizationArgs.strategy as compressed-tensors infers it when absent.
std::string strategy_of(const json& args, const std::string& what) {
  std::string s = str_or(args, "strategy", "");
  const bool has_group = args.contains("group_size") && !args["group_size"].is_null();
  const int64_t group = has_group ? args["group_size"].get<int64_t>() : 0;
  if (s.empty()) s = !has_group ? "tensor" : group == -1 ? "channel" : "group";
  if (has_group && !(s == "channel" && group == -1) && s != "group" && s != "tensor_group")
    fail("{}.group_size {} with strategy '{}' is not supported ({})", what, group, s, kSupported);
  return s;
}

// Both fields refit serves as e4m3 with scales: 8-bit floats, symmetric (no zero points).
void check_fp8_args(const json& args, const std::string& what) {
  check_keys(args, what);
  const std::string type = str_or(args, "type", "int");  // QuantizationArgs' default
  const int64_t bits = args.contains("num_bits") ? args["num_bits"].get<int64_t>() : 8;
  if (type != "float")
    fail(
        "{}.type '{}' ({}-bit integer quantization: W8A8-int8, W4A16, W8A16) is not supported "
        "({})",
        what, type, bits, kSupported);
  if (bits != 8)
    fail("{}.num_bits {} (FP{}: NVFP4/MXFP4) is not supported ({})", what, bits, bits, kSupported);
  if (!bool_or(args, "symmetric", true))
    fail("{}.symmetric false (asymmetric, with zero points) is not supported ({})", what,
         kSupported);
  if (present(args, "zp_dtype"))
    fail("{}.zp_dtype {} (zero points) is not supported ({})", what, args["zp_dtype"].dump(),
         kSupported);
  if (present(args, "actorder"))
    fail("{}.actorder {} (GPTQ activation ordering) is not supported ({})", what,
         args["actorder"].dump(), kSupported);
}

// [128, 128] or "128x128".
bool is_block_128(const json& b) {
  if (b.is_array()) return b.size() == 2 && b[0] == 128 && b[1] == 128;
  return b.is_string() && b.get<std::string>() == "128x128";
}

QuantMethod weight_method(const json& w, const std::string& what) {
  if (!w.is_object())
    fail("{} is {}: weight-less groups (activation-only quantization) are not supported ({})", what,
         w.dump(), kSupported);
  check_fp8_args(w, what);
  if (present(w, "dynamic"))
    fail("{}.dynamic {} (weights quantized at run time) is not supported ({})", what,
         w["dynamic"].dump(), kSupported);
  const std::string s = strategy_of(w, what);
  if (s == "tensor") return QuantMethod::fp8_tensor;
  if (s == "channel") return QuantMethod::fp8_channel;
  if (s == "block") {
    if (!w.contains("block_structure") || !is_block_128(w["block_structure"]))
      fail("{}.block_structure {} is not supported (refit's fp8-block is 128x128; {})", what,
           w.contains("block_structure") ? w["block_structure"].dump() : "(missing)", kSupported);
    return QuantMethod::fp8_block;
  }
  fail("{}.strategy '{}' is not supported ({})", what, s, kSupported);
}

// The activations' scheme into `s` (whose weight method is set): null is W8A16; W8A8 per
// token, dynamically; or W8A8 with a static per-tensor scale (the input_scale tensors, as
// vLLM's Fp8LinearOp serves them). Anything else is refused.
void activations_of(const json& a, const std::string& what, QuantScheme& s) {
  if (a.is_null()) return;
  if (!a.is_object()) fail("{} must be an object or null, got {}", what, a.dump());
  check_fp8_args(a, what);
  const std::string strategy = strategy_of(a, what);
  if (a.contains("dynamic") && a["dynamic"].is_string())
    fail("{}.dynamic '{}' is not supported ({})", what, a["dynamic"].get<std::string>(),
         kSupported);
  const bool dynamic =
      a.contains("dynamic") && a["dynamic"].is_boolean() && a["dynamic"].get<bool>();
  if (!dynamic) {
    if (strategy != "tensor")
      fail(
          "{}: static activation scales with strategy '{}' are not supported; refit reads static "
          "per-tensor scales (strategy tensor: one input_scale per layer) ({})",
          what, strategy, kSupported);
    if (s.method == QuantMethod::fp8_block)
      fail(
          "{}: static activation scales with block weights are not supported (vLLM refuses them "
          "too; block weights take dynamic per-group activations) ({})",
          what, kSupported);
    s.w8a8 = true;
    s.static_activations = true;
    return;
  }
  if (strategy != "token")
    fail(
        "{}: dynamic activations with strategy '{}' are not supported; refit quantizes FP8 "
        "activations per token ({})",
        what, strategy, kSupported);
  s.w8a8 = true;
}

void check_format(const std::string& format, const std::string& what) {
  if (format == "float-quantized" || format == "naive-quantized") return;
  fail("{} '{}' is not supported ({})", what, format, kSupported);
}

std::vector<std::string> strings(const json& j, const std::string& what) {
  std::vector<std::string> out;
  if (j.is_null()) return out;
  if (!j.is_array()) fail("{} must be a list of strings, got {}", what, j.dump());
  for (const json& e : j) {
    if (!e.is_string()) fail("{} must be a list of strings, got {}", what, j.dump());
    out.push_back(e.get<std::string>());
  }
  return out;
}

// compressed-tensors' and vLLM's matching: "re:<pattern>" is Python's re.match (anchored at
// the start only); the class name "Linear" matches every linear layer (refit's matmul
// weights are all Linear modules in transformers); anything else is a layer name.
bool matches(const std::string& module, const std::string& target) {
  if (target.rfind("re:", 0) == 0) {
    const std::regex re(target.substr(3), std::regex::ECMAScript);
    return std::regex_search(module, re, std::regex_constants::match_continuous);
  }
  return target == "Linear" || target == module;
}

void check_regexes(const std::vector<std::string>& patterns, const std::string& what) {
  for (const std::string& p : patterns)
    if (p.rfind("re:", 0) == 0) try {
        std::regex re(p.substr(3), std::regex::ECMAScript);
      } catch (const std::regex_error& e) {
        fail("{} entry '{}' is not a regular expression refit can read ({})", what, p, e.what());
      }
}

}  // namespace

bool CompressedTensorsConfig::quantizes(const std::string& module) const {
  bool targeted = false;
  for (const std::string& t : targets) targeted = targeted || matches(module, t);
  if (!targeted) return false;
  for (const std::string& i : ignore)
    if (matches(module, i)) return false;
  return true;
}

CompressedTensorsConfig parse_compressed_tensors(const json& qc, const std::string& file) {
  const std::string at = file + ": quantization_config";
  try {
    CompressedTensorsConfig out;
    if (present(qc, "kv_cache_scheme"))
      fail(
          "kv_cache_scheme {} (an FP8 KV cache with k/v scales) is not supported: refit keeps "
          "the KV cache in f32 ({})",
          qc["kv_cache_scheme"].dump(), kSupported);
    if (present(qc, "sparsity_config"))
      fail("sparsity_config (2:4 or bitmask sparse weights) is not supported ({})", kSupported);
    if (present(qc, "transform_config"))
      fail("transform_config (rotations: QuIP, SpinQuant) is not supported ({})", kSupported);
    const std::string status = str_or(qc, "quantization_status", "compressed");
    if (status != "compressed")
      fail(
          "quantization_status '{}' is not supported: refit reads weights stored compressed "
          "({})",
          status, kSupported);
    const std::string top_format = str_or(qc, "format", "");
    if (!qc.contains("config_groups") || !qc["config_groups"].is_object() ||
        qc["config_groups"].empty())
      fail("config_groups is missing or empty ({})", kSupported);
    bool first = true;
    for (const auto& [name, group] : qc["config_groups"].items()) {
      const std::string g = "config_groups." + name;
      if (!group.is_object()) fail("{} must be an object", g);
      for (const auto& [key, value] : group.items())
        if (key != "targets" && key != "weights" && key != "input_activations" &&
            key != "output_activations" && key != "format")
          fail("{}.{} is not a compressed-tensors field refit knows ({})", g, key, kSupported);
      const std::string format = str_or(group, "format", top_format);
      if (format.empty()) fail("{} has no format, nor has quantization_config ({})", g, kSupported);
      check_format(format, group.contains("format") ? g + ".format" : "format");
      if (present(group, "output_activations"))
        fail("{}.output_activations is not supported ({})", g, kSupported);
      QuantScheme s;
      s.method =
          weight_method(group.contains("weights") ? group["weights"] : json(), g + ".weights");
      activations_of(group.contains("input_activations") ? group["input_activations"] : json(),
                     g + ".input_activations", s);
      // One scheme per model: refit fuses q/k/v and gate/up into one parameter of one scheme.
      if (!first && s != out.scheme)
        fail("{} is {} but an earlier group is {}: groups of different schemes are not supported",
             g, s.name(), out.scheme.name());
      out.scheme = s;
      first = false;
      const std::vector<std::string> targets =
          strings(group.contains("targets") ? group["targets"] : json(), g + ".targets");
      if (targets.empty()) fail("{}.targets is missing or empty", g);
      check_regexes(targets, g + ".targets");
      out.targets.insert(out.targets.end(), targets.begin(), targets.end());
    }
    out.ignore = strings(qc.contains("ignore") ? qc["ignore"] : json(), "ignore");
    check_regexes(out.ignore, "ignore");
    return out;
  } catch (const nlohmann::json::exception& e) {
    fail("{}: {} ({})", at, e.what(), kSupported);
  } catch (const Error& e) {
    fail("{} (quant_method compressed-tensors): {}", at, e.what());
  }
}

}  // namespace refit

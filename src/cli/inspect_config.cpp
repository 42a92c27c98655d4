#include "cli/inspect_config.h"

#include <fmt/format.h>

#include "core/error.h"
#include "models/config_fields.h"
#include "models/model_loader.h"
#include "models/quantize_model.h"

namespace refit::cli {
namespace {

struct ConfigSection {
  std::vector<std::string> honoured, unrecognised;
  std::string refused;  // the error, when refit refuses the config
};

ConfigSection section(const Checkpoint& checkpoint) {
  ConfigSection s;
  try {
    const ModelConfig c = read_model_config(checkpoint);
    s.honoured = describe_config(c);
    if (const std::string q = describe_quant_scheme(checkpoint_quant_scheme(checkpoint));
        !q.empty())
      s.honoured.push_back(q);
    s.unrecognised = c.unrecognised_fields;
  } catch (const Error& e) {
    s.refused = e.what();
  }
  return s;
}

}  // namespace

nlohmann::ordered_json config_section_json(const Checkpoint& checkpoint) {
  const ConfigSection s = section(checkpoint);
  nlohmann::ordered_json j;
  if (!s.refused.empty()) {
    j["refused"] = s.refused;
    return j;
  }
  j["honoured"] = s.honoured;
  j["unrecognised_ignored"] = s.unrecognised;
  return j;
}

void print_config_section(const Checkpoint& checkpoint) {
  const ConfigSection s = section(checkpoint);
  if (!s.refused.empty()) {
    fmt::print("config:        refused: {}\n", s.refused);
    return;
  }
  fmt::print("config honoured:\n");
  for (const std::string& h : s.honoured) fmt::print("  {}\n", h);
  if (s.unrecognised.empty()) {
    fmt::print("config fields not recognised: none\n");
  } else {
    fmt::print("config fields not recognised, ignored:\n");
    for (const std::string& f : s.unrecognised) fmt::print("  {}\n", f);
  }
}

}  // namespace refit::cli

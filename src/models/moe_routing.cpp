#include "models/moe_routing.h"

namespace refit {

int64_t moe_layer_count(const ModelConfig& c) {
  int64_t n = 0;
  for (int64_t l = 0; l < c.n_layers; ++l) n += c.layer(l).ffn == FfnKind::moe;
  return n;
}

int64_t moe_routing_width(const ModelConfig& c) { return moe_layer_count(c) * c.n_experts_used; }

}  // namespace refit

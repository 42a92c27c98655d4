#include "tokenizer/token_byte_bound.h"

#include <algorithm>

namespace refit {

size_t max_text_bytes_per_token(const Vocab& vocab) {
  size_t shrink = 1;
  for (const NormalizerStep& step : vocab.normalizer()) {
    switch (step.kind) {
      case NormalizerStep::Kind::nfkc:
      case NormalizerStep::Kind::nfkd:
        // Compatibility forms: MATHEMATICAL BOLD CAPITAL A (4 bytes) becomes 'A'.
        shrink *= 4;
        break;
      case NormalizerStep::Kind::nfc:
      case NormalizerStep::Kind::nfd:
      case NormalizerStep::Kind::lowercase:
        // Hangul jamo compose 9 bytes into 3; KELVIN SIGN (3 bytes) lowercases to 'k'.
        shrink *= 3;
        break;
      case NormalizerStep::Kind::prepend:
        break;  // only adds
      case NormalizerStep::Kind::replace:
        if (step.regex || step.content.empty()) return 0;
        shrink *= std::max<size_t>(
            1, (step.pattern.size() + step.content.size() - 1) / step.content.size());
        break;
      case NormalizerStep::Kind::strip:
      case NormalizerStep::Kind::strip_accents:
        return 0;
    }
  }
  size_t longest = 4;  // an unknown character
  for (TokenId id = 0; id < static_cast<TokenId>(vocab.size()); ++id) {
    if (vocab.lstrip(id) || vocab.rstrip(id)) return 0;
    longest = std::max(longest, vocab.text(id).size());
  }
  return longest * shrink;
}

}  // namespace refit

// The most bytes of input text one token can stand for: a prompt of B bytes then holds at
// least B / bound tokens, so a server can refuse a prompt that cannot fit its context from
// its length alone, before spending the tokenizer's time and memory on it. The bound is
// never too small: a prompt refused by it could not have fit.
#pragma once

#include <cstddef>

#include "tokenizer/vocab.h"

namespace refit {

// The longest token text (a token covers at most its stored text's bytes: byte-level and
// SentencePiece pieces are stored in a form at least as long as the bytes they stand for;
// one unknown character is at most 4 bytes), times how much the normalizer can shrink text
// (NFC composition and lowercasing by up to 3x, a literal Replace by pattern/content).
// 0 when nothing bounds it: a normalizer that can delete text (Strip, StripAccents, a
// Replace by "" or by a regex) or added tokens that swallow the whitespace next to them.
size_t max_text_bytes_per_token(const Vocab& vocab);

}  // namespace refit

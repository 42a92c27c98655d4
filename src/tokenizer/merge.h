// The merge loop shared by SentencePiece-style and byte-level BPE (llama.cpp's
// llm_tokenizer_spm / llm_tokenizer_bpe sessions): start from one symbol per UTF-8
// character, repeatedly merge the adjacent pair with the best (lowest) priority, leftmost
// first on ties, until no pair merges. Only the priority differs between the families:
//   SPM with scores:  -score of the merged piece (the piece must exist)
//   BPE / HF merges:   rank of the (left, right) merge
#pragma once

#include <cstdint>
#include <optional>
#include <queue>
#include <string_view>
#include <vector>

namespace refit {

// Byte length of the UTF-8 sequence a lead byte starts (1 for continuation/invalid bytes,
// so malformed text still advances one byte at a time).
inline size_t utf8_sequence_length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

// `priority(left, right)` returns the merge priority of two adjacent symbols, or nullopt
// when they do not merge. Returns the final symbols in order.
template <typename Priority>
std::vector<std::string_view> merge_symbols(std::string_view text, const Priority& priority) {
  struct Symbol {
    uint32_t start, size;
    int prev, next;
  };
  struct Candidate {
    double priority;
    int left, right;
    uint32_t size;  // left.size + right.size when queued: detects a stale candidate
  };
  struct Worse {
    bool operator()(const Candidate& a, const Candidate& b) const {
      return a.priority > b.priority || (a.priority == b.priority && a.left > b.left);
    }
  };

  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t offset = 0; offset < text.size();) {
    size_t n =
        std::min(utf8_sequence_length(static_cast<uint8_t>(text[offset])), text.size() - offset);
    int index = static_cast<int>(symbols.size());
    symbols.push_back({static_cast<uint32_t>(offset), static_cast<uint32_t>(n), index - 1,
                       offset + n == text.size() ? -1 : index + 1});
    offset += n;
  }

  std::priority_queue<Candidate, std::vector<Candidate>, Worse> queue;
  auto view = [&](const Symbol& s) { return text.substr(s.start, s.size); };
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    std::optional<double> p = priority(view(symbols[left]), view(symbols[right]));
    if (p) queue.push({*p, left, right, symbols[left].size + symbols[right].size});
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[c.left];
    Symbol& right = symbols[c.right];
    // A symbol only grows to the right, so equal total size means neither side changed.
    if (left.size == 0 || right.size == 0 || left.size + right.size != c.size) continue;
    left.size += right.size;
    right.size = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.left;
    try_add(left.prev, c.left);
    try_add(c.left, left.next);
  }

  std::vector<std::string_view> out;
  for (int i = symbols.empty() ? -1 : 0; i != -1; i = symbols[i].next)
    out.push_back(view(symbols[i]));
  return out;
}

}  // namespace refit

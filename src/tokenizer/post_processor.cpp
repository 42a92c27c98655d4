#include "tokenizer/post_processor.h"

#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace refit {

namespace {

using json = nlohmann::json;

[[noreturn]] void fail(const std::string& source, const std::string& message) {
  throw FormatError(fmt::format("{}: tokenizer.json post_processor {}", source, message));
}

TokenId checked_id(const json& id, const std::vector<std::string>& tokens, const char* what,
                   const std::string& source) {
  if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
      static_cast<uint64_t>(id.get<int64_t>()) >= tokens.size())
    fail(source, fmt::format("{} has an id {} outside the vocabulary of {} tokens", what, id.dump(),
                             tokens.size()));
  return static_cast<TokenId>(id.get<int64_t>());
}

std::string texts(const std::vector<TokenId>& ids, const std::vector<std::string>& tokens) {
  std::string out;
  for (TokenId id : ids) out += tokens[static_cast<size_t>(id)] + " ";
  return out;
}

std::string describe(const std::vector<TokenId>& prefix, const std::vector<TokenId>& suffix,
                     const std::vector<std::string>& tokens) {
  std::string s = texts(prefix, tokens) + "$A";
  if (!suffix.empty()) s += " " + texts(suffix, tokens);
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

// {"SpecialToken": {"id": "<s>"}} entries of "single", before and after {"Sequence": {"id": "A"}}.
SpecialTokenWrap template_processing(const json& p, const std::vector<std::string>& tokens,
                                     const std::string& source) {
  if (!p.contains("single") || !p["single"].is_array())
    fail(source, "TemplateProcessing has no \"single\" array");
  const json& specials = p.value("special_tokens", json::object());
  SpecialTokenWrap w;
  bool seen_sequence = false;
  for (const json& piece : p["single"]) {
    if (piece.is_object() && piece.contains("Sequence")) {
      if (seen_sequence) fail(source, "TemplateProcessing \"single\" names a sequence twice");
      seen_sequence = true;
      continue;
    }
    if (!piece.is_object() || !piece.contains("SpecialToken") ||
        !piece["SpecialToken"].contains("id") || !piece["SpecialToken"]["id"].is_string())
      fail(source, "TemplateProcessing \"single\" entry is neither SpecialToken nor Sequence");
    const std::string name = piece["SpecialToken"]["id"];
    // tokenizers takes the ids from the template's own special_tokens table, not the vocab.
    if (!specials.is_object() || !specials.contains(name) || !specials[name].contains("ids") ||
        !specials[name]["ids"].is_array())
      fail(source, fmt::format("TemplateProcessing special token '{}' is missing from "
                               "\"special_tokens\"",
                               name));
    for (const json& id : specials[name]["ids"])
      (seen_sequence ? w.suffix : w.prefix)
          .push_back(checked_id(id, tokens, "TemplateProcessing special token", source));
  }
  if (!seen_sequence) fail(source, "TemplateProcessing \"single\" has no $A sequence");
  w.description = "TemplateProcessing(" + describe(w.prefix, w.suffix, tokens) + ")";
  return w;
}

// {"cls": ["<s>", 0], "sep": ["</s>", 2]}
SpecialTokenWrap cls_sep(const json& p, const std::string& type,
                         const std::vector<std::string>& tokens, const std::string& source) {
  auto id_of = [&](const char* key) {
    if (!p.contains(key) || !p[key].is_array() || p[key].size() != 2)
      fail(source, fmt::format("{} has no [\"token\", id] \"{}\"", type, key));
    return checked_id(p[key][1], tokens, type.c_str(), source);
  };
  SpecialTokenWrap w;
  w.prefix = {id_of("cls")};
  w.suffix = {id_of("sep")};
  w.description = type + "(" + describe(w.prefix, w.suffix, tokens) + ")";
  return w;
}

SpecialTokenWrap walk(const json& p, const std::vector<std::string>& tokens,
                      const std::string& source, int depth) {
  if (p.is_null()) return {};
  if (!p.is_object() || !p.contains("type") || !p["type"].is_string())
    fail(source, "is not an object with a \"type\"");
  if (depth > 64) fail(source, "Sequence nests too deeply");
  const std::string type = p["type"];
  if (type == "TemplateProcessing") return template_processing(p, tokens, source);
  if (type == "BertProcessing" || type == "RobertaProcessing")
    return cls_sep(p, type, tokens, source);
  if (type == "ByteLevel") return {{}, {}, "ByteLevel"};
  if (type == "Sequence") {
    if (!p.contains("processors") || !p["processors"].is_array())
      fail(source, "Sequence has no \"processors\" array");
    SpecialTokenWrap w;
    std::vector<std::string> parts;
    int adders = 0;
    for (const json& inner : p["processors"]) {
      SpecialTokenWrap in = walk(inner, tokens, source, depth + 1);
      // tokenizers 0.23 returns only the special tokens, without the text's ids, when two
      // processors of a Sequence both add tokens; refused rather than reproduced or guessed.
      if (!in.prefix.empty() || !in.suffix.empty()) ++adders;
      if (adders > 1)
        fail(source, "Sequence with more than one processor that adds tokens is not supported");
      in.prefix.insert(in.prefix.end(), w.prefix.begin(), w.prefix.end());
      w.prefix = std::move(in.prefix);
      w.suffix.insert(w.suffix.end(), in.suffix.begin(), in.suffix.end());
      parts.push_back(in.description);
    }
    w.description = fmt::format("Sequence[{}]", fmt::join(parts, ", "));
    return w;
  }
  fail(source, fmt::format("'{}' is not supported (refit runs TemplateProcessing, BertProcessing, "
                           "RobertaProcessing, ByteLevel and Sequence)",
                           type));
}

}  // namespace

SpecialTokenWrap post_processor_from_hf(const json& post_processor,
                                        const std::vector<std::string>& tokens,
                                        const std::string& source) {
  SpecialTokenWrap w = walk(post_processor, tokens, source, 0);
  if (w.description.empty()) w.description = "none";
  return w;
}

void apply_bos_eos_flags(std::optional<bool> add_bos, std::optional<bool> add_eos,
                         bool default_add_bos, TokenId bos, TokenId eos,
                         const std::vector<std::string>& tokens, SpecialTokenWrap& wrap) {
  bool with_bos = add_bos.value_or(default_add_bos) && bos != kNoToken;
  bool with_eos = add_eos.value_or(false) && eos != kNoToken;
  wrap.prefix.clear();
  wrap.suffix.clear();
  if (with_bos) wrap.prefix.push_back(bos);
  if (with_eos) wrap.suffix.push_back(eos);
  wrap.description = "TemplateProcessing(" + describe(wrap.prefix, wrap.suffix, tokens) +
                     ") from tokenizer_config.json add_bos_token/add_eos_token";
}

}  // namespace refit

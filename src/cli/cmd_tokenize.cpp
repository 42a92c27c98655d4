// `refit tokenize -m PATH [--tokenizer TOK] [--no-bos] [--file F] [--decode] TEXT`: print the
// token ids of TEXT space-separated (llama.cpp's `llama-tokenize --ids`, without brackets),
// or with --decode turn ids back into text. Shares tokenize_for_cli() with the vocabulary
// tests, so what the tests check is what this prints.
#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "cli/command.h"
#include "core/error.h"
#include "tokenizer/vocab_loaders.h"

namespace refit::cli {
namespace {

struct TokenizeArgs {
  std::string model;
  std::string tokenizer;
  std::string file;
  std::string text;
  bool no_bos = false;
  bool no_parse_special = false;
  bool decode = false;
};

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot open --file", path));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

CommandRegistrar registrar{
    {"tokenize", "Print the token ids of a text (or decode ids with --decode)", [](CLI::App& sub) {
       auto args = std::make_shared<TokenizeArgs>();
       sub.add_option(
              "-m,--model", args->model,
              "GGUF (model or vocabulary-only), HF folder / tokenizer.json, or llama2.c model .bin")
           ->required();
       sub.add_option("--tokenizer", args->tokenizer,
                      "Tokenizer to use instead (llama2.c tokenizer .bin, GGUF, tokenizer.json)");
       sub.add_flag("--no-bos", args->no_bos,
                    "Do not add BOS/EOS even where the vocabulary asks for them");
       sub.add_flag("--no-parse-special", args->no_parse_special,
                    "Treat text that spells a control token (<s>, <|im_end|>) as plain text");
       sub.add_option("--file,-f", args->file, "Read the text from this file");
       sub.add_flag("--decode", args->decode,
                    "TEXT is a list of token ids; print the decoded text");
       sub.add_option("text", args->text, "Text to tokenize (or ids to decode)");
       return std::function<int()>([args] {
         std::optional<std::string> tokenizer_path;
         if (!args->tokenizer.empty()) tokenizer_path = args->tokenizer;
         auto tokenizer = load_tokenizer(args->model, tokenizer_path);
         std::string text = args->file.empty() ? args->text : read_text_file(args->file);
         if (args->decode) {
           std::string decoded = detokenize_for_cli(*tokenizer, text);
           std::fwrite(decoded.data(), 1, decoded.size(), stdout);
           std::fputc('\n', stdout);
         } else {
           fmt::print("{}\n",
                      tokenize_for_cli(*tokenizer, text, args->no_bos, !args->no_parse_special));
         }
         return 0;
       });
     }}};

}  // namespace
}  // namespace refit::cli

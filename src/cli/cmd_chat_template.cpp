// `refit chat-template -m MODEL [--chat-template FILE] [--request BODY.json] [--ids]`: print
// the prompt a /v1/chat/completions body renders to with the model's template (or its
// token ids with --ids), through the server's own code (parse_chat_input, the template
// loader, render), so what this prints is what `refit serve` feeds the model.
// --repeat N renders N times and reports the mean time per render on stderr.
#include <fmt/format.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/command.h"
#include "core/error.h"
#include "server/api_types.h"
#include "server/chat_request.h"
#include "server/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab_loaders.h"

namespace refit::cli {
namespace {

struct ChatTemplateArgs {
  std::string model;
  std::string chat_template;
  std::string request = "-";
  bool ids = false;
  int repeat = 0;
};

std::string read_request(const std::string& path) {
  std::ostringstream s;
  if (path == "-") {
    s << std::cin.rdbuf();
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(fmt::format("{}: cannot open --request", path));
    s << in.rdbuf();
  }
  return s.str();
}

int run(const ChatTemplateArgs& a) {
  std::unique_ptr<Tokenizer> tok;
  std::string bos, eos;
  try {
    tok = load_tokenizer(a.model);
  } catch (const FormatError&) {
    if (a.ids) throw;  // without --ids the template alone is enough
  }
  if (tok && tok->vocab().bos() >= 0) bos = tok->token_to_piece(tok->vocab().bos());
  if (tok && tok->vocab().eos() >= 0) eos = tok->token_to_piece(tok->vocab().eos());
  const ChatTemplate t = load_chat_template(a.model, {a.chat_template, bos, eos});
  const std::string body_text = read_request(a.request);
  ChatInput input;
  try {
    input = parse_chat_input(parse_json_body_ordered(body_text));  // the server's parser
  } catch (const HttpError& e) {
    throw Error(fmt::format("{}: {}", a.request, e.message));
  }
  const std::string prompt = t.render(input);
  if (a.repeat > 0) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < a.repeat; ++i) (void)t.render(input);
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count() /
        a.repeat;
    fmt::print(stderr, "{}: {:.1f} us per render ({} renders, {} prompt bytes)\n", t.source(), us,
               a.repeat, prompt.size());
  }
  if (a.ids) {
    std::string out;
    for (int32_t id : tok->encode(prompt, /*add_special=*/false, /*parse_special=*/true))
      out += (out.empty() ? "" : " ") + std::to_string(id);
    fmt::print("{}\n", out);
  } else {
    std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  }
  return 0;
}

CommandRegistrar registrar{
    {"chat-template", "Print the prompt a chat request renders to with the model's template",
     [](CLI::App& sub) {
       auto a = std::make_shared<ChatTemplateArgs>();
       sub.add_option("-m,--model", a->model,
                      "HF folder or GGUF file whose template (and tokenizer) to use")
           ->required();
       sub.add_option("--chat-template", a->chat_template,
                      "Use this template (a Jinja file or the text) instead of the model's");
       sub.add_option("--request", a->request,
                      "A /v1/chat/completions body (JSON file; '-': standard input)");
       sub.add_flag("--ids", a->ids, "Print the prompt's token ids instead of its text");
       sub.add_option("--repeat", a->repeat, "Render N more times and report the time per render");
       return std::function<int()>([a] { return run(*a); });
     }}};

}  // namespace
}  // namespace refit::cli

#include "chat_binding.h"

#include <pybind11/stl.h>

#include <filesystem>

#include "runtime/engine.h"
#include "server/api_types.h"
#include "server/chat_request.h"
#include "server/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace py = pybind11;

namespace refit::python {
namespace {

class PyChatTemplate {
 public:
  PyChatTemplate(const Engine& engine, const std::string& chat_template) {
    std::string bos, eos;
    if (const Tokenizer* tok = engine.tokenizer()) {
      if (tok->vocab().bos() >= 0) bos = tok->token_to_piece(tok->vocab().bos());
      if (tok->vocab().eos() >= 0) eos = tok->token_to_piece(tok->vocab().eos());
    }
    std::error_code ec;
    const std::string path =
        std::filesystem::exists(engine.description(), ec) ? engine.description() : "";
    template_ = load_chat_template(path, {chat_template, bos, eos});
  }

  // `request_json`: a /v1/chat/completions body (messages, tools, chat_template_kwargs, ...).
  // A malformed request or a template that raises is a ValueError with its message, as
  // transformers' apply_chat_template raises.
  std::string render(const std::string& request_json) const {
    try {
      return template_.render(parse_chat_input(parse_json_body_ordered(request_json)));
    } catch (const HttpError& e) {
      throw py::value_error(e.message);
    } catch (const TemplateRenderError& e) {
      throw py::value_error(e.what());
    }
  }

  const ChatTemplate& get() const { return template_; }

 private:
  ChatTemplate template_;
};

}  // namespace

void bind_chat_template(py::module_& m) {
  py::class_<PyChatTemplate>(m, "ChatTemplate",
                             "An engine's chat template (or `chat_template`: a Jinja file or the "
                             "template text), run in Jinja2 as transformers runs it.")
      .def(py::init<const Engine&, const std::string&>(), py::arg("engine"),
           py::arg("chat_template") = "")
      .def("render", &PyChatTemplate::render, py::arg("request_json"),
           "The prompt text of a chat request body (JSON text).")
      .def_property_readonly("source", [](const PyChatTemplate& t) { return t.get().source(); })
      .def_property_readonly("is_fallback",
                             [](const PyChatTemplate& t) { return t.get().is_fallback(); });
}

}  // namespace refit::python

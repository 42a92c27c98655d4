// Chat templates run in Jinja2 itself, embedded: the interpreter transformers renders them
// with, set up the way transformers' apply_chat_template sets it up (sandboxed,
// trim_blocks, lstrip_blocks, loop controls, a {% generation %} block, its tojson,
// raise_exception and strftime_now). A C++ re-implementation of Jinja would have to chase
// Python's string methods, filters and whitespace rules across every template on the
// Hub; the embedded one is byte-identical by construction. The cost is a Python
// interpreter in the process (started on the first template, about 60 ms) and a held lock
// while a prompt renders (bench/chat_template_cost.sh measures it).
//
// In the refit executable the interpreter is started here (isolated from PYTHONPATH and
// PYTHONHOME, without its signal handlers); inside the refit Python module the host
// interpreter is used as it is.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"

namespace refit {

// A template raised while rendering (raise_exception, an undefined attribute, a type
// error): the request's fault, answered with a 400 carrying `what()`.
class TemplateRenderError : public Error {
 public:
  using Error::Error;
};

class JinjaTemplate {
 public:
  // Compiles `text`; a FormatError naming `origin` and the line for a syntax error, or
  // an Error saying what to install when Jinja2 cannot be imported.
  JinjaTemplate(const std::string& text, const std::string& origin);
  ~JinjaTemplate();
  JinjaTemplate(const JinjaTemplate&) = delete;
  JinjaTemplate& operator=(const JinjaTemplate&) = delete;

  // Renders with `variables` (a JSON object, passed as keyword arguments; objects keep
  // their key order).
  // With continue_final_message the text is cut after the last message's content, as
  // transformers cuts it, so the model continues that message.
  std::string render(const nlohmann::ordered_json& variables,
                     bool continue_final_message = false) const;

  const std::string& origin() const { return origin_; }

 private:
  std::string origin_;
  void* compiled_ = nullptr;  // the jinja2.Template (a PyObject*)
};

// The Jinja2 version in use ("3.1.2"); starts the interpreter if needed.
std::string jinja_version();

}  // namespace refit

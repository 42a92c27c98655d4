// Python.h first, as the C API asks.
#define PY_SSIZE_T_CLEAN
#include <Python.h>
// clang-format off
#include "server/jinja_runtime.h"
// clang-format on

#include <fmt/format.h>

#include <mutex>

namespace refit {

namespace {

// The environment of transformers' _compile_jinja_template and the continue_final_message
// cut of its render_jinja_template, kept line for line so a prompt is what transformers
// (and so vLLM and SGLang) would feed the model.
constexpr const char* kEnvironmentSource = R"PY(
import datetime
import json

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class _Generation(Extension):
    # transformers' AssistantTracker, less the assistant-mask bookkeeping: the block
    # renders its body.
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # Jinja's own tojson HTML-escapes; transformers replaces it with json.dumps.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _strftime_now(fmt):
    return datetime.datetime.now().strftime(fmt)


class Failure(Exception):
    pass


def _env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[_Generation, loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


_ENV = _env()


def compile_template(text):
    try:
        return _ENV.from_string(text)
    except jinja2.exceptions.TemplateSyntaxError as e:
        raise Failure(f"line {e.lineno}: {e.message}") from None


def _continue_final(text, messages):
    final = messages[-1].get("content") if messages else None
    if isinstance(final, (list, tuple)):
        for block in reversed(final):
            if "text" in block:
                final = block["text"]
                break
        else:
            raise Failure("continue_final_message is set but we could not find any text to "
                          "continue in the final message")
    if not isinstance(final, str) or final.strip() not in text:
        raise Failure("continue_final_message is set but the final message does not appear in "
                      "the chat after applying the chat template")
    loc = text.rindex(final.strip())
    if text[loc:loc + len(final.lstrip())] == final:
        return text[:loc + len(final.lstrip())]
    return text[:loc + len(final.strip())]


def render(template, variables_json, continue_final):
    variables = json.loads(variables_json)
    try:
        text = template.render(**variables)
        if continue_final:
            text = _continue_final(text, variables.get("messages"))
        return text
    except Failure:
        raise
    except jinja2.exceptions.TemplateError as e:
        raise Failure(str(e)) from None
    except Exception as e:
        raise Failure(f"{type(e).__name__}: {e}") from None
)PY";

// Holds the GIL for a scope, from any thread (the server renders on its HTTP threads).
class GilScope {
 public:
  GilScope() : state_(PyGILState_Ensure()) {}
  ~GilScope() { PyGILState_Release(state_); }
  GilScope(const GilScope&) = delete;
  GilScope& operator=(const GilScope&) = delete;

 private:
  PyGILState_STATE state_;
};

std::string str_of(PyObject* o) {
  PyObject* s = o ? PyObject_Str(o) : nullptr;
  std::string out = "unknown Python error";
  if (s) {
    Py_ssize_t n = 0;
    if (const char* u = PyUnicode_AsUTF8AndSize(s, &n)) out.assign(u, static_cast<size_t>(n));
    Py_DECREF(s);
  }
  PyErr_Clear();
  return out;
}

// The pending Python exception as text (and cleared).
std::string take_error() {
  PyObject *type = nullptr, *value = nullptr, *trace = nullptr;
  PyErr_Fetch(&type, &value, &trace);
  PyErr_NormalizeException(&type, &value, &trace);
  std::string message = str_of(value);
  if (type && value && PyUnicode_Check(value) == 0) {
    PyObject* name = PyObject_GetAttrString(type, "__name__");
    const std::string type_name = name ? str_of(name) : "";
    Py_XDECREF(name);
    if (type_name != "Failure") message = type_name + ": " + message;
  }
  PyErr_Clear();
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(trace);
  return message;
}

struct Environment {
  PyObject* compile = nullptr;
  PyObject* render = nullptr;
  std::string jinja_version;
  std::string error;  // why there is no environment
};

// Runs the environment source in a module of its own; the GIL is held.
void load_environment(Environment& env) {
  PyObject* module = PyModule_New("refit_chat_template_environment");
  if (!module) {
    env.error = take_error();
    return;
  }
  PyObject* globals = PyModule_GetDict(module);  // borrowed
  PyDict_SetItemString(globals, "__builtins__", PyEval_GetBuiltins());
  PyObject* result = PyRun_String(kEnvironmentSource, Py_file_input, globals, globals);
  if (!result) {
    env.error = fmt::format(
        "chat templates run in Jinja2, which this Python cannot import ({}); install Debian's "
        "python3-jinja2 (scripts/setup.sh does)",
        take_error());
    Py_DECREF(module);
    return;
  }
  Py_DECREF(result);
  env.compile = PyDict_GetItemString(globals, "compile_template");
  env.render = PyDict_GetItemString(globals, "render");
  Py_XINCREF(env.compile);
  Py_XINCREF(env.render);
  if (PyObject* jinja = PyDict_GetItemString(globals, "jinja2")) {
    PyObject* v = PyObject_GetAttrString(jinja, "__version__");
    env.jinja_version = v ? str_of(v) : "?";
    Py_XDECREF(v);
  }
  // The module stays alive through the functions' __globals__.
  Py_DECREF(module);
}

// Started once per process. Never finalized: a template may be rendered by a server
// thread until exit, and finalizing under live threads is what the C API forbids.
Environment& environment() {
  static Environment env;
  static std::once_flag once;
  std::call_once(once, [] {
    if (Py_IsInitialized()) {  // inside the refit Python module: the host interpreter
      GilScope gil;
      load_environment(env);
      return;
    }
    PyConfig config;
    // Isolated: PYTHONPATH/PYTHONHOME of another Python on PATH must not leak in. The
    // home is the Python refit was built against, whose site adds Debian's dist-packages.
    PyConfig_InitIsolatedConfig(&config);
    config.install_signal_handlers = 0;  // SIGINT/SIGTERM stay the server's
    config.site_import = 1;
    PyStatus status = PyConfig_SetBytesString(&config, &config.home, REFIT_PYTHON_HOME);
    if (!PyStatus_Exception(status)) status = Py_InitializeFromConfig(&config);
    PyConfig_Clear(&config);
    if (PyStatus_Exception(status)) {
      env.error = fmt::format("cannot start the Python interpreter for chat templates: {}",
                              status.err_msg ? status.err_msg : "unknown error");
      return;
    }
    load_environment(env);
    PyEval_SaveThread();  // the GIL is taken per render, by whichever thread renders
  });
  if (!env.error.empty()) throw Error(env.error);
  return env;
}

PyObject* to_python(const std::string& utf8) {
  return PyUnicode_DecodeUTF8(utf8.data(), static_cast<Py_ssize_t>(utf8.size()), "strict");
}

}  // namespace

JinjaTemplate::JinjaTemplate(const std::string& text, const std::string& origin) : origin_(origin) {
  Environment& env = environment();
  GilScope gil;
  PyObject* source = to_python(text);
  if (!source) throw FormatError(fmt::format("{}: the chat template is not UTF-8", origin));
  PyObject* compiled = PyObject_CallOneArg(env.compile, source);
  Py_DECREF(source);
  if (!compiled)
    throw FormatError(
        fmt::format("{}: the chat template does not compile: {}", origin, take_error()));
  compiled_ = compiled;
}

JinjaTemplate::~JinjaTemplate() {
  if (compiled_ && Py_IsInitialized()) {
    GilScope gil;
    Py_DECREF(static_cast<PyObject*>(compiled_));
  }
}

std::string JinjaTemplate::render(const nlohmann::ordered_json& variables,
                                  bool continue_final_message) const {
  Environment& env = environment();
  std::string json_text;
  try {
    json_text = variables.dump();
  } catch (const nlohmann::ordered_json::exception& e) {
    throw TemplateRenderError(fmt::format("the chat request cannot be passed on: {}", e.what()));
  }
  GilScope gil;
  PyObject* vars = to_python(json_text);
  if (!vars) throw TemplateRenderError(take_error());
  PyObject* args = Py_BuildValue("(OOO)", static_cast<PyObject*>(compiled_), vars,
                                 continue_final_message ? Py_True : Py_False);
  Py_DECREF(vars);
  PyObject* result = args ? PyObject_CallObject(env.render, args) : nullptr;
  Py_XDECREF(args);
  if (!result) throw TemplateRenderError(take_error());
  Py_ssize_t n = 0;
  const char* utf8 = PyUnicode_AsUTF8AndSize(result, &n);
  std::string out = utf8 ? std::string(utf8, static_cast<size_t>(n)) : std::string();
  const bool ok = utf8 != nullptr;
  Py_DECREF(result);
  if (!ok) throw TemplateRenderError(take_error());
  return out;
}

std::string jinja_version() {
  Environment& env = environment();
  return env.jinja_version;
}

}  // namespace refit

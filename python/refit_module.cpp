// The `refit` Python module (built as refit/_refit*.so; refit/__init__.py re-exports it):
// drive the engine in-process from a trainer, read every tensor it owns and push new
// weights, zero-copy both ways through DLPack (law L1) and transactional (law L2).
//
// The GIL is released while the engine works (loading, generation, logits, validation
// and commits), so a Python thread can keep training while another generates; the
// engine's own lock makes a commit land between two forward passes, never inside one.
// Python objects are only touched with the GIL held: incoming tensors are imported
// before the release, and their deleters re-take the GIL (tensor_interop.cpp).
#include <fmt/format.h>
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <random>

#include "chat_binding.h"
#include "dist/communicator.h"
#include "errors.h"
#include "llm_binding.h"
#include "runtime/engine.h"
#include "tensor_interop.h"
#include "update_binding.h"
#include "weight_sync_binding.h"
#include "weights/layout_transform.h"

namespace py = pybind11;
using namespace pybind11::literals;

namespace refit::python {
namespace {

// A parameter's stored tensor with the metadata that explains it: what a trainer sends
// (logical shape and dtype, checkpoint names) and how it became the stored form
// (this rank's shard, layout transforms).
class PyParameter : public PyTensor {
 public:
  PyParameter(ParameterInfo info, std::vector<SubShard> shards)
      : PyTensor(info.tensor, info.name), info_(std::move(info)), shards_(std::move(shards)) {}
  const ParameterInfo& info() const { return info_; }
  const std::vector<SubShard>& shards() const { return shards_; }

 private:
  ParameterInfo info_;
  std::vector<SubShard> shards_;
};

// The checkpoint tensor `sub` as this rank stores it, in checkpoint orientation: a view
// of the engine's memory for the plain and transposed layouts, a plain-order copy for the
// tile-shuffled one, the decoded values (a copy) for a quantized weight.
Tensor checkpoint_view(const Parameter& p, const SubShard& sub) {
  if (p.quantized()) {
    // The values the engine computes with, in the dtype the checkpoint declared: what a
    // trainer starts from, and what update_weights_from_tensors re-quantizes.
    Tensor rows = p.dequantized(sub.local_row_offset, sub.local_rows).to(p.logical_dtype());
    return rows.shape() == sub.local_shape() ? rows : rows.reshape(sub.local_shape());
  }
  Tensor logical = p.data();
  bool copied = false;
  for (auto it = p.transforms().rbegin(); it != p.transforms().rend(); ++it) {
    switch (*it) {
      case LayoutTransform::transpose:
        logical = logical.transpose(0, 1);
        break;
      case LayoutTransform::shuffle_16x16:
        logical = unshuffle_16x16(logical);
        copied = true;
        break;
      case LayoutTransform::interleave_4x16:  // quantized weights only: decoded above
        break;
    }
  }
  Tensor rows =
      logical.dim() == 0 ? logical : logical.narrow(0, sub.local_row_offset, sub.local_rows);
  Tensor out = rows.shape() == sub.local_shape() ? rows : rows.reshape(sub.local_shape());
  if (copied) out.set_read_only(false);
  return out;
}

py::dict state_dict(Engine& engine, bool copy, const std::string& format) {
  if (engine.world_size() > 1)
    throw py::value_error(
        fmt::format("state_dict: rank {} of {} holds only its shard of each tensor; gather "
                    "across ranks, or use named_parameters() for the local shards",
                    engine.rank(), engine.world_size()));
  py::dict out;
  for (const auto& p : engine.model().parameters().all())
    for (const SubShard& sub : p->sub_shards()) {
      Tensor t = checkpoint_view(*p, sub);
      if (t.shape() != sub.checkpoint_shape)
        throw Error(fmt::format("state_dict: '{}' has local shape {} but checkpoint shape {}",
                                sub.checkpoint_name, shape_str(t.shape()),
                                shape_str(sub.checkpoint_shape)));
      out[py::str(sub.checkpoint_name)] = export_tensor(copy ? t.clone() : t, format);
    }
  return out;
}

struct GenerateOutput {
  std::vector<int32_t> ids;         // generated ids (the stop token included when hit)
  std::vector<int32_t> prompt_ids;  // what was fed, after tokenization
  std::optional<std::string> text;  // decoded ids; None without a tokenizer
  uint64_t weight_version = 0;      // every token was computed with this version
  std::string finish_reason;        // "length", "stop"
  uint64_t seed = 0;
  double prefill_seconds = 0, decode_seconds = 0;
};

// Decoded text as a Python str: bytes that are not UTF-8 (a random model's byte tokens, a
// character cut by max_tokens) become U+FFFD instead of failing the whole call.
py::str utf8_text(const std::string& bytes) {
  PyObject* s =
      PyUnicode_DecodeUTF8(bytes.data(), static_cast<Py_ssize_t>(bytes.size()), "replace");
  if (!s) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(s);
}

py::object optional_text(const std::optional<std::string>& text) {
  return text ? py::object(utf8_text(*text)) : py::object(py::none());
}

std::string fspath(py::handle path) {
  return py::str(py::module_::import("os").attr("fspath")(path));
}

std::vector<int32_t> token_ids(py::handle object, int64_t vocab_size, const char* what) {
  py::object seq = py::reinterpret_borrow<py::object>(object);
  if (py::hasattr(seq, "tolist") && !py::isinstance<py::list>(seq)) seq = seq.attr("tolist")();
  std::vector<int32_t> ids;
  try {
    ids = seq.cast<std::vector<int32_t>>();
  } catch (const py::cast_error&) {
    throw py::type_error(
        fmt::format("{}: expected a string or a sequence of token ids (ints), got {}", what,
                    py::str(py::type::of(object).attr("__name__")).cast<std::string>()));
  }
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= vocab_size)
      throw py::value_error(
          fmt::format("{}: token id {} at index {} is outside the vocabulary (size {})", what,
                      ids[i], i, vocab_size));
  return ids;
}

std::unique_ptr<Engine> make_engine(py::object model_path, int tp, py::object quant,
                                    py::object threads, py::object tokenizer, py::object layout,
                                    const std::string& generation_config) {
  EngineOptions options;
  options.generation_config = generation_config;
  if (!model_path.is_none()) options.model_path = fspath(model_path);
  if (!tokenizer.is_none()) options.tokenizer_path = fspath(tokenizer);
  if (!quant.is_none()) options.quant = quant.cast<std::string>();
  if (!layout.is_none()) options.layout = layout.cast<std::string>();
  if (!threads.is_none()) {
    options.threads = threads.cast<int>();
    if (options.threads < 1)
      throw py::value_error(fmt::format("threads must be >= 1, got {}", options.threads));
  }
  if (tp < 1) throw py::value_error(fmt::format("tp must be >= 1, got {}", tp));
  options.tp = tp;
  if (tp > 1) {
    // One process per rank, as for the CLI: `mpirun -np N python3 trainer.py`.
    options.communicator = mpi_communicator_if_launched();
    if (!options.communicator)
      throw py::value_error(fmt::format(
          "tp={} runs one process per rank: start Python as `mpirun -np {} python3 ...`{}", tp, tp,
          built_with_mpi() ? ""
                           : " (and this build has no MPI: install libopenmpi-dev and rebuild)"));
  }
  py::gil_scoped_release release;
  return std::make_unique<Engine>(options);
}

GenerateOutput generate(Engine& engine, py::handle prompt, int64_t max_tokens, float temperature,
                        py::object seed, int top_k, float top_p, float min_p,
                        float repetition_penalty, int repeat_last_n, py::object stop,
                        bool ignore_eos, bool add_special) {
  const Tokenizer* tokenizer = engine.tokenizer();
  const int64_t vocab = engine.config().vocab_size;
  GenerateRequest request;
  if (py::isinstance<py::str>(prompt)) {
    if (!tokenizer)
      throw py::value_error(
          "generate: this model has no tokenizer; pass token ids (or Engine(tokenizer=...))");
    request.prompt =
        tokenizer->encode(prompt.cast<std::string>(), add_special, /*parse_special=*/false);
    if (request.prompt.empty()) request.prompt.push_back(engine.config().bos_id);
  } else {
    request.prompt = token_ids(prompt, vocab, "generate: prompt");
    if (request.prompt.empty()) throw py::value_error("generate: the prompt has no tokens");
  }
  if (max_tokens < 0)
    throw py::value_error(fmt::format("generate: max_tokens must be >= 0, got {}", max_tokens));
  request.max_tokens = max_tokens;
  SamplingParams& s = request.sampling;
  s.temperature = temperature;
  s.top_k = top_k;
  s.top_p = top_p;
  s.min_p = min_p;
  s.repetition_penalty = repetition_penalty;
  s.repeat_last_n = repeat_last_n;
  s.seed = seed.is_none() ? std::random_device{}() : seed.cast<uint64_t>();
  try {
    s.validate();
  } catch (const Error& e) {
    throw py::value_error(fmt::format("generate: {}", e.what()));
  }

  // stop: token ids end generation after the token; strings end it when the decoded text
  // contains them (the text is cut before the match, the ids keep the last token).
  std::vector<std::string> stop_strings;
  if (!stop.is_none()) {
    py::list items = py::isinstance<py::str>(stop) || py::isinstance<py::int_>(stop)
                         ? py::list(py::make_tuple(stop))
                         : py::list(stop);
    for (py::handle item : items) {
      if (py::isinstance<py::int_>(item)) {
        request.stop_tokens.push_back(token_ids(py::make_tuple(item), vocab, "generate: stop")[0]);
      } else if (py::isinstance<py::str>(item)) {
        if (!tokenizer)
          throw py::value_error("generate: stop strings need a tokenizer; pass stop token ids");
        std::string text = item.cast<std::string>();
        if (text.empty())
          throw py::value_error("generate: an empty stop string would stop at once");
        stop_strings.push_back(std::move(text));
      } else {
        throw py::type_error("generate: stop must be token ids (int) or strings");
      }
    }
  }
  if (!ignore_eos)  // every id the model's files name as an end (runtime/stop_tokens.h)
    request.stop_tokens.insert(request.stop_tokens.end(), engine.stop_ids().ids.begin(),
                               engine.stop_ids().ids.end());

  GenerateOutput out;
  out.prompt_ids = request.prompt;
  out.seed = s.seed;
  bool stopped_by_string = false;
  {
    py::gil_scoped_release release;
    std::string streamed;
    std::optional<StreamingDecoder> decoder;
    if (!stop_strings.empty()) decoder.emplace(*tokenizer);
    TokenCallback on_token;
    if (decoder)
      on_token = [&](int32_t token) {
        streamed += decoder->push(token);
        for (const std::string& stop_string : stop_strings)
          if (streamed.find(stop_string) != std::string::npos) {
            stopped_by_string = true;
            return false;
          }
        return true;
      };
    GenerateResult result = engine.generate(request, on_token);
    out.ids = std::move(result.tokens);
    out.weight_version = result.weight_version;
    out.finish_reason = stopped_by_string ? "stop" : result.finish_reason;
    out.prefill_seconds = result.prefill_seconds;
    out.decode_seconds = result.decode_seconds;
    if (tokenizer) {
      std::string text = tokenizer->decode(out.ids);
      for (const std::string& stop_string : stop_strings) {
        size_t at = text.find(stop_string);
        if (at != std::string::npos) text.resize(at);
      }
      out.text = std::move(text);
    }
  }
  return out;
}

py::dict config_dict(const Engine& engine) {
  const ModelConfig& c = engine.config();
  return py::dict("vocab_size"_a = c.vocab_size, "hidden_size"_a = c.dim,
                  "num_hidden_layers"_a = c.n_layers, "num_attention_heads"_a = c.n_heads,
                  "num_key_value_heads"_a = c.n_kv_heads, "intermediate_size"_a = c.ffn_dim,
                  "max_position_embeddings"_a = c.max_seq_len, "rms_norm_eps"_a = c.rms_eps,
                  "tie_word_embeddings"_a = c.tied_embeddings, "bos_token_id"_a = c.bos_id,
                  "eos_token_id"_a = c.eos_id);
}

py::tuple shape_tuple(const Shape& shape) {
  py::tuple t(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) t[i] = shape[i];
  return t;
}

void bind_tensor(py::module_& m) {
  py::class_<PyTensor>(
      m, "Tensor",
      "A tensor the engine owns, exported zero-copy: torch.from_dlpack(t) and numpy.from_dlpack(t) "
      "see the engine's memory.")
      .def("__dlpack__", &PyTensor::dlpack, py::arg("stream") = py::none(), py::kw_only(),
           py::arg("max_version") = py::none(), py::arg("dl_device") = py::none(),
           py::arg("copy") = py::none())
      .def("__dlpack_device__", &PyTensor::dlpack_device)
      .def("as_bytes", &PyTensor::as_bytes,
           "A u8 view of the same bytes (no copy), for consumers that cannot represent the dtype "
           "(float8 and float4 in PyTorch 1.13).")
      .def_property_readonly("name", &PyTensor::name)
      .def_property_readonly("shape",
                             [](const PyTensor& t) { return shape_tuple(t.tensor().shape()); })
      .def_property_readonly(
          "strides", [](const PyTensor& t) { return shape_tuple(t.tensor().strides()); },
          "Strides in elements, as torch's stride().")
      .def_property_readonly(
          "dtype", [](const PyTensor& t) { return std::string(dtype_name(t.tensor().dtype())); })
      .def_property_readonly("device", [](const PyTensor& t) { return t.tensor().device().str(); })
      .def_property_readonly(
          "layout", [](const PyTensor& t) { return std::string(layout_name(t.tensor().layout())); })
      .def_property_readonly("nbytes", [](const PyTensor& t) { return t.tensor().nbytes(); })
      .def_property_readonly("numel", [](const PyTensor& t) { return t.tensor().numel(); })
      .def_property_readonly(
          "read_only", [](const PyTensor& t) { return t.tensor().read_only(); },
          "The engine forbids writes from outside: DLPack >= 1.0 consumers receive the read-only "
          "flag. Pre-1.0 DLPack (PyTorch 1.13) cannot carry it, so writing to such a torch view "
          "bypasses the update transaction; use update_weights_from_tensors instead.")
      .def("data_ptr", &PyTensor::data_ptr,
           "The address of element 0 (what torch's data_ptr() reports).")
      .def("__repr__", &PyTensor::repr);

  py::class_<PyParameter, PyTensor>(
      m, "ParameterTensor",
      "A parameter's stored tensor (this rank's shard, after layout transforms) with "
      "the metadata a trainer needs beside it.")
      .def_property_readonly(
          "logical_shape", [](const PyParameter& p) { return shape_tuple(p.info().logical_shape); },
          "The full, unsharded shape a trainer sends (for fused parameters, the concatenation).")
      .def_property_readonly(
          "logical_dtype",
          [](const PyParameter& p) { return std::string(dtype_name(p.info().logical_dtype)); })
      .def_property_readonly(
          "checkpoint_names", [](const PyParameter& p) { return p.info().checkpoint_names; },
          "The checkpoint tensors this parameter is built from (several for fused q/k/v).")
      .def_property_readonly("sharding", [](const PyParameter& p) { return p.info().sharding; })
      .def_property_readonly(
          "transforms", [](const PyParameter& p) { return p.info().transforms; },
          "Layout transforms applied in place after loading, in order.")
      .def_property_readonly(
          "shards",
          [](const PyParameter& p) {
            py::list out;
            for (const SubShard& s : p.shards()) {
              py::list slices;
              for (const SliceRange& r : s.slices())
                slices.append(py::make_tuple(r.start, r.length));
              out.append(py::dict("checkpoint_name"_a = s.checkpoint_name,
                                  "checkpoint_shape"_a = shape_tuple(s.checkpoint_shape),
                                  "split_dim"_a = s.split_dim, "slice_start"_a = s.slice_start,
                                  "slice_length"_a = s.slice_length, "slices"_a = slices,
                                  "local_row_offset"_a = s.local_row_offset,
                                  "local_rows"_a = s.local_rows));
            }
            return out;
          },
          "Which checkpoint tensor fills which rows of this rank's (untransformed) parameter: the "
          "rows "
          "[local_row_offset, +local_rows) hold the slice [slice_start, +slice_length) along "
          "split_dim "
          "(-1: the whole tensor). A tensor the checkpoint stores fused and tensor parallelism "
          "splits "
          "(Phi-3's qkv_proj under --tp) takes several ranges: 'slices' lists every (start, "
          "length) in "
          "local row order, the first being slice_start/slice_length.");
}

void bind_engine(py::module_& m) {
  py::class_<GenerateOutput>(m, "GenerateOutput")
      .def_readonly("ids", &GenerateOutput::ids)
      .def_readonly("prompt_ids", &GenerateOutput::prompt_ids)
      .def_property_readonly("text", [](const GenerateOutput& o) { return optional_text(o.text); })
      .def_readonly("weight_version", &GenerateOutput::weight_version)
      .def_readonly("finish_reason", &GenerateOutput::finish_reason)
      .def_readonly("seed", &GenerateOutput::seed)
      .def_readonly("prefill_seconds", &GenerateOutput::prefill_seconds)
      .def_readonly("decode_seconds", &GenerateOutput::decode_seconds)
      .def("to_dict",
           [](const GenerateOutput& o) {
             return py::dict("ids"_a = o.ids, "prompt_ids"_a = o.prompt_ids,
                             "text"_a = optional_text(o.text),
                             "weight_version"_a = o.weight_version,
                             "finish_reason"_a = o.finish_reason, "seed"_a = o.seed);
           })
      .def("__getitem__",
           [](const GenerateOutput& o, const std::string& key) -> py::object {
             py::dict d = py::cast(o).attr("to_dict")();
             if (!d.contains(key)) throw py::key_error(key);
             return d[key.c_str()];
           })
      .def("__repr__", [](const GenerateOutput& o) {
        return fmt::format("GenerateOutput(ids=[{}], weight_version={}, finish_reason='{}')",
                           fmt::join(o.ids, ", "), o.weight_version, o.finish_reason);
      });

  py::class_<Engine> engine_class(
      m, "Engine", "One loaded model: generation, logits, its parameters and weight updates.");
  engine_class
      .def(py::init(&make_engine), py::arg("model_path") = py::none(), py::arg("tp") = 1,
           py::arg("quant") = py::none(), py::arg("threads") = py::none(),
           py::arg("tokenizer") = py::none(), py::arg("layout") = py::none(),
           py::arg("generation_config") = "auto",
           "model_path: a GGUF file, a Hugging Face folder or a llama2.c .bin (None: the built-in "
           "demo model). "
           "tokenizer: a tokenizer file for formats without one. layout: None or 'auto' (the "
           "fastest kernel's layout per weight), 'plain', 'transpose', 'shuffle16x16' or "
           "'interleave4x16'. generation_config: vLLM's --generation-config ('auto': the model's "
           "generation_config.json gives the defaults of unset sampling fields; 'vllm': engine "
           "defaults; or a folder holding one).")
      .def("generate", &generate, py::arg("prompt"), py::arg("max_tokens") = 128,
           py::arg("temperature") = 0.0f, py::arg("seed") = py::none(), py::arg("top_k") = 0,
           py::arg("top_p") = 1.0f, py::arg("min_p") = 0.0f, py::arg("repetition_penalty") = 1.0f,
           py::arg("repeat_last_n") = 64, py::arg("stop") = py::none(),
           py::arg("ignore_eos") = false, py::arg("add_special") = true,
           "Generates from a prompt (text, or token ids). Returns ids, text and the weight version "
           "used.")
      .def(
          "logits",
          [](Engine& engine, py::handle tokens, const std::string& format) {
            std::vector<int32_t> ids = token_ids(tokens, engine.config().vocab_size, "logits");
            Tensor out;
            {
              py::gil_scoped_release release;
              out = engine.logits(ids);
            }
            return export_tensor(out, format);
          },
          py::arg("token_ids"), py::arg("format") = "auto",
          "Teacher-forced f32 logits [T, vocab] for token_ids from position 0, zero-copy as a "
          "torch tensor "
          "(format='auto' or 'torch'), a numpy array ('numpy') or a refit.Tensor ('refit').")
      .def(
          "named_parameters",
          [](const Engine& engine) {
            py::list out;
            for (ParameterInfo& info : engine.named_parameters()) {
              std::string name = info.name;
              // A quantized weight's scales are listed beside its codes under their own
              // name ("..._scale"): derived on every load, no checkpoint tensor of their own.
              const Parameter* p = engine.model().parameters().find(name);
              std::vector<SubShard> shards = p ? p->sub_shards() : std::vector<SubShard>{};
              out.append(py::make_tuple(name, PyParameter(std::move(info), std::move(shards))));
            }
            return out;
          },
          "Every tensor the engine owns as (name, ParameterTensor): torch.from_dlpack(t) shares "
          "its memory.")
      .def("state_dict", &state_dict, py::kw_only(), py::arg("copy") = false,
           py::arg("format") = "auto",
           "{checkpoint name: tensor} in checkpoint shape and orientation, what "
           "update_weights_from_tensors "
           "takes back. Zero-copy views of the engine's memory (read-only by contract) for the "
           "plain and "
           "transposed layouts; plain-order copies for shuffle16x16; for quantized weights the "
           "decoded values "
           "(copies, in the checkpoint's dtype); copy=True always copies.")
      .def_property_readonly("rank", &Engine::rank)
      .def_property_readonly("world_size", &Engine::world_size)
      .def_property_readonly("weight_version", &Engine::weight_version)
      .def_property_readonly("config", &config_dict)
      .def_property_readonly("description", &Engine::description)
      .def_property_readonly(
          "stop_token_ids", [](const Engine& e) { return e.stop_ids().ids; },
          "Every id that ends generation unless ignore_eos: the tokenizer's eos and the "
          "eos_token_id of config.json and generation_config.json (GGUF: llama.cpp's "
          "end-of-generation tokens).")
      .def_property_readonly(
          "generation_defaults",
          [](const Engine& e) {
            return py::module_::import("json").attr("loads")(
                e.generation_defaults().fields_json().dump());
          },
          "The generation_config.json sampling defaults that apply to unset fields "
          "({'temperature': 0.6, 'max_tokens': ...}; empty under generation_config='vllm').")
      .def_property_readonly("has_tokenizer",
                             [](const Engine& e) { return e.tokenizer() != nullptr; })
      .def(
          "encode",
          [](const Engine& e, const std::string& text, bool add_special, bool parse_special) {
            if (!e.tokenizer()) throw py::value_error("encode: this model has no tokenizer");
            return e.tokenizer()->encode(text, add_special, parse_special);
          },
          py::arg("text"), py::arg("add_special") = true, py::arg("parse_special") = false)
      .def(
          "decode",
          [](const Engine& e, py::handle ids) {
            if (!e.tokenizer()) throw py::value_error("decode: this model has no tokenizer");
            return utf8_text(
                e.tokenizer()->decode(token_ids(ids, e.config().vocab_size, "decode")));
          },
          py::arg("ids"));
  bind_updates(m, engine_class);
}

}  // namespace
}  // namespace refit::python

PYBIND11_MODULE(_refit, m) {
  m.doc() =
      "refit: an LLM inference engine whose weights a trainer can replace in place, zero-copy.";
  refit::python::register_exceptions(m);
  refit::python::bind_tensor(m);
  refit::python::bind_engine(m);
  refit::python::bind_llm(m);
  refit::python::bind_chat_template(m);
  refit::python::bind_weight_sync(m);
  m.attr("has_cuda") = refit::python::build_has_cuda();
  m.def(
      "zeros",
      [](std::vector<int64_t> shape, const std::string& dtype) {
        std::optional<refit::DType> d = refit::dtype_from_name(dtype);
        if (!d) throw py::value_error(fmt::format("zeros: unknown dtype '{}'", dtype));
        return refit::python::PyTensor(refit::Tensor::zeros(std::move(shape), *d));
      },
      py::arg("shape"), py::arg("dtype") = "f32",
      "A new zero-filled tensor owned by refit, in any refit dtype (f32, bf16, f8_e4m3fn, f4_e2m1, "
      "...).");
}

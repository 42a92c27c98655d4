// The Scheduler for Python (refit._refit.Scheduler, RequestSet, Request, Detokenizer).
//
// refit/llm.py builds the vLLM-shaped API (LLM, SamplingParams, AsyncLLMEngine) on these
// four small pieces:
//   Scheduler     the server's continuous-batching loop over a paged KV cache, on one
//                 Engine: its loop thread runs every step; submit() queues a request and
//                 returns at once.
//   Request       one submitted request: its id and cancel() (the scheduler ends it with
//                 finish_reason "abort" and frees its blocks at the next step).
//   RequestSet    the requests a consumer (one generate() call, one step() loop, the async
//                 engine's pump thread) waits on: wait(timeout) blocks with the GIL
//                 released until any of them has events, and returns them all.
//   Detokenizer   incremental, UTF-8-safe text for one output (StreamingDecoder).
//
// The GIL is released whenever the binding waits (wait, run_exclusive, close), and the
// loop thread never needs it: many requests are in flight while Python threads run.
//
// RequestSpec fields travel as a dict (submit(prompt, {"max_tokens": 8, ...})): one table
// below maps each key to its field, and a key the table lacks is refused by name, so a
// sampling option the Scheduler does not implement cannot be silently dropped.
// Scheduler.supported_fields lists the keys (refit/llm.py validates against it, so a new
// RequestSpec field is wired by one row here). can_sleep and reports_rank say what the
// Scheduler offers to the Python layer (both true since the Scheduler gained them).
#include "llm_binding.h"

#include <fmt/format.h>
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "models/moe_routing.h"
#include "runtime/engine.h"
#include "runtime/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace py = pybind11;
using namespace pybind11::literals;

namespace refit::python {
namespace {

using Clock = std::chrono::steady_clock;

// ---- RequestSpec from a dict ----

struct SpecField {
  const char* name;
  void (*set)(RequestSpec&, py::handle);
};

template <typename T>
T as(py::handle v, const char* name) {
  try {
    return v.cast<T>();
  } catch (const py::cast_error&) {
    throw py::type_error(
        fmt::format("{}: expected {}, got {}", name, py::type_id<T>(),
                    py::str(py::type::of(v).attr("__name__")).cast<std::string>()));
  }
}

// Every RequestSpec (and SamplingParams) field a request may set from Python. A new
// Scheduler feature is wired up here and nowhere else in C++.
const std::vector<SpecField>& spec_fields() {
  static const std::vector<SpecField> fields = [] {
    std::vector<SpecField> f = {
        {"max_tokens",
         [](RequestSpec& s, py::handle v) { s.max_tokens = as<int64_t>(v, "max_tokens"); }},
        {"temperature", [](RequestSpec& s,
                           py::handle v) { s.sampling.temperature = as<float>(v, "temperature"); }},
        {"top_k", [](RequestSpec& s, py::handle v) { s.sampling.top_k = as<int>(v, "top_k"); }},
        {"top_p", [](RequestSpec& s, py::handle v) { s.sampling.top_p = as<float>(v, "top_p"); }},
        {"min_p", [](RequestSpec& s, py::handle v) { s.sampling.min_p = as<float>(v, "min_p"); }},
        {"repetition_penalty",
         [](RequestSpec& s, py::handle v) {
           s.sampling.repetition_penalty = as<float>(v, "repetition_penalty");
         }},
        {"repeat_last_n",
         [](RequestSpec& s, py::handle v) {
           s.sampling.repeat_last_n = as<int>(v, "repeat_last_n");
         }},
        {"seed", [](RequestSpec& s, py::handle v) { s.sampling.seed = as<uint64_t>(v, "seed"); }},
        {"stop_tokens",
         [](RequestSpec& s, py::handle v) {
           s.stop_tokens = as<std::vector<int32_t>>(v, "stop_tokens");
         }},
        {"top_logprobs",
         [](RequestSpec& s, py::handle v) { s.top_logprobs = as<int>(v, "top_logprobs"); }},
        {"restart_on_retract",
         [](RequestSpec& s, py::handle v) {
           s.restart_on_retract = as<bool>(v, "restart_on_retract");
         }},
        {"min_tokens",
         [](RequestSpec& s, py::handle v) { s.min_tokens = as<int64_t>(v, "min_tokens"); }},
        {"frequency_penalty",
         [](RequestSpec& s, py::handle v) {
           s.sampling.frequency_penalty = as<float>(v, "frequency_penalty");
         }},
        {"presence_penalty",
         [](RequestSpec& s, py::handle v) {
           s.sampling.presence_penalty = as<float>(v, "presence_penalty");
         }},
        {"prompt_logprobs_from",
         [](RequestSpec& s, py::handle v) {
           s.prompt_logprobs_from = as<int64_t>(v, "prompt_logprobs_from");
         }},
        {"prompt_top_logprobs",
         [](RequestSpec& s, py::handle v) {
           s.prompt_top_logprobs = as<int>(v, "prompt_top_logprobs");
         }},
        {"return_routed_experts",
         [](RequestSpec& s, py::handle v) {
           s.return_routed_experts = as<bool>(v, "return_routed_experts");
         }},
        // Routing replay: [positions, moe layers, k] ids (any int sequence or array; flattened).
        {"routed_experts",
         [](RequestSpec& s, py::handle v) {
           py::object flat = py::hasattr(v, "reshape") ? v.attr("reshape")(-1).attr("tolist")()
                                                       : py::reinterpret_borrow<py::object>(v);
           s.forced_experts = as<std::vector<int32_t>>(flat, "routed_experts");
         }},
        {"logprob_mode",
         [](RequestSpec& s, py::handle v) {
           try {
             s.logprob_mode = logprob_mode_from_name(as<std::string>(v, "logprob_mode"));
           } catch (const Error& e) {
             throw py::value_error(fmt::format("logprob_mode: {}", e.what()));
           }
         }},
    };
    return f;
  }();
  return fields;
}

// ---- events as tuples ----

py::object token_rank(const TokenEvent& t) {
  return t.rank > 0 ? py::object(py::int_(t.rank)) : py::object(py::none());
}

py::list top_list(const std::vector<TokenLogprob>& top) {
  py::list out;
  for (const TokenLogprob& tl : top)
    out.append(py::make_tuple(tl.token, static_cast<double>(tl.logprob)));
  return out;
}

//   (id, "token", token, logprob, weight_version, [(token, logprob), ...], rank)
//   (id, "restart")                      retracted, re-run from its prompt (drop its tokens)
//   (id, "finished", finish_reason, error, busy, cached_tokens, routed_experts)
//        routed_experts: the flat [positions, moe layers, k] ids with return_routed_experts,
//        else None
//   (id, "prompt", [(position, token, logprob, rank, [(token, logprob), ...], weight_version),
//   ...])
py::tuple event_tuple(uint64_t id, const RequestHandle::Event& e) {
  using Ev = RequestHandle::Event;
  switch (e.kind) {
    case Ev::token: {
      const TokenEvent& t = e.token_event;
      return py::make_tuple(id, "token", t.token, static_cast<double>(t.logprob), t.weight_version,
                            top_list(t.top), token_rank(t));
    }
    case Ev::restart:
      return py::make_tuple(id, "restart");
    case Ev::finished:
      return py::make_tuple(id, "finished", e.finish_reason, e.error, e.busy, e.cached_tokens,
                            e.routed_experts.empty() ? py::object(py::none())
                                                     : py::object(py::cast(e.routed_experts)));
    case Ev::prompt: {
      py::list rows;
      for (const TokenEvent& t : e.prompt_logprobs)
        rows.append(py::make_tuple(t.position, t.token, static_cast<double>(t.logprob),
                                   token_rank(t), top_list(t.top), t.weight_version));
      return py::make_tuple(id, "prompt", rows);
    }
  }
  return py::make_tuple(id, "unknown", static_cast<int>(e.kind));
}

RequestSpec spec_from(std::vector<int32_t> prompt, const py::dict& fields) {
  RequestSpec spec;
  spec.prompt = std::move(prompt);
  for (auto item : fields) {
    const std::string key = py::str(item.first);
    const auto& table = spec_fields();
    auto it =
        std::find_if(table.begin(), table.end(), [&](const SpecField& f) { return key == f.name; });
    if (it == table.end())
      throw py::value_error(
          fmt::format("'{}' is not supported by refit's Scheduler (it takes: {})", key, [&] {
            std::vector<std::string> names;
            for (const SpecField& f : table) names.emplace_back(f.name);
            return fmt::format("{}", fmt::join(names, ", "));
          }()));
    it->set(spec, item.second);
  }
  return spec;
}

// ---- Request, RequestSet ----

struct SetCore;
struct Entry;

// A request's way to its RequestSet: RequestSpec::on_event (run on the scheduler's thread
// after every event it pushes) marks the request ready in the set it was added to and
// wakes that set's waiter. Made at submit(), before any set knows the request; add()
// fills it in. Holds the set and its entry weakly (the handle holds this).
struct EventLink {
  std::mutex mutex;
  std::weak_ptr<SetCore> core;
  std::weak_ptr<Entry> entry;
  void fire();
};

struct PyRequest {
  std::shared_ptr<RequestHandle> handle;
  std::shared_ptr<EventLink> link;
  uint64_t id() const { return handle->id(); }
};

struct Entry {
  explicit Entry(std::shared_ptr<RequestHandle> h) : handle(std::move(h)) {}
  std::shared_ptr<RequestHandle> handle;
  bool ready = false;  // queued in SetCore::ready (guarded by SetCore::mutex)
};

// What one RequestSet's waiters and its requests' on_event callbacks share.
struct SetCore {
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<std::shared_ptr<Entry>> entries;  // submission order
  std::vector<std::shared_ptr<Entry>> ready;    // may have events, in the order they came
  uint64_t interrupts = 0;

  void mark_ready_locked(const std::shared_ptr<Entry>& e) {
    if (e->ready) return;
    e->ready = true;
    ready.push_back(e);
  }
};

void EventLink::fire() {
  std::shared_ptr<SetCore> c;
  std::shared_ptr<Entry> e;
  {
    std::lock_guard lock(mutex);
    c = core.lock();
    e = entry.lock();
  }
  if (!c || !e) return;  // not added to a set yet (add() looks at it then), or the set is gone
  {
    std::lock_guard lock(c->mutex);
    c->mark_ready_locked(e);
  }
  c->cv.notify_all();
}

class PyRequestSet {
 public:
  // A request belongs to one set: adding it to another moves its notifications there.
  void add(const PyRequest& r) {
    auto entry = std::make_shared<Entry>(r.handle);
    if (r.link) {
      std::lock_guard lock(r.link->mutex);
      r.link->core = core_;
      r.link->entry = entry;
    }
    {
      std::lock_guard lock(core_->mutex);
      core_->entries.push_back(entry);
      core_->mark_ready_locked(entry);  // events pushed before it was linked
    }
    core_->cv.notify_all();
  }
  size_t size() const {
    std::lock_guard lock(core_->mutex);
    return core_->entries.size();
  }
  // Wakes every wait() (they return what they have, possibly nothing).
  void interrupt() {
    {
      std::lock_guard lock(core_->mutex);
      ++core_->interrupts;
    }
    core_->cv.notify_all();
  }

  // Blocks (GIL released) until a request of the set has events, the timeout passes or
  // interrupt() is called; returns every event available then, as event_tuple()s.
  // A request leaves the set with its finished event. An empty set waits for add().
  //
  // No polling: each request's on_event marks it ready here and notifies the set's one
  // condition variable, and a wait drains only the ready requests (try_next, never a
  // timed wait), so a set of thousands of queued requests costs nothing while idle.
  py::list wait(double timeout_seconds) {
    std::vector<std::pair<uint64_t, RequestHandle::Event>> got;
    {
      py::gil_scoped_release release;
      const auto deadline =
          Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                             std::max(0.0, std::min(timeout_seconds, 1e6))));
      SetCore& c = *core_;
      std::unique_lock lock(c.mutex);
      const uint64_t interrupts = c.interrupts;
      for (;;) {
        if (!c.cv.wait_until(lock, deadline,
                             [&] { return !c.ready.empty() || c.interrupts != interrupts; }))
          break;
        if (c.interrupts != interrupts) break;
        std::vector<std::shared_ptr<Entry>> ready;
        ready.swap(c.ready);
        for (const auto& e : ready) e->ready = false;  // an event from now on marks it again
        lock.unlock();
        std::vector<const Entry*> finished;
        for (const auto& e : ready) {
          RequestHandle::Event ev;
          while (e->handle->try_next(ev)) {
            const bool done = ev.kind == RequestHandle::Event::finished;
            got.emplace_back(e->handle->id(), std::move(ev));
            if (done) {
              finished.push_back(e.get());
              break;
            }
          }
        }
        lock.lock();
        if (!finished.empty())
          c.entries.erase(std::remove_if(c.entries.begin(), c.entries.end(),
                                         [&](const std::shared_ptr<Entry>& x) {
                                           return std::find(finished.begin(), finished.end(),
                                                            x.get()) != finished.end();
                                         }),
                          c.entries.end());
        if (!got.empty()) break;  // else: woken for events another wait() took; wait on
      }
    }
    py::list out;
    for (auto& [id, e] : got) out.append(event_tuple(id, e));
    return out;
  }

 private:
  std::shared_ptr<SetCore> core_ = std::make_shared<SetCore>();
};

// ---- Scheduler ----

// What refit/llm.py's refusal says too (its _SEND_AGAIN).
constexpr const char* kSendAgain =
    "send them again (update_weights_from_tensors, update_weights_from_disk or "
    "update_weights_from_distributed) first";

class PyScheduler {
 public:
  PyScheduler(py::object engine, int64_t block_size, int64_t kv_blocks, py::object kv_memory_bytes,
              int64_t max_running, int64_t max_step_tokens, int64_t max_waiting,
              double queue_timeout, bool prefix_cache)
      : engine_obj_(std::move(engine)), engine_(engine_obj_.cast<Engine&>()) {
    if (engine_.world_size() > 1)
      throw py::value_error(
          fmt::format("the Scheduler runs one process's model; this engine is rank {} of {} "
                      "(tensor-parallel batching "
                      "from Python is not supported: use `refit serve` for tp > 1)",
                      engine_.rank(), engine_.world_size()));
    SchedulerOptions o;
    o.block_size = block_size;
    o.kv_blocks = kv_blocks;
    if (!kv_memory_bytes.is_none()) o.kv_memory_bytes = kv_memory_bytes.cast<size_t>();
    o.max_running = max_running;
    o.max_step_tokens = max_step_tokens;
    o.max_waiting = max_waiting;
    o.queue_timeout_seconds = queue_timeout;
    o.prefix_cache = prefix_cache;
    if (o.block_size <= 0)
      throw py::value_error(fmt::format("block_size must be positive, got {}", o.block_size));
    if (o.kv_blocks < 0)
      throw py::value_error(fmt::format("kv_blocks must be >= 0, got {}", o.kv_blocks));
    if (o.max_running <= 0)
      throw py::value_error(fmt::format("max_num_seqs must be positive, got {}", o.max_running));
    if (o.max_step_tokens <= 0)
      throw py::value_error(
          fmt::format("max_num_batched_tokens must be positive, got {}", o.max_step_tokens));
    if (o.max_waiting <= 0)
      throw py::value_error(fmt::format("max_waiting must be positive, got {}", o.max_waiting));
    py::gil_scoped_release release;
    scheduler_ = std::make_unique<Scheduler>(
        engine_.model(), engine_.weights_mutex(), [e = &engine_] { return e->weight_version(); },
        o);
    // Released weights (sleep(level=2)) read as zero: no request may be admitted on them,
    // whoever submits (refit/llm.py refuses first with the same words, naming its call).
    scheduler_->set_admission_check([e = &engine_] {
      if (!e->weights_released()) return;
      const std::vector<std::string> released = e->released_weights();
      if (released.empty()) return;  // sent again in between
      fail("submit: {} weights were released by sleep(level=2) and not sent again (e.g. {}); {}",
           released.size(), released.front(), kSendAgain);
    });
  }
  ~PyScheduler() { scheduler_.reset(); }  // the loop thread never takes the GIL

  Scheduler& get() {
    if (!scheduler_) throw py::value_error("the scheduler is closed");
    return *scheduler_;
  }

  PyRequest submit(py::handle prompt, const py::dict& fields) {
    std::vector<int32_t> ids = as<std::vector<int32_t>>(prompt, "prompt_token_ids");
    RequestSpec spec = spec_from(std::move(ids), fields);
    auto link = std::make_shared<EventLink>();
    spec.on_event = [link] {
      link->fire();
    };  // on the scheduler's thread: no GIL, no scheduler calls
    Scheduler& s = get();
    try {
      return PyRequest{s.submit(std::move(spec)), std::move(link)};
    } catch (const CapacityExceeded& e) {
      throw py::value_error(e.what());  // a request the cache can never hold, or a full queue
    } catch (const Error& e) {
      throw py::value_error(e.what());
    }
  }

  // Runs fn (a Python callable: a weight update) with no step in flight, as the server's
  // weight-update routes do. fn runs on this thread with the GIL; its exception is raised
  // here after generation resumes.
  double run_exclusive(const std::string& mode, const py::function& fn) {
    PauseMode m;
    try {
      m = pause_mode_from_name(mode);
    } catch (const Error& e) {
      throw py::value_error(fmt::format("mode: {}", e.what()));
    }
    Scheduler& s = get();
    std::exception_ptr python_error;
    double seconds = 0;
    try {
      py::gil_scoped_release release;
      seconds = s.run_exclusive(m, [&] {
        bool failed = false;
        {
          py::gil_scoped_acquire acquire;
          try {
            fn();
          } catch (...) {
            python_error = std::current_exception();
            failed = true;
          }
        }
        if (failed)
          throw std::runtime_error("the exclusive function raised");  // counted as a refit failure
      });
    } catch (const std::runtime_error&) {
      if (!python_error) throw;
    }
    if (python_error) std::rethrow_exception(python_error);
    return seconds;
  }

  py::dict stats() {
    SchedulerStats st = get().stats();
    return py::dict(
        "running"_a = st.running, "waiting"_a = st.waiting, "kv_blocks_used"_a = st.kv.used_blocks,
        "kv_blocks_total"_a = st.kv.total_blocks, "kv_blocks_cached"_a = st.kv.cached_blocks,
        "requests_finished"_a = st.requests_finished, "requests_aborted"_a = st.requests_aborted,
        "requests_rejected"_a = st.requests_rejected, "prompt_tokens"_a = st.prompt_tokens,
        "generated_tokens"_a = st.generated_tokens, "steps"_a = st.steps,
        "preemptions"_a = st.preemptions, "refits"_a = st.refits,
        "refit_failures"_a = st.refit_failures, "refit_seconds"_a = st.refit_seconds,
        "paused"_a = st.paused, "prefix_query_tokens"_a = st.prefix_query_tokens,
        "prefix_hit_tokens"_a = st.prefix_hit_tokens,
        "prefix_invalidations"_a = st.prefix_invalidations);
  }

  py::dict options() {
    const SchedulerOptions& o = get().options();
    return py::dict("block_size"_a = o.block_size, "kv_blocks"_a = o.kv_blocks,
                    "kv_memory_bytes"_a = o.kv_memory_bytes, "max_running"_a = o.max_running,
                    "max_step_tokens"_a = o.max_step_tokens, "max_waiting"_a = o.max_waiting,
                    "queue_timeout"_a = o.queue_timeout_seconds, "prefix_cache"_a = o.prefix_cache);
  }

  void close() {
    py::gil_scoped_release release;
    scheduler_.reset();  // pending requests end with "abort"
  }

  const py::object& engine() const { return engine_obj_; }

  // The primary end-of-sequence id (the tokenizer's, else config.json's first): vLLM reports
  // stop_reason None for it. eos_token_ids: every id generation stops on (the server's set).
  int32_t eos_token_id() const { return engine_.stop_ids().primary; }
  std::vector<int32_t> eos_token_ids() const { return engine_.stop_ids().ids; }
  // Routing replay's rows: (moe layers, experts per token); (0, 0) for a dense model.
  py::tuple routing_shape() const {
    const int64_t layers = moe_layer_count(engine_.config());
    return py::make_tuple(layers, layers > 0 ? engine_.config().n_experts_used : 0);
  }

  // vLLM's sleep(): the KV pool's memory goes back to the OS (level 1); level 2 also
  // releases the weights (they must all be sent again before generating).
  size_t sleep(int level) {
    if (level != 1 && level != 2)
      throw py::value_error(fmt::format("level must be 1 or 2, got {}", level));
    Scheduler& s = get();
    try {
      py::gil_scoped_release release;
      size_t bytes = s.release_kv_memory();
      if (level == 2) bytes += engine_.release_weights();
      return bytes;
    } catch (const Error& e) {
      throw py::value_error(e.what());
    }
  }
  void wake_up() { get().resume_kv_memory(); }
  // Checkpoint names released by sleep(level=2) and not sent again (empty: whole).
  std::vector<std::string> released_weights() const { return engine_.released_weights(); }

 private:
  py::object engine_obj_;  // keeps the Engine alive (declared first: destroyed last)
  Engine& engine_;
  std::unique_ptr<Scheduler> scheduler_;
};

// ---- Detokenizer ----

py::str utf8(const std::string& bytes) {
  PyObject* s =
      PyUnicode_DecodeUTF8(bytes.data(), static_cast<Py_ssize_t>(bytes.size()), "replace");
  if (!s) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(s);
}

class PyDetokenizer {
 public:
  PyDetokenizer(py::object engine, bool skip_special_tokens) : engine_obj_(std::move(engine)) {
    const Tokenizer* tok = engine_obj_.cast<Engine&>().tokenizer();
    if (!tok)
      throw py::value_error("this model has no tokenizer: text needs Engine(tokenizer=...)");
    DecodeOptions o;
    o.skip_special = skip_special_tokens;
    decoder_ = std::make_unique<StreamingDecoder>(*tok, o);
    tokenizer_ = tok;
  }
  py::str push(int32_t token) { return utf8(decoder_->push(token)); }
  py::str finish() { return utf8(decoder_->finish()); }
  py::str piece(int32_t token) const { return utf8(tokenizer_->token_to_piece(token)); }

 private:
  py::object engine_obj_;
  const Tokenizer* tokenizer_ = nullptr;
  std::unique_ptr<StreamingDecoder> decoder_;
};

}  // namespace

void bind_llm(py::module_& m) {
  py::class_<PyRequest>(m, "Request", "One request submitted to a Scheduler.")
      .def_property_readonly("id", &PyRequest::id)
      .def(
          "cancel", [](PyRequest& r) { r.handle->cancel(); },
          "Ends the request (finish_reason 'abort'); the scheduler frees its KV blocks at its next "
          "step.")
      .def_property_readonly("cancelled", [](const PyRequest& r) { return r.handle->cancelled(); });

  py::class_<PyRequestSet>(m, "RequestSet",
                           "Requests one consumer waits on; wait() releases the GIL.")
      .def(py::init<>())
      .def("add", &PyRequestSet::add, py::arg("request"))
      .def("wait", &PyRequestSet::wait, py::arg("timeout"),
           "Blocks (GIL released) until a request has events or `timeout` seconds pass; returns "
           "them as tuples "
           "(id, 'token', token, logprob, weight_version, top, rank), (id, 'restart'), (id, "
           "'prompt', rows) or "
           "(id, 'finished', reason, error, busy, cached_tokens). A request leaves the set with "
           "its finished event.")
      .def("interrupt", &PyRequestSet::interrupt, "Wakes every wait() now.")
      .def("__len__", &PyRequestSet::size);

  py::class_<PyScheduler> scheduler(
      m, "Scheduler",
      "Continuous batching over a paged KV cache on one Engine (the server's loop).");
  scheduler
      .def(py::init<py::object, int64_t, int64_t, py::object, int64_t, int64_t, int64_t, double,
                    bool>(),
           py::arg("engine"), py::kw_only(), py::arg("block_size") = 16, py::arg("kv_blocks") = 0,
           py::arg("kv_memory_bytes") = py::none(), py::arg("max_running") = 64,
           py::arg("max_step_tokens") = 256, py::arg("max_waiting") = 4096,
           py::arg("queue_timeout") = 120.0, py::arg("prefix_cache") = true)
      .def("submit", &PyScheduler::submit, py::arg("prompt_token_ids"),
           py::arg("fields") = py::dict(),
           "Queues a request; `fields` sets RequestSpec fields by name (see supported_fields).")
      .def("run_exclusive", &PyScheduler::run_exclusive, py::arg("mode"), py::arg("fn"),
           "Runs fn() with no step in flight. mode: 'drain' (started requests finish first), "
           "'abort', "
           "'retract' or 'in_place'. Returns fn's duration in seconds.")
      .def(
          "pause",
          [](PyScheduler& s, const std::string& mode) {
            PauseMode m;
            try {
              m = pause_mode_from_name(mode);
            } catch (const Error& e) {
              throw py::value_error(fmt::format("mode: {}", e.what()));
            }
            py::gil_scoped_release release;
            s.get().pause(m);
          },
          py::arg("mode") = "abort")
      .def("resume", [](PyScheduler& s) { s.get().resume(); })
      .def_property_readonly("paused", [](PyScheduler& s) { return s.get().paused(); })
      .def(
          "flush_cache", [](PyScheduler& s) { return s.get().flush_cache(); },
          "Drops every prefix-cache key; returns how many cached blocks were dropped.")
      .def("stats", &PyScheduler::stats)
      .def_property_readonly("options", &PyScheduler::options)
      .def_property_readonly("max_context", [](PyScheduler& s) { return s.get().max_context(); })
      .def_property_readonly("engine", &PyScheduler::engine)
      .def_property_readonly("eos_token_id", &PyScheduler::eos_token_id)
      .def_property_readonly("eos_token_ids", &PyScheduler::eos_token_ids)
      .def_property_readonly("routing_shape", &PyScheduler::routing_shape)
      .def("sleep", &PyScheduler::sleep, py::arg("level") = 1,
           "Gives the KV cache's memory back to the OS (level 2: the weights' too); no step runs "
           "until "
           "wake_up(). Refused while requests run. Returns the bytes released.")
      .def("wake_up", &PyScheduler::wake_up)
      .def_property_readonly(
          "released_weights", &PyScheduler::released_weights,
          "Checkpoint names sleep(level=2) released and no update has sent again.")
      .def("close", &PyScheduler::close, "Stops the loop; pending requests end with 'abort'.");
  py::list names;
  for (const SpecField& f : spec_fields()) names.append(f.name);
  scheduler.attr("supported_fields") = py::tuple(names);
  scheduler.attr("can_sleep") = true;
  scheduler.attr("reports_rank") = true;

  py::class_<PyDetokenizer>(m, "Detokenizer", "Incremental UTF-8-safe text of one token stream.")
      .def(py::init<py::object, bool>(), py::arg("engine"), py::arg("skip_special_tokens") = true)
      .def("push", &PyDetokenizer::push, py::arg("token"),
           "Text completed by this token (possibly '').")
      .def("finish", &PyDetokenizer::finish, "Whatever was held back (an incomplete character).")
      .def("piece", &PyDetokenizer::piece, py::arg("token"), "One token's own text.");
}

}  // namespace refit::python

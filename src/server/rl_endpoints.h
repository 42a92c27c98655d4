// SGLang-compatible endpoints an RL trainer drives: weight updates, weight reads, weight
// labels and pausing generation. Requests are SGLang's (managers/io_struct.py); unknown
// fields are ignored (server/request_fields.h), known ones type-checked. Replies are
// SGLang's ({success, message, ...}) plus refit's "weight_version" label and numeric
// "version". docs/weight-lifecycle.md describes every field.
//
//   POST /update_weights_from_disk   {model_path, load_format?, abort_all_requests?,
//   weight_version?,
//                                     is_async?, keep_pause?, flush_cache?, token_step?, ...}
//        (server/weight_update_request.h); a checkpoint holding only some of the model's
//        tensors updates just those -> {success, message, num_paused_requests, ...}
//   POST /update_weights_from_tensor {serialized_named_tensors: [one per TP rank], load_format:
//                                     null | "direct" | "flattened_bucket", flush_cache?,
//                                     abort_all_requests?, weight_version?}
//        each entry in refit's CPU carrier (server/weight_carrier.h: JSON named tensors or a
//        flattened bucket, inline base64 or a /dev/shm segment); SGLang's pickles are refused
//        with the reason. refit's {named_tensors: [{name, dtype, shape, data}]} still works.
//   POST /update_weight_version      {new_version, abort_all_requests? (default true)}
//   POST /get_weights_by_name        {name, truncate_size?}  -> first values, flattened
//                                    (the whole checkpoint tensor under --tp: ranks' slices
//                                    gathered)
//   POST /pause_generation           {mode: abort | retract | in_place}
//   POST /continue_generation, /flush_cache;  GET /get_weight_version
//
// An update is validated completely before generation is disturbed, then applies between
// two steps: without abort_all_requests, started requests finish on the old weights first
// (each request sees one version); is_async applies it at once and running requests go
// on with their tokens tagged by version; while generation is paused it applies at once.
// A refused update changes nothing (bitwise; the version and label stay) and generation
// goes on.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "runtime/engine.h"
#include "runtime/scheduler.h"
#include "server/base64.h"  // base64_decode, for callers of this header
#include "server/weights_root.h"

namespace httplib {
class Server;
}

namespace refit {

class RankGroup;

struct RlContext {
  Engine& engine;
  Scheduler& scheduler;
  std::mutex& labels_mutex;
  std::map<uint64_t, std::string>& labels;
  std::function<std::string(uint64_t)> label_of;
  RankGroup* ranks = nullptr;  // tensor parallel: updates run on every rank
  bool check_finite = true;    // a request's check_finite default (--no-check-finite)
  const WeightsRoot* weights_root = nullptr;  // where model_path may point (none: anywhere)
  // /get_weights_by_name: most f32 bytes of values one reply holds (0: 256 MiB or the
  // largest parameter, whichever is more), and how many readbacks run at once (more: 503).
  size_t max_readback_bytes = 0;
  int max_concurrent_readbacks = 2;
};

void register_rl_endpoints(httplib::Server& server, RlContext context);

}  // namespace refit

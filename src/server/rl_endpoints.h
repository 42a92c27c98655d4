// SGLang-compatible endpoints an RL trainer drives: weight updates, weight reads, and
// pausing generation. Each answers {"success", "message", "weight_version"}.
//
//   POST /update_weights_from_disk   {model_path, abort_all_requests?, weight_version?, flush_cache?}
//   POST /update_weights_from_tensor {named_tensors: [{name, dtype, shape, data (base64, little-endian)}],
//                                     abort_all_requests?, weight_version?, flush_cache?}
//        (SGLang sends pickled torch tensors there; over plain HTTP refit takes base64 bytes)
//   POST /get_weights_by_name        {name, truncate_size?}  -> first values, flattened
//                                    (the whole checkpoint tensor under --tp: ranks' slices gathered)
//   POST /pause_generation           {mode: abort | retract | in_place}
//   POST /continue_generation, /flush_cache;  GET /get_weight_version
//
// An update applies between two steps: without abort_all_requests, started requests
// finish on the old weights first (each request sees one version); while generation is
// paused it applies at once. A refused update changes nothing and generation goes on.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "runtime/engine.h"
#include "runtime/scheduler.h"

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
};

void register_rl_endpoints(httplib::Server& server, RlContext context);

// Base64 (RFC 4648, padding optional) to bytes; throws Error naming the bad character.
std::string base64_decode(const std::string& text);

}  // namespace refit

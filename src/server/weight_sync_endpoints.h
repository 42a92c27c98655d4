// SGLang's weight sync from a torch.distributed trainer, over HTTP:
//
//   POST /init_weights_update_group      {master_address, master_port, rank_offset, world_size,
//                                         group_name = "weight_update_group", backend = "nccl",
//                                         timeout? (seconds; refit's extra, default 1800 as
//                                         torch's)}
//   POST /update_weights_from_distributed {names, dtypes, shapes, group_name, flush_cache = true,
//                                         abort_all_requests = false, weight_version?,
//                                         load_format?} (or SGLang's older one-tensor form {name,
//                                         dtype, shape, ...})
//   POST /destroy_weights_update_group    {group_name}
//
// Each answers SGLang's {"success", "message"} (200, or 400 on failure) plus refit's
// "weight_version". Init blocks until the trainer's group is formed (the trainer calls its
// init_custom_process_group at the same time); only backend "gloo" is accepted (this is a
// CPU build: "nccl" is refused by name). An update receives every broadcast the request
// announces (per tensor, or one flattened bucket), validates every tensor (known name,
// the full logical shape, a dtype its parameter converts from), then commits between
// scheduler steps (drain, or abort with abort_all_requests); any failure commits nothing
// and the engine serves its old weights. Under --tp every rank joins as rank_offset + its
// rank and receives each broadcast itself. See docs/weight-sync.md.
#pragma once

#include "server/rl_endpoints.h"

namespace httplib {
class Server;
}

namespace refit {

void register_weight_sync_endpoints(httplib::Server& server, RlContext context);

}  // namespace refit

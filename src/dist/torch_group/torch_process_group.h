// A member of a torch.distributed process group that a trainer created: how refit takes
// part in SGLang's `init_weights_update_group` weight sync without Python.
//
// The trainer (rank 0, torch 1.13) builds the group as SGLang's init_custom_process_group
// does: rendezvous("tcp://master:port") makes a c10d TCPStore hosted by rank 0, wrapped
// in PrefixStore(group_name); torch's _new_process_group_helper wraps it once more in
// PrefixStore(group_name) and creates ProcessGroupGloo on it, which for each of its
// devices (one unless GLOO_SOCKET_IFNAME lists several) makes a gloo rendezvous context
// under a further gloo PrefixStore("<device index>") and connects a full mesh. So rank r's
// transport address lands at "/<group>/<group>/0/<r>" in the store. Each dist.broadcast
// takes the next tag of the group's collective counter (0, 1, 2, ...) and runs on context
// tag % devices as gloo::broadcast with that tag.
//
// refit links the same libgloo (Debian's libgloo-dev, which Debian's python3-torch links)
// and repeats those steps: TcpStoreClient for the store, the same prefixes (detected:
// the doubled prefix of torch 1.13's helper, or one prefix for a caller that creates
// ProcessGroupGloo on the bare PrefixStore), the same per-device contexts, the same tag
// sequence. No process-group barrier: _new_process_group_helper has none in 1.13.
//
// Failures (the trainer gone, a timeout, gloo's own errors) are Errors, never aborts; a
// group that failed a collective is broken (its tag count no longer matches the
// trainer's) and refuses further use until destroyed.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

namespace refit {

struct TorchGroupOptions {
  std::string master_address;
  int master_port = 0;
  int rank = 0;        // this process's rank in the group (SGLang: rank_offset + tp rank)
  int world_size = 0;  // trainer + every engine rank
  std::string group_name;
  std::string backend = "gloo";
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};  // torch's default_pg_timeout
};

class TorchProcessGroup {
 public:
  // Joins the group; throws Error with what went wrong (unreachable store, timeout,
  // unsupported backend, a build without gloo).
  static std::unique_ptr<TorchProcessGroup> join(const TorchGroupOptions& options);
  ~TorchProcessGroup();

  // dist.broadcast(tensor, src=root, group=...): `bytes` of `data` from rank `root`.
  // Throws Error (the group is then broken) when the broadcast cannot complete.
  void broadcast(void* data, size_t bytes, int root);

  const TorchGroupOptions& options() const;
  bool broken() const;
  const std::string& broken_reason() const;
  // "group 'g': rank 1 of 2, store 127.0.0.1:29500 (keys under '/g/g/'), 1 gloo device(s), 3
  // broadcasts"
  std::string describe() const;

  struct Impl;

 private:
  explicit TorchProcessGroup(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Whether this build has gloo (REFIT_GLOO and libgloo-dev found).
bool built_with_gloo();

}  // namespace refit

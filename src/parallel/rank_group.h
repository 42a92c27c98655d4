// Tensor-parallel serving (`mpirun -np N refit serve --tp N`): rank 0 (the lead) runs the
// HTTP server and the scheduler; every other rank (a worker) holds its shard of the model
// and of the paged KV cache and runs whatever the lead broadcasts, in the lead's order:
//
//   cache           the pool's size, once, before the first step
//   forward         a step's batch: each sequence's new tokens, start position, block table
//                   and which logits rows it wants; every rank runs batched_forward on it
//                   (its collectives pair up with the lead's)
//   update_disk     a weight update from a checkpoint path (+ names)
//   update_tensors  a weight update from tensors (names, dtypes, shapes, then the bytes)
//   read_weight     /get_weights_by_name: each rank in turn broadcasts its piece of the
//                   named tensor, the lead puts them together (parallel/weight_readback.h)
//   sync_init       /init_weights_update_group: every rank joins the trainer's torch group
//                   as rank_offset + its rank (parallel/weight_sync.h), all at once, since
//                   gloo's rendezvous needs every member; any rank failing undoes all joins
//   sync_update     /update_weights_from_distributed: every rank receives every broadcast
//                   itself (each keeps its own shard of the full tensors), stages, and the
//                   ranks agree; the staged update waits for
//   sync_commit     (between scheduler steps) or sync_abort
//   sync_destroy    /destroy_weights_update_group
//   exit            shutdown: the workers return
//
// The block tables need no translation: every rank's pool has the same block count and
// only the lead allocates (and prefix-caches) blocks, so block b holds the same positions'
// k/v heads everywhere. A weight update is all-or-nothing across ranks: each rank stages
// (validates) it, the ranks agree by an all-reduce of their refusals, then all commit or
// all abort.
//
// MPI is initialised MPI_THREAD_FUNNELED: only the thread that initialised it (main) may
// call it. The lead's scheduler thread and HTTP handler threads therefore hand their
// collectives to the main thread (run_lead() serves them) and wait for the result.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "dist/communicator.h"
#include "models/model.h"
#include "parallel/weight_readback.h"
#include "parallel/weight_sync.h"
#include "runtime/engine.h"

namespace refit {

class RankGroup {
 public:
  // Call on the main thread (the one that initialised MPI), on every rank.
  RankGroup(Engine& engine, std::shared_ptr<Communicator> communicator);
  ~RankGroup();

  int rank() const { return communicator_->rank(); }
  int world_size() const { return communicator_->world_size(); }
  bool lead() const { return rank() == 0; }

  // ---- workers ----
  // Serves the lead's commands until it says exit. Errors of one command (a refused
  // update, a bad batch) are the lead's to report; the worker goes on.
  void run_worker();

  // ---- the lead; callable from any thread (the work runs on the main thread) ----
  void announce_cache(int64_t n_blocks, int64_t block_size);
  BatchForwardResult forward(std::span<const BatchSequence> batch, PagedKvCache& cache);
  // Throws Error (nothing changed on any rank) when any rank refuses the update.
  // Every rank validates with `options`; the lead's report is engine.last_update_report().
  void update_from_disk(const std::string& path, const std::vector<std::string>& names = {},
                        const UpdateOptions& options = {});
  void update_from_tensors(const std::vector<std::pair<std::string, Tensor>>& tensors,
                           const UpdateOptions& options = {});
  // Every rank's piece of the leading rows of checkpoint tensor `name` that hold its first
  // `wanted` values, in rank order (each read under its rank's weights lock). A failed
  // read (no such name, tile layout) is reported in the pieces' status.
  std::vector<WeightPiece> read_weight(const std::string& name, int64_t wanted);

  // Weight sync from a torch.distributed trainer (every rank takes part; each throws
  // Error on the lead with nothing changed when any rank fails). `options.rank` is the
  // request's rank_offset. Returns the lead's group description.
  std::string sync_init(const TorchGroupOptions& options);
  // Receives and stages on every rank; the staged update is committed by sync_commit()
  // (call between steps) or dropped by sync_abort().
  void sync_receive(const DistributedUpdate& update);
  void sync_commit();
  void sync_abort();
  void sync_destroy(const std::string& group_name);

  // The lead's main thread: runs the work other threads hand over until stop(), then
  // tells the workers to exit.
  void run_lead();
  // Any thread: run_lead() returns once the work in hand is done. Later calls throw.
  void stop();
  // Every worker gives its KV pool's pages (kv) and/or its weights' pages back to the OS,
  // as the lead does for itself (/release_memory_occupation, /sleep). No step may be in
  // flight: the lead's scheduler has stopped stepping first.
  void release_memory(bool weights, bool kv);
  // Main thread, when run_lead() never ran (startup failed): the workers exit.
  void release_workers();

 private:
  enum class Command : int64_t {
    exit = 0,
    cache = 1,
    forward = 2,
    update_disk = 3,
    update_tensors = 4,
    read_weight = 5,
    sync_init = 6,
    sync_update = 7,
    sync_commit = 8,
    sync_abort = 9,
    sync_destroy = 10,
    release_memory = 11,
  };
  void on_main(const std::function<void()>& fn);
  void send(Command command, const std::string& payload);
  std::pair<Command, std::string> receive();
  void broadcast_bytes(void* data, size_t bytes, int root = 0);
  // Each rank in turn broadcasts its piece; the lead keeps them all (workers: empty).
  std::vector<WeightPiece> exchange_pieces(const std::string& name, int64_t wanted);
  // Stages on this rank, agrees with the others, commits everywhere or nowhere.
  void apply_everywhere(const std::function<std::unique_ptr<WeightUpdate>()>& stage);
  // The ranks' agreement: an all-reduce of refusals. On a refusal the lead throws (its own
  // error, or how many ranks refused) and a worker logs its error; returns whether all
  // ranks succeeded.
  bool agree(const std::string& error, const char* what);
  // This rank's part of the sync commands (the lead after sending, the workers on receipt).
  std::string sync_init_here(const std::string& payload);
  void sync_update_here(const DistributedUpdate& update);
  void sync_commit_here();
  void sync_destroy_here(const std::string& group_name);
  void worker_update_tensors(const std::string& meta);

  Engine& engine_;
  std::shared_ptr<Communicator> communicator_;
  std::thread::id main_thread_;
  bool workers_released_ = false;

  // Weight sync: this rank's groups, and the update staged between sync_update and
  // sync_commit (the received tensors stay alive with it). Main thread only.
  WeightSyncGroups sync_groups_;
  struct PendingSync {
    std::unique_ptr<WeightUpdate> update;
    std::vector<std::pair<std::string, Tensor>> tensors;
  };
  PendingSync pending_sync_;

  struct Task {
    const std::function<void()>* fn;
    std::exception_ptr error;
    bool done = false;
  };
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Task*> tasks_;
  bool stopping_ = false;
};

}  // namespace refit

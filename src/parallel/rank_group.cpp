#include "parallel/rank_group.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>
#include <shared_mutex>

#include "core/error.h"
#include "parallel/command_wire.h"

namespace refit {

namespace {

struct DecodedBatch {
  std::vector<std::vector<int32_t>> tokens, tables, forced;
  std::vector<BatchSequence> sequences;
};

std::string encode_batch(std::span<const BatchSequence> batch) {
  WireWriter w;
  w.i64(static_cast<int64_t>(batch.size()));
  for (const BatchSequence& s : batch) {
    w.i64(static_cast<int64_t>(s.tokens.size()));
    w.i64(s.start_pos);
    w.i64(static_cast<int64_t>(s.block_table.size()));
    w.i64(static_cast<int64_t>(s.logits));
    w.i64(static_cast<int64_t>(s.forced_experts.size()));
    w.i32s(s.tokens);
    w.i32s(s.block_table);
    w.i32s(s.forced_experts);
  }
  return w.take();
}

DecodedBatch decode_batch(const std::string& payload) {
  WireReader r(payload, "tensor-parallel serving");
  DecodedBatch d;
  const int64_t B = r.i64();
  if (B < 0 || B > (int64_t{1} << 24))
    fail("tensor-parallel serving: a forward command with {} sequences", B);
  d.tokens.resize(static_cast<size_t>(B));
  d.tables.resize(static_cast<size_t>(B));
  d.forced.resize(static_cast<size_t>(B));
  d.sequences.resize(static_cast<size_t>(B));
  for (size_t b = 0; b < static_cast<size_t>(B); ++b) {
    const int64_t n_tokens = r.i64(), start = r.i64(), n_table = r.i64(), logits = r.i64(),
                  n_forced = r.i64();
    if (logits < 0 || logits > static_cast<int64_t>(LogitsWanted::all))
      fail("tensor-parallel serving: unknown logits request {}", logits);
    d.tokens[b] = r.i32s(n_tokens);
    d.tables[b] = r.i32s(n_table);
    d.forced[b] = r.i32s(n_forced);  // routing replay: every rank routes alike
    d.sequences[b] = BatchSequence{d.tokens[b], start, d.tables[b],
                                   static_cast<LogitsWanted>(logits), d.forced[b]};
  }
  return d;
}

}  // namespace

RankGroup::RankGroup(Engine& engine, std::shared_ptr<Communicator> communicator)
    : engine_(engine),
      communicator_(std::move(communicator)),
      main_thread_(std::this_thread::get_id()) {
  if (!communicator_) fail("tensor-parallel serving needs a communicator");
  if (communicator_->world_size() != engine_.world_size())
    fail("tensor-parallel serving: the communicator has {} ranks, the model is sharded {} ways",
         communicator_->world_size(), engine_.world_size());
}

RankGroup::~RankGroup() {
  // A lead that unwinds (startup failed) must still let the workers go.
  if (lead() && std::this_thread::get_id() == main_thread_) {
    try {
      release_workers();
    } catch (...) {
    }
  }
}

// ---- transport ----

void RankGroup::broadcast_bytes(void* data, size_t bytes, int root) {
  // MPI counts are int: large tensors go in pieces.
  constexpr size_t kPiece = size_t{1} << 30;
  char* p = static_cast<char*>(data);
  for (size_t done = 0; done < bytes; done += kPiece)
    communicator_->broadcast(p + done, std::min(kPiece, bytes - done), root);
}

void RankGroup::send(Command command, const std::string& payload) {
  int64_t header[2] = {static_cast<int64_t>(command), static_cast<int64_t>(payload.size())};
  communicator_->broadcast(header, sizeof header, 0);
  if (!payload.empty()) broadcast_bytes(const_cast<char*>(payload.data()), payload.size());
}

std::pair<RankGroup::Command, std::string> RankGroup::receive() {
  int64_t header[2] = {0, 0};
  communicator_->broadcast(header, sizeof header, 0);
  if (header[1] < 0) fail("tensor-parallel serving: negative payload size {}", header[1]);
  std::string payload(static_cast<size_t>(header[1]), '\0');
  if (!payload.empty()) broadcast_bytes(payload.data(), payload.size());
  return {static_cast<Command>(header[0]), std::move(payload)};
}

// ---- the lead's hand-over to the main thread ----

void RankGroup::on_main(const std::function<void()>& fn) {
  if (std::this_thread::get_id() == main_thread_) {
    fn();
    return;
  }
  Task task{&fn, nullptr, false};
  {
    std::unique_lock lock(mutex_);
    if (stopping_) fail("the server is shutting down");
    tasks_.push_back(&task);
    cv_.notify_all();
    cv_.wait(lock, [&] { return task.done; });
  }
  if (task.error) std::rethrow_exception(task.error);
}

void RankGroup::run_lead() {
  std::unique_lock lock(mutex_);
  while (true) {
    cv_.wait(lock, [&] { return !tasks_.empty() || stopping_; });
    if (tasks_.empty()) break;  // stopping, nothing left
    Task* task = tasks_.front();
    tasks_.pop_front();
    lock.unlock();
    try {
      (*task->fn)();
    } catch (...) {
      task->error = std::current_exception();
    }
    lock.lock();
    task->done = true;
    cv_.notify_all();
  }
  lock.unlock();
  release_workers();
}

void RankGroup::stop() {
  std::lock_guard lock(mutex_);
  stopping_ = true;
  cv_.notify_all();
}

void RankGroup::release_workers() {
  if (!lead() || workers_released_) return;
  workers_released_ = true;
  send(Command::exit, {});
}

// ---- lead operations ----

void RankGroup::announce_cache(int64_t n_blocks, int64_t block_size) {
  on_main([&] {
    WireWriter w;
    w.i64(n_blocks);
    w.i64(block_size);
    send(Command::cache, w.take());
  });
}

BatchForwardResult RankGroup::forward(std::span<const BatchSequence> batch, PagedKvCache& cache) {
  BatchForwardResult result;
  on_main([&] {
    send(Command::forward, encode_batch(batch));
    result = batched_forward(engine_.model(), batch, cache);
  });
  return result;
}

bool RankGroup::agree(const std::string& error, const char* what) {
  float refusals = error.empty() ? 0.0f : 1.0f;
  communicator_->all_reduce_sum(&refusals, 1);
  if (refusals == 0) return true;
  if (!lead()) {
    if (!error.empty())
      fmt::print(stderr, "refit serve (rank {}): {} refused: {}\n", rank(), what, error);
    return false;
  }
  if (!error.empty()) throw Error(error);
  fail("the {} was refused by {} of {} tensor-parallel ranks (see their stderr); nothing changed",
       what, static_cast<int>(refusals), world_size());
}

void RankGroup::apply_everywhere(const std::function<std::unique_ptr<WeightUpdate>()>& stage) {
  std::unique_ptr<WeightUpdate> update;
  std::string error;
  try {
    update = stage();
  } catch (const std::exception& e) {
    error = e.what();
  }
  bool agreed = false;
  try {
    agreed = agree(error, "weight update");
  } catch (...) {
    if (update) update->abort();
    throw;
  }
  if (!agreed) {
    if (update) update->abort();
    return;
  }
  engine_.commit(*update);
}

void RankGroup::update_from_disk(const std::string& path, const std::vector<std::string>& names,
                                 const UpdateOptions& options) {
  on_main([&] {
    WireWriter w;
    w.str(path);
    w.i64(static_cast<int64_t>(names.size()));
    for (const std::string& n : names) w.str(n);
    w.i64(static_cast<int64_t>(options.bits()));
    send(Command::update_disk, w.take());
    apply_everywhere([&] { return engine_.stage_update_from_disk(path, names, options); });
  });
}

void RankGroup::update_from_tensors(const std::vector<std::pair<std::string, Tensor>>& tensors,
                                    const UpdateOptions& options) {
  on_main([&] {
    std::vector<Tensor> data;
    WireWriter w;
    w.i64(static_cast<int64_t>(options.bits()));
    w.i64(static_cast<int64_t>(tensors.size()));
    for (const auto& [name, tensor] : tensors) {
      data.push_back(tensor.contiguous());
      w.str(name);
      w.str(std::string(dtype_name(tensor.dtype())));
      w.i64(tensor.dim());
      for (int64_t d : tensor.shape()) w.i64(d);
    }
    send(Command::update_tensors, w.take());
    for (Tensor& t : data) broadcast_bytes(t.raw_data(), t.nbytes());
    apply_everywhere([&] {
      auto update = engine_.begin_update(options);
      for (size_t i = 0; i < tensors.size(); ++i) update->update(tensors[i].first, data[i]);
      return update;
    });
  });
}

std::vector<WeightPiece> RankGroup::exchange_pieces(const std::string& name, int64_t wanted) {
  WeightPiece mine;
  {
    std::shared_lock lock(engine_.weights_mutex());
    mine = local_weight_piece(engine_, name, wanted);
  }
  // Header: status, split_dim, number of slices, rank (dims) of the piece, then its dims
  // (at most 8); then the slices as (start, length) pairs, several for a fused checkpoint
  // tensor (Phi-3's qkv_proj holds this rank's q, k and v heads).
  constexpr int kMaxDims = 8;
  std::vector<WeightPiece> pieces;
  for (int root = 0; root < world_size(); ++root) {
    int64_t header[4 + kMaxDims] = {};
    if (root == rank()) {
      const bool ok = mine.status == 200 && mine.values.dim() <= kMaxDims;
      header[0] = ok ? 200 : mine.status == 200 ? 400 : mine.status;
      header[1] = mine.split_dim;
      header[2] = ok ? static_cast<int64_t>(mine.slices.size()) : 0;
      header[3] = ok ? mine.values.dim() : 0;
      for (int64_t d = 0; ok && d < mine.values.dim(); ++d) header[4 + d] = mine.values.size(d);
    }
    communicator_->broadcast(header, sizeof header, root);
    if (header[0] != 200) {
      if (lead()) {
        WeightPiece failed = root == 0 ? mine : WeightPiece{};
        failed.status = static_cast<int>(header[0]);
        if (failed.error.empty())
          failed.error = fmt::format("rank {} could not read the tensor", root);
        pieces.push_back(std::move(failed));
      }
      continue;
    }
    std::vector<int64_t> ranges(static_cast<size_t>(2 * header[2]));
    if (root == rank())
      for (size_t i = 0; i < mine.slices.size(); ++i) {
        ranges[2 * i] = mine.slices[i].start;
        ranges[2 * i + 1] = mine.slices[i].length;
      }
    if (!ranges.empty())
      communicator_->broadcast(ranges.data(), ranges.size() * sizeof(int64_t), root);
    Shape shape(header + 4, header + 4 + header[3]);
    Tensor values = root == rank() ? mine.values : Tensor::empty(shape, DType::f32);
    broadcast_bytes(values.raw_data(), values.nbytes(), root);
    if (!lead()) continue;
    WeightPiece piece = root == 0 ? mine : WeightPiece{};
    piece.values = values;
    piece.split_dim = header[1];
    piece.slices.clear();
    for (size_t i = 0; i < ranges.size(); i += 2)
      piece.slices.push_back({ranges[i], ranges[i + 1]});
    piece.head_rows = mine.head_rows;  // the same model everywhere: the same leading rows
    pieces.push_back(std::move(piece));
  }
  return pieces;
}

std::vector<WeightPiece> RankGroup::read_weight(const std::string& name, int64_t wanted) {
  std::vector<WeightPiece> pieces;
  on_main([&] {
    WireWriter w;
    w.str(name);
    w.i64(wanted);
    send(Command::read_weight, w.take());
    pieces = exchange_pieces(name, wanted);
  });
  return pieces;
}

// ---- weight sync from a torch.distributed trainer ----

namespace {

std::string encode_group_options(const TorchGroupOptions& o) {
  WireWriter w;
  w.str(o.master_address);
  w.i64(o.master_port);
  w.i64(o.rank);
  w.i64(o.world_size);
  w.str(o.group_name);
  w.str(o.backend);
  w.i64(o.timeout.count());
  return w.take();
}

TorchGroupOptions decode_group_options(const std::string& payload) {
  WireReader r(payload, "tensor-parallel serving");
  TorchGroupOptions o;
  o.master_address = r.str();
  o.master_port = static_cast<int>(r.i64());
  o.rank = static_cast<int>(r.i64());
  o.world_size = static_cast<int>(r.i64());
  o.group_name = r.str();
  o.backend = r.str();
  o.timeout = std::chrono::milliseconds(r.i64());
  return o;
}

}  // namespace

std::string RankGroup::sync_init_here(const std::string& payload) {
  TorchGroupOptions o = decode_group_options(payload);
  o.rank += rank();  // SGLang: rank_offset + tp_rank
  std::string error, description;
  try {
    description = sync_groups_.init(o);
  } catch (const std::exception& e) {
    error = fmt::format("tensor-parallel rank {}: {}", rank(), e.what());
  }
  bool agreed = false;
  try {
    agreed = agree(error, "weight update group init");
  } catch (...) {
    if (sync_groups_.has(o.group_name)) sync_groups_.destroy(o.group_name);
    throw;
  }
  if (!agreed && sync_groups_.has(o.group_name)) sync_groups_.destroy(o.group_name);
  return description;
}

void RankGroup::sync_update_here(const DistributedUpdate& u) {
  if (pending_sync_.update) pending_sync_.update->abort();
  pending_sync_ = {};
  std::string error;
  PendingSync staged;
  // Receive first whatever follows: the trainer broadcasts every tensor regardless, and a
  // rank that skipped one would be out of step with the group.
  try {
    staged.tensors = sync_groups_.receive(u);
  } catch (const std::exception& e) {
    error = fmt::format("tensor-parallel rank {}: {}", rank(), e.what());
  }
  if (error.empty()) {
    try {
      staged.update = engine_.begin_update(u.options);
      for (const auto& [name, t] : staged.tensors) staged.update->update(name, t);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  bool agreed = false;
  try {
    agreed = agree(error, "weight update from the trainer's group");
  } catch (...) {
    if (staged.update) staged.update->abort();
    throw;
  }
  if (!agreed) {
    if (staged.update) staged.update->abort();
    return;
  }
  pending_sync_ = std::move(staged);
}

void RankGroup::sync_commit_here() {
  PendingSync staged = std::move(pending_sync_);
  pending_sync_ = {};
  if (staged.update) engine_.commit(*staged.update);
}

void RankGroup::sync_destroy_here(const std::string& group_name) {
  if (lead()) {
    sync_groups_.destroy(group_name);  // throws naming the known groups
  } else if (sync_groups_.has(group_name)) {
    sync_groups_.destroy(group_name);
  }
}

std::string RankGroup::sync_init(const TorchGroupOptions& options) {
  std::string description;
  on_main([&] {
    const std::string payload = encode_group_options(options);
    send(Command::sync_init, payload);
    description = sync_init_here(payload);
  });
  return description;
}

void RankGroup::sync_receive(const DistributedUpdate& update) {
  on_main([&] {
    send(Command::sync_update, update.encode());
    sync_update_here(update);
  });
}

void RankGroup::sync_commit() {
  on_main([&] {
    if (!pending_sync_.update) fail("no weight update from the trainer's group is staged");
    send(Command::sync_commit, {});
    sync_commit_here();
  });
}

void RankGroup::sync_abort() {
  on_main([&] {
    send(Command::sync_abort, {});
    if (pending_sync_.update) pending_sync_.update->abort();
    pending_sync_ = {};
  });
}

void RankGroup::sync_destroy(const std::string& group_name) {
  on_main([&] {
    WireWriter w;
    w.str(group_name);
    send(Command::sync_destroy, w.take());
    sync_destroy_here(group_name);
  });
}

// ---- workers ----

void RankGroup::worker_update_tensors(const std::string& meta) {
  WireReader r(meta, "tensor-parallel serving");
  const UpdateOptions options = UpdateOptions::from_bits(static_cast<uint64_t>(r.i64()));
  const int64_t count = r.i64();
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (int64_t i = 0; i < count; ++i) {
    std::string name = r.str();
    const std::string dtype = r.str();
    const int64_t ndim = r.i64();
    Shape shape;
    for (int64_t d = 0; d < ndim; ++d) shape.push_back(r.i64());
    const std::optional<DType> dt = dtype_from_name(dtype);
    if (!dt) fail("tensor-parallel serving: unknown dtype '{}' for '{}'", dtype, name);
    tensors.emplace_back(std::move(name), Tensor::empty(shape, *dt));
  }
  // The lead sends every tensor's bytes before anyone stages.
  for (auto& [name, t] : tensors) broadcast_bytes(t.raw_data(), t.nbytes());
  apply_everywhere([&] {
    auto update = engine_.begin_update(options);
    for (const auto& [name, t] : tensors) update->update(name, t);
    return update;
  });
}

void RankGroup::release_memory(bool weights, bool kv) {
  on_main([&] {
    WireWriter w;
    w.i64(weights ? 1 : 0);
    w.i64(kv ? 1 : 0);
    send(Command::release_memory, w.take());
  });
}

void RankGroup::run_worker() {
  if (lead()) fail("run_worker() is for ranks other than 0");
  std::optional<PagedKvCache> cache;
  while (true) {
    auto [command, payload] = receive();
    switch (command) {
      case Command::exit:
        return;
      case Command::cache: {
        WireReader r(payload, "tensor-parallel serving");
        const int64_t n_blocks = r.i64(), block_size = r.i64();
        cache.emplace(make_paged_cache(engine_.model(), n_blocks, block_size));
        break;
      }
      case Command::forward: {
        if (!cache) fail("tensor-parallel serving: a forward step before the cache was announced");
        DecodedBatch batch = decode_batch(payload);
        // A batch the lead refuses is refused here too, before any collective; the
        // lead reports it.
        try {
          batched_forward(engine_.model(), batch.sequences, *cache);
        } catch (const std::exception& e) {
          fmt::print(stderr, "refit serve (rank {}): step refused: {}\n", rank(), e.what());
        }
        break;
      }
      case Command::update_disk: {
        WireReader r(payload, "tensor-parallel serving");
        const std::string path = r.str();
        std::vector<std::string> names(static_cast<size_t>(std::max<int64_t>(r.i64(), 0)));
        for (std::string& n : names) n = r.str();
        const UpdateOptions options = UpdateOptions::from_bits(static_cast<uint64_t>(r.i64()));
        apply_everywhere([&] { return engine_.stage_update_from_disk(path, names, options); });
        break;
      }
      case Command::update_tensors:
        worker_update_tensors(payload);
        break;
      case Command::read_weight: {
        WireReader r(payload, "tensor-parallel serving");
        const std::string name = r.str();
        exchange_pieces(name, r.i64());
        break;
      }
      case Command::sync_init:
        sync_init_here(payload);
        break;
      case Command::sync_update:
        sync_update_here(DistributedUpdate::decode(payload));
        break;
      case Command::sync_commit:
        sync_commit_here();
        break;
      case Command::sync_abort:
        if (pending_sync_.update) pending_sync_.update->abort();
        pending_sync_ = {};
        break;
      case Command::sync_destroy: {
        WireReader r(payload, "tensor-parallel serving");
        sync_destroy_here(r.str());
        break;
      }
      case Command::release_memory: {
        WireReader r(payload, "tensor-parallel serving");
        const bool weights = r.i64() != 0, kv = r.i64() != 0;
        try {
          if (kv && cache) cache->discard_memory();
          if (weights) engine_.release_weights();
        } catch (const std::exception& e) {
          fmt::print(stderr, "refit serve (rank {}): memory release failed: {}\n", rank(),
                     e.what());
        }
        break;
      }
      default:
        fail("tensor-parallel serving: unknown command {} from the lead",
             static_cast<int64_t>(command));
    }
  }
}

}  // namespace refit

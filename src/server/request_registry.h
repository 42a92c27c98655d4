// The requests in flight by their client-visible id (SGLang's rid, vLLM's request id), so
// /abort_request can end them by id or all at once. Handlers register each request's
// scheduler handles for as long as they serve it; an abort cancels them, and the
// scheduler ends each with finish_reason "abort" at its next step (its KV blocks freed).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/scheduler.h"

namespace refit {

class RequestRegistry {
 public:
  // Registers `handles` under `rid` until the returned guard is destroyed.
  class Entry {
   public:
    Entry(RequestRegistry* registry, uint64_t key) : registry_(registry), key_(key) {}
    Entry(Entry&& other) noexcept : registry_(other.registry_), key_(other.key_) {
      other.registry_ = nullptr;
    }
    Entry(const Entry&) = delete;
    Entry& operator=(const Entry&) = delete;
    ~Entry();

   private:
    RequestRegistry* registry_;
    uint64_t key_;
  };
  Entry add(const std::string& rid, std::vector<std::shared_ptr<RequestHandle>> handles);

  // Cancels every request registered under `rid`; returns how many handles. A rid that is
  // not registered (finished already, or never seen) cancels nothing.
  size_t abort(const std::string& rid);
  size_t abort_all();
  size_t size() const;

 private:
  struct Registered {
    std::string rid;
    std::vector<std::shared_ptr<RequestHandle>> handles;
  };
  mutable std::mutex mutex_;
  std::map<uint64_t, Registered> entries_;
  uint64_t next_ = 1;
};

}  // namespace refit

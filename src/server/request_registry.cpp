#include "server/request_registry.h"

namespace refit {

RequestRegistry::Entry::~Entry() {
  if (!registry_) return;
  std::lock_guard lock(registry_->mutex_);
  registry_->entries_.erase(key_);
}

RequestRegistry::Entry RequestRegistry::add(const std::string& rid,
                                            std::vector<std::shared_ptr<RequestHandle>> handles) {
  std::lock_guard lock(mutex_);
  const uint64_t key = next_++;
  entries_[key] = Registered{rid, std::move(handles)};
  return Entry(this, key);
}

size_t RequestRegistry::abort(const std::string& rid) {
  std::lock_guard lock(mutex_);
  size_t n = 0;
  for (auto& [key, e] : entries_)
    if (e.rid == rid)
      for (auto& h : e.handles) {
        h->cancel();
        ++n;
      }
  return n;
}

size_t RequestRegistry::abort_all() {
  std::lock_guard lock(mutex_);
  size_t n = 0;
  for (auto& [key, e] : entries_)
    for (auto& h : e.handles) {
      h->cancel();
      ++n;
    }
  return n;
}

size_t RequestRegistry::size() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

}  // namespace refit

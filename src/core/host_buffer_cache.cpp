#include "core/host_buffer_cache.h"

#include <cstdlib>
#include <iterator>
#include <list>
#include <mutex>

#include "core/error.h"
#include "core/fresh_pages.h"

namespace refit::host_buffer_cache {
namespace {

struct Kept {
  void* p;
  size_t bytes;
};

struct Cache {
  std::mutex mutex;
  std::list<Kept> kept;  // most recently kept first
  size_t total = 0;
  size_t limit = kMaxTotal;
};

size_t limit_from_env() {
  const char* v = std::getenv("REFIT_BUFFER_CACHE_MIB");
  if (!v || !*v) return kMaxTotal;
  char* end = nullptr;
  const long long mib = std::strtoll(v, &end, 10);
  if (*end != '\0' || mib < 0 || mib > (1ll << 30))
    fail("REFIT_BUFFER_CACHE_MIB='{}' is not a size in MiB (expected an integer >= 0)", v);
  return static_cast<size_t>(mib) << 20;
}

Cache& cache() {
  static Cache* c = [] {
    auto* made = new Cache();  // never destroyed: storages may be freed during exit
    made->limit = limit_from_env();
    return made;
  }();
  return *c;
}

}  // namespace

void* take(size_t bytes) {
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  for (auto it = c.kept.begin(); it != c.kept.end(); ++it)
    if (it->bytes == bytes) {
      void* p = it->p;
      c.total -= bytes;
      c.kept.erase(it);
      return p;
    }
  return nullptr;
}

bool keep(void* p, size_t bytes) noexcept {
  // Called from a storage's release (a destructor), so nothing may escape: a failure
  // (the setting unreadable, no memory for the list node) just frees the buffer instead.
  try {
    Cache& c = cache();
    if (bytes > kMaxEach || bytes > c.limit) return false;
    std::list<Kept> evicted;
    {
      std::lock_guard lock(c.mutex);
      c.kept.push_front({p, bytes});
      c.total += bytes;
      while (c.total > c.limit) {
        c.total -= c.kept.back().bytes;
        evicted.splice(evicted.end(), c.kept, std::prev(c.kept.end()));
      }
    }
    for (const Kept& k : evicted) fresh_pages::unmap(k.p, k.bytes);
    return true;
  } catch (...) {
    return false;
  }
}

size_t release_all() {
  Cache& c = cache();
  std::list<Kept> all;
  size_t bytes = 0;
  {
    std::lock_guard lock(c.mutex);
    all.swap(c.kept);
    c.total = 0;
  }
  for (const Kept& k : all) {
    bytes += fresh_pages::resident_bytes(k.p, k.bytes);
    fresh_pages::unmap(k.p, k.bytes);
  }
  return bytes;
}

size_t kept_bytes() {
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  return c.total;
}

}  // namespace refit::host_buffer_cache

#include "core/sigbus_guard.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <mutex>

#include "core/error.h"

namespace refit {
namespace {

// Far above what a process maps at once (a sharded folder holds a few hundred files); the
// handler scans only up to the highest slot ever used.
constexpr int kMaxRegions = 4096;

// Everything the handler reads is a lock-free atomic: it may interrupt a thread in the middle
// of registering or unregistering another region.
struct Slot {
  std::atomic<bool> used{false};
  std::atomic<uintptr_t> begin{0};  // 0: free (or not yet published)
  std::atomic<uintptr_t> end{0};    // page-rounded, as the mapping extends
  std::atomic<bool> torn{false};
};

Slot g_slots[kMaxRegions];
std::atomic<int> g_slots_in_use_bound{0};
struct sigaction g_previous {};
uintptr_t g_page_size = 4096;
std::once_flag g_installed;

// What would have happened without refit's handler.
void chain_to_previous(int sig, siginfo_t* info, void* context) {
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction) {
      g_previous.sa_sigaction(sig, info, context);
      return;
    }
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(sig);
    return;
  }
  const bool sent = info->si_code <= 0;  // kill() or raise(), not a fault
  if (sent && g_previous.sa_handler == SIG_IGN) return;
  // The default action: a fault re-runs its instruction after we return and faults again,
  // now fatal as it would have been; a sent signal is raised again (it stays blocked until
  // this handler returns).
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, nullptr);
  if (sent) raise(sig);
}

void on_sigbus(int sig, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  if (info->si_code > 0) {
    const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
    const int n = g_slots_in_use_bound.load(std::memory_order_acquire);
    for (int i = 0; i < n; ++i) {
      Slot& s = g_slots[i];
      const uintptr_t begin = s.begin.load(std::memory_order_acquire);
      if (begin == 0 || addr < begin) continue;
      const uintptr_t end = s.end.load(std::memory_order_acquire);
      if (addr >= end) continue;
      // Every page after the faulting one lies past the new end too: replace them all at
      // once, so the reader does not fault page by page through the rest of the file.
      const uintptr_t page = addr & ~(g_page_size - 1);
      void* p = mmap(reinterpret_cast<void*>(page), end - page, PROT_READ,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
      if (p == MAP_FAILED) break;  // cannot repair it: behave as without the guard
      s.torn.store(true, std::memory_order_release);
      errno = saved_errno;
      return;
    }
  }
  errno = saved_errno;
  chain_to_previous(sig, info, context);
}

void install_handler() {
  const long page = sysconf(_SC_PAGESIZE);
  if (page > 0) g_page_size = static_cast<uintptr_t>(page);
  struct sigaction sa {};
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGBUS, &sa, &g_previous) != 0)
    fail("cannot install the SIGBUS handler that guards mapped files: {}", std::strerror(errno));
}

}  // namespace

GuardedRegion::GuardedRegion(const void* begin, size_t size) {
  std::call_once(g_installed, install_handler);
  const auto b = reinterpret_cast<uintptr_t>(begin);
  const uintptr_t end = b + (size + g_page_size - 1) / g_page_size * g_page_size;
  for (int i = 0; i < kMaxRegions; ++i) {
    bool expected = false;
    if (!g_slots[i].used.compare_exchange_strong(expected, true, std::memory_order_acq_rel))
      continue;
    Slot& s = g_slots[i];
    s.torn.store(false, std::memory_order_relaxed);
    s.end.store(end, std::memory_order_relaxed);
    s.begin.store(b, std::memory_order_release);
    int bound = g_slots_in_use_bound.load(std::memory_order_relaxed);
    while (bound < i + 1 &&
           !g_slots_in_use_bound.compare_exchange_weak(bound, i + 1, std::memory_order_acq_rel))
      ;
    slot_ = i;
    return;
  }
  fail("cannot guard another mapped file: {} are open already", kMaxRegions);
}

GuardedRegion::~GuardedRegion() {
  Slot& s = g_slots[slot_];
  s.begin.store(0, std::memory_order_release);
  s.end.store(0, std::memory_order_release);
  s.used.store(false, std::memory_order_release);
}

bool GuardedRegion::torn() const { return g_slots[slot_].torn.load(std::memory_order_acquire); }

}  // namespace refit

// TorchProcessGroup on libgloo: the join follows torch 1.13's ProcessGroupGloo
// constructor step by step (see torch_process_group.h), the broadcast its
// AsyncBroadcastWork (gloo::broadcast with the group's next tag, on context tag % devices).
#include <arpa/inet.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.h"
#include "dist/torch_group/gloo/gloo_store.h"
#include "dist/torch_group/tcp_store_client.h"
#include "dist/torch_group/torch_process_group.h"

namespace refit {

struct TorchProcessGroup::Impl {
  TorchGroupOptions options;
  std::string prefix;  // the store prefix the trainer's group uses
  std::vector<std::shared_ptr<gloo::rendezvous::Context>> contexts;
  uint32_t next_tag = 0;  // torch's collectiveCounter_
  std::string broken_reason;
};

bool built_with_gloo() { return true; }

namespace {

using Clock = std::chrono::steady_clock;

// The local address this host uses to reach the trainer: the one the trainer can connect
// back to (torch's own default, the hostname's address, is often loopback-only or not
// the interface facing the trainer).
std::string local_address_towards(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || !found)
    fail("weight sync: cannot resolve master_address '{}'", host);
  std::string out;
  const int fd = ::socket(found->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0) {  // UDP: no packet is sent
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    char text[INET6_ADDRSTRLEN] = {};
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      const void* addr =
          local.ss_family == AF_INET6
              ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
              : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
      if (::inet_ntop(local.ss_family, addr, text, sizeof text)) out = text;
    }
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(found);
  if (out.empty()) fail("weight sync: no local address routes to master_address '{}'", host);
  return out;
}

// As torch's ProcessGroupGloo Python constructor: one device per interface named in
// GLOO_SOCKET_IFNAME (comma-separated), else one. The trainer and the engine must agree
// on the count, since the group has one rendezvous context per device.
std::vector<std::shared_ptr<gloo::transport::Device>> make_devices(const TorchGroupOptions& o) {
  std::vector<std::shared_ptr<gloo::transport::Device>> devices;
  const char* ifnames = std::getenv("GLOO_SOCKET_IFNAME");
  if (ifnames && std::strlen(ifnames) > 1) {
    std::string all = ifnames;
    size_t start = 0;
    while (start <= all.size()) {
      const size_t comma = std::min(all.find(',', start), all.size());
      gloo::transport::tcp::attr attr;
      attr.iface = all.substr(start, comma - start);
      devices.push_back(gloo::transport::tcp::CreateDevice(attr));
      start = comma + 1;
    }
  } else {
    gloo::transport::tcp::attr attr;
    attr.hostname = local_address_towards(o.master_address, o.master_port);
    devices.push_back(gloo::transport::tcp::CreateDevice(attr));
  }
  return devices;
}

// The trainer's rank-0 address key appears once its ProcessGroupGloo is connecting: which
// of the prefixes it is under says how the trainer built its group.
std::string detect_prefix(TcpStoreClient& store, const TorchGroupOptions& o,
                          Clock::time_point deadline) {
  const std::string g = o.group_name;
  const std::vector<std::string> candidates = {g + "/" + g + "/",  // SGLang's helper on torch 1.13
                                               g + "/"};  // ProcessGroupGloo on PrefixStore(g)
  auto pause = std::chrono::milliseconds(5);
  while (true) {
    for (const std::string& p : candidates)
      if (store.check({p + "0/0"})) return p;
    if (Clock::now() >= deadline)
      fail(
          "weight sync: the trainer at {} did not create process group '{}' within {} ms (no "
          "rank-0 address at "
          "'/{}0/0' or '/{}0/0' in its TCPStore); check group_name, world_size and that the "
          "trainer calls "
          "init_custom_process_group at the same time",
          store.address(), g, o.timeout.count(), candidates[0], candidates[1]);
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(100));
  }
}

}  // namespace

std::unique_ptr<TorchProcessGroup> TorchProcessGroup::join(const TorchGroupOptions& o) {
  if (o.backend == "nccl")
    fail(
        "backend 'nccl' needs GPUs and NCCL; this refit runs on CPUs and joins 'gloo' groups: "
        "create the "
        "trainer's group with backend='gloo' and pass backend 'gloo'");
  if (o.backend != "gloo") fail("unknown backend '{}' (this refit supports 'gloo')", o.backend);
  if (o.world_size < 2)
    fail("world_size must be at least 2 (the trainer and this engine), got {}", o.world_size);
  if (o.rank < 1 || o.rank >= o.world_size)
    fail("rank {} is outside 1..{}: rank 0 is the trainer's (it hosts the TCPStore and broadcasts)",
         o.rank, o.world_size - 1);
  if (o.group_name.empty()) fail("group_name must not be empty");
  if (o.master_address.empty()) fail("master_address must not be empty");
  if (o.timeout.count() <= 0) fail("the timeout must be positive");

  // A trainer that dies leaves half-open sockets; a write to one must be an error (EPIPE
  // in gloo's pair), not SIGPIPE killing the server. Python (the trainer's side) ignores
  // SIGPIPE for the same reason.
  static std::once_flag sigpipe;
  std::call_once(sigpipe, [] { std::signal(SIGPIPE, SIG_IGN); });

  const auto deadline = Clock::now() + o.timeout;
  auto impl = std::make_unique<Impl>();
  impl->options = o;
  try {
    TcpStoreClient store(o.master_address, o.master_port, o.timeout);
    store.count_in_workers();
    impl->prefix = detect_prefix(store, o, deadline);
    GlooTcpStore group_store(store, impl->prefix);
    auto devices = make_devices(o);
    for (size_t i = 0; i < devices.size(); ++i) {
      auto context = std::make_shared<gloo::rendezvous::Context>(o.rank, o.world_size);
      gloo::rendezvous::PrefixStore device_store(std::to_string(i), group_store);
      context->setTimeout(o.timeout);
      context->connectFullMesh(device_store, devices[i]);
      impl->contexts.push_back(std::move(context));
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // gloo::IoException, gloo::EnforceNotMet, system errors
    fail("weight sync: joining process group '{}' at {}:{} as rank {} of {} failed: {}",
         o.group_name, o.master_address, o.master_port, o.rank, o.world_size, e.what());
  }
  return std::unique_ptr<TorchProcessGroup>(new TorchProcessGroup(std::move(impl)));
}

TorchProcessGroup::TorchProcessGroup(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

TorchProcessGroup::~TorchProcessGroup() {
  try {
    impl_->contexts.clear();  // closes the pairs
  } catch (...) {
  }
}

void TorchProcessGroup::broadcast(void* data, size_t bytes, int root) {
  Impl& m = *impl_;
  if (!m.broken_reason.empty())
    fail("weight sync group '{}' is broken ({}): destroy it and init a new one",
         m.options.group_name, m.broken_reason);
  if (root < 0 || root >= m.options.world_size)
    fail("broadcast root {} is outside the group of {}", root, m.options.world_size);
  const uint32_t tag = m.next_tag++;
  uint8_t empty = 0;
  std::string error;
  try {
    gloo::BroadcastOptions opts(m.contexts[tag % m.contexts.size()]);
    opts.setOutput(bytes ? static_cast<uint8_t*>(data) : &empty, bytes);
    opts.setRoot(root);
    opts.setTag(tag);
    opts.setTimeout(m.options.timeout);
    gloo::broadcast(opts);
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (!error.empty()) {
    // The trainer's counter and ours may now differ, and a pair may be half-done: no
    // later broadcast on this group can be trusted.
    m.broken_reason = fmt::format("broadcast #{} failed: {}", tag, error);
    try {
      m.contexts.clear();
    } catch (...) {
    }
    fail("weight sync group '{}': broadcast #{} ({} bytes from rank {}) failed: {}",
         m.options.group_name, tag, bytes, root, error);
  }
}

const TorchGroupOptions& TorchProcessGroup::options() const { return impl_->options; }
bool TorchProcessGroup::broken() const { return !impl_->broken_reason.empty(); }
const std::string& TorchProcessGroup::broken_reason() const { return impl_->broken_reason; }

std::string TorchProcessGroup::describe() const {
  const TorchGroupOptions& o = impl_->options;
  return fmt::format(
      "group '{}': rank {} of {}, store {}:{} (keys under '/{}'), {} gloo device(s), {} broadcasts",
      o.group_name, o.rank, o.world_size, o.master_address, o.master_port, impl_->prefix,
      impl_->contexts.size(), impl_->next_tag);
}

}  // namespace refit

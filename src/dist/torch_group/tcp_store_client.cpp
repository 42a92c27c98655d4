#include "dist/torch_group/tcp_store_client.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <thread>

#include "core/error.h"

namespace refit {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// The largest value this client accepts from the store: the values here are transport
// addresses and counters, so anything near this is a peer out of protocol.
constexpr uint64_t kMaxValueBytes = uint64_t{64} << 20;

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : left > 1'000'000'000 ? 1'000'000'000 : static_cast<int>(left);
}

// One non-blocking connect attempt, bounded by the deadline. Returns the socket or -1
// (errno-like reason in `why`).
int try_connect(const addrinfo* ai, Clock::time_point deadline, std::string& why) {
  const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
  if (fd < 0) {
    why = std::strerror(errno);
    return -1;
  }
  const int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  int rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
  if (rc != 0 && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    rc = ::poll(&p, 1, remaining_ms(deadline));
    if (rc == 0) {
      why = "connection attempt timed out";
      ::close(fd);
      return -1;
    }
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (rc < 0 || err != 0) {
      why = std::strerror(rc < 0 ? errno : err);
      ::close(fd);
      return -1;
    }
  } else if (rc != 0) {
    why = std::strerror(errno);
    ::close(fd);
    return -1;
  }
  fcntl(fd, F_SETFL, flags);  // blocking again; reads are bounded by poll()
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

}  // namespace

TcpStoreClient::TcpStoreClient(const std::string& host, int port, milliseconds timeout)
    : address_(fmt::format("{}:{}", host, port)), timeout_(timeout) {
  if (port <= 0 || port > 65535) fail("torch TCPStore at {}: the port must be 1..65535", address_);
  const auto deadline = Clock::now() + timeout;
  std::string why = "no address";
  // Like c10d's client: keep trying until the timeout, since the trainer may create its
  // store a moment after asking us to join.
  while (true) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int gai = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
    if (gai != 0) {
      why = std::string("cannot resolve the host: ") + gai_strerror(gai);
    } else {
      for (const addrinfo* ai = found; ai && fd_ < 0; ai = ai->ai_next)
        fd_ = try_connect(ai, deadline, why);
      ::freeaddrinfo(found);
    }
    if (fd_ >= 0) return;
    if (remaining_ms(deadline) == 0) break;
    std::this_thread::sleep_for(std::min(milliseconds(100), milliseconds(remaining_ms(deadline))));
  }
  fail("cannot reach the trainer's torch TCPStore at {} within {} ms: {}", address_,
       timeout.count(), why);
}

TcpStoreClient::~TcpStoreClient() {
  if (fd_ >= 0) ::close(fd_);
}

void TcpStoreClient::broken(const std::string& what) {
  // The connection is no longer in step with the protocol: nothing more may use it.
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  fail("torch TCPStore at {}: {}", address_, what);
}

void TcpStoreClient::send_bytes(const void* data, size_t n) {
  if (fd_ < 0)
    fail("torch TCPStore at {}: the connection was closed after an earlier error", address_);
  const char* p = static_cast<const char*>(data);
  const auto deadline = Clock::now() + timeout_;
  while (n > 0) {
    pollfd pf{fd_, POLLOUT, 0};
    const int rc = ::poll(&pf, 1, remaining_ms(deadline));
    if (rc == 0) broken("a write timed out");
    if (rc < 0 && errno == EINTR) continue;
    const ssize_t sent = ::send(fd_, p, n, MSG_NOSIGNAL);  // no SIGPIPE if the trainer died
    if (sent < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      broken(std::string("write failed: ") + std::strerror(errno));
    }
    p += sent;
    n -= static_cast<size_t>(sent);
  }
}

void TcpStoreClient::send_string(const std::string& s) {
  send_u64(s.size());
  send_bytes(s.data(), s.size());
}

void TcpStoreClient::recv_bytes(void* data, size_t n, milliseconds timeout) {
  if (fd_ < 0)
    fail("torch TCPStore at {}: the connection was closed after an earlier error", address_);
  char* p = static_cast<char*>(data);
  const auto deadline = Clock::now() + timeout;
  while (n > 0) {
    pollfd pf{fd_, POLLIN, 0};
    const int rc = ::poll(&pf, 1, remaining_ms(deadline));
    if (rc == 0) broken(fmt::format("no answer within {} ms", timeout.count()));
    if (rc < 0 && errno == EINTR) continue;
    const ssize_t got = ::recv(fd_, p, n, 0);
    if (got == 0) broken("the store closed the connection (did the trainer exit?)");
    if (got < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      broken(std::string("read failed: ") + std::strerror(errno));
    }
    p += got;
    n -= static_cast<size_t>(got);
  }
}

std::vector<uint8_t> TcpStoreClient::recv_vector() {
  uint64_t n = 0;
  recv_bytes(&n, sizeof n, timeout_);
  if (n > kMaxValueBytes)
    broken(fmt::format("a value of {} bytes is out of protocol (at most {})", n, kMaxValueBytes));
  std::vector<uint8_t> v(static_cast<size_t>(n));
  recv_bytes(v.data(), v.size(), timeout_);
  return v;
}

void TcpStoreClient::set(const std::string& key, const std::vector<uint8_t>& value) {
  send_query(Query::set);
  send_string("/" + key);
  send_u64(value.size());
  send_bytes(value.data(), value.size());
}

std::vector<uint8_t> TcpStoreClient::get(const std::string& key) {
  // The store's GET on a missing key is an error on its side, so wait first, as c10d does.
  raw_wait({"/" + key}, timeout_);
  send_query(Query::get);
  send_string("/" + key);
  return recv_vector();
}

int64_t TcpStoreClient::raw_add(const std::string& key, int64_t delta) {
  send_query(Query::add);
  send_string(key);
  send_bytes(&delta, sizeof delta);
  int64_t value = 0;
  recv_bytes(&value, sizeof value, timeout_);
  return value;
}

int64_t TcpStoreClient::add(const std::string& key, int64_t delta) {
  return raw_add("/" + key, delta);
}

void TcpStoreClient::count_in_workers() { raw_add("init/", 1); }

bool TcpStoreClient::check(const std::vector<std::string>& keys) {
  send_query(Query::check);
  send_u64(keys.size());
  for (const std::string& k : keys) send_string("/" + k);
  uint8_t answer = 0xff;
  recv_bytes(&answer, 1, timeout_);
  if (answer > 1) broken(fmt::format("CHECK answered {}, not READY (0) or NOT_READY (1)", answer));
  return answer == 0;
}

void TcpStoreClient::raw_wait(const std::vector<std::string>& keys, milliseconds timeout) {
  send_query(Query::wait);
  send_u64(keys.size());
  for (const std::string& k : keys) send_string(k);
  uint8_t answer = 0xff;
  try {
    recv_bytes(&answer, 1, timeout);
  } catch (const Error& e) {
    // recv_bytes says why: no answer within the timeout, or the store gone (a trainer that
    // exited), which must not read as a timeout.
    std::string names;
    for (const std::string& k : keys) names += (names.empty() ? "" : ", ") + k;
    fail("waiting for key(s) {}: {} (is the trainer creating the same group?)", names, e.what());
  }
  if (answer != 0) broken(fmt::format("WAIT answered {}, not STOP_WAITING (0)", answer));
}

void TcpStoreClient::wait(const std::vector<std::string>& keys, milliseconds timeout) {
  std::vector<std::string> full;
  for (const std::string& k : keys) full.push_back("/" + k);
  raw_wait(full, timeout);
}

}  // namespace refit

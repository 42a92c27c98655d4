#include "server/connection_server.h"

#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "server/connection_pool.h"
#include "server/connection_stream.h"

namespace refit {
namespace {

// How long a body-less request's connection is watched for bytes that would be a body
// sent without a length (a client writing its headers and body separately).
constexpr auto kBodyGrace = std::chrono::milliseconds(100);

// The methods cpp-httplib reads a body for (its expect_content): DELETE too.
bool has_body_method(const std::string& method) {
  return method == "POST" || method == "PUT" || method == "PATCH" || method == "PRI" ||
         method == "DELETE";
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Ends a connection whose client may still be sending (a refusal before its body was
// read): closing with unread data would reset the connection and could destroy the
// answer before the client reads it, so the rest is read and dropped for a moment first.
void linger_and_close(int fd) {
  ::shutdown(fd, SHUT_WR);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  char sink[4096];
  size_t dropped = 0;
  while (dropped < (size_t{1} << 20)) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          until - std::chrono::steady_clock::now())
                          .count();
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) break;
    const ssize_t n = ::recv(fd, sink, sizeof sink, MSG_DONTWAIT);
    if (n <= 0) break;
    dropped += static_cast<size_t>(n);
  }
  ::close(fd);
}

// A connection no thread is free for, on the accepting thread: answered without waiting.
void refuse_busy(int fd, int max_connections) {
  char sink[4096];
  for (int i = 0; i < 16 && ::recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0; ++i) {
  }
  const std::string answer = error_answer(
      503,
      fmt::format("the server has {} open connections, its limit (--http-threads); retry "
                  "shortly",
                  max_connections),
      "too_many_connections");
  (void)!::send(fd, answer.data(), answer.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  ::shutdown(fd, SHUT_WR);
  ::close(fd);
}

}  // namespace

void raise_open_file_limit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }
}

ConnectionServer::ConnectionServer(const ConnectionLimits& limits) : limits_(limits) {
  const size_t max_threads = static_cast<size_t>(std::max(1, limits_.max_connections));
  new_task_queue = [max_threads] { return new ConnectionPool(max_threads); };
  // SO_REUSEADDR (a restart may bind while old connections linger in TIME_WAIT), not
  // cpp-httplib's default SO_REUSEPORT, which lets a second server bind the same port and
  // silently take half of its connections.
  set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  // The stream enforces the deadlines; these are what cpp-httplib sets on each socket
  // and names in its Keep-Alive header.
  set_read_timeout(static_cast<time_t>(std::ceil(limits_.request_read_seconds)));
  set_write_timeout(static_cast<time_t>(std::ceil(limits_.write_timeout_seconds)));
  set_keep_alive_timeout(static_cast<time_t>(std::ceil(limits_.keep_alive_seconds)));
}

void ConnectionServer::apply_listen_backlog() {
  // listen(2) again on a listening socket sets its backlog (cpp-httplib's is 5); the
  // kernel caps it at net.core.somaxconn.
  if (svr_sock_ != INVALID_SOCKET) ::listen(svr_sock_, limits_.listen_backlog);
}

void ConnectionServer::stop_accepting() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    for (ConnectionStream* c : connections_) {
      const ConnectionPhase p = c->phase();
      if (p == ConnectionPhase::connection_waiting || p == ConnectionPhase::connection_headers)
        ::shutdown(c->socket(), SHUT_RDWR);  // wakes its thread, which then closes it
    }
  }
  stop();
}

size_t ConnectionServer::open_connections() const {
  std::lock_guard lock(mutex_);
  return connections_.size();
}

bool ConnectionServer::enter(ConnectionStream& stream, ConnectionPhase phase) {
  std::lock_guard lock(mutex_);
  if (stopping_ || svr_sock_ == INVALID_SOCKET) return false;
  stream.set_phase(phase);
  return true;
}

bool ConnectionServer::stopping() const {
  std::lock_guard lock(mutex_);
  return stopping_ || svr_sock_ == INVALID_SOCKET;
}

void ConnectionServer::check_body_framing(ConnectionStream& stream, httplib::Request& req) {
  // A refused request is answered here; the method no route has then makes cpp-httplib
  // route it nowhere (its 400 goes into the failed stream), so no handler runs on it.
  auto refuse = [&](int status, const std::string& message, const std::string& code) {
    stream.refuse(status, message, code);
    req.method = "REFUSED";
  };
  if (!enter(stream, ConnectionPhase::connection_body)) {
    refuse(503, "the server is shutting down", "shutting_down");
    return;
  }
  stream.begin_body(body_limit_ ? body_limit_(req.path) : SIZE_MAX);
  if (!has_body_method(req.method)) return;
  const std::string encoding = req.get_header_value("Transfer-Encoding");
  if (!encoding.empty()) {
    if (strcasecmp(encoding.c_str(), "chunked") != 0)
      refuse(400,
             fmt::format("Transfer-Encoding '{}' is not supported: send the body with "
                         "Content-Length or 'Transfer-Encoding: chunked'",
                         encoding),
             "unsupported_transfer_encoding");
    return;
  }
  if (req.has_header("Content-Length")) {
    const std::string length = req.get_header_value("Content-Length");
    if (!all_digits(length) || req.get_header_value_count("Content-Length") != 1)
      refuse(400, fmt::format("Content-Length '{}' is not one decimal number", length),
             "invalid_content_length");
    return;
  }
  if (stream.data_follows(kBodyGrace))
    refuse(411,
           fmt::format("{} {} sent a body without its length: send Content-Length (or "
                       "'Transfer-Encoding: chunked')",
                       req.method, req.path),
           "length_required");
  else
    stream.end_body_here();
}

bool ConnectionServer::process_and_close_socket(socket_t sock) {
  if (ConnectionPool::refusing()) {
    refuse_busy(sock, limits_.max_connections);
    return false;
  }
  // An answer is two writes (headers, body): with Nagle's algorithm the second waits for
  // the client's delayed ACK of the first, 40 ms on every request of a kept-alive connection.
  int yes = 1;
  setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
  ConnectionStream stream(sock, limits_);
  {
    std::lock_guard lock(mutex_);
    connections_.insert(&stream);
  }
  ConnectionStream::set_current(&stream);
  bool ok = false;
  for (size_t left = keep_alive_max_count_; left > 0; --left) {
    if (!enter(stream, ConnectionPhase::connection_waiting) ||
        !stream.wait_for_request(limits_.keep_alive_seconds) ||
        !enter(stream, ConnectionPhase::connection_headers))
      break;
    stream.begin_request();
    bool closed_by_client = false;
    ok = process_request(stream, /*close_connection=*/left == 1 || stopping(), closed_by_client,
                         [&](httplib::Request& req) { check_body_framing(stream, req); });
    if (!ok || closed_by_client || stream.failed()) break;
  }
  ConnectionStream::set_current(nullptr);
  {
    std::lock_guard lock(mutex_);
    connections_.erase(&stream);
  }
  if (stream.refused()) {
    linger_and_close(sock);
  } else {
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
  }
  return ok;
}

}  // namespace refit

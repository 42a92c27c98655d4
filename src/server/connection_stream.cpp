#include "server/connection_stream.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "server/api_types.h"

namespace refit {
namespace {

thread_local ConnectionStream* t_current = nullptr;

// Every answer cpp-httplib writes starts so (Server::write_response_core).
constexpr char kAnswerPrefix[] = "HTTP/1.1 ";
constexpr size_t kAnswerPrefixSize = sizeof(kAnswerPrefix) - 1;
constexpr size_t kBufferSize = 4096;

int poll_one(int fd, short events, long long timeout_ms, short& revents) {
  pollfd p{fd, events, 0};
  const int timeout = static_cast<int>(std::clamp<long long>(timeout_ms, -1, 1 << 30));
  int n;
  do {
    n = ::poll(&p, 1, timeout);
  } while (n < 0 && errno == EINTR);
  revents = p.revents;
  return n;
}

long long to_ms(double seconds) { return static_cast<long long>(std::ceil(seconds * 1000)); }

void endpoint(const sockaddr_storage& a, std::string& ip, int& port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(a);
    if (inet_ntop(AF_INET, &in.sin_addr, buf, sizeof buf)) ip = buf;
    port = ntohs(in.sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(a);
    if (inet_ntop(AF_INET6, &in6.sin6_addr, buf, sizeof buf)) ip = buf;
    port = ntohs(in6.sin6_port);
  }
}

}  // namespace

std::string error_answer(int status, const std::string& message, const std::string& code) {
  const char* reason = status == 400   ? "Bad Request"
                       : status == 408 ? "Request Timeout"
                       : status == 411 ? "Length Required"
                       : status == 431 ? "Request Header Fields Too Large"
                       : status == 503 ? "Service Unavailable"
                                       : "Error";
  const std::string body =
      HttpError{status,
                message,
                status == 503 ? "service_unavailable" : "invalid_request_error",
                {},
                code}
          .body()
          .dump();
  return fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n"
      "Connection: close\r\n\r\n{}",
      status, reason, body.size(), body);
}

ConnectionStream::ConnectionStream(int fd, const ConnectionLimits& limits)
    : fd_(fd), limits_(limits), buffer_(kBufferSize) {
  sockaddr_storage a{};
  socklen_t n = sizeof a;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&a), &n) == 0)
    endpoint(a, remote_ip_, remote_port_);
  n = sizeof a;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n) == 0)
    endpoint(a, local_ip_, local_port_);
}

ConnectionStream* ConnectionStream::current() { return t_current; }
void ConnectionStream::set_current(ConnectionStream* stream) { t_current = stream; }

void ConnectionStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  ip = remote_ip_;
  port = remote_port_;
}

void ConnectionStream::get_local_ip_and_port(std::string& ip, int& port) const {
  ip = local_ip_;
  port = local_port_;
}

bool ConnectionStream::wait_for_request(double seconds) {
  if (failed_) return false;
  if (buffer_begin_ < buffer_end_) return true;
  short revents = 0;
  return poll_one(fd_, POLLIN, to_ms(seconds), revents) > 0 && (revents & POLLIN) &&
         !(revents & (POLLERR | POLLNVAL));
}

void ConnectionStream::begin_request() {
  request_start_ = std::chrono::steady_clock::now();
  header_bytes_ = body_bytes_ = 0;
  body_ended_ = false;
  probe_sent_ = answer_skipped_ = 0;
  answer_started_ = false;
}

void ConnectionStream::begin_body(size_t max_body_bytes) {
  body_start_ = std::chrono::steady_clock::now();
  max_body_bytes_ = max_body_bytes;
}

void ConnectionStream::end_body_here() { body_ended_ = true; }

long long ConnectionStream::remaining_ms() const {
  using namespace std::chrono;
  const auto now = steady_clock::now();
  const ConnectionPhase p = phase();
  if (p == ConnectionPhase::connection_headers)
    return to_ms(limits_.request_read_seconds) -
           duration_cast<milliseconds>(now - request_start_).count();
  if (p == ConnectionPhase::connection_body)
    return to_ms(limits_.request_read_seconds +
                 double(body_bytes_) / limits_.min_body_bytes_per_second) -
           duration_cast<milliseconds>(now - body_start_).count();
  return to_ms(limits_.request_read_seconds);  // per recv, as cpp-httplib's read timeout
}

bool ConnectionStream::is_readable() const {
  if (failed_) return false;
  if (buffer_begin_ < buffer_end_) return true;
  short revents = 0;
  return poll_one(fd_, POLLIN, std::max<long long>(remaining_ms(), 0), revents) > 0;
}

void ConnectionStream::expire() {
  const bool headers = phase() == ConnectionPhase::connection_headers;
  refuse(408,
         fmt::format("the request's {} did not arrive in time ({} s for the headers; the body as "
                     "long again plus its size at {} MiB/s)",
                     headers ? "headers" : "body", limits_.request_read_seconds,
                     limits_.min_body_bytes_per_second / double(1 << 20)),
         "request_timeout");
}

ssize_t ConnectionStream::fill(char* ptr, size_t size) {
  const long long left = remaining_ms();
  if (left <= 0) {
    expire();
    return -1;
  }
  short revents = 0;
  const int ready = poll_one(fd_, POLLIN, left, revents);
  if (ready == 0) {
    expire();
    return -1;
  }
  if (ready < 0) return -1;
  ssize_t n;
  // Small reads (cpp-httplib reads headers a byte at a time) go through the buffer.
  char* into = size < kBufferSize ? buffer_.data() : ptr;
  const size_t room = size < kBufferSize ? kBufferSize : size;
  do {
    n = ::recv(fd_, into, room, 0);
  } while (n < 0 && errno == EINTR);
  if (n <= 0 || into == ptr) return n;
  const size_t give = std::min(size, static_cast<size_t>(n));
  std::memcpy(ptr, buffer_.data(), give);
  buffer_begin_ = give;
  buffer_end_ = static_cast<size_t>(n);
  return static_cast<ssize_t>(give);
}

ssize_t ConnectionStream::read(char* ptr, size_t size) {
  if (failed_) return -1;
  const ConnectionPhase p = phase();
  if (body_ended_ && p == ConnectionPhase::connection_body) return 0;
  ssize_t n;
  if (buffer_begin_ < buffer_end_) {
    const size_t give = std::min(size, buffer_end_ - buffer_begin_);
    std::memcpy(ptr, buffer_.data() + buffer_begin_, give);
    buffer_begin_ += give;
    n = static_cast<ssize_t>(give);
  } else {
    n = fill(ptr, size);
  }
  if (n <= 0) return n;
  if (p == ConnectionPhase::connection_headers) {
    header_bytes_ += static_cast<size_t>(n);
    if (header_bytes_ > limits_.max_header_bytes) {
      refuse(
          431,
          fmt::format("the request line and headers are over {} bytes", limits_.max_header_bytes),
          "headers_too_large");
      return -1;
    }
  } else if (p == ConnectionPhase::connection_body) {
    body_bytes_ += static_cast<size_t>(n);
    // A declared Content-Length over the limit was refused before routing; this catches
    // chunked bodies (and anything else cpp-httplib would read without a bound).
    if (body_bytes_ > max_body_bytes_) {
      refuse(413,
             fmt::format("the request body is over this route's limit of {} bytes "
                         "(--max-request-bytes)",
                         max_body_bytes_),
             "body_too_large");
      return -1;
    }
  }
  return n;
}

bool ConnectionStream::data_follows(std::chrono::milliseconds grace) {
  if (buffer_begin_ < buffer_end_) return true;
  short revents = 0;
  if (poll_one(fd_, POLLIN, grace.count(), revents) <= 0) return false;
  char c;
  ssize_t n;
  do {
    n = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  return n > 0;
}

bool ConnectionStream::is_writable() const {
  if (failed_) return false;
  short revents = 0;
  // A FIN from the client (POLLRDHUP) is no reason to stop: it may wait for its answer.
  return poll_one(fd_, POLLOUT, to_ms(limits_.write_timeout_seconds), revents) > 0 &&
         (revents & POLLOUT) && !(revents & (POLLERR | POLLHUP | POLLNVAL));
}

ssize_t ConnectionStream::send_all_or_some(const char* ptr, size_t size) {
  if (!is_writable()) return -1;
  ssize_t n;
  do {
    n = ::send(fd_, ptr, size, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  return n;
}

// "HTTP/1.1 100 Continue\r\n\r\n": an interim answer; the final one follows it.
static bool is_interim_answer(const char* ptr, size_t size) {
  return size >= kAnswerPrefixSize + 1 && std::memcmp(ptr, kAnswerPrefix, kAnswerPrefixSize) == 0 &&
         ptr[kAnswerPrefixSize] == '1';
}

ssize_t ConnectionStream::write(const char* ptr, size_t size) {
  if (failed_) return -1;
  if (!answer_started_ && is_interim_answer(ptr, size)) return send_all_or_some(ptr, size);
  answer_started_ = true;
  phase_.store(ConnectionPhase::connection_responding);
  if (answer_skipped_ < probe_sent_) {
    // peer_gone() sent the answer's first bytes already: these are they.
    const size_t skip = std::min(probe_sent_ - answer_skipped_, size);
    if (std::memcmp(ptr, kAnswerPrefix + answer_skipped_, skip) == 0) {
      answer_skipped_ += skip;
      if (skip == size) return static_cast<ssize_t>(size);
      const ssize_t n = send_all_or_some(ptr + skip, size - skip);
      return n < 0 ? n : n + static_cast<ssize_t>(skip);
    }
    answer_skipped_ = probe_sent_;  // not an answer's start: cpp-httplib never writes one
  }
  return send_all_or_some(ptr, size);
}

bool ConnectionStream::peer_gone() {
  if (failed_) return true;
  short revents = 0;
  if (poll_one(fd_, POLLRDHUP, 0, revents) <= 0) return false;
  if (revents & (POLLERR | POLLHUP | POLLNVAL)) return true;
  if (!(revents & POLLRDHUP) || probe_sent_ > 0 || answer_started_) return false;
  ssize_t n;
  do {
    n = ::send(fd_, kAnswerPrefix, kAnswerPrefixSize, MSG_NOSIGNAL | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK;
  // What went of the prefix is what the answer skips; the rest goes with the answer.
  probe_sent_ = static_cast<size_t>(n);
  return false;
}

void ConnectionStream::refuse(int status, const std::string& message, const std::string& code) {
  if (failed_) return;
  if (!answer_started_ && probe_sent_ == 0) {
    const std::string answer = error_answer(status, message, code);
    size_t sent = 0;
    while (sent < answer.size()) {
      const ssize_t n = send_all_or_some(answer.data() + sent, answer.size() - sent);
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
  }
  failed_ = true;
  refused_ = true;
}

}  // namespace refit

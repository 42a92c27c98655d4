// One client connection of `refit serve` as cpp-httplib reads and writes it (an
// httplib::Stream over the socket), with what cpp-httplib's own SocketStream lacks:
//
// - Deadlines for the whole request, not per recv(): its line and headers must arrive
//   within `request_read_seconds` of its first byte, its body within that again plus its
//   size at `min_body_bytes_per_second`. A client past its deadline is answered 408 and
//   closed. Headers over `max_header_bytes` are refused the same way (cpp-httplib would
//   buffer an endless header line whole).
// - A half-closed client (shutdown(SHUT_WR) after its request) is still written to:
//   SocketStream reports a socket whose peer sent FIN as unwritable, so such a client got
//   no answer at all.
// - peer_gone() for handlers that hold a request without writing: see there.
//
// The server (server/connection_server.h) moves a connection through its phases; the
// stream is used by that connection's thread only, except phase(), which stop() reads.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "server/connection_limits.h"

namespace refit {

// A whole HTTP/1.1 answer with an OpenAI-style error body that closes the connection.
std::string error_answer(int status, const std::string& message, const std::string& code);

enum class ConnectionPhase {
  connection_waiting,     // between requests: nothing of the next one has come
  connection_headers,     // reading a request's line and headers
  connection_body,        // headers are in: its body, then its handler
  connection_responding,  // writing its answer
};

class ConnectionStream : public httplib::Stream {
 public:
  ConnectionStream(int fd, const ConnectionLimits& limits);

  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  int socket() const override { return fd_; }

  ConnectionPhase phase() const { return phase_.load(); }
  void set_phase(ConnectionPhase p) { phase_.store(p); }
  // Waits up to `seconds` for the next request's first byte (or one already buffered);
  // false when none came, the client closed, or the server shut the socket down.
  bool wait_for_request(double seconds);
  // Deadlines: the request's first byte is here; its headers are in.
  void begin_request();
  // The body may take up to `max_body_bytes` bytes on the wire (chunk framing included):
  // past that the request is refused 413 before more is read, whatever its framing.
  void begin_body(size_t max_body_bytes = SIZE_MAX);
  // The request has no body (RFC 9112 6.3: neither Content-Length nor chunked): its body
  // reads see the end at once, whatever follows stays for the next request.
  void end_body_here();
  // Whether bytes of data (not the end of the stream) follow the headers within `grace`.
  bool data_follows(std::chrono::milliseconds grace);
  // Answers `status` with an OpenAI-style error and ends the connection: every later read
  // and write fails, so no handler runs on what was read.
  void refuse(int status, const std::string& message, const std::string& code);
  bool failed() const { return failed_; }
  // Whether the connection ended in a way that warrants a lingering close (a refusal
  // sent while the client may still be sending).
  bool refused() const { return refused_; }

  // For a handler that holds its request for a long time before writing: true once the
  // client has gone (reset, or closed). A FIN alone cannot tell a client that closed from
  // one that half-closed and waits for its answer, and only data sent can: so on a FIN
  // the stream sends "HTTP/1.1 ", the first bytes of every answer, which a waiting client
  // takes as the start of its answer and a closed socket answers with a reset, seen by the
  // next call. The answer's own first bytes are then not sent again.
  bool peer_gone();

  // The connection whose request this thread is serving (set by the server), or null.
  static ConnectionStream* current();
  static void set_current(ConnectionStream* stream);

 private:
  // Milliseconds left before the phase's deadline (<= 0: passed); -1: none applies.
  long long remaining_ms() const;
  ssize_t fill(char* ptr, size_t size);
  ssize_t send_all_or_some(const char* ptr, size_t size);
  void expire();  // the deadline passed: 408, then failure

  const int fd_;
  const ConnectionLimits limits_;
  std::atomic<ConnectionPhase> phase_{ConnectionPhase::connection_waiting};
  std::vector<char> buffer_;
  size_t buffer_begin_ = 0, buffer_end_ = 0;
  std::chrono::steady_clock::time_point request_start_, body_start_;
  size_t header_bytes_ = 0, body_bytes_ = 0, max_body_bytes_ = SIZE_MAX;
  bool body_ended_ = false, failed_ = false, refused_ = false;
  // peer_gone()'s probe: bytes of the answer's prefix sent ahead of it, and how many of
  // them the answer has skipped since.
  size_t probe_sent_ = 0, answer_skipped_ = 0;
  bool answer_started_ = false;  // a final (not 1xx) answer is being written
  std::string remote_ip_, local_ip_;
  int remote_port_ = -1, local_port_ = -1;
};

}  // namespace refit

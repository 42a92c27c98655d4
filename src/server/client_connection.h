// Whether the client of a request is still connected, for handlers that hold a request
// for a long time without writing (non-streaming completions): a client that gives up
// should cancel its generation and free its KV blocks, as a streaming one does when a
// write fails.
//
// cpp-httplib 0.11 (Debian 12's) gives a handler no access to its connection, so the
// connection's socket is found among the process's descriptors by its two endpoints
// (the request's remote and local address and port, which httplib fills in): a TCP
// connection is the only socket with that pair, and httplib keeps it open until the
// handler returns. Polling it for POLLRDHUP then tells whether the peer has closed.
#pragma once

namespace httplib {
struct Request;
}

namespace refit {

class ClientConnection {
 public:
  // Looks the socket up once; if it cannot be found, disconnects are never reported.
  explicit ClientConnection(const httplib::Request& request);
  // True once the client has closed or reset the connection. Never blocks.
  bool closed() const;
  bool found() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace refit

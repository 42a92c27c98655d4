// Whether the client of a request is still connected, for handlers that hold a request
// for a long time without writing (non-streaming completions): a client that gives up
// should cancel its generation and free its KV blocks, as a streaming one does when a
// write fails.
//
// cpp-httplib 0.11 (Debian 12's) gives a handler no access to its connection; the server's
// own connection loop (server/connection_server.h) does, and a handler runs on the thread
// of its connection, so the request's connection is the one this thread serves. A client
// that half-closed after its request is not taken for gone: see ConnectionStream::peer_gone.
#pragma once

namespace httplib {
struct Request;
}

namespace refit {

class ConnectionStream;

class ClientConnection {
 public:
  // The connection `request` came on; if it cannot be found, disconnects are never reported.
  explicit ClientConnection(const httplib::Request& request);
  // True once the client has closed or reset the connection. Never blocks.
  bool closed() const;
  bool found() const { return stream_ != nullptr; }

 private:
  ConnectionStream* stream_ = nullptr;
};

}  // namespace refit

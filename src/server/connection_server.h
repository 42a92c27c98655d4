// cpp-httplib's Server with connections that cannot be held by a slow client, a listen
// backlog of our choosing, and a stop that does not wait for idle connections.
//
// cpp-httplib 0.11 (Debian 12's, compiled into its library) serves each connection with a
// fixed pool, a per-recv read timeout and a backlog of 5; its stop() waits for every
// connection, idle keep-alive ones included. Its connection loop is a virtual
// (process_and_close_socket) over a protected process_request(), so this class runs its
// own loop over a ConnectionStream (server/connection_stream.h) instead:
//
// - a thread per open connection, started on demand up to max_connections, then 503
//   (server/connection_pool.h);
// - deadlines for each request and its body, and a bounded wait between requests;
// - a POST, PUT or PATCH with neither Content-Length nor chunked Transfer-Encoding has no
//   body (RFC 9112 6.3), served at once rather than read until the client closes;
//   when bytes follow its headers anyway, it is refused 411 Length Required;
// - stop_accepting() closes the listener and every connection that is idle or still
//   sending its headers; a request already read runs and is answered.
#pragma once

#include <httplib.h>

#include <functional>
#include <mutex>
#include <set>
#include <string>

#include "server/connection_limits.h"
#include "server/connection_stream.h"

namespace refit {

class ConnectionServer : public httplib::Server {
 public:
  explicit ConnectionServer(const ConnectionLimits& limits);
  // After bind_to_port/bind_to_any_port: the listening socket takes limits' backlog.
  void apply_listen_backlog();
  void stop_accepting();
  size_t open_connections() const;
  // The most body bytes a request to `path` may send on the wire (set before listening).
  void set_body_limit(std::function<size_t(const std::string& path)> limit) {
    body_limit_ = std::move(limit);
  }

 private:
  bool process_and_close_socket(socket_t sock) override;
  // Moves a connection to `phase`, unless the server is stopping (then false): under the
  // mutex, so stop_accepting() never cuts one that has just been routed.
  bool enter(ConnectionStream& stream, ConnectionPhase phase);
  bool stopping() const;
  // After a request's headers, before it is routed: the checks on its body's framing.
  void check_body_framing(ConnectionStream& stream, httplib::Request& req);

  const ConnectionLimits limits_;
  std::function<size_t(const std::string&)> body_limit_;
  mutable std::mutex mutex_;
  std::set<ConnectionStream*> connections_;
  bool stopping_ = false;
};

}  // namespace refit

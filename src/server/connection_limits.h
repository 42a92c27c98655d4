// What a client connection of `refit serve` may hold, and for how long
// (server/connection_server.h enforces them).
//
// A connection has a thread while it is open, so a slow or idle client must lose it on a
// deadline, never by the pool running dry: cpp-httplib's own read timeout restarts on
// every byte, so a client that sends one byte every few seconds would keep it forever.
#pragma once

#include <cstddef>

namespace refit {

struct ConnectionLimits {
  // Open connections, one thread each (threads start as connections arrive); one more is
  // answered 503 and closed at once rather than queued behind the others.
  int max_connections = 1024;
  // A request's line and headers must have arrived this long after its first byte; its
  // body may take this long again plus its size at min_body_bytes_per_second, so a large
  // tensor upload at any reasonable rate is never cut while a drip of bytes is.
  double request_read_seconds = 30;
  double min_body_bytes_per_second = double(1 << 20);
  // Request line and headers together; more is refused (cpp-httplib buffers a header
  // line whole, however long, until its newline).
  size_t max_header_bytes = size_t{64} << 10;
  // How long a connection waits for its next request (keep-alive) before it is closed.
  double keep_alive_seconds = 5;
  // Per send(): a client that stops reading its answer loses its connection after this.
  double write_timeout_seconds = 600;
  // Pending connections the kernel holds for accept() (listen(2)'s backlog; cpp-httplib's
  // is 5, compiled into its library).
  int listen_backlog = 1024;
};

// Raises this process's soft limit of open files to its hard limit (server/connection_server.cpp):
// each connection is one, and a soft limit of 1024 is common.
void raise_open_file_limit();

}  // namespace refit

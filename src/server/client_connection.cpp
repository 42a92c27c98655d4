#include "server/client_connection.h"

#include <httplib.h>

#include "server/connection_stream.h"

namespace refit {

ClientConnection::ClientConnection(const httplib::Request& r) {
  ConnectionStream* stream = ConnectionStream::current();
  std::string ip;
  int port = -1;
  if (stream) stream->get_remote_ip_and_port(ip, port);
  if (stream && port == r.remote_port && ip == r.remote_addr) stream_ = stream;
}

bool ClientConnection::closed() const { return stream_ && stream_->peer_gone(); }

}  // namespace refit

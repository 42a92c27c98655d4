#include "server/client_connection.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace refit {
namespace {

// The numeric address and port of a socket endpoint, as httplib spells them.
bool endpoint(const sockaddr_storage& a, std::string& ip, int& port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(a);
    if (!inet_ntop(AF_INET, &in.sin_addr, buf, sizeof buf)) return false;
    port = ntohs(in.sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(a);
    if (!inet_ntop(AF_INET6, &in6.sin6_addr, buf, sizeof buf)) return false;
    port = ntohs(in6.sin6_port);
  } else {
    return false;
  }
  ip = buf;
  return true;
}

bool matches(int fd, const httplib::Request& r) {
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return false;
  sockaddr_storage peer{}, local{};
  socklen_t n = sizeof peer;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &n) != 0) return false;
  n = sizeof local;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &n) != 0) return false;
  std::string peer_ip, local_ip;
  int peer_port = -1, local_port = -1;
  return endpoint(peer, peer_ip, peer_port) && endpoint(local, local_ip, local_port) &&
         peer_port == r.remote_port && local_port == r.local_port && peer_ip == r.remote_addr &&
         local_ip == r.local_addr;
}

}  // namespace

ClientConnection::ClientConnection(const httplib::Request& r) {
  if (r.remote_port < 0 || r.local_port < 0) return;
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return;
  const int own = dirfd(dir);
  while (const dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == own) continue;
    if (matches(static_cast<int>(fd), r)) {
      fd_ = static_cast<int>(fd);
      break;
    }
  }
  closedir(dir);
}

bool ClientConnection::closed() const {
  if (fd_ < 0) return false;
  pollfd p{fd_, POLLRDHUP, 0};
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

}  // namespace refit

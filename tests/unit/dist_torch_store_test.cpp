// The torch TCPStore client (src/dist/torch_group/) against a real torch 1.13 TCPStore
// host, and against a fake host that breaks the protocol; the weight-sync request's
// command encoding and torch dtype names (src/parallel/weight_sync.h).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "core/error.h"
#include "dist/torch_group/tcp_store_client.h"
#include "parallel/weight_sync.h"

namespace refit {
namespace {

using std::chrono::milliseconds;

// A listening socket on 127.0.0.1 with a kernel-chosen port.
struct Listener {
  int fd = -1;
  int port = 0;
  Listener() {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(fd, 4);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~Listener() { ::close(fd); }
};

TEST(TorchStore, UnreachableStoreFailsWithinTheTimeoutNamingTheAddress) {
  int port;
  {
    Listener l;  // closed again at once: nothing listens there
    port = l.port;
  }
  const auto t0 = std::chrono::steady_clock::now();
  try {
    TcpStoreClient c("127.0.0.1", port, milliseconds(300));
    FAIL() << "connected to a closed port";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(port)), std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(2000));
}

TEST(TorchStore, AHostOutOfProtocolIsAnErrorNotACrash) {
  Listener l;
  std::thread host([&] {
    const int fd = ::accept(l.fd, nullptr, nullptr);
    char buf[256];
    ::recv(fd, buf, sizeof buf, 0);  // CHECK request
    const uint8_t seven = 7;
    ::send(fd, &seven, 1, 0);
    ::recv(fd, buf, sizeof buf, 0);  // (a new connection's) nothing: close
    ::close(fd);
  });
  TcpStoreClient c("127.0.0.1", l.port, milliseconds(2000));
  EXPECT_THROW(c.check({"k"}), Error);
  // The connection is closed after a protocol error: later calls fail at once.
  EXPECT_THROW(c.add("k", 1), Error);
  host.join();
}

TEST(TorchStore, AHostThatNeverAnswersTimesOut) {
  Listener l;
  std::thread host([&] {
    const int fd = ::accept(l.fd, nullptr, nullptr);
    std::this_thread::sleep_for(milliseconds(800));
    ::close(fd);
  });
  TcpStoreClient c("127.0.0.1", l.port, milliseconds(200));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(c.add("counter", 1), Error);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(700));
  host.join();
}

// A wait ends with the reason: the store gone (a trainer that exited) is said at once, not
// reported as the wait's timeout; a store that never answers is a timeout.
TEST(TorchStore, AWaitSaysWhetherTheStoreClosedOrNeverAnswered) {
  for (const bool close_it : {true, false}) {
    SCOPED_TRACE(close_it ? "closed" : "silent");
    Listener l;
    std::thread host([&] {
      const int fd = ::accept(l.fd, nullptr, nullptr);
      // The whole WAIT request (query byte, key count, key length, "/k"), which the client
      // sends in pieces: closing with some of it unread would reset the connection under
      // the client's next write instead of ending its wait.
      char buf[19];
      for (size_t got = 0; got < sizeof buf;) {
        const ssize_t n = ::recv(fd, buf + got, sizeof buf - got, 0);
        if (n <= 0) break;
        got += static_cast<size_t>(n);
      }
      if (!close_it) std::this_thread::sleep_for(milliseconds(600));
      ::close(fd);
    });
    TcpStoreClient c("127.0.0.1", l.port, milliseconds(5000));
    const auto t0 = std::chrono::steady_clock::now();
    std::string what;
    try {
      c.wait({"k"}, milliseconds(close_it ? 5000 : 200));
    } catch (const Error& e) {
      what = e.what();
    }
    EXPECT_NE(what.find("waiting for key(s) /k"), std::string::npos) << what;
    EXPECT_NE(what.find(close_it ? "closed the connection" : "no answer within 200 ms"),
              std::string::npos)
        << what;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(close_it ? 3000 : 500));
    host.join();
  }
}

// The wire protocol against torch itself: the host counts us in ("init/"), then checks
// what we set and added, sets a key we wait for and read.
TEST(TorchStore, SpeaksTorch113TcpStore) {
  if (std::system("/usr/bin/python3 -c 'import torch.distributed' 2>/dev/null") != 0)
    GTEST_SKIP() << "no torch at /usr/bin/python3";
  Listener probe;
  const int port = probe.port;
  ::close(probe.fd);
  probe.fd = -1;
  const std::string script =
      "import sys, torch.distributed as d\n"
      "from datetime import timedelta\n"
      "s = d.TCPStore('127.0.0.1', " +
      std::to_string(port) +
      ", 2, True, timedelta(seconds=90))\n"
      "s.wait(['from_refit'])\n"
      "assert s.get('from_refit') == b'hello\\x00bytes', s.get('from_refit')\n"
      "assert s.add('counter', 0) == 5\n"
      "s.set('from_torch', 'ok')\n"
      "s.wait(['done'])\n"
      "print('host ok')\n";
  FILE* host = ::popen(("/usr/bin/python3 -c \"" + std::string(script) + "\" 2>&1").c_str(), "r");
  ASSERT_NE(host, nullptr);
  // Generous deadlines: on a loaded 2-core machine importing torch alone can take 20 s.
  TcpStoreClient c("127.0.0.1", port, milliseconds(90000));
  c.count_in_workers();
  // The adds come before the key the host waits for, so its check of the counter cannot
  // run between them (on a loaded machine it could: the host's assertion then failed, its
  // store closed, and our wait below failed, once).
  EXPECT_EQ(c.add("counter", 2), 2);
  EXPECT_EQ(c.add("counter", 3), 5);
  c.set("from_refit", {'h', 'e', 'l', 'l', 'o', 0, 'b', 'y', 't', 'e', 's'});
  EXPECT_FALSE(c.check({"never_set"}));
  const std::vector<uint8_t> v = c.get("from_torch");  // waits until the host sets it
  EXPECT_EQ(std::string(v.begin(), v.end()), "ok");
  EXPECT_TRUE(c.check({"from_torch", "from_refit"}));
  // A wait that times out leaves the connection out of step (the answer may still come):
  // it fails, and that client is closed; another one goes on.
  EXPECT_THROW(c.wait({"never_set"}, milliseconds(200)), Error);
  EXPECT_THROW(c.check({"from_torch"}), Error);
  TcpStoreClient c2("127.0.0.1", port, milliseconds(90000));
  c2.set("done", {});
  std::string out;
  char buf[512];
  while (::fgets(buf, sizeof buf, host)) out += buf;
  EXPECT_EQ(::pclose(host), 0) << out;
  EXPECT_NE(out.find("host ok"), std::string::npos) << out;
}

TEST(WeightSyncRequest, TorchDtypeNames) {
  EXPECT_EQ(dtype_from_torch_name("float32"), DType::f32);
  EXPECT_EQ(dtype_from_torch_name("torch.bfloat16"), DType::bf16);
  EXPECT_EQ(dtype_from_torch_name("half"), DType::f16);
  EXPECT_EQ(dtype_from_torch_name("f32"), DType::f32);
  EXPECT_EQ(dtype_from_torch_name("float8_e4m3fn"), DType::f8_e4m3fn);
  EXPECT_EQ(dtype_from_torch_name("complex64"), std::nullopt);
  EXPECT_EQ(dtype_from_torch_name("f4_e2m1"), std::nullopt);  // no whole bytes: not broadcastable
}

TEST(WeightSyncRequest, CommandRoundTripAndTruncation) {
  DistributedUpdate u;
  u.group_name = "g";
  u.flattened_bucket = true;
  u.names = {"a", "b"};
  u.dtypes = {DType::f32, DType::bf16};
  u.shapes = {{2, 3}, {}};
  const std::string wire = u.encode();
  const DistributedUpdate back = DistributedUpdate::decode(wire);
  EXPECT_EQ(back.group_name, "g");
  EXPECT_TRUE(back.flattened_bucket);
  EXPECT_EQ(back.names, u.names);
  EXPECT_EQ(back.dtypes, u.dtypes);
  EXPECT_EQ(back.shapes, u.shapes);
  for (size_t n = 0; n < wire.size(); n += 3)
    EXPECT_THROW(DistributedUpdate::decode(wire.substr(0, n)), Error) << n;
}

TEST(WeightSyncGroups, UnknownGroupsAreNamed) {
  WeightSyncGroups groups;
  try {
    groups.destroy("nope");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no weight update group 'nope'"), std::string::npos)
        << e.what();
  }
  DistributedUpdate u;
  u.group_name = "nope";
  EXPECT_THROW(groups.receive(u), Error);
}

}  // namespace
}  // namespace refit

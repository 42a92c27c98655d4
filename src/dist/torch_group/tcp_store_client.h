// A client of c10d's TCPStore as torch 1.13 speaks it (torch/csrc/distributed/c10d/
// TCPStore.cpp): the key-value store a torch.distributed trainer hosts on rank 0 for
// `init_method="tcp://host:port"`, and where every rank of a process group publishes its
// transport address. refit joins a trainer's group through it without any Python.
//
// The wire protocol, one TCP connection per client, little-endian, no framing beyond:
//   request   1 byte query type, then per type:
//     SET         key, value                          (no reply)
//     GET         key                       -> value  (the key must exist: c10d waits first)
//     ADD         key, int64 delta          -> int64 new value (a decimal string in the store)
//     CHECK       uint64 n, n keys          -> 1 byte READY(0) / NOT_READY(1)
//     WAIT        uint64 n, n keys          -> 1 byte STOP_WAITING(0), sent once all exist
//   a key / value is a uint64 byte count then the bytes.
// c10d's TCPStore puts "/" before every user key; the rendezvous counter "init/" (which the
// store's host waits on until world_size clients have added 1) is the one raw key.
//
// Every read and write has a deadline; a peer that goes away or answers out of protocol
// gives an Error naming the store's address and the operation.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace refit {

class TcpStoreClient {
 public:
  // Connects, retrying until `timeout` (the trainer may open its store after we start).
  TcpStoreClient(const std::string& host, int port, std::chrono::milliseconds timeout);
  ~TcpStoreClient();
  TcpStoreClient(const TcpStoreClient&) = delete;
  TcpStoreClient& operator=(const TcpStoreClient&) = delete;

  // User keys, as c10d::TCPStore's set/get/add/check/wait take them ("/" is added here).
  void set(const std::string& key, const std::vector<uint8_t>& value);
  // Waits for the key (up to the timeout), then reads it: c10d's get.
  std::vector<uint8_t> get(const std::string& key);
  int64_t add(const std::string& key, int64_t delta);
  bool check(const std::vector<std::string>& keys);
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);

  // What a TCPStore client does on construction (waitWorkers): counts itself in "init/",
  // which the store's host waits on before its constructor returns.
  void count_in_workers();

  std::chrono::milliseconds timeout() const { return timeout_; }
  const std::string& address() const { return address_; }

 private:
  enum class Query : uint8_t { set = 0, compare_set = 1, get = 2, add = 3, check = 4, wait = 5 };
  void send_bytes(const void* data, size_t n);
  void send_u64(uint64_t v) { send_bytes(&v, sizeof v); }
  void send_string(const std::string& s);
  void send_query(Query q) { send_bytes(&q, 1); }
  void recv_bytes(void* data, size_t n, std::chrono::milliseconds timeout);
  std::vector<uint8_t> recv_vector();
  int64_t raw_add(const std::string& key, int64_t delta);
  void raw_wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  [[noreturn]] void broken(const std::string& what);

  std::string address_;
  std::chrono::milliseconds timeout_;
  int fd_ = -1;
};

}  // namespace refit

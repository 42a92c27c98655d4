// gloo::rendezvous::Store over the trainer's c10d TCPStore, under a key prefix: what
// torch's ProcessGroupGloo::GlooStore adapter plus c10d's PrefixStore(s) give gloo there,
// so gloo's connectFullMesh reads and writes the keys the trainer's side uses.
#pragma once

#include <gloo/rendezvous/store.h>

#include <string>
#include <vector>

#include "dist/torch_group/tcp_store_client.h"

namespace refit {

class GlooTcpStore final : public gloo::rendezvous::Store {
 public:
  // `prefix` is c10d PrefixStore's joined form: "<group>/<group>/" for torch 1.13's helper.
  GlooTcpStore(TcpStoreClient& client, std::string prefix)
      : client_(client), prefix_(std::move(prefix)) {}

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override { wait(keys, client_.timeout()); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  TcpStoreClient& client_;
  std::string prefix_;
};

}  // namespace refit

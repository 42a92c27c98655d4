#include "dist/torch_group/gloo/gloo_store.h"

namespace refit {

void GlooTcpStore::set(const std::string& key, const std::vector<char>& data) {
  client_.set(prefix_ + key, std::vector<uint8_t>(data.begin(), data.end()));
}

std::vector<char> GlooTcpStore::get(const std::string& key) {
  const std::vector<uint8_t> v = client_.get(prefix_ + key);
  return std::vector<char>(v.begin(), v.end());
}

void GlooTcpStore::wait(const std::vector<std::string>& keys,
                        const std::chrono::milliseconds& timeout) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const std::string& k : keys) full.push_back(prefix_ + k);
  client_.wait(full, timeout);
}

}  // namespace refit

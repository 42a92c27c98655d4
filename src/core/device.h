// Where a tensor's bytes live. Dispatch (law L3) reads this from each argument tensor,
// never from the build or the platform.
#pragma once

#include <string>

namespace refit {

enum class DeviceType : uint8_t { cpu, cuda, rocm };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static Device cpu() { return {DeviceType::cpu, 0}; }
  static Device cuda(int i = 0) { return {DeviceType::cuda, i}; }
  bool operator==(const Device&) const = default;
  std::string str() const;  // "cpu", "cuda:0"
};

const char* device_type_name(DeviceType t);

}  // namespace refit

#include "core/device.h"

#include <fmt/format.h>

namespace refit {

const char* device_type_name(DeviceType t) {
  switch (t) {
    case DeviceType::cpu:
      return "cpu";
    case DeviceType::cuda:
      return "cuda";
    case DeviceType::rocm:
      return "rocm";
  }
  return "?";
}

std::string Device::str() const {
  if (type == DeviceType::cpu) return "cpu";
  return fmt::format("{}:{}", device_type_name(type), index);
}

}  // namespace refit

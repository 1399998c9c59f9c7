// Where a tensor's bytes live. Only the CPU exists today; the op seam (kernels/ops.h) is where a second device's
// kernels plug in, and tensors say which device they are for.
#pragma once

namespace deepinfer {

enum class Device { kCpu };

inline const char* DeviceName(Device d) {
  switch (d) {
    case Device::kCpu: return "cpu";
  }
  return "?";
}

}  // namespace deepinfer

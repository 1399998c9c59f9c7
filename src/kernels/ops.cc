#include "kernels/ops.h"

#include "kernels/cpu/cpu_ops.h"

namespace deepinfer {

const Ops& OpsFor(Device d) {
  switch (d) {
    case Device::kCpu: return CpuOps();
  }
  return CpuOps();
}

}  // namespace deepinfer

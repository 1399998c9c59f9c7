// The CPU implementation of the op seam (kernels/ops.h): each op is today's kernel (gemm.h, attention.h, ops.h),
// which dispatches once to the active ISA's table (dispatch.h).
#pragma once
#include "kernels/ops.h"

namespace deepinfer {

const Ops& CpuOps();

}  // namespace deepinfer

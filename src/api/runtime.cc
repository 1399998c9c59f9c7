#include "deepinfer/runtime.h"

#include "base/logging.h"
#include "base/thread_pool.h"

namespace deepinfer::api {

void SetLogLevel(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: deepinfer::SetLogLevel(deepinfer::LogLevel::kDebug); break;
    case LogLevel::kInfo: deepinfer::SetLogLevel(deepinfer::LogLevel::kInfo); break;
    case LogLevel::kWarn: deepinfer::SetLogLevel(deepinfer::LogLevel::kWarn); break;
    case LogLevel::kError: deepinfer::SetLogLevel(deepinfer::LogLevel::kError); break;
    case LogLevel::kOff: deepinfer::SetLogLevel(deepinfer::LogLevel::kOff); break;
  }
}

void SetComputeThreads(int n) { deepinfer::SetComputeThreads(n); }
int ComputeThreads() { return deepinfer::ComputePool().size(); }

}  // namespace deepinfer::api

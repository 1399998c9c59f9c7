#include "deepinfer/runtime.h"

#include <cstdarg>
#include <cstdio>

#include "base/logging.h"
#include "base/thread_pool.h"

namespace deepinfer::api {
namespace {

deepinfer::LogLevel InternalLevel(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return deepinfer::LogLevel::kDebug;
    case LogLevel::kInfo: return deepinfer::LogLevel::kInfo;
    case LogLevel::kWarn: return deepinfer::LogLevel::kWarn;
    case LogLevel::kError: return deepinfer::LogLevel::kError;
    case LogLevel::kOff: break;
  }
  return deepinfer::LogLevel::kOff;
}

}  // namespace

void SetLogLevel(LogLevel level) { deepinfer::SetLogLevel(InternalLevel(level)); }

void Log(LogLevel level, const char* format, ...) {
  const deepinfer::LogLevel l = InternalLevel(level);
  if (l == deepinfer::LogLevel::kOff || l < deepinfer::GetLogLevel()) return;
  char buf[4096];  // LogMessage's own bound
  va_list ap;
  va_start(ap, format);
  std::vsnprintf(buf, sizeof buf, format, ap);
  va_end(ap);
  deepinfer::LogMessage(l, "%s", buf);
}

void SetComputeThreads(int n) { deepinfer::SetComputeThreads(n); }
int ComputeThreads() { return deepinfer::ComputePool().size(); }

}  // namespace deepinfer::api

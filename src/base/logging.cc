#include "base/logging.h"

#include <cstdarg>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace deepinfer {
namespace {

LogLevel LevelFromEnv() {
  const char* v = std::getenv("DEEPINFER_LOG");
  if (!v) return LogLevel::kInfo;
  if (!strcmp(v, "debug")) return LogLevel::kDebug;
  if (!strcmp(v, "warn")) return LogLevel::kWarn;
  if (!strcmp(v, "error")) return LogLevel::kError;
  if (!strcmp(v, "off")) return LogLevel::kOff;
  return LogLevel::kInfo;
}

LogLevel g_level = LevelFromEnv();

}  // namespace

LogLevel GetLogLevel() { return g_level; }
void SetLogLevel(LogLevel level) { g_level = level; }

void LogMessage(LogLevel level, const char* fmt, ...) {
  if (level < g_level) return;
  static const char* kNames[] = {"D", "I", "W", "E"};
  char ts[32];
  std::time_t now = std::time(nullptr);
  std::strftime(ts, sizeof ts, "%H:%M:%S", std::localtime(&now));
  char buf[4096];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "[%s %s] %s\n", kNames[static_cast<int>(level)], ts, buf);
}

}  // namespace deepinfer

// Minimal leveled logging to stderr. DEEPINFER_LOG=debug|info|warn|error sets the level.
#pragma once
#include <cstdio>
#include <string>

namespace deepinfer {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };
LogLevel GetLogLevel();
void SetLogLevel(LogLevel level);
void LogMessage(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace deepinfer

#define DI_LOG_DEBUG(...) ::deepinfer::LogMessage(::deepinfer::LogLevel::kDebug, __VA_ARGS__)
#define DI_LOG_INFO(...) ::deepinfer::LogMessage(::deepinfer::LogLevel::kInfo, __VA_ARGS__)
#define DI_LOG_WARN(...) ::deepinfer::LogMessage(::deepinfer::LogLevel::kWarn, __VA_ARGS__)
#define DI_LOG_ERROR(...) ::deepinfer::LogMessage(::deepinfer::LogLevel::kError, __VA_ARGS__)

// Process-wide settings of the library: logging and the compute thread pool. Both are shared by every model
// and engine in the process (the pool runs one kernel at a time), so they are set here, not per object.
#pragma once

namespace deepinfer::api {

enum class LogLevel { kDebug, kInfo, kWarn, kError, kOff };

// Messages below `level` are dropped. The default comes from DEEPINFER_LOG (debug|info|warn|error), else info.
void SetLogLevel(LogLevel level);
// A message on stderr as the library writes its own ("[I 12:34:56] text"), dropped below the level set above.
// printf-style; kOff is not a level to write at.
void Log(LogLevel level, const char* format, ...) __attribute__((format(printf, 2, 3)));

// Threads of the compute pool that loading and the forward pass use; n <= 0 means one per hardware thread.
// Call it before Model::Load to bound loading as well (EngineOptions::threads applies it at Engine::Create).
void SetComputeThreads(int n);
// The pool's current size (what an unset pool would be created with).
int ComputeThreads();

}  // namespace deepinfer::api

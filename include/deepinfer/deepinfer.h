// The deepinfer C++ API: everything a program needs to load a model and generate with it (model.h, engine.h,
// request.h), serve it over HTTP (server.h), run it over several processes (parallel.h), and the process-wide
// settings (runtime.h, progress.h). These headers are the whole public interface: their types are the only
// types a program sees, and they include nothing but each other and the standard library. Consumers link the
// CMake target deepinfer::deepinfer, whose include path is this directory's parent only.
#pragma once
#include "deepinfer/engine.h"
#include "deepinfer/model.h"
#include "deepinfer/parallel.h"
#include "deepinfer/progress.h"
#include "deepinfer/request.h"
#include "deepinfer/runtime.h"
#include "deepinfer/server.h"
#include "deepinfer/status.h"

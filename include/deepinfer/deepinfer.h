// The deepinfer C++ API: everything a program needs to load a model and generate with it. Consumers link the
// CMake target deepinfer::deepinfer, whose include path is this directory's parent only.
#pragma once
#include "deepinfer/engine.h"
#include "deepinfer/model.h"
#include "deepinfer/request.h"
#include "deepinfer/runtime.h"
#include "deepinfer/status.h"

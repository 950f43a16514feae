// The engine room's Python surface; the module root (src/module.cc) calls these.
#pragma once

#include <nanobind/nanobind.h>

// engine_bindings.cc: Engine, TensorInfo, the runtime's loader, and the exception classes with their translator
// (first: every other binding's C++ errors map through it).
void BindEngine(nanobind::module_& m);
void BindWordPiece(nanobind::module_& m);  // wordpiece_bindings.cc: WordPiece and its tables' version

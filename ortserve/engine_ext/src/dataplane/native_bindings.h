// The Python NativeVersion object, as other C++ code (the front end's set_routes) reads it.
#pragma once

#include <nanobind/nanobind.h>

#include <memory>

#include "native_batcher.h"

// The version a Python NativeVersion object holds (shared: the route table keeps copies). Throws
// nanobind::cast_error when `object` is not a NativeVersion.
std::shared_ptr<ortserve::NativeVersion> NativeVersionPtr(nanobind::handle object);

// The sink a Python EventSink object holds (the front end pushes its request records there). Throws
// nanobind::cast_error when `object` is not an EventSink.
std::shared_ptr<ortserve::EventSink> EventSinkPtr(nanobind::handle object);

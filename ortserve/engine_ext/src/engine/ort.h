// The one way this project includes the ONNX Runtime C++ API.
#pragma once

// The engine does not link libonnxruntime: the PyPI wheel's library has no dev symlink and versioned
// symbols, so runtime.cc dlopen()s it and hands its OrtApi to Ort::InitApi(). MANUAL_INIT stops the
// header from calling OrtGetApiBase() in a static initialiser (which would need link-time binding).
#define ORT_API_MANUAL_INIT
#include <onnxruntime_cxx_api.h>

// What the engine's own files share (engine_load.cc, engine_io.cc, engine_runs.cc, graph_runner.cc) and nothing
// outside them includes: engine.h is the contract, this is how its parts reach each other.
#pragma once

#include <string>

#include "engine.h"
#include "ort.h"

namespace ortserve {

// A model input's or output's TensorInfo as ORT describes it; ModelLoadError for what the engine cannot exchange
// (not a tensor, an element type numpy has no name for). `role`: "input" or "output", for the message.
TensorInfo ReadTensorInfo(const std::string& role, std::string name, const Ort::TypeInfo& type_info);

// Whether ORT's error is an allocation failure: BFCArena over its cap (GPU gpu_mem_limit or a capped CPU arena), the
// CUDA allocator itself, or cuBLAS/cuDNN workspace.
bool IsOutOfMemory(const std::string& what);

// `text` with its line breaks as spaces: ORT's multi-line errors in one log line or message.
std::string OneLine(std::string text);

}  // namespace ortserve

// KServe V2 ModelInfer protobuf messages <-> the wire rules' plain views (infer_wire.h), for the native front end.
// No rule lives here: what a call may carry, what it is told and what its reply holds are infer_wire's, the same
// for every front end; this file only reads the request's fields into views and writes the reply's tensors.
#pragma once

#include <vector>

#include "grpc_service.pb.h"
#include "infer_wire.h"

namespace ortserve {

// The request's inputs, outputs, raw contents and the parameters the rules read, as views into `request` (valid
// while it lives).
WireRequest ToWire(const inference::ModelInferRequest& request);

// The reply's output tensors, in order: each one's name, datatype and shape, and its raw bytes (one
// raw_output_contents entry each) or its contents.
void WriteOutputs(inference::ModelInferResponse& response, std::vector<ReplyTensor>&& tensors);

}  // namespace ortserve

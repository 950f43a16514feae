// A run through captured CUDA graphs (graph_runner.h): the first run of an input shape is plain, the second captures,
// later ones replay; past kMaxGraphs shapes, runs are bound without a graph.
#include "graph_runner.h"

#include <string>

#include "cuda_runtime.h"

namespace ortserve {

Engine::Outputs Engine::GraphRunner::Run(const std::vector<const InputView*>& ordered) {
  const CudaRuntime& cuda = RequireCudaRuntime();
  cuda.Check(cuda.set_device(engine.cuda_device_), "selecting GPU " + std::to_string(engine.cuda_device_));
  Ort::Session& session = *engine.session_;
  if (!device) {
    Ort::MemoryInfo info("Cuda", OrtArenaAllocator, engine.cuda_device_, OrtMemTypeDefault);
    device = std::make_unique<Ort::Allocator>(session, info);
  }
  std::vector<int64_t> key;
  for (const InputView* feed : ordered) {
    key.push_back(static_cast<int64_t>(feed->shape.size()));
    key.insert(key.end(), feed->shape.begin(), feed->shape.end());
  }
  auto found = slots.find(key);
  if (found == slots.end()) {
    if (slots.size() >= kMaxGraphs) return engine.RunBound(ordered);
    Slot slot;
    slot.id = next_id++;
    for (size_t i = 0; i < ordered.size(); ++i) {
      slot.inputs.push_back(Ort::Value::CreateTensor(*device, ordered[i]->shape.data(), ordered[i]->shape.size(),
                                                     engine.inputs_[i].element_type));
    }
    found = slots.emplace(std::move(key), std::move(slot)).first;
  }
  Slot& slot = found->second;
  Ort::IoBinding binding(session);
  for (size_t i = 0; i < ordered.size(); ++i) {
    if (ordered[i]->nbytes > 0) {
      cuda.Check(cuda.memcpy(slot.inputs[i].GetTensorMutableRawData(), ordered[i]->data, ordered[i]->nbytes,
                             CudaRuntime::kHostToDevice),
                 "copying input '" + engine.inputs_[i].name + "' to the GPU");
    }
    binding.BindInput(engine.input_names_[i], slot.inputs[i]);
  }
  Ort::RunOptions run_options;
  if (slot.outputs.empty()) {
    // First run of this shape: a plain one (ORT also wants one before it captures), which tells the output shapes.
    run_options.AddConfigEntry("gpu_graph_id", "-1");
    for (const char* name : engine.output_names_) binding.BindOutput(name, engine.cpu_memory_);
    session.Run(run_options, binding);
    std::vector<Ort::Value> results = binding.GetOutputValues();
    for (Ort::Value& result : results) {
      auto info = result.GetTensorTypeAndShapeInfo();
      const std::vector<int64_t> shape = info.GetShape();
      slot.outputs.push_back(Ort::Value::CreateTensor(*device, shape.data(), shape.size(), info.GetElementType()));
    }
    return engine.CopyOut(results);
  }
  // Captured on the second run of a shape, replayed from the third on.
  run_options.AddConfigEntry("gpu_graph_id", std::to_string(slot.id).c_str());
  for (size_t i = 0; i < slot.outputs.size(); ++i) binding.BindOutput(engine.output_names_[i], slot.outputs[i]);
  session.Run(run_options, binding);
  return engine.CopyOut(slot.outputs, &cuda);
}

}  // namespace ortserve

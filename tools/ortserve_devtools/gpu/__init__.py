"""The GPU check for a bare CUDA host with no network: scripts/gpu_stage stages here what it lacks, scripts/gpu_unpack
reassembles it there, scripts/gpu_check builds the engine there and runs check.py.

Modules: stage (download the onnxruntime-gpu wheel, prune the CUDA provider's fatbins to one GPU arch, compress,
split, stage the missing wheels and the ORT headers, write stage.json), unpack (standard library only: verify,
reassemble, lay out onnxruntime/capi, install the wheels, print the shell exports), check (the measurements: models,
engine alone, served over gRPC, sweep, out-of-memory and memory-budget drills, one JSON file and a table).
"""

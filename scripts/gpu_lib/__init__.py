"""Offline CUDA bundle for a bare GPU host: scripts/gpu_stage builds it here, scripts/gpu_unpack reassembles it there.

Modules: stage (download the onnxruntime-gpu wheel, prune the CUDA provider's fatbins to one GPU arch, compress,
split, stage the missing wheels and the ORT headers, write stage.json), unpack (standard library only: verify,
reassemble, lay out onnxruntime/capi, install the wheels, print the shell exports).
"""

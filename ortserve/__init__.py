"""ortserve: a KServe V2 gRPC inference service for ONNX text classifiers."""

__version__ = "0.1.0"

"""The torch module to ONNX: the bundle's inputs and output, dynamic batch and sequence axes, FP32.

    exported = export(graph, ..., directory)
                                      torch.onnx.export, then the wire checked: int64 [batch, sequence] inputs named
                                      as the bundle format names them, float32 [batch, columns] out (a token
                                      classifier's, per_token: [batch, sequence, labels], both axes dynamic); written
                                      into `directory` as model.onnx, its weights in model.onnx.data beside it when
                                      they pass `external_data_above` bytes (model_writer.py: protobuf's 2 GiB)

The exporter is torch.onnx's TorchScript one (`dynamo=False`), at opset 17, with the model's eager attention. Why not
the torch.export-based default: for all-MiniLM-L6-v2 its graph ran 12-15% slower under ONNX Runtime (2 threads,
batches of 16) and ONNX Runtime's transformer fusion (`registry optimize`'s fuse and fp16 levels) matched none of its
attention blocks, where the TorchScript graph of the same model serves as fast as the demo builder's and fuses every
block. Both give the same answers. The module is traced on a padded batch of two (the second row half padding) at
min(max_seq_len, TRACE_LENGTH) tokens; the parity gate then runs every length its texts have, up to max_seq_len, in
batches and alone, so a shape the trace baked in would not pass it.
"""

from __future__ import annotations

import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ortserve.bundle.manifest import MODEL_FILE
from ortserve.bundle.model_files import model_size
from ortserve.prepare.model_writer import EXTERNAL_DATA_ABOVE, external_data, write_model

OPSET = 17
EXPORTER = {"name": "torch.onnx.export", "mode": "TorchScript (dynamo=False)", "opset": OPSET, "attention": "eager"}
AXES = ("batch", "sequence")
TRACE_LENGTH = 64
"""Tokens per row of the traced example: long enough for a padded row and windows of local attention; short enough
that tracing a model with 8192 positions costs nothing."""


class ExportError(Exception):
    """torch.onnx could not export the model, or what it wrote does not fit the bundle format; one line."""


@dataclass(frozen=True)
class Exported:
    path: Path
    """model.onnx; model.onnx.data beside it when `external`."""
    nodes: int
    model_bytes: int
    """Bytes of the model's files."""
    external: bool


def export(graph: Any, input_names: tuple[str, ...], output_name: str, *, columns: int, max_seq_len: int, pad_id: int,
           example_id: int, directory: Path, per_token: bool = False,
           external_data_above: int = EXTERNAL_DATA_ABOVE) -> Exported:
    """Exports `graph` (a torch module in eval mode taking `input_names`, answering [batch, `columns`], or with
    `per_token` [batch, sequence, `columns`]) into `directory` (holding no model yet); see the module docstring."""
    import onnx
    import torch

    if any(module.training for module in graph.modules()):
        raise ExportError("the model is in training mode; it must be exported in eval mode (dropout off)")
    length = min(max_seq_len, TRACE_LENGTH)
    ids = torch.full((2, length), example_id, dtype=torch.long)
    mask = torch.ones_like(ids)
    half = max(2, length // 2)
    ids[1, half:], mask[1, half:] = pad_id, 0
    example = {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}
    args = tuple(example[name] for name in input_names)
    try:
        # A file, not bytes: past 2 GiB the exporter writes each weight to a file of its own beside it; onnx reads
        # them back, and write_model lays them out as a bundle keeps them.
        with tempfile.TemporaryDirectory(prefix="ortserve-export-") as traced:
            traced_path = Path(traced) / MODEL_FILE
            with warnings.catch_warnings(), torch.inference_mode(False), torch.no_grad():
                warnings.simplefilter("ignore")  # tracer and deprecation warnings: the parity gate judges the graph
                torch.onnx.export(graph, args, str(traced_path), input_names=list(input_names),
                                  output_names=[output_name],
                                  dynamic_axes={**{name: dict(enumerate(AXES)) for name in input_names},
                                                output_name: dict(enumerate(AXES if per_token else AXES[:1]))},
                                  opset_version=OPSET, dynamo=False, do_constant_folding=True)
            model = onnx.load(str(traced_path))
    except Exception as e:  # torch.onnx raises anything (RuntimeError, TypeError, its own errors...) on odd models
        raise ExportError(f"torch.onnx.export failed ({type(e).__name__}: {_first_line(e)})") from e
    if any(module.training for module in graph.modules()):  # the exporter restores modes; check it left eval
        raise ExportError("torch.onnx.export left the model in training mode")
    _check_wire(model, input_names, output_name, rank=3 if per_token else 2)
    # The exporter names a width it could not infer (after a division, say) symbolically; the bundle declares it.
    width = model.graph.output[0].type.tensor_type.shape.dim[-1]
    if width.HasField("dim_value") and width.dim_value != columns:
        raise ExportError(f"the exported graph's {output_name!r} is {width.dim_value} wide, expected {columns}")
    width.Clear()
    width.dim_value = columns
    nodes, external = len(model.graph.node), external_data(model, external_data_above)
    path = directory / MODEL_FILE
    write_model(model, directory, external=external)
    del model
    try:
        onnx.checker.check_model(str(path))  # by path: the checker reads a model past 2 GiB only from its file
    except Exception as e:  # onnx's ValidationError and friends
        raise ExportError(f"the exported graph is not valid ONNX ({_first_line(e)})") from e
    return Exported(path=path, nodes=nodes, model_bytes=model_size(directory), external=external)


def _check_wire(model: Any, input_names: tuple[str, ...], output_name: str, *, rank: int) -> None:
    import onnx

    inputs = [vi for vi in model.graph.input if vi.name not in {t.name for t in model.graph.initializer}]
    if tuple(vi.name for vi in inputs) != input_names:
        raise ExportError(f"the exported graph's inputs are {[vi.name for vi in inputs]}, expected {list(input_names)}")
    for vi in inputs:
        _check_tensor(vi, onnx.TensorProto.INT64, symbolic=2)
    outputs = list(model.graph.output)
    if [vi.name for vi in outputs] != [output_name]:
        raise ExportError(f"the exported graph's outputs are {[vi.name for vi in outputs]}, expected [{output_name!r}]")
    _check_tensor(outputs[0], onnx.TensorProto.FLOAT, symbolic=rank - 1, rank=rank)


def _check_tensor(vi: Any, elem_type: int, *, symbolic: int, rank: int = 2) -> None:
    """The tensor's type, its rank, and its first `symbolic` axes not fixed to the traced example's sizes."""
    tensor = vi.type.tensor_type
    if tensor.elem_type != elem_type or len(tensor.shape.dim) != rank:
        raise ExportError(f"the exported graph's {vi.name!r} is not a rank-{rank} tensor of the bundle format's type")
    fixed = [n for n, dim in enumerate(tensor.shape.dim[:symbolic]) if dim.HasField("dim_value")]
    if fixed:
        raise ExportError(f"the exported graph fixed {vi.name!r}'s axis {fixed[0]} to the traced example's "
                          f"{tensor.shape.dim[fixed[0]].dim_value}; it must be dynamic")


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:240] if text else type(e).__name__

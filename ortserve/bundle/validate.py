"""The full check of a bundle that `registry publish` runs before anything is uploaded: files present, manifest
valid, the ONNX graph's signature fits its kind, its weights beside it (model.onnx.data) where the manifest says, the
tokenizer loads, the reference answers fit. `onnx` and `tokenizers` are imported lazily (only publish pays for
them)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ortserve.bundle import model_files
from ortserve.bundle.kinds import KINDS
from ortserve.bundle.manifest import (
    MANIFEST_FILE,
    MODEL_DATA_FILE,
    MODEL_FILE,
    OPTIONAL_INPUTS,
    REQUIRED_FILES,
    REQUIRED_INPUTS,
    TOKENIZER_FILE,
    BundleError,
    BundleManifest,
    load_manifest,
)
from ortserve.bundle.references import check_token_rows, read_references


def validate_bundle(bundle_dir: str | Path) -> BundleManifest:
    """Full check: files present, manifest valid, ONNX graph signature, tokenizer loads, the reference answers fit
    (a token classifier's: a row per token its tokenizer makes of each text)."""
    root = Path(bundle_dir)
    if not root.is_dir():
        raise BundleError(f"{root}: not a directory")
    for name in REQUIRED_FILES:
        path = root / name
        if path.is_symlink() or not path.is_file():
            raise BundleError(f"{path}: missing (a bundle needs {', '.join(REQUIRED_FILES)})")
    manifest = load_manifest(root)
    model_files.check_present(root, manifest)
    graph = _check_onnx(root / MODEL_FILE, manifest)
    _check_model_data(root, graph, manifest)
    _check_tokenizer(root / TOKENIZER_FILE)
    if manifest.references is not None:
        refs = read_references(root, manifest.references, manifest.columns, per_token=manifest.per_token,
                               max_seq_len=manifest.max_seq_len, sparse=manifest.spec.sparse)
        if manifest.per_token:
            check_token_rows(root, refs, manifest.max_seq_len)
    return manifest


def _check_model_data(root: Path, graph: Any, manifest: BundleManifest) -> None:
    """Every initializer kept outside model.onnx is in model.onnx.data and inside it, and the file is the one the
    manifest names (its sha256); a manifest that names one has a graph that reads it."""
    import onnx

    external = [t for t in graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    path = root / MODEL_DATA_FILE
    if manifest.model_data is None:
        if external:
            raise BundleError(f"{root / MODEL_FILE}: {len(external)} weights are kept outside the file (ONNX external "
                              f"data, e.g. {external[0].name!r}), but manifest.json names no model_data; a bundle "
                              f"keeps them in {MODEL_DATA_FILE}, named in its manifest")
        return
    if not external:
        raise BundleError(f"{root / MANIFEST_FILE}: model_data names {MODEL_DATA_FILE}, but model.onnx keeps every "
                          f"weight inline")
    size = manifest.model_data.bytes
    for tensor in external:
        info = {entry.key: entry.value for entry in tensor.external_data}
        location = info.get("location")
        if location != MODEL_DATA_FILE:
            raise BundleError(f"{root / MODEL_FILE}: weight {tensor.name!r} is kept in {location!r}; a bundle keeps "
                              f"its weights in {MODEL_DATA_FILE} beside model.onnx")
        try:
            offset, length = int(info.get("offset", "0")), int(info["length"])
        except (KeyError, ValueError):
            raise BundleError(f"{root / MODEL_FILE}: weight {tensor.name!r} has no valid offset and length in "
                              f"{MODEL_DATA_FILE}") from None
        if offset < 0 or length < 0 or offset + length > size:
            raise BundleError(f"{root / MODEL_FILE}: weight {tensor.name!r} reads bytes {offset}..{offset + length} "
                              f"of {MODEL_DATA_FILE}, which has {size}")
    actual = model_files.file_sha256(path)
    if actual != manifest.model_data.sha256:
        raise BundleError(f"{path}: sha256 {actual[:12]}, manifest.json's model_data says "
                          f"{manifest.model_data.sha256[:12]} (another export's weights, or a damaged copy)")


def _check_onnx(path: Path, manifest: BundleManifest) -> Any:
    import onnx  # lazy: heavy import, only `publish` needs it

    try:
        # External weights are not needed to check the signature.
        model = onnx.load(str(path), load_external_data=False)
    except Exception as e:  # onnx raises DecodeError, ValueError, ... for non-ONNX bytes
        raise BundleError(f"{path}: not an ONNX model ({type(e).__name__}: {_first_line(e)})") from None
    graph = model.graph
    if not graph.node and not graph.output:
        raise BundleError(f"{path}: not an ONNX model (empty graph)")
    initializers = {init.name for init in graph.initializer}
    inputs = {vi.name: vi for vi in graph.input if vi.name not in initializers}
    for name in REQUIRED_INPUTS:
        if name not in inputs:
            raise BundleError(f"{path}: missing input {name!r} (inputs: {sorted(inputs)})")
    unexpected = sorted(set(inputs) - set(REQUIRED_INPUTS) - set(OPTIONAL_INPUTS))
    if unexpected:
        raise BundleError(f"{path}: unexpected inputs {unexpected} (the server feeds only "
                          f"{', '.join(REQUIRED_INPUTS + OPTIONAL_INPUTS)})")
    for vi in inputs.values():
        _check_tensor(path, "input", vi, onnx.TensorProto.INT64, "int64")
    outputs = {vi.name: vi for vi in graph.output}
    wanted = manifest.output_name
    if wanted not in outputs:
        hint = _kind_hint(manifest, outputs)
        raise BundleError(f"{path}: missing output {wanted!r} (outputs: {sorted(outputs)}){hint}")
    dims = _check_tensor(path, "output", outputs[wanted], onnx.TensorProto.FLOAT, "float32",
                         rank=manifest.spec.output_rank, hint=_rank_hint(manifest, outputs[wanted]))
    last = dims[-1]
    if last.HasField("dim_value") and last.dim_value != manifest.columns:
        if manifest.spec.labelled:
            raise BundleError(f"{path}: output {wanted!r} has {last.dim_value} classes but "
                              f"manifest.json lists {manifest.columns} labels")
        raise BundleError(f"{path}: output {wanted!r} is {last.dim_value} wide but manifest.json declares "
                          f"dim {manifest.columns}")
    return graph


def _kind_hint(manifest: BundleManifest, outputs: Mapping[str, Any]) -> str:
    """When the graph is the other kind of bundle, say so: the usual mistake is the manifest's format."""
    for other in KINDS:
        if other is not manifest.spec and other.graph_output in outputs:
            return (f": manifest.json declares format {manifest.format!r} ({manifest.kind}, output "
                    f"{manifest.output_name!r}) but the graph is {_article(other.name)} {other.name} (output "
                    f"{other.graph_output!r}); declare format {other.format!r} or export the {manifest.kind} graph")
    return ""


def _rank_hint(manifest: BundleManifest, output: Any) -> str:
    """When the output's rank is another kind's with the same output name (a classifier's `logits` [batch, labels]
    against a token classifier's [batch, seq, labels]), say so."""
    tensor_type = output.type.tensor_type if output.type.HasField("tensor_type") else None
    if tensor_type is None or not tensor_type.HasField("shape"):
        return ""
    rank = len(tensor_type.shape.dim)
    for other in KINDS:
        if other is not manifest.spec and other.graph_output == manifest.output_name and other.output_rank == rank:
            return (f": manifest.json declares format {manifest.format!r} ({manifest.kind}) but the graph is "
                    f"{_article(other.name)} {other.name}'s; declare format {other.format!r} or export the "
                    f"{manifest.kind} graph")
    return ""


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def _check_tensor(path: Path, kind: str, vi: Any, elem_type: int, type_name: str, rank: int = 2,
                  hint: str = "") -> Any:
    if not vi.type.HasField("tensor_type"):
        raise BundleError(f"{path}: {kind} {vi.name!r} is not a tensor")
    tensor_type = vi.type.tensor_type
    if tensor_type.elem_type != elem_type:
        import onnx

        actual = onnx.TensorProto.DataType.Name(tensor_type.elem_type)
        raise BundleError(f"{path}: {kind} {vi.name!r} must be {type_name}, got {actual.lower()}")
    if not tensor_type.HasField("shape") or len(tensor_type.shape.dim) != rank:
        actual = len(tensor_type.shape.dim) if tensor_type.HasField("shape") else "unknown"
        raise BundleError(f"{path}: {kind} {vi.name!r} must have rank {rank}, got rank {actual}{hint}")
    return tensor_type.shape.dim


def _check_tokenizer(path: Path) -> None:
    from tokenizers import Tokenizer  # lazy, see module docstring

    try:
        Tokenizer.from_file(str(path))
    except Exception as e:  # tokenizers raises its own Exception type for any parse failure
        raise BundleError(f"{path}: not a loadable tokenizers file ({_first_line(e)})") from None


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:200] if text else type(e).__name__

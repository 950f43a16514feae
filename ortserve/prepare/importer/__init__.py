"""`registry import`: a Hugging Face checkpoint directory in, a bundle proven against PyTorch out.

    checkpoint.py      the directory read without torch: layout, architecture, task (classify, embed, rerank,
                       tokens, sparse), labels, pooling; refusals
    architectures.py   the encoders it takes, and the decoders it names when it refuses them
    torch_side.py      the checkpoint loaded with PyTorch: the module to export and PyTorch's answers
    torch_graph.py     the exported modules: logits (per text, or per token), pooling + normalisation inside the
                       graph, or SPLADE's pooling of a masked LM's logits
    tokenizer_file.py  the bundle's tokenizer.json from the checkpoint's tokenizer
    export.py          torch.onnx.export and the wire check
    parity.py          the parity gate: ONNX Runtime against PyTorch (pure), per text or per token
    pipeline.py        one import, from directory to bundle

torch, transformers and sentence-transformers are the `import` extra: only torch_side.py, torch_graph.py and
export.py import them, inside the import's calls, so `registry` and the server never load them.
"""

from ortserve.prepare.importer.checkpoint import (
    CLASSIFY,
    EMBED,
    POOLING_CHOICES,
    POOLING_MODES,
    SPARSE,
    TASKS,
    TOKENS,
    CheckpointError,
)
from ortserve.prepare.importer.export import ExportError
from ortserve.prepare.importer.parity import LOGIT_TOLERANCE, MIN_COSINE, ParityReport
from ortserve.prepare.importer.pipeline import DestinationError, ImportResult, ParityRefused, import_checkpoint
from ortserve.prepare.importer.torch_side import MissingDependency

__all__ = [
    "CLASSIFY",
    "EMBED",
    "LOGIT_TOLERANCE",
    "MIN_COSINE",
    "POOLING_CHOICES",
    "POOLING_MODES",
    "SPARSE",
    "TASKS",
    "TOKENS",
    "CheckpointError",
    "DestinationError",
    "ExportError",
    "ImportResult",
    "MissingDependency",
    "ParityRefused",
    "ParityReport",
    "import_checkpoint",
]

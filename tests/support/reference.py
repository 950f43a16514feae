"""Expected outputs computed without ortserve: tokenizers + onnxruntime's own Python session.

The output is the bundle's: `logits` of a classifier, `embedding` of an embedding bundle (manifest format)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer


class Reference:
    def __init__(self, bundle: Path) -> None:
        manifest = json.loads((bundle / "manifest.json").read_text())
        self.tokenizer = Tokenizer.from_file(str(bundle / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=manifest["max_seq_len"])
        self.session = ort.InferenceSession(str(bundle / "model.onnx"), providers=["CPUExecutionProvider"])
        self.input_names = {i.name for i in self.session.get_inputs()}
        self.output = "embedding" if manifest["format"] == "onnx-text-embedding" else "logits"
        self.labels: list[str] = manifest.get("labels", [])

    def logits(self, texts: Sequence[str]) -> np.ndarray:
        """Each text alone (batch of 1): what unbatched inference returns (an embedding bundle's embeddings)."""
        return np.concatenate([self._run([t]) for t in texts])

    embeddings = logits

    def logits_batch(self, texts: Sequence[str]) -> np.ndarray:
        """The texts as one padded batch (faster; padding moves a value by rounding only)."""
        return self._run(texts)

    def pair_logits(self, texts: Sequence[str], pairs: Sequence[str]) -> np.ndarray:
        """Each pair alone (batch of 1), tokenized as the tokenizer makes a pair, its token types included."""
        rows = []
        for text, pair in zip(texts, pairs, strict=True):
            e = self.tokenizer.encode(text, pair)
            ids = np.asarray([e.ids], dtype=np.int64)
            feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
            if "token_type_ids" in self.input_names:
                feeds["token_type_ids"] = np.asarray([e.type_ids], dtype=np.int64)
            rows.append(self.session.run([self.output], feeds)[0])
        return np.concatenate(rows)

    def _run(self, texts: Sequence[str]) -> np.ndarray:
        encodings = self.tokenizer.encode_batch(list(texts))
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(texts), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        for i, e in enumerate(encodings):
            ids[i, : len(e.ids)] = e.ids
            mask[i, : len(e.ids)] = 1
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self.input_names:
            feeds["token_type_ids"] = np.zeros_like(ids)
        return self.session.run([self.output], feeds)[0]

"""The SPLADE pooling the importer exports (torch_graph.SparseVector), through the importer's exporter and ONNX
Runtime, against sentence-transformers' SparseEncoder.encode on the same directory: max and sum pooling, relu and
log1p_relu, BERT and DistilBERT (with and without token types), over short texts, texts past max_seq_len and padded
batches of mixed lengths (an empty text among them). Real PyTorch, real torch.onnx export, real ONNX Runtime."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from support.hf_checkpoints import IMPORT_MAX_SEQ_LEN, corpus, make_sparse_encoder

from ortserve.prepare.importer.export import export

CASES = [("bert", "max", "relu"), ("distilbert", "max", "relu"), ("bert", "sum", "relu"),
         ("distilbert", "max", "log1p_relu")]
TEXTS = corpus()
BATCHES = {
    "short": ["hello world", "a b"],
    "long": [" ".join(TEXTS[5:9]), " ".join(TEXTS[20:24])],  # past max_seq_len: truncated alike
    "padded": ["x", " ".join(TEXTS[3:6]), TEXTS[10], ""],
}
ABS, REL = 1e-4, 1e-4
"""|ours - SparseEncoder's| <= ABS + REL x |theirs|: FP32 on any CPU (the differences seen are under 4e-6 at values to
17 for sum pooling); a value over ABS on one side is a non-zero on the other."""


@pytest.fixture(scope="module")
def graphs(tmp_path_factory: pytest.TempPathFactory, torch_one_thread: None) -> dict[tuple[str, str, str], Any]:
    """case -> (SparseEncoder, ONNX Runtime session of the exported SparseVector, its input names)."""
    import onnxruntime as ort
    import transformers
    from sentence_transformers import SparseEncoder

    from ortserve.prepare.importer.torch_graph import SparseVector

    root = tmp_path_factory.mktemp("sparse")
    made = {}
    for n, (arch, strategy, activation) in enumerate(CASES):
        dest = make_sparse_encoder(root / f"{arch}-{strategy}-{activation}", arch, strategy=strategy,
                                   activation=activation, max_seq_length=IMPORT_MAX_SEQ_LEN, seed=60 + n)
        encoder = SparseEncoder(str(dest), device="cpu")
        masked_lm = transformers.AutoModelForMaskedLM.from_pretrained(dest).eval()
        takes_token_types = arch != "distilbert"
        names = ("input_ids", "attention_mask", "token_type_ids")[: 3 if takes_token_types else 2]
        graph = SparseVector(masked_lm, strategy=strategy, activation=activation,
                             takes_token_types=takes_token_types).eval()
        tokenizer = encoder.tokenizer
        out = root / f"{arch}-{strategy}-{activation}-onnx"
        out.mkdir()
        exported = export(graph, names, "sparse_embedding", columns=masked_lm.config.vocab_size,
                          max_seq_len=IMPORT_MAX_SEQ_LEN, pad_id=tokenizer.pad_token_id,
                          example_id=tokenizer.convert_tokens_to_ids("a"), directory=out)
        session = ort.InferenceSession(str(exported.path), providers=["CPUExecutionProvider"])
        made[(arch, strategy, activation)] = (encoder, session, names)
    return made


def _ours(encoder: Any, session: Any, names: tuple[str, ...], texts: list[str]) -> np.ndarray:
    features = encoder.tokenize(texts)
    return session.run(None, {name: features[name].numpy().astype(np.int64) for name in names})[0]


@pytest.mark.parametrize("batch", sorted(BATCHES))
@pytest.mark.parametrize("case", CASES, ids=["-".join(c) for c in CASES])
def test_exported_pooling_is_sparse_encoders(graphs: dict[tuple[str, str, str], Any], case: tuple[str, str, str],
                                             batch: str) -> None:
    encoder, session, names = graphs[case]
    texts = BATCHES[batch]
    ours = _ours(encoder, session, names, texts)
    theirs = encoder.encode(texts, convert_to_tensor=True, batch_size=len(texts)).to_dense().numpy()
    assert ours.shape == theirs.shape == (len(texts), encoder.tokenizer.vocab_size)
    assert (ours >= 0).all()
    np.testing.assert_allclose(ours, theirs, atol=ABS, rtol=REL)
    assert not ((ours > ABS) & (theirs == 0)).any() and not ((theirs > ABS) & (ours == 0)).any()
    nonzeros = (theirs > 0).sum(axis=1)  # a SPLADE-like vector: some of the vocabulary, not most of it
    assert (nonzeros > 0).all() and (nonzeros < theirs.shape[1] // 2).all(), nonzeros


def test_padding_changes_nothing(graphs: dict[tuple[str, str, str], Any]) -> None:
    """A text's vector alone equals its vector in a batch padded to a longer text: padded positions never count."""
    encoder, session, names = graphs[("bert", "sum", "relu")]  # sum: a padded position would add, not just tie
    alone = _ours(encoder, session, names, ["x"])
    padded = _ours(encoder, session, names, ["x", " ".join(TEXTS[3:6])])
    np.testing.assert_allclose(padded[:1], alone, atol=ABS, rtol=REL)


def test_unknown_pooling_refused() -> None:
    from ortserve.prepare.importer.torch_graph import SparseVector

    with pytest.raises(ValueError, match="max or sum"):
        SparseVector(object(), strategy="mean", activation="relu", takes_token_types=False)


def test_sum_is_not_max(graphs: dict[tuple[str, str, str], Any]) -> None:
    """The comparison can fail: the same checkpoint's sum pooling is not its max pooling."""
    encoder, session, names = graphs[("bert", "sum", "relu")]
    texts = BATCHES["padded"]
    from sentence_transformers import SparseEncoder
    from sentence_transformers.sparse_encoder.modules import SpladePooling

    as_max = SparseEncoder(modules=[encoder[0], SpladePooling("max")], device="cpu")
    theirs = as_max.encode(texts, convert_to_tensor=True, batch_size=len(texts)).to_dense().numpy()
    assert not np.allclose(_ours(encoder, session, names, texts), theirs, atol=ABS, rtol=REL)

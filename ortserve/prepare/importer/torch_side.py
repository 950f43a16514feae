"""The checkpoint as PyTorch runs it: the model to export, and PyTorch's answers, the reference the import is held to.

    model = load(checkpoint, max_seq_len=None)
    model.graph                    the torch module to export (eval, FP32, eager attention; torch_graph.py)
    model.reference_outputs(texts) what transformers (the model as users load it, one text at a time) or
                                   sentence-transformers' encode gives: logits or sentence vectors, float32 (a
                                   sparse embedding model's: SparseEncoder.encode's vectors, dense [texts, vocab])
    model.reference_token_outputs(texts)   a token classifier's: its logits [T, labels] per text, T its tokens
    model.reference_ids(texts)     the checkpoint's own tokenizer's ids, truncated at max_seq_len

Loading checks what needs the weights, each a CheckpointError (exit 2): the tokenizer loads, every weight the config
asks for is there with the shape it asks for (a classifier head whose width differs from id2label is named as
such), and the tokenizer's ids fit the embedding table. transformers' own loading messages and progress bars are
kept off the terminal. torch, transformers and sentence-transformers are imported here, inside the calls.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import logging
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ortserve.bundle.manifest import MAX_SEQ_LEN, MIN_SEQ_LEN
from ortserve.prepare.importer.checkpoint import SENTENCE_TRANSFORMERS, Checkpoint, CheckpointError

INSTALL_HINT = "pip install 'ortserve[import]' (PyTorch, transformers and sentence-transformers; see the README)"
MIN_PAIR_TOKENS = 16
"""A decoder reranker's max_seq_len must leave this many tokens for the query and document beside its prompt."""
# tokenizer.model_max_length when the checkpoint sets none (transformers' VERY_LARGE_INTEGER is 1e30).
UNSET_MAX_LENGTH = 10**9


class MissingDependency(Exception):
    """A package the import path needs is not installed; the message says which and how to install it."""


@dataclass
class TorchModel:
    """The loaded checkpoint; owned by one import call."""

    checkpoint: Checkpoint
    tokenizer: Any
    """The checkpoint's tokenizer as transformers loads it (a fast tokenizer: its backend is the bundle's)."""
    graph: Any
    """torch.nn.Module: the bundle's inputs in, `logits` ([batch, labels], a token classifier's [batch, seq, labels])
    or the sentence vector out."""
    input_names: tuple[str, ...]
    columns: int
    max_seq_len: int
    reference_name: str
    """What computed the reference, for the manifest: the library, its version and the model class or call."""
    tools: dict[str, str]
    _ids: Callable[[Sequence[str]], list[list[int]]]
    _outputs: Callable[[Sequence[str]], np.ndarray] | None = None
    """A row per text (a classifier's, an embedding model's); None for a token classifier."""
    _pair_outputs: Callable[[Sequence[str], Sequence[str]], np.ndarray] | None = None
    _pair_ids: Callable[[Sequence[str], Sequence[str]], list[list[int]]] | None = None
    _token_outputs: Callable[[Sequence[str]], list[np.ndarray]] | None = None
    pair_template: Any = None
    """A decoder reranker's yes_no_reranker.PairTemplate; None otherwise."""
    wrap_ids: tuple[list[int], list[int]] = ([], [])
    """A decoder reranker's prefix and suffix token ids (what the bundle's tokenizer.json adds around a text)."""

    def reference_outputs(self, texts: Sequence[str], pairs: Sequence[str] | None = None) -> np.ndarray:
        """float32 [texts, columns]: PyTorch's answers, eval mode, FP32, on the CPU (with `pairs`: to each text
        and its second text, a classifier's)."""
        with _quiet():
            if pairs is not None:
                assert self._pair_outputs is not None, "pairs are a classifier's"
                return self._pair_outputs(texts, pairs)
            assert self._outputs is not None, "a token classifier answers per token: reference_token_outputs"
            return self._outputs(texts)

    def reference_token_outputs(self, texts: Sequence[str]) -> list[np.ndarray]:
        """A token classifier's PyTorch answers: float32 [T, labels] per text, one text at a time, unpadded, T its
        token count under the checkpoint's tokenizer truncated at max_seq_len (special tokens included)."""
        assert self._token_outputs is not None, "per-token outputs are a token classifier's"
        with _quiet():
            return self._token_outputs(texts)

    def reference_ids(self, texts: Sequence[str], pairs: Sequence[str] | None = None) -> list[list[int]]:
        with _quiet():
            if pairs is not None:
                assert self._pair_ids is not None, "pairs are a classifier's"
                return self._pair_ids(texts, pairs)
            return self._ids(texts)


def load(checkpoint: Checkpoint, *, max_seq_len: int | None = None) -> TorchModel:
    """The checkpoint loaded as users run it (the reference: transformers' default attention, or sentence-transformers)
    and once more with eager attention (the graph to export, whose attention ONNX Runtime's fusions recognise)."""
    torch, transformers = _require("torch"), _require("transformers")
    sparse = checkpoint.splade is not None
    st = _require("sentence_transformers") if checkpoint.layout == SENTENCE_TRANSFORMERS or sparse else None
    auto = (transformers.AutoModelForCausalLM if checkpoint.yes_no
            else transformers.AutoModelForMaskedLM if sparse
            else transformers.AutoModelForSequenceClassification if checkpoint.classifier
            else transformers.AutoModelForTokenClassification if checkpoint.per_token else transformers.AutoModel)
    with _quiet():
        tokenizer = _tokenizer(checkpoint, transformers)
        exported = _model(checkpoint, auto, attn_implementation="eager")
        _check_vocabulary(checkpoint, tokenizer, exported)
        # sentence-transformers loads its modules itself; transformers' reference is the same weights, loaded again.
        reference = (_load_sparse_encoder(checkpoint, st, max_seq_len) if sparse
                     else _load_sentence_transformer(checkpoint, st) if st is not None else _model(checkpoint, auto))
    limit = _max_seq_len(checkpoint, tokenizer, max_seq_len, reference if st is not None else None)
    takes_token_types = _takes_token_types(exported, checkpoint)
    names = ("input_ids", "attention_mask", *(("token_type_ids",) if takes_token_types else ()))
    from ortserve.prepare.importer.torch_graph import Logits, SentenceVector  # imports torch

    tools = {"torch": torch.__version__, "transformers": transformers.__version__}
    ids = _transformers_ids(tokenizer, limit)
    outputs: Callable[[Sequence[str]], np.ndarray] | None = None
    token_outputs: Callable[[Sequence[str]], list[np.ndarray]] | None = None
    if checkpoint.yes_no:
        return _yes_no(checkpoint, tokenizer, exported, reference, limit, names, tools)
    if sparse:
        return _sparse(checkpoint, tokenizer, exported, reference, limit, names, takes_token_types,
                       {**tools, "sentence-transformers": st.__version__})
    if checkpoint.per_token:
        graph = Logits(exported, takes_token_types=takes_token_types).eval()
        columns = len(checkpoint.labels)
        reference_name = f"transformers {transformers.__version__} {reference.__class__.__name__}"

        def each_text_alone(texts: Sequence[str]) -> list[np.ndarray]:
            rows = _unpadded([_encode(tokenizer, text, limit) for text in texts], lambda feed: reference(**feed).logits,
                             torch)
            return [row.astype(np.float32) for row in rows]

        token_outputs = each_text_alone
    elif checkpoint.classifier:
        graph = Logits(exported, takes_token_types=takes_token_types).eval()
        columns = len(checkpoint.labels)
        outputs = _one_at_a_time(lambda text: _encode(tokenizer, text, limit), lambda feed: reference(**feed).logits,
                                 torch)
        reference_name = f"transformers {transformers.__version__} {reference.__class__.__name__}"

        def pair_outputs(texts: Sequence[str], pairs: Sequence[str]) -> np.ndarray:
            feeds = [dict(tokenizer(text, pair, truncation=True, max_length=limit, return_tensors="pt"))
                     for text, pair in zip(texts, pairs, strict=True)]
            return np.stack(_unpadded(feeds, lambda feed: reference(**feed).logits, torch)).astype(np.float32)

        def pair_ids(texts: Sequence[str], pairs: Sequence[str]) -> list[list[int]]:
            return [list(tokenizer(text, pair, truncation=True, max_length=limit)["input_ids"])
                    for text, pair in zip(texts, pairs, strict=True)]
    else:
        pooling = checkpoint.pooling
        assert pooling is not None
        graph = SentenceVector(exported, modes=pooling.modes, normalize=pooling.normalize,
                               takes_token_types=takes_token_types).eval()
        columns = int(exported.config.hidden_size) * len(pooling.modes)
        if st is not None:
            outputs, ids = _encode_calls(reference, limit)
            reference_name = f"sentence-transformers {st.__version__} encode"
            tools["sentence-transformers"] = st.__version__
        else:
            pooled = SentenceVector(reference, modes=pooling.modes, normalize=pooling.normalize,
                                    takes_token_types=takes_token_types).eval()
            outputs = _one_at_a_time(
                lambda text: {k: v for k, v in _encode(tokenizer, text, limit).items() if k in names},
                lambda feed: pooled(**feed), torch)
            reference_name = (f"transformers {transformers.__version__} {reference.__class__.__name__} with "
                              f"{pooling.describe()} in PyTorch")
    model = TorchModel(checkpoint=checkpoint, tokenizer=tokenizer, graph=graph, input_names=names, columns=columns,
                       max_seq_len=limit, reference_name=reference_name, tools=tools, _outputs=outputs, _ids=ids,
                       _token_outputs=token_outputs)
    if checkpoint.classifier:
        model._pair_outputs, model._pair_ids = pair_outputs, pair_ids
    return model


def _yes_no(checkpoint: Checkpoint, tokenizer: Any, exported: Any, reference: Any, limit: int,
            names: tuple[str, ...], tools: dict[str, str]) -> TorchModel:
    """A decoder reranker (yes_no_reranker.py): the graph answers logit(yes) - logit(no); the reference is the model
    card's code, in its left-padded batches."""
    import transformers

    from ortserve.prepare.importer import yes_no_reranker as card
    from ortserve.prepare.importer.torch_graph import YesNoLogit  # imports torch

    try:
        no, yes = card.answer_ids(tokenizer)
    except ValueError as e:
        raise CheckpointError(f"{checkpoint.model_dir}: {e}; a reranker in Qwen3-Reranker's form answers with one "
                              "of them") from None
    template = card.PairTemplate.qwen3()
    wrap = card.wrap_ids(tokenizer, template)
    prompt = len(wrap[0]) + len(wrap[1]) + len(tokenizer.encode(template.format("", ""), add_special_tokens=False))
    if prompt + MIN_PAIR_TOKENS > limit:
        raise CheckpointError(f"{checkpoint.model_dir}: max_seq_len {limit} leaves fewer than {MIN_PAIR_TOKENS} "
                              f"tokens for a pair beside the reranker's {prompt} tokens of prompt")
    tokenizer.padding_side = "left"  # the card's: AutoTokenizer.from_pretrained(..., padding_side="left")

    def pair_outputs(texts: Sequence[str], pairs: Sequence[str]) -> np.ndarray:
        stacked = card.reference_logits(reference, tokenizer, template, texts, pairs, limit)
        return (stacked[:, 1:] - stacked[:, :1]).astype(np.float32)

    graph = YesNoLogit(exported, no_id=no, yes_id=yes).eval()
    model = TorchModel(checkpoint=checkpoint, tokenizer=tokenizer, graph=graph, input_names=names, columns=1,
                       max_seq_len=limit,
                       reference_name=(f"transformers {transformers.__version__} {reference.__class__.__name__}, "
                                       "Qwen3-Reranker's reference code (logit yes - no at the last position)"),
                       tools=tools, _ids=_transformers_ids(tokenizer, limit), pair_template=template, wrap_ids=wrap)
    model._pair_outputs = pair_outputs
    model._pair_ids = lambda texts, pairs: card.reference_ids(tokenizer, template, texts, pairs, limit)
    return model


def _sparse(checkpoint: Checkpoint, tokenizer: Any, exported: Any, reference: Any, limit: int,
            names: tuple[str, ...], takes_token_types: bool, tools: dict[str, str]) -> TorchModel:
    """A sparse embedding model (SPLADE): the graph pools the masked LM's logits as SpladePooling does
    (torch_graph.SparseVector); the reference is sentence-transformers' SparseEncoder.encode, its vectors dense."""
    import sentence_transformers

    from ortserve.prepare.importer.torch_graph import SparseVector  # imports torch

    splade = checkpoint.splade
    assert splade is not None
    columns = int(exported.get_output_embeddings().out_features)
    graph = SparseVector(exported, strategy=splade.strategy, activation=splade.activation,
                         takes_token_types=takes_token_types).eval()
    reference.max_seq_length = limit

    def outputs(texts: Sequence[str]) -> np.ndarray:
        vectors = reference.encode(list(texts), convert_to_tensor=True, convert_to_sparse_tensor=False,
                                   show_progress_bar=False)
        return np.asarray(vectors.float().cpu().numpy(), dtype=np.float32)

    def ids(texts: Sequence[str]) -> list[list[int]]:
        out = []
        for text in texts:
            features = reference.tokenize([text])
            row, mask = features["input_ids"][0].tolist(), features["attention_mask"][0].tolist()
            out.append([int(i) for i, m in zip(row, mask, strict=True) if m])
        return out

    made = "" if checkpoint.layout == SENTENCE_TRANSFORMERS else f" of {checkpoint.class_name} + {splade.describe()}"
    return TorchModel(checkpoint=checkpoint, tokenizer=tokenizer, graph=graph, input_names=names, columns=columns,
                      max_seq_len=limit,
                      reference_name=f"sentence-transformers {sentence_transformers.__version__} SparseEncoder.encode"
                                     f"{made}",
                      tools=tools, _outputs=outputs, _ids=ids)


def _load_sparse_encoder(checkpoint: Checkpoint, st: Any, max_seq_len: int | None) -> Any:
    """The SparseEncoder directory as sentence-transformers loads it; a bare masked LM as the SparseEncoder SPLADE
    makes of it (a fill-mask Transformer, then SpladePooling)."""
    splade = checkpoint.splade
    assert splade is not None
    try:
        if checkpoint.layout == SENTENCE_TRANSFORMERS:
            return st.SparseEncoder(str(checkpoint.path), device="cpu").eval()
        from sentence_transformers.models import Transformer
        from sentence_transformers.sparse_encoder.modules import SpladePooling

        kwargs = {} if max_seq_len is None else {"max_seq_length": max_seq_len}
        modules = [Transformer(str(checkpoint.model_dir), transformer_task="fill-mask", **kwargs),
                   SpladePooling(splade.strategy, activation_function=splade.activation)]
        return st.SparseEncoder(modules=modules, device="cpu").eval()
    except Exception as e:  # as _model
        raise CheckpointError(f"{checkpoint.path}: sentence-transformers' SparseEncoder does not load it "
                              f"({type(e).__name__}: {_first_line(e)})") from None


# -- loading --------------------------------------------------------------------------------------------------


def _require(name: str) -> Any:
    try:
        return __import__(name)
    except ImportError as e:
        raise MissingDependency(f"registry import needs the Python package {name!r}, which does not import here "
                                f"({_first_line(e)}): {INSTALL_HINT}") from None


def _tokenizer(checkpoint: Checkpoint, transformers: Any) -> Any:
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(checkpoint.model_dir))
    except Exception as e:  # transformers raises anything (OSError, ValueError, KeyError...) for a broken tokenizer
        raise CheckpointError(f"{checkpoint.model_dir}: the tokenizer does not load ({type(e).__name__}: "
                              f"{_first_line(e)})") from None
    if not getattr(tokenizer, "is_fast", False) or getattr(tokenizer, "backend_tokenizer", None) is None:
        raise CheckpointError(f"{checkpoint.model_dir}: the tokenizer ({type(tokenizer).__name__}) has no "
                              "tokenizers backend to write as tokenizer.json")
    return tokenizer


def _model(checkpoint: Checkpoint, auto: Any, **kwargs: Any) -> Any:
    import torch

    try:
        model, info = auto.from_pretrained(str(checkpoint.model_dir), dtype=torch.float32, output_loading_info=True,
                                           ignore_mismatched_sizes=True, **kwargs)
    except Exception as e:  # as above: a checkpoint can break loading in any of a dozen ways
        raise CheckpointError(f"{checkpoint.model_dir}: the weights do not load ({type(e).__name__}: "
                              f"{_first_line(e)})") from None
    _check_loaded(checkpoint, info)
    if checkpoint.architecture.decoder:  # one forward pass, no generation: no KV cache to build or export
        model.config.use_cache = False
    return model.float().eval()


def _check_loaded(checkpoint: Checkpoint, info: dict[str, Any]) -> None:
    where = checkpoint.model_dir
    mismatched = sorted((str(k), tuple(a), tuple(b)) for k, a, b in info.get("mismatched_keys") or ())
    if mismatched:
        labels = len(checkpoint.labels)
        head = [m for m in mismatched if m[2] and m[2][0] == labels and m[1] and m[1][0] != labels]
        if checkpoint.labelled and len(head) == len(mismatched):
            name, have, _want = max(head, key=lambda m: (len(m[1]), m[0]))  # the weight matrix, not its bias
            raise CheckpointError(f"{where}: config.json's id2label lists {labels} labels but the checkpoint's "
                                  f"classifier has {have[0]} outputs ({name} is {list(have)}); make id2label name "
                                  "every column")
        name, have, want = mismatched[0]
        more = f" (and {len(mismatched) - 1} more)" if len(mismatched) > 1 else ""
        raise CheckpointError(f"{where}: the weights do not match config.json: {name} is {list(have)} in the "
                              f"checkpoint but {list(want)} per the config{more}")
    missing = sorted(str(k) for k in info.get("missing_keys") or () if not str(k).endswith("position_ids"))
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise CheckpointError(f"{where}: the weights do not match config.json: {missing[0]} is missing{more}; "
                              "transformers would start it at random")


def _check_vocabulary(checkpoint: Checkpoint, tokenizer: Any, model: Any) -> None:
    rows = model.get_input_embeddings().num_embeddings
    if len(tokenizer) > rows:
        raise CheckpointError(f"{checkpoint.model_dir}: the tokenizer has {len(tokenizer)} tokens but the embedding "
                              f"table has {rows} rows: ids past {rows - 1} would index outside it (a tokenizer from "
                              "another checkpoint?)")


def _takes_token_types(model: Any, checkpoint: Checkpoint) -> bool:
    """token_type_ids is an input only where the model reads it: its forward takes it and it has 2+ types."""
    types = checkpoint.config.get("type_vocab_size", 0)
    return ("token_type_ids" in inspect.signature(model.forward).parameters
            and isinstance(types, int) and types > 1)


def _positions(checkpoint: Checkpoint) -> int:
    """How many tokens the model's position table holds."""
    config = checkpoint.config
    positions = config.get("max_position_embeddings", MAX_SEQ_LEN)
    if not isinstance(positions, int) or positions <= 0:
        positions = MAX_SEQ_LEN
    if checkpoint.architecture.positions_after_pad:
        positions -= int(config.get("pad_token_id") or 0) + 1
    return positions


def _max_seq_len(checkpoint: Checkpoint, tokenizer: Any, asked: int | None, st_model: Any) -> int:
    """`asked`, checked against the model's positions; else what the checkpoint truncates at (sentence-transformers'
    max_seq_length, else the tokenizer's model_max_length), else its positions; within the bundle format's range."""
    positions = _positions(checkpoint)
    if asked is not None:
        if not MIN_SEQ_LEN <= asked <= MAX_SEQ_LEN:
            raise CheckpointError(f"--max-seq-len must be in {MIN_SEQ_LEN}..{MAX_SEQ_LEN}, got {asked}")
        if asked > positions:
            raise CheckpointError(f"--max-seq-len {asked} is past the {positions} positions "
                                  f"{checkpoint.class_name} has (config.json max_position_embeddings)")
        return asked
    own = (st_model.max_seq_length if st_model is not None else None) or tokenizer.model_max_length
    chosen = own if isinstance(own, int) and 0 < own < UNSET_MAX_LENGTH else positions
    return max(MIN_SEQ_LEN, min(chosen, positions, MAX_SEQ_LEN))


# -- the reference ---------------------------------------------------------------------------------------------


def _encode(tokenizer: Any, text: str, limit: int) -> dict[str, Any]:
    return dict(tokenizer(text, truncation=True, max_length=limit, return_tensors="pt"))


UNPADDED_BATCH = 32
"""Texts of one token count run together, at most this many a forward call."""


def _unpadded(feeds: Sequence[dict[str, Any]], run: Callable[[dict[str, Any]], Any], torch: Any) -> list[np.ndarray]:
    """run over each text's feed (tensors [1, T]), texts of the same T stacked into one call: no row is padded and
    the rows of a batch never meet, so each answer is the one transformers gives the text alone, unpadded (whatever
    batch it would come in), in a fraction of the forward calls. Row r of run's answer is its r-th text's."""
    by_length: dict[int, list[int]] = {}
    for i, feed in enumerate(feeds):
        by_length.setdefault(int(feed["input_ids"].shape[1]), []).append(i)
    out: list[np.ndarray | None] = [None] * len(feeds)
    with torch.inference_mode():
        for members in by_length.values():
            for start in range(0, len(members), UNPADDED_BATCH):
                chunk = members[start:start + UNPADDED_BATCH]
                stacked = {key: torch.cat([feeds[i][key] for i in chunk]) for key in feeds[chunk[0]]}
                answers = run(stacked).float().numpy()
                for row, i in enumerate(chunk):
                    out[i] = answers[row]
    return [row for row in out if row is not None]


def _one_at_a_time(encode: Callable[[str], dict[str, Any]], run: Callable[[dict[str, Any]], Any],
                   torch: Any) -> Callable[[Sequence[str]], np.ndarray]:
    """Each text alone, unpadded (`_unpadded`): a row per text."""

    def outputs(texts: Sequence[str]) -> np.ndarray:
        return np.stack(_unpadded([encode(text) for text in texts], run, torch)).astype(np.float32)

    return outputs


def _transformers_ids(tokenizer: Any, limit: int) -> Callable[[Sequence[str]], list[list[int]]]:
    return lambda texts: [list(tokenizer(text, truncation=True, max_length=limit)["input_ids"]) for text in texts]


def _load_sentence_transformer(checkpoint: Checkpoint, st: Any) -> Any:
    try:
        return st.SentenceTransformer(str(checkpoint.path), device="cpu").eval()
    except Exception as e:  # as _model
        raise CheckpointError(f"{checkpoint.path}: sentence-transformers does not load it ({type(e).__name__}: "
                              f"{_first_line(e)})") from None


def _encode_calls(model: Any, limit: int) -> tuple[Callable[[Sequence[str]], np.ndarray],
                                                     Callable[[Sequence[str]], list[list[int]]]]:
    """sentence-transformers' encode as users call it (its batches, its padding) and its tokenizer's ids, truncating
    at `limit`."""
    model.max_seq_length = limit

    def outputs(texts: Sequence[str]) -> np.ndarray:
        vectors = model.encode(list(texts), convert_to_numpy=True, show_progress_bar=False)
        return np.asarray(vectors, dtype=np.float32)

    def ids(texts: Sequence[str]) -> list[list[int]]:
        out = []
        for text in texts:
            features = model.tokenize([text])
            row, mask = features["input_ids"][0].tolist(), features["attention_mask"][0].tolist()
            out.append([int(i) for i, m in zip(row, mask, strict=True) if m])
        return out

    return outputs, ids


# -- quiet ---------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """transformers' and sentence-transformers' warnings, loading reports and progress bars stay off the terminal:
    the import prints its own report, and what matters in theirs becomes a CheckpointError."""
    import transformers

    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(previous)
        transformers.logging.set_verbosity(verbosity)


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:240] if text else type(e).__name__

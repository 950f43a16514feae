"""A checkpoint directory read without torch: its layout, architecture, task, labels and pooling.

    checkpoint = read_checkpoint(path, task=None, pooling=None, pairs=None)

Two layouts: a transformers `save_pretrained` directory (config.json, model.safetensors or pytorch_model.bin, and
tokenizer.json or the files transformers turns into one), and a sentence-transformers directory (modules.json
naming Transformer -> Pooling -> an optional Normalize, with the Transformer's files where its path says).

The task comes from the checkpoint: a `*ForSequenceClassification` becomes a classifier whose labels are config's
`id2label` in column order; a `*ForTokenClassification` a token classifier (named entities: a label per token, BIO
or IOBES tags or any other), its labels `id2label` likewise (`--task tokens` asks for one where config.json names no
class, and is refused where its class has another head); a base model, a masked-LM checkpoint or a
sentence-transformers directory becomes an embedding model, pooled as 1_Pooling/config.json says (mean for a plain
encoder, or `--pooling`) and normalised where a Normalize module is listed (always for a plain encoder: cosine
similarity is then a dot product).

A sparse embedding model (SPLADE) is a masked LM whose logits are pooled over the tokens into one weight per
vocabulary entry: a sentence-transformers SparseEncoder directory (modules.json: MLMTransformer, or a Transformer
whose sentence_bert_config.json says transformer_task fill-mask, then SpladePooling with its strategy and activation),
or a bare `*ForMaskedLM` asked for with `--task sparse` (SPLADE's max of log(1 + relu(logits))). Without
`--task sparse` a bare masked LM is still an embedding model of its encoder (the import warns that it could be
sparse).

A decoder the import takes (architectures.py: Qwen2, Qwen3, Llama, Mistral) is an embedding model: a
sentence-transformers directory pools as it says (Qwen3-Embedding's is lasttoken + Normalize, with its prompts), a
base model (`*Model`) at its last token, normalised; a `*ForCausalLM` in the transformers layout needs `--task embed`
(its head is left out) or `--task rerank` (a reranker in Qwen3-Reranker's form: yes_no_reranker.py). The last token
is the last one the attention mask keeps, so a batch padded on either side pools the same token.

A classifier of pairs of texts (a cross-encoder: reranking, NLI, duplicates) is told apart by the sentence-transformers
CrossEncoder layout (config_sentence_transformers.json with model_type CrossEncoder, or the sentence_transformers
or sbert_ce_default_activation_function keys in config.json, as versions 4-5 and 2-3 saved it), or asked for with
`--task rerank` or `--pairs` (both refused for a token classifier, which reads one text). A one-label one is a
reranker: its score goes through the activation CrossEncoder applies (the checkpoint's activation_fn, else
CrossEncoder's default, a sigmoid), which must be a sigmoid or the identity.

Every refusal here is a CheckpointError whose message is one line naming the directory, before torch is imported:
not a directory, no config.json, no weights, no tokenizer, a decoder (or a generative head), an architecture the
importer does not take, a classifier whose id2label is not 0..n-1, a sentence-transformers module it cannot put in
a graph. What needs the weights (their shapes, the tokenizer's size) is checked when they load (torch_side.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ortserve.bundle.kinds import CLASSIFIER, EMBEDDING, SPARSE_EMBEDDING, TOKEN_CLASSIFIER, Kind
from ortserve.prepare.importer.architectures import (
    DECODER_NAMES,
    DECODER_TYPES,
    ENCODER_NAMES,
    GENERATIVE_HEADS,
    SUPPORTED,
    SUPPORTED_NAMES,
    Architecture,
)

TRANSFORMERS, SENTENCE_TRANSFORMERS = "transformers", "sentence-transformers"
CLASSIFY, EMBED, RERANK, TOKENS, SPARSE = "classify", "embed", "rerank", "tokens", "sparse"
TASKS = (CLASSIFY, EMBED, RERANK, TOKENS, SPARSE)
"""rerank: a classifier of pairs of texts (CLASSIFY with pairs); tokens: a token classifier (a label per token);
sparse: a sparse embedding model (SPLADE: a masked LM's logits pooled into vocabulary weights)."""
SPLADE_STRATEGIES = ("max", "sum")
SPLADE_ACTIVATIONS = ("relu", "log1p_relu")
"""sentence-transformers' SpladePooling choices the graph reproduces (torch_graph.SparseVector)."""
MASKED_LM_SUFFIX = "ForMaskedLM"
ACTIVATIONS = {"torch.nn.modules.activation.Sigmoid": "sigmoid", "torch.nn.Sigmoid": "sigmoid",
               "torch.nn.modules.linear.Identity": "identity", "torch.nn.Identity": "identity"}
"""CrossEncoder activation_fn paths a reranker's SCORE reproduces, and the bundle's name for each."""
POOLING_MODES = ("mean", "cls", "max", "lasttoken", "mean_sqrt_len_tokens")
"""What the graph pools with (sentence-transformers' names); lasttoken is the last token the mask keeps, on either
padding side (a decoder's default)."""
POOLING_CHOICES = POOLING_MODES[:4]
"""What `--pooling` offers for a plain encoder or decoder."""
CLASSIFIER_SUFFIX = "ForSequenceClassification"
TOKEN_CLASSIFIER_SUFFIX = "ForTokenClassification"
# Heads whose checkpoints carry a whole encoder and nothing that a sentence vector needs: imported as embeddings.
ENCODER_SUFFIXES = ("Model", "ForMaskedLM", "ForPreTraining")
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "sentencepiece.bpe.model", "spm.model",
                   "tokenizer.model")
MAX_CONFIG_BYTES = 4 * 1024 * 1024
_GENERIC_LABEL = re.compile(r"LABEL_\d+")


class CheckpointError(ValueError):
    """A directory `registry import` cannot take; the message is one line naming it (exit 2, nothing written)."""


@dataclass(frozen=True)
class Pooling:
    """How token vectors become the sentence vector, inside the graph (sentence-transformers' Pooling/Normalize)."""

    modes: tuple[str, ...]
    """One or more of POOLING_MODES; several are concatenated in this order, as sentence-transformers does."""
    normalize: bool

    def describe(self) -> str:
        pooled = " + ".join(self.modes) + " pooling"
        return f"{pooled} + L2 normalisation" if self.normalize else pooled


@dataclass(frozen=True)
class Splade:
    """How a masked LM's logits become a sparse vector, inside the graph (sentence-transformers' SpladePooling):
    log1p(relu(logits)) (`activation` relu; log1p_relu takes a second log1p), then the max or the sum over tokens."""

    strategy: str = "max"
    activation: str = "relu"

    def describe(self) -> str:
        weight = "log(1 + relu(logit))" if self.activation == "relu" else "log(1 + log(1 + relu(logit)))"
        return f"SPLADE: {self.strategy} over tokens of {weight}"


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    """The directory given."""
    model_dir: Path
    """Where config.json, the weights and the tokenizer are (a sentence-transformers Transformer module's path)."""
    layout: str  # TRANSFORMERS or SENTENCE_TRANSFORMERS
    config: Mapping[str, Any]
    architecture: Architecture
    class_name: str
    """The checkpoint's class as config.json names it (its first `architectures` entry), else its model_type."""
    task: str  # CLASSIFY, EMBED or TOKENS
    labels: tuple[str, ...] = ()
    """A classifier's (or token classifier's) labels in column order (id2label); () for an embedding model."""
    multi_label: bool = False
    pooling: Pooling | None = None
    """An embedding model's pooling; None for a classifier."""
    lowercase: bool = False
    """sentence-transformers lowercases each text before its tokenizer (sentence_bert_config's do_lower_case)."""
    weights: tuple[Path, ...] = ()
    warnings: tuple[str, ...] = ()
    pairs: bool = False
    """A classifier of pairs of texts (a cross-encoder)."""
    score_activation: str | None = None
    """A one-label classifier of pairs (a reranker): "sigmoid" or "identity", what CrossEncoder applies."""
    cross_encoder: bool = False
    """The directory is in sentence-transformers' CrossEncoder layout."""
    yes_no: bool = False
    """A decoder reranker in Qwen3-Reranker's form (a *ForCausalLM imported with --task rerank): its one label is
    logit(yes) - logit(no) at the last token, its score the sigmoid of that (yes_no_reranker.py)."""
    prompts: tuple[tuple[str, str], ...] = ()
    """(name, text) per prompt a sentence-transformers directory names (config_sentence_transformers.json's
    `prompts`): kept in the bundle, and put before a text whose call asks for it by name (`prompt_name`)."""
    splade: Splade | None = None
    """A sparse embedding model's pooling; None for every other kind."""

    @property
    def kind(self) -> Kind:
        """The kind of bundle its task makes."""
        return {CLASSIFY: CLASSIFIER, TOKENS: TOKEN_CLASSIFIER, SPARSE: SPARSE_EMBEDDING}.get(self.task, EMBEDDING)

    @property
    def classifier(self) -> bool:
        """A sequence classifier: a row of logits per text."""
        return self.kind is CLASSIFIER

    @property
    def per_token(self) -> bool:
        """A token classifier: a row of logits per token."""
        return self.kind.per_token

    @property
    def labelled(self) -> bool:
        """Its output's columns are `labels` (a classifier or a token classifier)."""
        return self.kind.labelled


def read_checkpoint(path: str | Path, *, task: str | None = None, pooling: str | None = None,
                    pairs: bool | None = None) -> Checkpoint:
    """Reads and checks `path`; `task`, `pooling` and `pairs` override what the checkpoint says (see the module
    docstring)."""
    root = Path(path)
    if task is not None and task not in TASKS:
        raise CheckpointError(f"--task must be {', '.join(TASKS[:-1])} or {TASKS[-1]}, got {task!r}")
    if pairs and task in (EMBED, SPARSE):
        raise CheckpointError("--pairs applies to classifiers (a cross-encoder); an embedding model reads one text")
    if pairs and task == TOKENS:
        raise CheckpointError("--pairs applies to sequence classifiers (a cross-encoder); a token classifier "
                              "(--task tokens) reads one text")
    cross_encoder = _cross_encoder_activation(root) if root.is_dir() else None
    wants_pairs = task == RERANK or bool(pairs) or (pairs is None and cross_encoder is not None and task != EMBED)
    rerank = task == RERANK
    if task == RERANK:
        task = CLASSIFY
    if pooling is not None and pooling not in POOLING_MODES:
        raise CheckpointError(f"--pooling must be one of {', '.join(POOLING_MODES)}, got {pooling!r}")
    if not root.is_dir():
        raise CheckpointError(f"{root}: not a directory (give the directory save_pretrained wrote)")
    st_pooling: Pooling | None = None
    lowercase = False
    prompts: tuple[tuple[str, str], ...] = ()
    model_dir = root
    splade: Splade | None = None
    if cross_encoder is not None:
        _check_cross_encoder_modules(root)
    elif (root / "modules.json").is_file() and _names_splade(root):
        model_dir, splade, lowercase, prompts = _sparse_encoder(root)
    elif (root / "modules.json").is_file():
        model_dir, st_pooling, lowercase, prompts = _sentence_transformers(root)
    config = _config(model_dir)
    weights = tuple(model_dir / name for name in WEIGHT_FILES if (model_dir / name).is_file())
    if not weights:
        raise CheckpointError(f"{model_dir}: no weights ({' or '.join(WEIGHT_FILES[::2])}); save_pretrained writes "
                              "them beside config.json")
    if not any((model_dir / name).is_file() for name in TOKENIZER_FILES):
        raise CheckpointError(f"{model_dir}: no tokenizer (tokenizer.json, or vocab.txt, vocab.json + merges.txt or a "
                              "SentencePiece model); save the tokenizer with save_pretrained into the same directory")
    model_type = config.get("model_type")
    names = config.get("architectures") or []
    class_name = names[0] if names and isinstance(names[0], str) else str(model_type)
    architecture = _architecture(model_dir, model_type, class_name, config)
    layout = SENTENCE_TRANSFORMERS if st_pooling is not None or splade is not None else TRANSFORMERS
    detected = (SPARSE if splade is not None else EMBED if layout == SENTENCE_TRANSFORMERS
                else CLASSIFY if class_name.endswith(CLASSIFIER_SUFFIX)
                else TOKENS if class_name.endswith(TOKEN_CLASSIFIER_SUFFIX) else EMBED)
    chosen = task or detected
    if SPARSE in (chosen, detected):
        if wants_pairs:
            raise CheckpointError("--pairs applies to classifiers (a cross-encoder); a sparse embedding model reads "
                                  "one text")
        return _sparse_checkpoint(root, model_dir, layout, config, architecture, class_name, weights, chosen,
                                  splade, pooling, lowercase, prompts)
    if architecture.decoder and rerank:
        if layout != TRANSFORMERS or not class_name.endswith("ForCausalLM"):
            raise CheckpointError(f"{model_dir}: --task rerank takes a decoder as a causal LM asked yes or no "
                                  f"(Qwen3-Reranker's form, a *ForCausalLM), not {class_name}")
        if pooling is not None:
            raise CheckpointError("--pooling applies to embedding models; a decoder reranker reads its last token")
        return Checkpoint(path=root, model_dir=model_dir, layout=layout, config=config, architecture=architecture,
                          class_name=class_name, task=CLASSIFY, labels=("yes",), weights=weights, pairs=True,
                          score_activation="sigmoid", yes_no=True)
    if wants_pairs and TOKENS in (chosen, detected):
        raise CheckpointError(f"{model_dir}: {class_name} is a token classifier, which reads one text; a classifier "
                              "of pairs (a cross-encoder: --pairs, --task rerank) needs a sequence-classification head")
    if wants_pairs and chosen != CLASSIFY:
        raise CheckpointError(f"{model_dir}: {class_name} has no sequence-classification head; a classifier of pairs "
                              "(a cross-encoder: --pairs, --task rerank) needs one")
    if chosen == CLASSIFY and detected == TOKENS:
        raise CheckpointError(f"{model_dir}: {class_name} is a token classifier (a label per token), not a sequence "
                              "classifier; leave --task out (or --task tokens)")
    if chosen == CLASSIFY and detected != CLASSIFY:
        raise CheckpointError(f"{model_dir}: {class_name} has no sequence-classification head, so it cannot be "
                              f"imported as a classifier; import it as an embedding model (--task embed)")
    if chosen == TOKENS and detected != TOKENS and (layout == SENTENCE_TRANSFORMERS or names):
        raise CheckpointError(f"{model_dir}: {class_name} has no token-classification head, so it cannot be imported "
                              "as a token classifier (--task tokens takes a *ForTokenClassification, or a checkpoint "
                              "whose config.json names no class)")
    if architecture.decoder and chosen != EMBED:
        raise CheckpointError(f"{model_dir}: {class_name} is a decoder ({architecture.name}); `registry import` takes "
                              "decoders as embedding models (last-token pooling) or, a *ForCausalLM, as rerankers "
                              "(--task rerank), not as classifiers")
    if task is None and layout == TRANSFORMERS and architecture.decoder and not class_name.endswith(ENCODER_SUFFIXES):
        raise CheckpointError(f"{model_dir}: {class_name} is a causal language model; --task embed imports it as an "
                              "embedding model (its last token's hidden state, L2-normalised), --task rerank as a "
                              "reranker asked yes or no (Qwen3-Reranker's form)")
    if task is None and layout == TRANSFORMERS and chosen == EMBED and not class_name.endswith(ENCODER_SUFFIXES):
        raise CheckpointError(f"{model_dir}: {class_name} is neither a sequence or token classifier nor a plain "
                              f"encoder; --task embed imports its encoder alone")
    if chosen == TOKENS:
        if pooling is not None:
            raise CheckpointError("--pooling applies to embedding models; a token classifier answers per token")
        labels, warnings = _labels(model_dir, config)
        return Checkpoint(path=root, model_dir=model_dir, layout=layout, config=config, architecture=architecture,
                          class_name=class_name, task=TOKENS, labels=labels, weights=weights, warnings=warnings)
    if chosen == CLASSIFY:
        if pooling is not None:
            raise CheckpointError("--pooling applies to embedding models; a classifier's head does its own pooling")
        labels, warnings = _labels(model_dir, config)
        return Checkpoint(path=root, model_dir=model_dir, layout=layout, config=config, architecture=architecture,
                          class_name=class_name, task=CLASSIFY, labels=labels,
                          multi_label=config.get("problem_type") == "multi_label_classification", weights=weights,
                          warnings=warnings, pairs=wants_pairs, cross_encoder=cross_encoder is not None,
                          score_activation=_score_activation(root, cross_encoder, labels) if wants_pairs else None)
    if st_pooling is not None:
        if pooling is not None and (pooling,) != st_pooling.modes:
            raise CheckpointError(f"{root}: its 1_Pooling/config.json pools with {' + '.join(st_pooling.modes)}; "
                                  f"--pooling {pooling} would answer differently from sentence-transformers (leave "
                                  "--pooling out, or import its Transformer module's directory)")
        chosen_pooling = st_pooling
    else:
        chosen_pooling = Pooling(modes=(pooling or ("lasttoken" if architecture.decoder else "mean"),), normalize=True)
    warnings = ((f"{model_dir}: {class_name} is imported as a dense embedding model of its encoder "
                 f"({chosen_pooling.describe()}); --task sparse imports a masked LM as a sparse one (SPLADE)",)
                if task is None and layout == TRANSFORMERS and class_name.endswith(MASKED_LM_SUFFIX) else ())
    return Checkpoint(path=root, model_dir=model_dir, layout=layout, config=config, architecture=architecture,
                      class_name=class_name, task=EMBED, pooling=chosen_pooling, lowercase=lowercase,
                      prompts=prompts, weights=weights, warnings=warnings)


def _sparse_checkpoint(root: Path, model_dir: Path, layout: str, config: Mapping[str, Any],
                       architecture: Architecture, class_name: str, weights: tuple[Path, ...], chosen: str,
                       splade: Splade | None, pooling: str | None, lowercase: bool,
                       prompts: tuple[tuple[str, str], ...]) -> Checkpoint:
    """A sparse embedding model: a SparseEncoder directory (`splade` its pooling), or a bare *ForMaskedLM asked for
    with --task sparse (SPLADE's max of log(1 + relu))."""
    if chosen != SPARSE:
        raise CheckpointError(f"{root}: a sentence-transformers SparseEncoder (SPLADE) imports as a sparse embedding "
                              f"model; leave --task out (or --task sparse), not --task {chosen}")
    if pooling is not None:
        raise CheckpointError("--pooling applies to dense embedding models; a sparse one pools as its SpladePooling "
                              "says (max of log(1 + relu(logit)) for a bare masked LM)")
    if architecture.decoder:
        raise CheckpointError(f"{model_dir}: {class_name} is a decoder; a sparse embedding model (--task sparse) is "
                              "a masked-LM encoder (BERT, DistilBERT, ...)")
    if splade is None and not class_name.endswith(MASKED_LM_SUFFIX):
        raise CheckpointError(f"{model_dir}: {class_name} has no masked-LM head, so it cannot be imported as a sparse "
                              f"embedding model (--task sparse takes a *{MASKED_LM_SUFFIX}: its vocabulary logits are "
                              "the weights)")
    return Checkpoint(path=root, model_dir=model_dir, layout=layout, config=config, architecture=architecture,
                      class_name=class_name, task=SPARSE, lowercase=lowercase, prompts=prompts, weights=weights,
                      splade=splade or Splade())


def _module_kinds(root: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """modules.json's modules in order, and each one's class name (its type's last part)."""
    modules = _json_list(root / "modules.json")
    return modules, [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules]


def _names_splade(root: Path) -> bool:
    """modules.json names a SPLADE module (a SparseEncoder directory)."""
    return any(k in ("SpladePooling", "SparseStaticEmbedding", "SparseAutoEncoder") for k in _module_kinds(root)[1])


def _sparse_encoder(root: Path) -> tuple[Path, Splade, bool, tuple[tuple[str, str], ...]]:
    """A SparseEncoder directory: its masked LM's directory, its SpladePooling, whether texts are lowercased first,
    and the prompts by name."""
    modules, kinds = _module_kinds(root)
    masked_lm = kinds[:1] == ["MLMTransformer"] or (
        kinds[:1] == ["Transformer"] and _transformer_task(_module_dir(root, modules[0])) == "fill-mask")
    if len(kinds) != 2 or not masked_lm or kinds[1] != "SpladePooling":
        raise CheckpointError(f"{root / 'modules.json'}: a SparseEncoder of {' -> '.join(kinds)}; the import takes "
                              "MLMTransformer (or a fill-mask Transformer) -> SpladePooling (SPLADE), not "
                              "inference-free or sparse-autoencoder ones")
    model_dir = _module_dir(root, modules[0])
    pooling_dir = _module_dir(root, modules[1])
    pool = _json(pooling_dir / "config.json") if (pooling_dir / "config.json").is_file() else {}
    strategy = pool.get("pooling_strategy", "max")
    activation = pool.get("activation_function", "relu")
    if strategy not in SPLADE_STRATEGIES or activation not in SPLADE_ACTIVATIONS:
        raise CheckpointError(f"{pooling_dir / 'config.json'}: SpladePooling {strategy!r} of {activation!r} is not "
                              f"supported (strategies {', '.join(SPLADE_STRATEGIES)}; activations "
                              f"{', '.join(SPLADE_ACTIVATIONS)})")
    st_config = model_dir / "sentence_bert_config.json"
    lowercase = bool(_json(st_config).get("do_lower_case", False)) if st_config.is_file() else False
    return model_dir, Splade(strategy=strategy, activation=activation), lowercase, _prompts(root)


def _transformer_task(model_dir: Path) -> str | None:
    """A Transformer module's transformer_task (sentence_bert_config.json), None when it names none."""
    st_config = model_dir / "sentence_bert_config.json"
    task = _json(st_config).get("transformer_task") if st_config.is_file() else None
    return task if isinstance(task, str) else None


def _score_activation(root: Path, found: str | None, labels: tuple[str, ...]) -> str | None:
    """A one-label classifier of pairs: what CrossEncoder applies to its logit (the checkpoint's activation_fn, else
    CrossEncoder's default for one label, a sigmoid); None for several labels."""
    if len(labels) != 1:
        return None
    path = found or "torch.nn.modules.activation.Sigmoid"
    activation = ACTIVATIONS.get(path)
    if activation is None:
        raise CheckpointError(f"{root}: its CrossEncoder activation_fn {path} is not one a reranker's SCORE "
                              f"reproduces ({', '.join(sorted(ACTIVATIONS))})")
    return activation


def _check_cross_encoder_modules(root: Path) -> None:
    """A CrossEncoder directory's modules.json (sentence-transformers 5+) must be its one Transformer, in place."""
    if not (root / "modules.json").is_file():
        return
    modules, kinds = _module_kinds(root)
    if kinds != ["Transformer"] or str(modules[0].get("path", "")) not in ("", "."):
        raise CheckpointError(f"{root / 'modules.json'}: a CrossEncoder of {' -> '.join(kinds) or 'no modules'}; the "
                              "import takes one Transformer module in the directory itself")


def _cross_encoder_activation(root: Path) -> str | None:
    """The activation_fn path a sentence-transformers CrossEncoder directory names ("" when it names none), or None
    when the directory is not one."""
    st_config = root / "config_sentence_transformers.json"
    if st_config.is_file():
        data = _json(st_config)
        if data.get("model_type") == "CrossEncoder":
            return str(data.get("activation_fn") or "")
    config = root / "config.json"
    if config.is_file():
        data = _json(config)
        st = data.get("sentence_transformers")
        if isinstance(st, dict) and "activation_fn" in st:
            return str(st.get("activation_fn") or "")
        if data.get("sbert_ce_default_activation_function"):
            return str(data["sbert_ce_default_activation_function"])
    return None


def _config(model_dir: Path) -> dict[str, Any]:
    path = model_dir / "config.json"
    if not path.is_file():
        raise CheckpointError(f"{model_dir}: no config.json (a Hugging Face checkpoint directory has config.json, "
                              "the weights and the tokenizer files)")
    data = _json(path)
    if not isinstance(data.get("model_type"), str):
        raise CheckpointError(f"{path}: no model_type (not a transformers config.json)")
    return data


def _json(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read ({e.strerror})") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise CheckpointError(f"{path}: larger than {MAX_CONFIG_BYTES} bytes")
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    return data


def _architecture(model_dir: Path, model_type: str, class_name: str, config: Mapping[str, Any]) -> Architecture:
    found = SUPPORTED.get(model_type)
    if found is not None and found.decoder:  # its *ForCausalLM head is left out, as sentence-transformers does
        return found
    if class_name.endswith(GENERATIVE_HEADS) or model_type in DECODER_TYPES or config.get("is_decoder") is True:
        raise CheckpointError(f"{model_dir}: {class_name} (model_type {model_type}) is a decoder language model; "
                              f"`registry import` takes encoders: {ENCODER_NAMES}; and decoders, as embedding "
                              f"models: {DECODER_NAMES}")
    if found is None:
        raise CheckpointError(f"{model_dir}: architecture {class_name} (model_type {model_type}) is not supported; "
                              f"supported: {SUPPORTED_NAMES}")
    return found


def _labels(model_dir: Path, config: Mapping[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    where = model_dir / "config.json"
    raw = config.get("id2label")
    if raw is None:  # transformers' default: num_labels (2) generic names
        count = config.get("num_labels", 2)
        raw = {str(i): f"LABEL_{i}" for i in range(count if isinstance(count, int) and count > 0 else 2)}
    if not isinstance(raw, dict) or not raw:
        raise CheckpointError(f"{where}: id2label must be an object of column index -> label name")
    try:
        columns = {int(key): value for key, value in raw.items()}
    except (TypeError, ValueError):
        raise CheckpointError(f"{where}: id2label keys must be column indices 0..n-1, got {sorted(raw)}") from None
    if sorted(columns) != list(range(len(columns))):
        raise CheckpointError(f"{where}: id2label keys must be the column indices 0..{len(columns) - 1}, got "
                              f"{sorted(columns)}")
    labels = tuple(columns[i] for i in range(len(columns)))
    if not all(isinstance(label, str) and label for label in labels):
        raise CheckpointError(f"{where}: every id2label value must be a non-empty label name")
    if len(set(labels)) != len(labels):
        raise CheckpointError(f"{where}: id2label names a label twice ({list(labels)}); each column needs its own")
    warnings = ()
    if all(_GENERIC_LABEL.fullmatch(label) for label in labels):
        warnings = (f"{where}: id2label has only generic names ({', '.join(labels)}); the bundle keeps them (set "
                    "id2label in config.json to name the classes)",)
    return labels, warnings


def _sentence_transformers(root: Path) -> tuple[Path, Pooling, bool, tuple[tuple[str, str], ...]]:
    """The Transformer module's directory, the pooling, whether texts are lowercased first, and the prompts by
    name."""
    modules, kinds = _module_kinds(root)
    if not kinds or kinds[0] != "Transformer" or "Pooling" not in kinds:
        raise CheckpointError(f"{root / 'modules.json'}: expected Transformer -> Pooling -> optional Normalize, got "
                              f"{' -> '.join(kinds) or 'no modules'}")
    pooling_at = kinds.index("Pooling")
    rest = kinds[pooling_at + 1:]
    if pooling_at != 1 or rest not in ([], ["Normalize"]):
        unsupported = [k for k in kinds[1:] if k not in ("Pooling", "Normalize")] or kinds[1:]
        raise CheckpointError(f"{root / 'modules.json'}: the module(s) {', '.join(unsupported)} cannot be imported "
                              f"(the import takes Transformer -> Pooling -> optional Normalize; this one is "
                              f"{' -> '.join(kinds)})")
    model_dir = _module_dir(root, modules[0])
    pooling_dir = _module_dir(root, modules[pooling_at])
    pool = _json(pooling_dir / "config.json") if (pooling_dir / "config.json").is_file() else None
    if pool is None:
        raise CheckpointError(f"{pooling_dir}: no config.json (sentence-transformers' Pooling module writes one)")
    modes = _pooling_modes(pool, pooling_dir / "config.json")
    st_config = model_dir / "sentence_bert_config.json"
    lowercase = bool(_json(st_config).get("do_lower_case", False)) if st_config.is_file() else False
    return model_dir, Pooling(modes=modes, normalize=rest == ["Normalize"]), lowercase, _prompts(root)


def _prompts(root: Path) -> tuple[tuple[str, str], ...]:
    """The prompts a sentence-transformers directory names (config_sentence_transformers.json), sorted by name;
    CheckpointError for a default prompt (every call would have to carry it, V2 ones too) or, a SparseEncoder's,
    max_active_dims (the bound is the call's: top_k)."""
    st_file = root / "config_sentence_transformers.json"
    if not st_file.is_file():
        return ()
    data = _json(st_file)
    named = data.get("prompts") or {}
    if not isinstance(named, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in named.items()):
        raise CheckpointError(f"{st_file}: prompts must be an object of strings (a prompt's name: its text)")
    name = data.get("default_prompt_name")
    prompt = named.get(name) if name else None
    if prompt:
        # The bundle keeps the prompts, chosen per call by name.
        raise CheckpointError(f"{st_file}: sentence-transformers puts the default prompt {prompt!r} before every "
                              "text, which a bundle cannot do: unset default_prompt_name, and ask for the prompt "
                              "by name (prompt_name) or send it with the text")
    if data.get("max_active_dims") is not None:
        raise CheckpointError(f"{st_file}: max_active_dims {data['max_active_dims']!r} bounds every text's "
                              "entries, which a bundle leaves to each call: unset it, and send top_k per call")
    return tuple(sorted(named.items()))


def _json_list(path: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads(path.read_bytes()[:MAX_CONFIG_BYTES])
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: not readable JSON ({e})") from None
    if not isinstance(data, list) or not all(isinstance(m, dict) for m in data):
        raise CheckpointError(f"{path}: expected a list of modules")
    return sorted(data, key=lambda m: m.get("idx", 0) if isinstance(m.get("idx"), int) else 0)


def _module_dir(root: Path, module: Mapping[str, Any]) -> Path:
    relative = module.get("path") or ""
    path = (root / str(relative)).resolve()
    if root.resolve() not in (path, *path.parents):
        raise CheckpointError(f"{root / 'modules.json'}: module path {relative!r} leaves the directory")
    return path


def _pooling_modes(config: Mapping[str, Any], where: Path) -> tuple[str, ...]:
    # sentence-transformers 6 writes "pooling_mode" (a name or a list); earlier versions one boolean per mode.
    # In sentence-transformers' order, which is the order several modes are concatenated in.
    legacy = {"pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max", "pooling_mode_mean_tokens": "mean",
              "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
              "pooling_mode_weightedmean_tokens": "weightedmean", "pooling_mode_lasttoken": "lasttoken"}
    named = config.get("pooling_mode")
    if named is not None:
        modes = (named,) if isinstance(named, str) else tuple(named) if isinstance(named, list) else ()
    else:
        modes = tuple(mode for key, mode in legacy.items() if config.get(key) is True)
    if not modes:
        raise CheckpointError(f"{where}: names no pooling mode")
    unsupported = [m for m in modes if m not in POOLING_MODES]
    if unsupported:
        raise CheckpointError(f"{where}: pooling mode {', '.join(map(str, unsupported))} is not supported "
                              f"(supported: {', '.join(POOLING_MODES)})")
    if config.get("include_prompt") is False:
        raise CheckpointError(f"{where}: include_prompt false (pooling that leaves the prompt out) is not supported")
    return modes

"""Tiny random-weight Hugging Face checkpoints of every architecture `registry import` takes, made offline.

    make_checkpoint(dest, "roberta", task="classify", labels=("neg", "pos"))     a save_pretrained directory
    make_token_checkpoint(dest, "bert", labels=BIO_LABELS)                       a *ForTokenClassification one
    make_sentence_transformer(dest, "bert", pooling="mean", normalize=True)      a sentence-transformers directory
    make_sparse_encoder(dest, "bert", strategy="max", activation="relu")         a SparseEncoder (SPLADE) directory

Each is what a user's directory holds: config.json, model.safetensors and the tokenizer transformers saves for the
family (tokenizer.json and tokenizer_config.json), built from transformers' own config and tokenizer classes. The
tokenizers are trained in milliseconds on the built-in evaluation corpus with the family's model (WordPiece,
byte-level BPE, SentencePiece Unigram), so they cover its 20+ scripts, and give texts of 100+ tokens, past the
checkpoints' max_seq_len. Weights come from `torch.manual_seed(seed)`: same arguments, same checkpoint.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

ARCHITECTURES = ("bert", "distilbert", "roberta", "xlm-roberta", "electra", "mpnet", "deberta-v2", "modernbert")
TASKS = ("classify", "embed")
"""The tasks every architecture is imported with in the importer's session fixtures (tokens: TOKEN_TASK)."""
TOKEN_TASK = "tokens"
MASKED_LM_TASK = "masked-lm"
"""make_checkpoint's task for a *ForMaskedLM (a SPLADE model's body and head)."""
BIO_LABELS = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC")
"""Named-entity tags, BIO (CoNLL's shape): O outside, B- begins an entity, I- continues it."""
IOBES_LABELS = ("O", "B-PER", "I-PER", "E-PER", "S-PER", "B-ORG", "I-ORG", "E-ORG", "S-ORG")
"""IOBES: E- ends a multi-token entity, S- is a one-token one."""
TOKEN_LABELS = {"bio": BIO_LABELS, "iobes": IOBES_LABELS}
TOKEN_CASES = [*((arch, "bio") for arch in ARCHITECTURES), ("bert", "iobes")]
"""(architecture, label set): the token classifiers the importer's session fixtures make and import."""
IMPORT_MAX_SEQ_LEN = 32
"""What the tests import at: short enough that the built-in corpus has texts past it (the checkpoints hold 128)."""
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
HIDDEN, LAYERS, HEADS, INTERMEDIATE, POSITIONS = 32, 2, 2, 64, 128
VOCAB_SIZE = 600


@dataclass(frozen=True)
class Family:
    """How one architecture's tokenizer is made and which of its config classes take which sizes."""

    tokenizer: str  # wordpiece | bpe | unigram
    specials: tuple[str, ...]  # in id order, first in the vocabulary


FAMILIES = {
    "bert": Family("wordpiece", ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")),
    "distilbert": Family("wordpiece", ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")),
    "electra": Family("wordpiece", ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")),
    "mpnet": Family("wordpiece", ("<s>", "<pad>", "</s>", "[UNK]", "<mask>")),
    "roberta": Family("bpe", ("<s>", "<pad>", "</s>", "<unk>", "<mask>")),
    "modernbert": Family("bpe", ("[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]")),
    "xlm-roberta": Family("unigram", ("<s>", "<pad>", "</s>", "<unk>")),
    "deberta-v2": Family("unigram", ("[PAD]", "[CLS]", "[SEP]", "[UNK]")),
}


TOKENIZER_TEXTS = 334
"""The test tokenizers learn from the built-in corpus's first 334 texts, what it held when they were designed: the
whole corpus has 1,146 distinct characters, more than a unigram vocabulary of VOCAB_SIZE pieces can hold."""


def corpus() -> list[str]:
    data = resources.files("ortserve.prepare").joinpath("eval_corpus.txt").read_text(encoding="utf-8")
    return [line.strip() for line in data.splitlines() if line.strip()][:TOKENIZER_TEXTS]


def make_checkpoint(dest: Path, architecture: str, *, task: str = "classify",
                    labels: Sequence[str] = ("negative", "positive"), seed: int = 0,
                    multi_label: bool = False, config_overrides: dict[str, Any] | None = None) -> Path:
    """A save_pretrained directory: `task` classify (…ForSequenceClassification with `labels` as id2label), tokens
    (…ForTokenClassification, likewise), masked-lm (…ForMaskedLM, its vocabulary biases lowered by 1.5 so that most
    logits are negative: a SPLADE vector then has tens of non-zeros, not the whole vocabulary) or embed (the base
    model). Returns `dest`."""
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    tokenizer = make_tokenizer(architecture)
    config = _config(architecture, tokenizer, **(config_overrides or {}))
    if task in ("classify", TOKEN_TASK):
        config.id2label = dict(enumerate(labels))
        config.label2id = {label: i for i, label in enumerate(labels)}
        if multi_label:
            config.problem_type = "multi_label_classification"
    torch.manual_seed(seed)
    auto = {"classify": transformers.AutoModelForSequenceClassification,
            TOKEN_TASK: transformers.AutoModelForTokenClassification,
            MASKED_LM_TASK: transformers.AutoModelForMaskedLM}.get(task, transformers.AutoModel)
    model = auto.from_config(config).eval()
    # Random init leaves LayerNorms at 1/0 and tiny logits; spread the weights so the logits span a few units.
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() >= 2:
                param.normal_(0.0, 0.1 if "classifier" not in name else 0.5)
            elif "bias" in name:
                param.normal_(0.0, 0.1)
        if task == MASKED_LM_TASK:
            model.get_output_embeddings().bias -= 1.5
    dest.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    return dest


def make_token_checkpoint(dest: Path, architecture: str = "bert", *, labels: Sequence[str] = BIO_LABELS,
                          seed: int = 0, config_overrides: dict[str, Any] | None = None) -> Path:
    """A token classifier's save_pretrained directory (…ForTokenClassification, `labels` as id2label: BIO_LABELS,
    IOBES_LABELS or any): "bert" has a WordPiece tokenizer, "roberta" a byte-level BPE one, and every architecture in
    ARCHITECTURES can be made. Offline, deterministic; import it at IMPORT_MAX_SEQ_LEN so that long texts truncate."""
    return make_checkpoint(dest, architecture, task=TOKEN_TASK, labels=labels, seed=seed,
                           config_overrides=config_overrides)


def make_sentence_transformer(dest: Path, architecture: str, *, pooling: str = "mean", normalize: bool = True,
                              max_seq_length: int = 64, seed: int = 0) -> Path:
    """A sentence-transformers directory (modules.json, 1_Pooling, optionally Normalize) around a base model."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    base = make_checkpoint(dest.parent / f".{dest.name}-base", architecture, task="embed", seed=seed)
    modules: list[Any] = [Transformer(str(base), max_seq_length=max_seq_length), Pooling(HIDDEN, pooling)]
    if normalize:
        modules.append(Normalize())
    SentenceTransformer(modules=modules, device="cpu").save(str(dest))
    return dest


def make_sparse_encoder(dest: Path, architecture: str, *, strategy: str = "max", activation: str = "relu",
                        max_seq_length: int = 64, seed: int = 0, fill_mask: bool = False) -> Path:
    """A sentence-transformers SparseEncoder directory (modules.json: MLMTransformer, or with `fill_mask` a
    Transformer of transformer_task fill-mask, as sentence-transformers 6 prefers; then SpladePooling with `strategy`
    and `activation`) around a masked-LM checkpoint of `architecture`, as SPLADE models are saved."""
    from sentence_transformers import SparseEncoder
    from sentence_transformers.models import Transformer
    from sentence_transformers.sparse_encoder.modules import MLMTransformer, SpladePooling

    base = make_checkpoint(dest.parent / f".{dest.name}-base", architecture, task=MASKED_LM_TASK, seed=seed)
    first = (Transformer(str(base), transformer_task="fill-mask", max_seq_length=max_seq_length) if fill_mask
             else MLMTransformer(str(base), max_seq_length=max_seq_length))
    modules = [first,
               SpladePooling(strategy, activation_function=activation)]
    SparseEncoder(modules=modules, device="cpu").save(str(dest))
    return dest


def sparse_encoder_of(path: Path, *, bare: bool = False) -> Any:
    """sentence-transformers' SparseEncoder of a make_sparse_encoder directory at IMPORT_MAX_SEQ_LEN; `bare`: the
    SparseEncoder SPLADE makes of a bare masked LM (a fill-mask Transformer, then SpladePooling's max of relu), as
    `registry import --task sparse` reads one."""
    from sentence_transformers import SparseEncoder
    from sentence_transformers.models import Transformer
    from sentence_transformers.sparse_encoder.modules import SpladePooling

    if bare:
        modules = [Transformer(str(path), transformer_task="fill-mask", max_seq_length=IMPORT_MAX_SEQ_LEN),
                   SpladePooling("max")]
        return SparseEncoder(modules=modules, device="cpu")
    model = SparseEncoder(str(path), device="cpu")
    model.max_seq_length = IMPORT_MAX_SEQ_LEN
    return model


def make_tokenizer(architecture: str) -> Any:
    """The family's transformers tokenizer class around a vocabulary trained on the corpus."""
    import transformers

    family = FAMILIES[architecture]
    if architecture in ("bert", "distilbert", "electra"):
        cls = {"bert": transformers.BertTokenizer, "distilbert": transformers.DistilBertTokenizer,
               "electra": transformers.ElectraTokenizer}[architecture]
        return cls(vocab=_wordpiece_vocab(family.specials), do_lower_case=True)
    if architecture == "mpnet":
        return transformers.MPNetTokenizer(vocab=_wordpiece_vocab(family.specials), do_lower_case=True)
    if architecture == "roberta":
        vocab, merges = _bpe(family.specials)
        return transformers.RobertaTokenizer(vocab=vocab, merges=merges)
    if architecture == "modernbert":
        return _modernbert_tokenizer(family.specials)
    pieces = _unigram_pieces(family.specials)
    if architecture == "xlm-roberta":
        return transformers.XLMRobertaTokenizer(vocab=[*pieces, ("<mask>", 0.0)])
    return transformers.DebertaV2Tokenizer(vocab=[*pieces, ("[MASK]", 0.0)], do_lower_case=False)


@cache
def _wordpiece_vocab(specials: tuple[str, ...]) -> dict[str, int]:
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.WordPiece(unk_token=specials[1] if specials[0] == "[PAD]" else "[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(corpus(), trainers.WordPieceTrainer(vocab_size=VOCAB_SIZE, special_tokens=list(specials)))
    return dict(tok.get_vocab())


@cache
def _bpe(specials: tuple[str, ...]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=list(specials),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer)
    data = json.loads(tok.to_str())
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in data["model"]["merges"]]
    return dict(data["model"]["vocab"]), merges


@cache
def _unigram_pieces(specials: tuple[str, ...]) -> list[tuple[str, float]]:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    unk = next(s for s in specials if "unk" in s.lower())
    tok.train_from_iterator(corpus(), trainers.UnigramTrainer(vocab_size=VOCAB_SIZE, special_tokens=list(specials),
                                                             unk_token=unk))
    vocab = json.loads(tok.to_str())["model"]["vocab"]
    return [(piece, float(score)) for piece, score in vocab]


def _modernbert_tokenizer(specials: tuple[str, ...]) -> Any:
    """ModernBERT ships a plain tokenizer.json (byte-level BPE, `[CLS] $A [SEP]`) behind PreTrainedTokenizerFast."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

    vocab, merges = _bpe(specials)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=list(merges)))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    cls_id, sep_id = vocab["[CLS]"], vocab["[SEP]"]
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
                                                       special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)])
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", cls_token="[CLS]",
                                                sep_token="[SEP]", pad_token="[PAD]", mask_token="[MASK]")


def _config(architecture: str, tokenizer: Any, **overrides: Any) -> Any:
    import transformers

    vocab = len(tokenizer)
    pad = tokenizer.pad_token_id
    common = {"vocab_size": vocab, "pad_token_id": pad}
    if architecture == "distilbert":
        kw = {"dim": HIDDEN, "n_layers": LAYERS, "n_heads": HEADS, "hidden_dim": INTERMEDIATE,
              "max_position_embeddings": POSITIONS}
    else:
        kw = {"hidden_size": HIDDEN, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
              "intermediate_size": INTERMEDIATE, "max_position_embeddings": POSITIONS}
    if architecture in ("roberta", "xlm-roberta", "mpnet"):
        # Their positions start after the pad id (positions = pad + 1 + index), so the table is 2 longer.
        kw["max_position_embeddings"] = POSITIONS + pad + 1
        common.update(bos_token_id=tokenizer.bos_token_id or tokenizer.cls_token_id,
                      eos_token_id=tokenizer.eos_token_id or tokenizer.sep_token_id)
    if architecture in ("roberta", "xlm-roberta"):
        kw["type_vocab_size"] = 1
    if architecture == "electra":
        kw["embedding_size"] = HIDDEN // 2
    if architecture == "deberta-v2":
        # deberta-v3's shape: relative attention with position buckets, no absolute positions or token types.
        kw.update(relative_attention=True, position_buckets=32, pos_att_type=["p2c", "c2p"],
                  position_biased_input=False, type_vocab_size=0, norm_rel_ebd="layer_norm", share_att_key=True,
                  max_relative_positions=-1)
    if architecture == "modernbert":
        kw.update(num_hidden_layers=3, global_attn_every_n_layers=3, local_attention=16,
                  cls_token_id=tokenizer.cls_token_id, sep_token_id=tokenizer.sep_token_id)
    kw.update(common)
    kw.update(overrides)
    return transformers.AutoConfig.for_model(architecture, **kw)


# -- decoders ------------------------------------------------------------------------------------------------

DECODERS = ("qwen3", "qwen2", "llama", "mistral")
"""The decoder architectures `registry import` takes as embedding models (last-token pooling)."""
DECODER_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
"""Qwen's special tokens, first in the vocabulary: <|endoftext|> pads and ends every text, as Qwen3-Embedding's
tokenizer appends it."""
QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
              r"|\s+(?!\S)|\s+")
"""Qwen2's pre-tokenizer pattern (its tokenizer.json's Split), before the byte-level step."""
QWEN3_EMBEDDING_PROMPTS = {"query": "Instruct: Given a web search query, retrieve relevant passages that answer the "
                                    "query\nQuery:", "document": ""}
"""Qwen3-Embedding's config_sentence_transformers.json prompts (its default_prompt_name is null)."""
DECODER_MATRYOSHKA_DIMS = (16, 8)
"""The widths the tests import the Qwen3-Embedding-shaped directory with (--matryoshka-dims)."""


def make_decoder_tokenizer(*, append_end: bool = True) -> Any:
    """Qwen's tokenizer, shaped as Qwen3-Embedding ships it: byte-level BPE after Qwen's split, trained on the
    corpus (and on "yes" and "no", so that each is one token, as in Qwen's vocabulary), `$A <|endoftext|>` after every
    text (`append_end`; Qwen3-Reranker's adds nothing), <|endoftext|> as pad, padding on the left."""
    import transformers
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=list(DECODER_SPECIALS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([*corpus(), *["yes", "no"] * 50], trainer)
    end = DECODER_SPECIALS[0]
    if append_end:
        tok.post_processor = processors.TemplateProcessing(single=f"$A {end}", pair=f"$A {end} $B {end}",
                                                           special_tokens=[(end, tok.token_to_id(end))])
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=end, eos_token=DECODER_SPECIALS[2],
                                                padding_side="left")


def make_decoder_checkpoint(dest: Path, architecture: str = "qwen3", *, seed: int = 0, causal_lm: bool = False,
                            reranker: bool = False) -> Path:
    """A decoder's save_pretrained directory: the base model (Qwen3Model), or with `causal_lm` its *ForCausalLM, as
    Qwen3-Embedding's config.json names it; `reranker`: a Qwen3ForCausalLM shaped as Qwen3-Reranker's (its tokenizer
    appends nothing). Returns `dest`."""
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    causal_lm = causal_lm or reranker
    tokenizer = make_decoder_tokenizer(append_end=not reranker)
    kw: dict[str, Any] = {"vocab_size": len(tokenizer), "hidden_size": HIDDEN, "num_hidden_layers": LAYERS,
                          "num_attention_heads": HEADS, "num_key_value_heads": 1, "intermediate_size": INTERMEDIATE,
                          # A reranker's prompt takes ~180 of this tokenizer's tokens before the pair's own.
                          "max_position_embeddings": POSITIONS * (4 if reranker else 1),
                          "pad_token_id": tokenizer.pad_token_id,
                          "bos_token_id": tokenizer.pad_token_id, "eos_token_id": tokenizer.eos_token_id,
                          "tie_word_embeddings": True}
    if architecture == "qwen3":
        kw["head_dim"] = HIDDEN // HEADS
    config = transformers.AutoConfig.for_model(architecture, **kw)
    torch.manual_seed(seed)
    auto = transformers.AutoModelForCausalLM if causal_lm else transformers.AutoModel
    model = auto.from_config(config).eval()
    with torch.no_grad():  # spread the weights, as make_checkpoint does, so the vectors differ from text to text
        for name, param in model.named_parameters():
            if param.dim() >= 2 or "bias" in name:
                param.normal_(0.0, 0.1)
    dest.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    return dest


def make_decoder_sentence_transformer(dest: Path, architecture: str = "qwen3", *, max_seq_length: int = 64,
                                      seed: int = 0) -> Path:
    """A directory shaped as Qwen3-Embedding's: its causal LM as the Transformer module, lasttoken Pooling,
    Normalize, and its two prompts."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    base = make_decoder_checkpoint(dest.parent / f".{dest.name}-base", architecture, seed=seed, causal_lm=True)
    modules: list[Any] = [Transformer(str(base), max_seq_length=max_seq_length), Pooling(HIDDEN, "lasttoken"),
                          Normalize()]
    SentenceTransformer(modules=modules, device="cpu", prompts=QWEN3_EMBEDDING_PROMPTS).save(str(dest))
    return dest

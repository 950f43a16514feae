"""The architectures `registry import` takes, by config.json's `model_type` (encoders, and the decoders it imports as
embedding models with last-token pooling), and the decoders it names when it refuses them. A new architecture adds a
row here and a tiny checkpoint to the tests."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Architecture:
    model_type: str
    name: str
    """As people call it (the refusal lists these)."""
    positions_after_pad: bool = False
    """Position ids start after the pad id (RoBERTa's scheme): pad_token_id + 1 of the position table are unusable."""
    decoder: bool = False
    """A decoder-only language model (causal attention): imported as an embedding model pooled at its last token
    (sentence-transformers' lasttoken), its *ForCausalLM head left out, as sentence-transformers loads it."""


SUPPORTED = {a.model_type: a for a in (
    Architecture("bert", "BERT"),
    Architecture("distilbert", "DistilBERT"),
    Architecture("roberta", "RoBERTa", positions_after_pad=True),
    Architecture("xlm-roberta", "XLM-RoBERTa", positions_after_pad=True),
    Architecture("electra", "ELECTRA"),
    Architecture("mpnet", "MPNet", positions_after_pad=True),
    Architecture("deberta-v2", "DeBERTa-v2"),
    Architecture("modernbert", "ModernBERT"),
    Architecture("qwen2", "Qwen2", decoder=True),
    Architecture("qwen3", "Qwen3", decoder=True),
    Architecture("llama", "Llama", decoder=True),  # e5-mistral-style embedders: the same code, last-token pooling
    Architecture("mistral", "Mistral", decoder=True),
)}
SUPPORTED_NAMES = ", ".join(a.name for a in SUPPORTED.values())
ENCODER_NAMES = ", ".join(a.name for a in SUPPORTED.values() if not a.decoder)
DECODER_NAMES = ", ".join(a.name for a in SUPPORTED.values() if a.decoder)

# Class-name endings of language-model heads that generate text: a checkpoint with one is a decoder (or an
# encoder-decoder), whatever its model_type.
GENERATIVE_HEADS = ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration", "ForSeq2SeqLM")
# model_types that are decoder-only language models the import does not take (a supported decoder's row wins).
DECODER_TYPES = frozenset({
    "gpt2", "gpt_neo", "gpt_neox", "gptj", "mixtral", "phi", "phi3", "gemma",
    "gemma2", "gemma3", "falcon", "bloom", "opt", "mpt", "olmo", "olmo2", "codegen", "starcoder2", "stablelm",
})

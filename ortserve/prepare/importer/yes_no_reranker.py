"""A decoder reranker in Qwen3-Reranker's form: a causal LM asked whether a document meets a query, its score the
probability of "yes" against "no" at the last position, as the model card's reference code computes it.

    template = PairTemplate.qwen3(instruction=None)   the text around (query, document), and the token-level prefix
                                                      and suffix (the chat turn) the card puts around it
    reference_scores(model, tokenizer, template, queries, documents, max_length)   the card's code: P(yes)
    reference_logits(...)                             the same batch, logit(yes) - logit(no): the bundle's LOGITS

The card's code, which the import is held to:

    pairs = [format_instruction(instruction, query, doc) ...]   "<Instruct>: {i}\\n<Query>: {q}\\n<Document>: {d}"
    inputs = tokenizer(pairs, padding=False, truncation="longest_first", return_attention_mask=False,
                       max_length=max_length - len(prefix_tokens) - len(suffix_tokens))
    input_ids = prefix_tokens + ids + suffix_tokens; tokenizer.pad(..., padding=True)   (its tokenizer pads left)
    scores = model(**inputs).logits[:, -1, :]; log_softmax(stack([no, yes])) [:, 1].exp()

softmax([no, yes])[1] is sigmoid(yes - no), so the bundle is a one-label classifier of pairs (a reranker): the graph
answers yes - no at the last token the mask keeps, and SCORE applies the sigmoid. The server makes the same ids: the
text template is applied to each (query, document) before its tokenizer (bundle manifest `pair_template`), and the
bundle's tokenizer.json adds the prefix and suffix ids (its post-processor; truncation keeps them, as the card does).
torch is imported inside the calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

DEFAULT_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"
PREFIX = ("<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct "
          "provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n")
SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
ANSWERS = ("no", "yes")
"""The two answer tokens, in the order the card stacks them: the score is the second's probability."""


@dataclass(frozen=True)
class PairTemplate:
    before_query: str
    between: str
    after_document: str
    prefix: str
    """Put before the formatted text as tokens (encoded alone, no special tokens added), as the card does."""
    suffix: str

    @classmethod
    def qwen3(cls, instruction: str | None = None) -> PairTemplate:
        return cls(before_query=f"<Instruct>: {instruction or DEFAULT_INSTRUCTION}\n<Query>: ",
                   between="\n<Document>: ", after_document="", prefix=PREFIX, suffix=SUFFIX)

    def format(self, query: str, document: str) -> str:
        return self.before_query + query + self.between + document + self.after_document

    def text_parts(self) -> list[str]:
        """What the bundle's manifest keeps (`imported.pair_template`): the text before, between and after."""
        return [self.before_query, self.between, self.after_document]


def wrap_ids(tokenizer: Any, template: PairTemplate) -> tuple[list[int], list[int]]:
    """The prefix's and the suffix's token ids, as the card encodes them."""
    return (list(tokenizer.encode(template.prefix, add_special_tokens=False)),
            list(tokenizer.encode(template.suffix, add_special_tokens=False)))


def answer_ids(tokenizer: Any) -> tuple[int, int]:
    """The ids of "no" and "yes" (convert_tokens_to_ids, as the card); ValueError where either is not one token."""
    ids = tuple(tokenizer.convert_tokens_to_ids(token) for token in ANSWERS)
    unk = getattr(tokenizer, "unk_token_id", None)
    if any(not isinstance(i, int) or i == unk for i in ids):
        raise ValueError(f"the tokenizer has no single token for {' or '.join(repr(a) for a in ANSWERS)}")
    return ids[0], ids[1]


def reference_ids(tokenizer: Any, template: PairTemplate, queries: Sequence[str], documents: Sequence[str],
                  max_length: int) -> list[list[int]]:
    prefix, suffix = wrap_ids(tokenizer, template)
    texts = [template.format(q, d) for q, d in zip(queries, documents, strict=True)]
    encoded = tokenizer(texts, padding=False, truncation="longest_first", return_attention_mask=False,
                        max_length=max_length - len(prefix) - len(suffix))
    return [prefix + list(ids) + suffix for ids in encoded["input_ids"]]


def reference_logits(model: Any, tokenizer: Any, template: PairTemplate, queries: Sequence[str],
                     documents: Sequence[str], max_length: int, *, batch_size: int = 8) -> np.ndarray:
    """float32 [pairs, 2]: the card's stacked (no, yes) logits at the last position, in its padded batches."""
    import torch

    no, yes = answer_ids(tokenizer)
    rows = reference_ids(tokenizer, template, queries, documents, max_length)
    out = []
    with torch.inference_mode():
        for start in range(0, len(rows), batch_size):
            inputs = tokenizer.pad({"input_ids": rows[start:start + batch_size]}, padding=True, return_tensors="pt",
                                   max_length=max_length)
            last = model(**inputs).logits[:, -1, :].float()
            out.append(torch.stack([last[:, no], last[:, yes]], dim=1).numpy())
    return np.concatenate(out).astype(np.float32)


def reference_scores(model: Any, tokenizer: Any, template: PairTemplate, queries: Sequence[str],
                     documents: Sequence[str], max_length: int) -> np.ndarray:
    """float32 [pairs]: P(yes), the card's compute_logits."""
    import torch

    stacked = torch.from_numpy(reference_logits(model, tokenizer, template, queries, documents, max_length))
    return torch.nn.functional.log_softmax(stacked, dim=1)[:, 1].exp().numpy().astype(np.float32)

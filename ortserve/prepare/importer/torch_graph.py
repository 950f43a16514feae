"""The PyTorch modules an import exports: token ids in, a classifier's logits or a sentence vector out.

    Logits(model, takes_token_types)                    model(...).logits as float32 [batch, labels] (a token
                                                        classifier's [batch, sequence, labels])
    SentenceVector(encoder, modes, normalize, ...)      last_hidden_state -> pooling -> optional L2 norm [batch, dim]
    SparseVector(masked_lm, strategy, activation, ...)  SPLADE: MLM logits -> relu -> log1p (twice for log1p_relu),
                                                        padding zeroed, max or sum over tokens [batch, vocab]
    YesNoLogit(causal_lm, no_id, yes_id)                a decoder reranker's logit(yes) - logit(no) at the last
                                                        token the mask keeps [batch, 1] (yes_no_reranker.py)

Their forward takes exactly the bundle's inputs (input_ids, attention_mask, and token_type_ids where the model uses
them). The pooling is sentence-transformers' (Pooling._forward_padded, right-padded batches): cls is the first
token, max skips padding, mean divides by the unmasked count (at least 1e-9), mean_sqrt_len_tokens by its root,
lasttoken takes the last position the mask keeps (Pooling's own rule, so left and right padding pool the same token;
the mask in int32, as sentence-transformers traces it); several modes are concatenated in order; Normalize is
F.normalize (x / max(||x||, 1e-12)).

This module imports torch at import time: only torch_side.py imports it, inside the import path.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F


def model_inputs(input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None,
                 takes_token_types: bool) -> dict[str, torch.Tensor | None]:
    """The checkpoint's keyword inputs: token_type_ids only where the model takes them."""
    inputs: dict[str, torch.Tensor | None] = {"input_ids": input_ids, "attention_mask": attention_mask}
    if takes_token_types:
        inputs["token_type_ids"] = token_type_ids
    return inputs


class Logits(torch.nn.Module):
    def __init__(self, model: Any, *, takes_token_types: bool) -> None:
        super().__init__()
        self.model = model
        self.takes_token_types = takes_token_types

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        inputs = model_inputs(input_ids, attention_mask, token_type_ids, self.takes_token_types)
        return self.model(**inputs).logits.float()


class SentenceVector(torch.nn.Module):
    def __init__(self, encoder: Any, *, modes: tuple[str, ...], normalize: bool, takes_token_types: bool) -> None:
        super().__init__()
        self.encoder = encoder
        self.modes = modes
        self.normalize = normalize
        self.takes_token_types = takes_token_types

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        inputs = model_inputs(input_ids, attention_mask, token_type_ids, self.takes_token_types)
        hidden = self.encoder(**inputs).last_hidden_state.float()
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        parts = []
        summed = count = None
        for mode in self.modes:
            if mode == "cls":
                parts.append(hidden[:, 0])
            elif mode == "lasttoken":
                parts.append(last_token(hidden, attention_mask))
            elif mode == "max":
                parts.append(hidden.masked_fill(mask == 0, float("-inf")).max(dim=1).values)
            else:  # mean, mean_sqrt_len_tokens
                if summed is None:
                    summed = (hidden * mask).sum(dim=1)
                    count = torch.clamp(mask.sum(dim=1), min=1e-9)
                parts.append(summed / (count if mode == "mean" else torch.sqrt(count)))
        vector = parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)
        return F.normalize(vector, p=2.0, dim=1) if self.normalize else vector


def last_token(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """[batch, hidden]: each row's vector at the last position its mask keeps (the first for an all-zero mask, as
    sentence-transformers), whichever side the row is padded on."""
    values, from_end = attention_mask.to(torch.int32).flip(1).max(1)
    last = hidden.shape[1] - 1 - from_end  # the sequence axis stays symbolic in the trace
    index = torch.where(values == 0, torch.zeros_like(last), last).view(-1, 1, 1).expand(-1, 1, hidden.shape[-1])
    return torch.gather(hidden, 1, index).squeeze(1)


class SparseVector(torch.nn.Module):
    """sentence-transformers' SpladePooling over a masked LM's logits (its padded-batch path): logits times the
    attention mask, relu, log1p (a second log1p for activation "log1p_relu"), then the max or the sum over tokens:
    [batch, vocab], every value >= 0, a padded position 0 (it never wins a max of values >= 0 nor adds to a sum).
    The max takes the masked logits' max first and activates [batch, vocab] only: relu and log1p are monotone, so
    the same float wins and comes out, and the graph holds one [batch, seq, vocab] tensor (the logits), not four."""

    def __init__(self, masked_lm: Any, *, strategy: str, activation: str, takes_token_types: bool) -> None:
        super().__init__()
        if strategy not in ("max", "sum") or activation not in ("relu", "log1p_relu"):
            raise ValueError(f"SPLADE pooling is max or sum of relu or log1p_relu, got {strategy}, {activation}")
        self.masked_lm = masked_lm
        self.strategy = strategy
        self.activation = activation
        self.takes_token_types = takes_token_types

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        inputs = model_inputs(input_ids, attention_mask, token_type_ids, self.takes_token_types)
        logits = self.masked_lm(**inputs).logits.float()
        masked = logits * attention_mask.unsqueeze(-1).to(logits.dtype)
        pooled = masked.max(dim=1).values if self.strategy == "max" else masked
        weights = torch.log1p(torch.relu(pooled))
        if self.activation == "log1p_relu":
            weights = torch.log1p(weights)
        return weights if self.strategy == "max" else weights.sum(dim=1)


class YesNoLogit(torch.nn.Module):
    """A causal LM's logit(yes) - logit(no) at each row's last token: the LM head's two rows only, on that one state
    (the card computes every logit at every position and keeps two of the last)."""

    def __init__(self, causal_lm: Any, *, no_id: int, yes_id: int) -> None:
        super().__init__()
        self.body = causal_lm.get_decoder() if hasattr(causal_lm, "get_decoder") else causal_lm.model
        self.head = causal_lm.get_output_embeddings()
        self.no_id, self.yes_id = no_id, yes_id

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.body(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        logits = self.head(last_token(hidden, attention_mask))[:, [self.no_id, self.yes_id]].float()
        return logits[:, 1:] - logits[:, :1]

"""Shadow copies to a version on HF tokenizers: the data plane hands each such copy over (`engine_ext.ShadowTokenize`
on the event queue) and it is tokenized here, on one thread of its own, never the tokenizer pool the live calls use,
then submitted as ids to the shadow version's lowest class. A copy that finds `MAX_PENDING` copies waiting is dropped
(counted as the shadow's `dropped`), as the batcher drops one past its shadow queue: a copy never holds work the live
calls need.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import structlog

from ortserve.service.tokenization import TokenEncoding

server_log = structlog.get_logger("ortserve.server")

TokenizeRows = Callable[[Sequence[str], Sequence[str] | None],
                        tuple[list[np.ndarray], list[int], list[TokenEncoding] | None]]
"""A version's `ModelInstance.tokenize_rows`: (ids per row, where each pair's second text begins, spans or None)."""

MAX_PENDING = 16
"""Copies waiting to be tokenized past which a new one is dropped."""


class ShadowTokenizer:
    """Tokenizes the shadow copies of versions on HF tokenizers. `add`/`remove` from the loop as versions load and
    close; `hand_over` from the events thread; the work on its own thread."""

    def __init__(self) -> None:
        self._versions: dict[tuple[str, str], TokenizeRows] = {}
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="ortserve-shadow-tokenize")
        self._lock = threading.Lock()
        self._pending = 0  # guarded by _lock

    def add(self, model: str, version: str, tokenize: TokenizeRows) -> None:
        self._versions[(model, version)] = tokenize

    def remove(self, model: str, version: str) -> None:
        """After the version drained: no copy of it is waiting (each holds a lease)."""
        self._versions.pop((model, version), None)

    def hand_over(self, copy: Any) -> None:
        tokenize = self._versions.get((copy.model, copy.candidate))
        if tokenize is None:
            copy.fail(f"version '{copy.candidate}' of model '{copy.model}' has no tokenizer here", dropped=True)
            return
        with self._lock:
            full = self._pending >= MAX_PENDING
            if not full:
                self._pending += 1
        if full:
            copy.fail(f"{MAX_PENDING} shadow copies are waiting to be tokenized", dropped=True)
            return
        try:
            self._pool.submit(self._tokenize, copy, tokenize)
        except RuntimeError:  # shut down: the server is stopping
            self._done()
            copy.fail("the server is stopping", dropped=True)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=False)

    def _tokenize(self, copy: Any, tokenize: TokenizeRows) -> None:
        try:
            ids, seconds, encodings = tokenize(list(copy.texts), list(copy.pairs) or None)
        except Exception as e:  # the candidate's tokenizer refused them: the copy failed, the live call did not
            server_log.warning("shadow_tokenize_failed", model=copy.model, version=copy.candidate, error=str(e))
            copy.fail(f"tokenizing the shadow copy: {e}")
            return
        finally:
            self._done()
        tokens = None if encodings is None else [(e.spans, e.chars_read) for e in encodings]
        copy.submit_ids(ids, seconds, tokens)

    def _done(self) -> None:
        with self._lock:
            self._pending -= 1

"""Shadow copies to a version on HF tokenizers, tokenized in Python (service/shadow_tokenize.py), over plain copies:
each one is submitted as its version's rows or ended, never left holding its lease; past MAX_PENDING waiting a copy
is dropped at once; a tokenizer that refuses the texts fails the copy, not the process. The served path, both front
ends, is tests/reload/test_shadow.py's."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ortserve.service.shadow_tokenize import MAX_PENDING, ShadowTokenizer


@dataclass
class Copy:
    """engine_ext.ShadowTokenize's side that the tokenizer reads and calls."""

    texts: list[str]
    pairs: list[str] = field(default_factory=list)
    model: str = "m"
    candidate: str = "v2"
    submitted: list[tuple[Any, ...]] = field(default_factory=list)
    failed: list[tuple[str, bool]] = field(default_factory=list)
    ended: threading.Event = field(default_factory=threading.Event)

    def submit_ids(self, ids: Any, seconds: Any, tokens: Any) -> bool:
        self.submitted.append((ids, seconds, tokens))
        self.ended.set()
        return True

    def fail(self, message: str, dropped: bool = False) -> bool:
        self.failed.append((message, dropped))
        self.ended.set()
        return True


def rows(texts: Sequence[str], pairs: Sequence[str] | None) -> tuple[list[np.ndarray], list[int], None]:
    return [np.arange(len(t) + 2, dtype=np.int64) for t in texts], [], None


def test_a_copy_is_tokenized_by_its_versions_tokenizer_and_submitted() -> None:
    tokenizer = ShadowTokenizer()
    tokenizer.add("m", "v2", rows)
    copy = Copy(["ab", "abcd"])
    tokenizer.hand_over(copy)
    assert copy.ended.wait(5)
    tokenizer.close()
    ((ids, seconds, tokens),) = copy.submitted
    assert [len(r) for r in ids] == [4, 6] and seconds == [] and tokens is None
    assert copy.failed == []


def test_a_version_without_a_tokenizer_here_drops_its_copy() -> None:
    tokenizer = ShadowTokenizer()
    tokenizer.add("m", "v2", rows)
    tokenizer.remove("m", "v2")
    copy = Copy(["ab"])
    tokenizer.hand_over(copy)
    tokenizer.close()
    assert copy.submitted == [] and copy.failed == [("version 'v2' of model 'm' has no tokenizer here", True)]


def test_past_max_pending_a_copy_is_dropped_at_once_and_the_waiting_ones_go_on() -> None:
    release = threading.Event()

    def slow(texts: Sequence[str], pairs: Sequence[str] | None) -> tuple[list[np.ndarray], list[int], None]:
        assert release.wait(10)
        return rows(texts, pairs)

    tokenizer = ShadowTokenizer()
    tokenizer.add("m", "v2", slow)
    waiting = [Copy([f"text {i}"]) for i in range(MAX_PENDING)]
    for copy in waiting:
        tokenizer.hand_over(copy)
    extra = Copy(["one too many"])
    tokenizer.hand_over(extra)
    assert extra.failed == [(f"{MAX_PENDING} shadow copies are waiting to be tokenized", True)]
    release.set()
    assert all(c.ended.wait(10) for c in waiting)
    later = Copy(["room again"])  # the waiting ones are done: there is room
    tokenizer.hand_over(later)
    tokenizer.close()
    assert all(len(c.submitted) == 1 and c.failed == [] for c in waiting)
    assert len(later.submitted) == 1 and later.failed == []


def test_a_tokenizer_that_refuses_the_texts_fails_the_copy_not_the_thread() -> None:
    def refuses(texts: Sequence[str], pairs: Sequence[str] | None) -> Any:
        raise ValueError("no such token")

    tokenizer = ShadowTokenizer()
    tokenizer.add("m", "bad", refuses)
    tokenizer.add("m", "v2", rows)
    bad, good = Copy(["x"], candidate="bad"), Copy(["x"])
    tokenizer.hand_over(bad)
    tokenizer.hand_over(good)
    tokenizer.close()
    assert bad.failed == [("tokenizing the shadow copy: no such token", False)] and bad.submitted == []
    assert len(good.submitted) == 1  # the thread went on

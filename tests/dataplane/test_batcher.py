"""The batcher on the tiny BERT bundle, real engine and real threads: every reply equals unbatched inference of its
own texts, queued calls share batches, and admission, deadlines, cancellation, close and drain behave as
docs/architecture.md states.

Tests that need "the engine is busy" pause the lanes (`Lanes.pause`: no thread starts a new task) with one
blocker call taken by a thread, so what queues behind it never depends on how long a run takes.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.instances import options

from ortserve.engine_ext import (
    ADMISSION_DEADLINE_SHARE,
    BatcherSettings,
    BatchEvent,
    BatchPolicy,
    Engine,
    EventSink,
    Lanes,
    ServedVersion,
    TextModel,
    Ticket,
    WordPiece,
    call_tokens,
    load_wordpiece,
)
from ortserve.service.instance import ModelInstance

WORDS = ["good", "bad", "movie", "the", "plot", "was", "really", "boring", "great", "acting", "fun", "slow",
         "refund", "xyzzy", "unbelievable", "ok", "!", "?"]
SHUTTING_DOWN = "model version is shutting down; retry"
EXPIRED_QUEUED = "deadline exceeded while queued; the request never reached the engine"
EXPIRED_BEFORE = "deadline exceeded before the request reached the engine"
WAIT = 60.0  # generous bound on a ticket wait: only a hang reaches it

Reply = tuple[str, str, "np.ndarray | None", dict[str, float]]


@dataclass
class Model:
    classifier: ModelInstance
    tokenizer: WordPiece
    bundle: Path
    cache: dict[str, np.ndarray]

    @property
    def token_types(self) -> bool:
        return "token_type_ids" in {t.name for t in self.classifier.engine.inputs}

    def reference(self, texts: list[str]) -> np.ndarray:
        """ModelInstance's own unbatched inference: each text alone."""
        for text in texts:
            if text not in self.cache:
                self.cache[text] = self.classifier.run(self.classifier.tokenize([text]))[0]
        return np.stack([self.cache[t] for t in texts])


@pytest.fixture(scope="module")
def model(tiny_bundle: Path) -> Iterator[Model]:
    classifier = ModelInstance.load(tiny_bundle, options(intra_op_threads=2, narrow_engine=True),
                                     tokenizer="native")
    assert classifier.narrow is not None
    tokenizer = load_wordpiece(tiny_bundle / "tokenizer.json", classifier.manifest.max_seq_len)
    yield Model(classifier, tokenizer, tiny_bundle, {})
    classifier.close()


POLICY: dict[str, Any] = {"max_batch_size": 32, "max_queue_delay_s": 0.010, "max_padding_ratio": 1.3,
                          "batch_overhead_tokens": 0, "max_batch_tokens": 1024, "sort_window": 24}


def make_version(model: Model, lanes: Lanes, events: EventSink, *, narrow: bool = True,
                 wide: Engine | None = None, labels: int | None = None, **overrides: Any) -> ServedVersion:
    options: dict[str, Any] = {**POLICY, "max_queue_items": 256, "default_timeout_s": 0.0, "engine_concurrency": 2}
    options.update(overrides)
    text_model = TextModel(
        wide=wide if wide is not None else model.classifier.engine,
        narrow=model.classifier.narrow if narrow else None,
        tokenizer=model.tokenizer,
        output="logits",
        columns=labels if labels is not None else len(model.classifier.labels),
        pad_id=model.classifier.tokenizer.pad_id,
        token_types=model.token_types,
    )
    return ServedVersion("classifier", "1", text_model=text_model, settings=BatcherSettings(**options),
                         lanes=lanes, events=events)


@contextmanager
def running_lanes(lanes: int = 2, wide_threads: int = 2) -> Iterator[Lanes]:
    pool = Lanes(lanes, wide_threads)
    try:
        yield pool
    finally:
        pool.stop()  # resumes paused threads first, so no test leaves a call hanging


def batches(events: EventSink) -> list[BatchEvent]:
    out: list[BatchEvent] = []
    while chunk := events.drain(512, 0.0):
        out.extend(chunk)
    assert all(isinstance(e, BatchEvent) for e in out)
    return out


def check_ok(model: Model, texts: list[str], reply: Reply) -> None:
    code, message, logits, timings = reply
    assert (code, message) == ("OK", ""), message
    assert logits is not None and logits.dtype == np.float32
    assert logits.shape == (len(texts), len(model.classifier.labels))
    np.testing.assert_allclose(logits, model.reference(texts), rtol=1e-5, atol=1e-5)
    assert timings["batch_size"] >= 1
    assert timings["engine_s"] > 0


def hold_engine(version: ServedVersion, lanes: Lanes, timeout_s: float | None = None) -> Ticket:
    """Pause the lanes and take the engine with one lone call: what is submitted next queues behind it. `timeout_s`:
    the blocker's deadline (a version with a small default budget would refuse it without one)."""
    lanes.pause()
    blocker = version.submit(["the blocker call"], timeout_s=timeout_s)
    assert version.queue_depth == 0 and not blocker.done
    return blocker


def test_lone_call_is_not_held_back(model: Model) -> None:
    with running_lanes() as lanes:
        events = EventSink()
        version = make_version(model, lanes, events)
        reply = version.infer(["a really good movie"])
        check_ok(model, ["a really good movie"], reply)
        timings = reply[3]
        assert timings["batch_size"] == 1
        assert timings["queue_s"] == 0.0
        assert timings["tokenize_s"] > 0
        (batch,) = batches(events)
        tokens = len(model.classifier.tokenize(["a really good movie"])[0])
        assert (batch.model, batch.version, batch.texts, batch.padded_tokens, batch.real_tokens) == (
            "classifier", "1", 1, tokens, tokens)
        assert batch.lane == "wide"
        assert (version.model, version.version, version.queue_depth) == ("classifier", "1", 0)


calls_strategy = st.lists(st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=40).map(" ".join),
                                   min_size=1, max_size=6), min_size=1, max_size=12)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(calls=calls_strategy, held=st.booleans(), narrow=st.booleans(), concurrency=st.integers(1, 3),
       lanes_n=st.integers(0, 3), max_batch_size=st.integers(1, 8), sort_window=st.sampled_from([0, 2, 24]),
       delay=st.sampled_from([0.0, 60.0]), run_here=st.booleans())
def test_every_reply_equals_unbatched_inference(model: Model, calls: list[list[str]], held: bool, narrow: bool,
                                                 concurrency: int, lanes_n: int, max_batch_size: int,
                                                 sort_window: int, delay: float, run_here: bool) -> None:
    with running_lanes(lanes_n, 2) as lanes:
        events = EventSink()
        version = make_version(model, lanes, events, narrow=narrow, engine_concurrency=concurrency,
                               max_batch_size=max_batch_size, sort_window=sort_window, max_queue_delay_s=delay)
        # Held: every call queues at once behind a blocker, so batches mix and split calls deterministically.
        blocker = hold_engine(version, lanes) if held else None
        with ThreadPoolExecutor(max_workers=len(calls)) as pool:
            # run_here (the gRPC front end's way): submitting threads race for the one caller-run slot.
            tickets = list(pool.map(lambda texts: version.submit(texts, run_here=run_here), calls))
            if blocker is not None:
                lanes.resume()
            replies = [t.wait(WAIT) for t in tickets]
        for texts, reply in zip(calls, replies, strict=True):
            check_ok(model, texts, reply)
            assert reply[3]["batch_size"] <= max(max_batch_size, len(texts))
        if blocker is not None:
            check_ok(model, ["the blocker call"], blocker.wait(WAIT))
        runs = batches(events)
        assert sum(b.texts for b in runs) == sum(map(len, calls)) + (blocker is not None)
        assert version.queue_depth == 0


def test_concurrent_submissions_share_a_batch(model: Model) -> None:
    with running_lanes() as lanes:
        events = EventSink()
        version = make_version(model, lanes, events)
        blocker = hold_engine(version, lanes)
        first, second = version.submit(["good movie"]), version.submit(["bad movie"])
        assert version.queue_depth == 2
        lanes.resume()
        for ticket, texts in ((first, ["good movie"]), (second, ["bad movie"])):
            reply = ticket.wait(WAIT)
            check_ok(model, texts, reply)
            assert reply[3]["batch_size"] == 2
            assert reply[3]["queue_s"] > 0
        check_ok(model, ["the blocker call"], blocker.wait(WAIT))
        runs = batches(events)
        assert [(b.texts, b.lane) for b in runs] == [(1, "wide"), (2, "narrow")]
        shared = runs[1]
        assert shared.padded_tokens >= shared.real_tokens > 0


def test_run_here_answers_a_lone_call_before_submit_returns(model: Model) -> None:
    """What the gRPC front end asks for: an idle engine runs a lone call on the submitting thread (no wake of a
    wide thread); paused lanes or a busy engine send it the usual way, to wait its turn."""
    with running_lanes() as lanes:
        events = EventSink()
        version = make_version(model, lanes, events)
        ticket = version.submit(["a really good movie"], run_here=True)
        assert ticket.done  # ran and was answered on this thread
        check_ok(model, ["a really good movie"], ticket.wait(WAIT))
        assert [(b.texts, b.lane) for b in batches(events)] == [(1, "wide")]
        assert version.submit(["good movie"]).wait(WAIT)[0] == "OK"  # without run_here: a wide thread's run
        batches(events)

        lanes.pause()  # a paused engine holds a caller's run as it holds a posted one
        held = version.submit(["the held call"], run_here=True)
        assert not held.done and version.queue_depth == 0  # the engine's: posted, not queued
        queued = version.submit(["bad movie"], run_here=True)
        assert not queued.done and version.queue_depth == 1  # the engine is busy: queued behind it
        lanes.resume()
        check_ok(model, ["the held call"], held.wait(WAIT))
        check_ok(model, ["bad movie"], queued.wait(WAIT))
        assert [(b.texts, b.lane) for b in batches(events)] == [(1, "wide"), (1, "narrow")]
        assert version.queue_depth == 0


@pytest.mark.parametrize("narrow", [True, False])
def test_one_session_at_concurrency_one(model: Model, narrow: bool) -> None:
    with running_lanes() as lanes:
        events = EventSink()
        version = make_version(model, lanes, events, narrow=narrow, engine_concurrency=1)
        blocker = hold_engine(version, lanes)
        tickets = [version.submit(["good movie"]), version.submit(["bad movie", "fun movie"])]  # equal lengths
        assert version.queue_depth == 3
        lanes.resume()
        check_ok(model, ["good movie"], tickets[0].wait(WAIT))
        check_ok(model, ["bad movie", "fun movie"], tickets[1].wait(WAIT))
        blocker.wait(WAIT)
        # One session does everything when only one run goes at a time.
        assert [(b.texts, b.lane) for b in batches(events)] == [(1, "wide"), (3, "wide")]


def test_queue_full_refuses_at_once(model: Model) -> None:
    with running_lanes() as lanes:
        version = make_version(model, lanes, EventSink(), max_queue_items=3)
        blocker = hold_engine(version, lanes)
        accepted = [version.submit(["good", "bad"]), version.submit(["ok"])]
        assert version.queue_depth == 3
        refused = version.submit(["one more"])
        assert refused.done  # answered on the submitting thread
        code, message, logits, timings = refused.wait(0)
        assert code == "RESOURCE_EXHAUSTED" and logits is None
        assert message == "server busy: 3 texts queued for this model version (limit 3); retry with backoff"
        assert timings["retry_after_s"] >= 0
        assert version.queue_depth == 3
        lanes.resume()
        check_ok(model, ["good", "bad"], accepted[0].wait(WAIT))
        check_ok(model, ["ok"], accepted[1].wait(WAIT))
        blocker.wait(WAIT)
        # An empty queue always admits, whatever the call's size.
        check_ok(model, ["a"] * 5, version.infer(["a"] * 5))


def test_refusal_tells_what_submit_would_answer(model: Model) -> None:
    with running_lanes() as lanes:
        version = make_version(model, lanes, EventSink(), max_queue_items=2)
        assert version.refusal(5, None) is None  # an empty queue admits any size
        blocker = hold_engine(version, lanes)
        queued = version.submit(["a", "b"])
        code, message, retry_after_s = version.refusal(1, 10.0)
        assert (code, message) == ("RESOURCE_EXHAUSTED", "server busy: 2 texts queued for this model version "
                                                         "(limit 2); retry with backoff")
        assert retry_after_s >= 0
        assert version.refusal(0, None) is None  # nothing to run: an empty answer, never a refusal
        assert version.queue_depth == 2  # asking reserved nothing
        lanes.resume()
        check_ok(model, ["a", "b"], queued.wait(WAIT))
        blocker.wait(WAIT)
        version.close()
        assert version.refusal(1, None)[0] == "UNAVAILABLE"


def test_a_call_without_a_deadline_is_admitted_by_the_default_budget(model: Model) -> None:
    """default_timeout_s is the budget of a call that sends no deadline: with more queued work than three quarters
    of it (at the batcher's measured rate), such a call is refused at once, saying the budget was the server's."""
    budget_s = 0.2  # the backlog is seconds of work at the rate a tiny run gives; 20 ms could lapse before admission
    with running_lanes() as lanes:
        version = make_version(model, lanes, EventSink(), default_timeout_s=budget_s, max_queue_items=512)
        check_ok(model, ["warm"], version.infer(["warm"], timeout_s=60.0))  # gives the batcher a measured rate
        blocker = hold_engine(version, lanes, timeout_s=60.0)
        long_text = " ".join(["the movie was long and the popcorn was cold"] * 40)  # past max_seq_len
        backlog = [version.submit([long_text] * 100, timeout_s=60.0) for _ in range(2)]
        ahead_s = 2 * 100 * model.classifier.manifest.max_seq_len / version.tokens_per_s
        assert ahead_s > ADMISSION_DEADLINE_SHARE * budget_s, f"{ahead_s} s ahead: the arrangement needs more work"
        code, message, _, timings = version.submit(["refused"]).wait(0)
        assert code == "RESOURCE_EXHAUSTED"
        assert re.fullmatch(r"server busy: \d+ texts queued for this model version, about \d+ ms of work including "
                            r"this call's, which has \d+ ms left of the server's default time budget \(it sent no "
                            r"deadline\); retry with backoff, or send a longer deadline", message), message
        assert timings["retry_after_s"] > 0
        lanes.resume()
        for ticket in backlog:
            assert ticket.wait(WAIT)[0] == "OK"
        blocker.wait(WAIT)


def test_the_default_budget_expires_a_queued_call(model: Model) -> None:
    """An admitted call without a deadline that is still queued when the server's default budget runs out is
    answered DEADLINE_EXCEEDED, naming that budget, and never reaches the engine."""
    with running_lanes() as lanes:
        version = make_version(model, lanes, EventSink(), default_timeout_s=0.5)
        check_ok(model, ["warm"], version.infer(["warm"], timeout_s=60.0))
        blocker = hold_engine(version, lanes, timeout_s=60.0)
        queued = version.submit(["queued"])  # admitted: a few tokens ahead, far within the budget
        assert not queued.done, queued.wait(0)
        time.sleep(0.6)  # past its budget while the lanes are paused
        lanes.resume()
        code, message, _, _ = queued.wait(WAIT)
        assert (code, message) == ("DEADLINE_EXCEEDED", "the server's default time budget for a call without a "
                                   "deadline (default_timeout_ms) ran out while queued; the request never reached the "
                                   "engine: send a longer deadline")
        blocker.wait(WAIT)


def test_admission_counts_a_call_s_tokens_not_its_texts(model: Model) -> None:
    """Issue 29's finding: a call of 128 texts of 4,000 words was admitted as if it were 128 short texts, at the rate
    short texts ran at, and ran past its deadline. The batcher counts the padded tokens its runs will do (each text
    truncated to max_seq_len, in SplitRows' runs) against its own rate estimate: with a deadline that 128 short texts
    would fit in and these cannot, the call is refused at once; with twice the time it needs, it is admitted."""
    with running_lanes() as lanes:
        version = make_version(model, lanes, EventSink())
        short = "good movie"
        for _ in range(20):  # short texts set the rate, as the fuzzing callers' did
            check_ok(model, [short], version.infer([short]))
        tokens_per_s = version.tokens_per_s
        assert tokens_per_s > 0
        blocker = hold_engine(version, lanes)  # no run ends while the lanes are paused: the estimate stands still
        # Each past max_seq_len (200 words, ~300 tokens), so the call's work is its truncated tokens. Issue 29's
        # 4,000 words a text took the ThreadSanitizer build's tokenizer past the deadline before admission.
        texts = [" ".join(["unbelievable acting"] * 100)] * 128
        lengths = [len(ids) for ids in model.tokenizer.encode(texts)]
        assert set(lengths) == {model.classifier.manifest.max_seq_len}  # truncated
        own = call_tokens(lengths, BatchPolicy(**POLICY))
        ahead = call_tokens([len(model.tokenizer.encode(["the blocker call"])[0])], BatchPolicy(**POLICY))
        need_s = (ahead + own) / tokens_per_s / ADMISSION_DEADLINE_SHARE
        as_texts_s = (ahead + 128 * len(model.tokenizer.encode([short])[0])) / tokens_per_s / ADMISSION_DEADLINE_SHARE
        assert as_texts_s < need_s / 2  # counted as texts, the refused call below would have fit

        refused = version.submit(texts, timeout_s=need_s / 2)
        assert refused.done  # answered on the submitting thread
        code, message, logits, timings = refused.wait(0)
        assert (code, logits) == ("RESOURCE_EXHAUSTED", None), message
        assert re.fullmatch(r"server busy: 0 texts queued for this model version, about \d+ ms of work including "
                            r"this call's, which has \d+ ms left; retry with backoff or a longer deadline", message)
        assert timings["retry_after_s"] == pytest.approx(ahead / tokens_per_s)
        assert version.queue_depth == 0

        admitted = version.submit(texts, timeout_s=2 * need_s)
        assert not admitted.done and version.queue_depth == 128  # queued behind the blocker
        admitted.cancel()  # whether it then finishes in time depends on this CPU, not on admission
        lanes.resume()
        check_ok(model, ["the blocker call"], blocker.wait(WAIT))


def test_expired_deadline_never_reaches_the_engine(model: Model) -> None:
    with running_lanes() as lanes:
        events = EventSink()
        version = make_version(model, lanes, events)
        code, message, logits, _ = version.infer(["too late"], timeout_s=0.0)
        assert (code, message, logits) == ("DEADLINE_EXCEEDED", EXPIRED_BEFORE, None)
        assert batches(events) == []
        assert version.queue_depth == 0

        blocker = hold_engine(version, lanes)
        late = version.submit(["expires while queued", "and its sibling"], timeout_s=0.2)
        time.sleep(0.4)  # past the deadline (not a timing assertion: only makes sure it has passed)
        lanes.resume()
        code, message, logits, _ = late.wait(WAIT)
        assert (code, message, logits) == ("DEADLINE_EXCEEDED", EXPIRED_QUEUED, None)
        blocker.wait(WAIT)
        assert [b.texts for b in batches(events)] == [1]  # the blocker's run only
        assert version.queue_depth == 0


def test_cancel_frees_the_queue_and_never_runs(model: Model) -> None:
    with running_lanes() as lanes:
        events = EventSink()
        version = make_version(model, lanes, events)
        blocker = hold_engine(version, lanes)
        cancelled = version.submit(["never", "runs", "at all"])
        kept = version.submit(["kept"])
        assert version.queue_depth == 4
        cancelled.cancel()
        assert version.queue_depth == 1
        assert cancelled.wait(0)[:3] == ("CANCELLED", "call cancelled by the client", None)
        lanes.resume()
        check_ok(model, ["kept"], kept.wait(WAIT))
        check_ok(model, ["the blocker call"], blocker.wait(WAIT))
        blocker.cancel()  # after the answer: nothing changes
        assert blocker.wait(0)[0] == "OK"
        assert [b.texts for b in batches(events)] == [1, 1]
        assert version.queue_depth == 0


def test_close_answers_queued_calls_and_waits_for_running(model: Model) -> None:
    with running_lanes() as lanes:
        version = make_version(model, lanes, EventSink())
        blocker = hold_engine(version, lanes)
        queued = version.submit(["queued when closing"])
        closer = threading.Thread(target=version.close)
        closer.start()
        assert queued.wait(WAIT)[:3] == ("UNAVAILABLE", SHUTTING_DOWN, None)
        closer.join(0.2)
        assert closer.is_alive()  # still waiting for the blocker's run, which the paused lanes hold
        lanes.resume()
        closer.join(WAIT)
        assert not closer.is_alive()
        check_ok(model, ["the blocker call"], blocker.wait(0))  # answered before close() returned
        assert version.infer(["after close"])[:3] == ("UNAVAILABLE", SHUTTING_DOWN, None)
        version.close()  # idempotent


def test_drain_waits_for_leases(model: Model) -> None:
    with running_lanes() as lanes:
        version = make_version(model, lanes, EventSink())
        assert version.acquire() and version.acquire()
        assert version.in_flight == 2
        version.release()
        assert version.drain(0.05) is False  # one lease still held
        assert version.acquire() is False  # draining: no new leases
        result: list[bool] = []
        drainer = threading.Thread(target=lambda: result.append(version.drain(WAIT)))
        drainer.start()
        version.release()
        drainer.join(WAIT)
        assert result == [True] and version.in_flight == 0


def test_engine_failures_answer_internal(model: Model) -> None:
    with running_lanes() as lanes:
        closed = Engine(str(model.bundle / "model.onnx"))
        closed.close()
        version = make_version(model, lanes, EventSink(), wide=closed, narrow=False)
        code, message, logits, _ = version.infer(["x"])
        assert code == "INTERNAL" and logits is None
        assert message.startswith("inference failed: ") and "clos" in message

        labels = len(model.classifier.labels) + 1
        wrong = make_version(model, lanes, EventSink(), labels=labels)
        code, message, _, _ = wrong.infer(["x", "y"])
        assert code == "INTERNAL"
        assert message == (f"inference failed: model returned 'logits' of shape [2, {labels - 1}], expected "
                           f"[2, {labels}] (one row per text)")


def test_bad_policy_is_a_value_error(model: Model) -> None:
    with running_lanes() as lanes:
        with pytest.raises(ValueError, match="max_batch_size must be >= 1"):
            make_version(model, lanes, EventSink(), max_batch_size=0)
        with pytest.raises(ValueError, match="engine_concurrency must be >= 1"):
            make_version(model, lanes, EventSink(), engine_concurrency=0)


def test_event_sink_is_bounded() -> None:
    events = EventSink(capacity=1)
    assert events.drain(10, 0.0) == [] and events.dropped == 0
    events.close()
    assert events.drain(10, 5.0) == []  # closed: returns at once


def test_objects_dropped_without_stop(model: Model) -> None:
    """Dropping the last references (no close, no stop) closes the version and joins the lanes' threads."""
    lanes = Lanes(2, 1)
    version = make_version(model, lanes, EventSink())
    tickets = [version.submit(["good movie"]) for _ in range(4)]
    del version, lanes
    for ticket in tickets:  # the tickets keep the batcher itself; its calls were answered or refused
        assert ticket.wait(WAIT)[0] in ("OK", "UNAVAILABLE")


def _engine_threads() -> dict[str, str]:
    """Thread id -> name of this process's ortserve-* threads."""
    names: dict[str, str] = {}
    for task in Path("/proc/self/task").iterdir():
        with suppress(OSError):  # a thread that ended meanwhile
            name = (task / "comm").read_text().strip()
            if name.startswith("ortserve-"):
                names[task.name] = name
    return names


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="thread names are read from Linux's /proc")
def test_lane_threads_are_named() -> None:
    """`top -H`, perf and the bench's engine-thread CPU figure find the engine's threads by these names."""
    before = set(_engine_threads())  # other tests' lanes may still be alive, or ending meanwhile
    lanes = Lanes(2, 1)
    try:
        new = {tid: name for tid, name in _engine_threads().items() if tid not in before}
        assert Counter(new.values()) == Counter({"ortserve-lane0": 1, "ortserve-lane1": 1, "ortserve-wide0": 1})
    finally:
        lanes.stop()
    assert not set(new) & set(_engine_threads())  # joined


# --- bulk calls (issue 45 item 4: interactive before bulk; the decision itself in test_priority.py) ---


def test_an_interactive_call_runs_before_a_queued_bulk_job(model: Model) -> None:
    with running_lanes(lanes=1) as lanes:
        events = EventSink()
        version = make_version(model, lanes, events, engine_concurrency=1, bulk_min_texts=8, bulk_batch_tokens=16)
        blocker = hold_engine(version, lanes)
        job = [f"bulk text number {i} about the movie" for i in range(24)]
        bulk = version.submit(job)  # 24 texts >= bulk_min_texts: bulk
        query = version.submit(["is it any good"])  # arrives after the whole job is queued
        assert not bulk.done and not query.done
        lanes.resume()
        check_ok(model, ["is it any good"], query.wait(WAIT))
        check_ok(model, job, bulk.wait(WAIT))
        blocker.wait(WAIT)
        runs = [b.texts for b in batches(events)]
    # The blocker's run, then the query's, then the job in short runs (16 padded tokens: a few texts each).
    assert runs[:2] == [1, 1], runs
    assert sum(runs[2:]) == len(job) and max(runs[2:]) < len(job), runs


def test_a_bulk_call_on_an_idle_engine_runs_in_short_batches(model: Model) -> None:
    with running_lanes() as lanes:
        events = EventSink()
        version = make_version(model, lanes, events, bulk_min_texts=8, bulk_batch_tokens=16)
        job = [f"bulk text {i}" for i in range(20)]
        check_ok(model, job, version.infer(job))
        runs = batches(events)
    assert sum(b.texts for b in runs) == len(job) and len(runs) > 1
    assert all(b.lane != "wide" for b in runs)  # queued, never a lone run holding the wide session


def test_the_caller_s_priority_overrides_the_call_s_size(model: Model) -> None:
    """priority=bulk makes a one-text call bulk (queued behind an interactive one); priority=interactive makes a
    call of bulk_min_texts texts interactive (one lone run on the wide session)."""
    with running_lanes(lanes=1) as lanes:
        events = EventSink()
        version = make_version(model, lanes, events, engine_concurrency=1, bulk_min_texts=8)
        blocker = hold_engine(version, lanes)
        marked = version.submit(["marked bulk"], bulk=True)
        query = version.submit(["a query"])
        lanes.resume()
        check_ok(model, ["a query"], query.wait(WAIT))
        check_ok(model, ["marked bulk"], marked.wait(WAIT))
        blocker.wait(WAIT)
        assert [b.texts for b in batches(events)] == [1, 1, 1]  # blocker, query, then the bulk one
        big = [f"text {i}" for i in range(8)]
        check_ok(model, big, version.submit(big, bulk=False).wait(WAIT))
        (run,) = batches(events)
    assert run.texts == 8 and run.lane == "wide"  # interactive: a lone call, one run



def test_a_shadow_copy_runs_after_every_other_class(model: Model) -> None:
    """A shadow copy (Batcher::SubmitShadow) queued first runs last: after an interactive call and a bulk one that
    arrived after it; its answer is the model's, as any call's."""
    with running_lanes(lanes=1) as lanes:
        events = EventSink()
        version = make_version(model, lanes, events, engine_concurrency=1, bulk_min_texts=8)
        blocker = hold_engine(version, lanes)
        texts = ["a query", "a bulk text of a few more words", "a shadow copy of a call that says even more"]
        lengths = [len(ids) for ids in model.tokenizer.encode(texts)]
        assert len(set(lengths)) == 3  # each run tells which call it ran
        copy = version.submit(texts[2:], shadow=True)
        marked = version.submit(texts[1:2], bulk=True)
        query = version.submit(texts[:1])
        lanes.resume()
        check_ok(model, texts[:1], query.wait(WAIT))
        check_ok(model, texts[1:2], marked.wait(WAIT))
        check_ok(model, texts[2:], copy.wait(WAIT))
        blocker.wait(WAIT)
        runs = batches(events)
    assert [b.texts for b in runs] == [1, 1, 1, 1]
    assert [b.real_tokens for b in runs[1:]] == lengths


def test_a_shadow_copy_is_dropped_when_the_shadow_queue_is_full(model: Model) -> None:
    """Copies never hold what the live calls need: past kShadowQueueRuns (4) runs of max_batch_size texts queued,
    a copy is answered RESOURCE_EXHAUSTED at once; a live call is admitted as before."""
    with running_lanes(lanes=1) as lanes:
        events = EventSink()
        version = make_version(model, lanes, events, engine_concurrency=1, max_batch_size=2)
        blocker = hold_engine(version, lanes)
        first = version.submit([f"copy {i}" for i in range(8)], shadow=True)  # alone in the queue: taken whole
        full = version.submit(["one more copy"], shadow=True)
        assert full.done
        code, message, logits, _ = full.wait(WAIT)
        assert (code, logits) == ("RESOURCE_EXHAUSTED", None) and "shadow queue is full" in message
        query = version.submit(["a live call"])
        lanes.resume()
        check_ok(model, ["a live call"], query.wait(WAIT))
        check_ok(model, [f"copy {i}" for i in range(8)], first.wait(WAIT))
        blocker.wait(WAIT)


def test_a_shadow_copy_waits_until_no_version_runs_anything(model: Model) -> None:
    """Two versions on one set of lanes: another version's copy, queued first, starts only once the engine runs
    nothing else (the blocker and the live query, whichever ends last): Lanes::Post's idle tasks."""
    with running_lanes(lanes=2) as lanes:
        events = EventSink()
        live = make_version(model, lanes, events)
        shadow = make_version(model, lanes, events)
        blocker = hold_engine(live, lanes)
        copy = shadow.submit(["a shadow copy of a call that says even more"], shadow=True)
        query = live.submit(["a query"])
        lanes.resume()
        check_ok(model, ["a query"], query.wait(WAIT))
        blocker.wait(WAIT)
        check_ok(model, ["a shadow copy of a call that says even more"], copy.wait(WAIT))
        runs = batches(events)
    assert len(runs) == 3 and runs[-1].texts == 1
    assert runs[-1].real_tokens == len(model.tokenizer.encode(["a shadow copy of a call that says even more"])[0])


@pytest.mark.parametrize("lane_s", [60.0, 0.0])
def test_bulk_runs_leave_a_lane_to_recent_interactive_calls(model: Model, lane_s: float) -> None:
    """interactive_lane_s: after an interactive call, a bulk job takes one lane of two, and the next query goes
    straight to the other; with 0 the job takes both and the query waits for one of its runs."""
    with running_lanes(lanes=2) as lanes:
        events = EventSink()
        version = make_version(model, lanes, events, bulk_min_texts=8, bulk_batch_tokens=16,
                               interactive_lane_s=lane_s)
        check_ok(model, ["an interactive call"], version.infer(["an interactive call"]))
        lanes.pause()
        job = [f"bulk job text {chr(ord('a') + i)}" for i in range(24)]
        lengths = {len(ids) for ids in model.tokenizer.encode(job)}
        assert len(lengths) == 1  # one length: every bulk run holds as many texts
        bulk = version.submit(job)
        dispatched = len(job) - version.queue_depth
        one_run = max(1, 16 // lengths.pop())
        assert dispatched == (one_run if lane_s else 2 * one_run)  # one lane kept free, or both taken
        query = version.submit(["is it any good"])
        assert version.queue_depth == len(job) - dispatched + (0 if lane_s else 1)  # on the free lane, or waiting
        lanes.resume()
        check_ok(model, ["is it any good"], query.wait(WAIT))
        check_ok(model, job, bulk.wait(WAIT))

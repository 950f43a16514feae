"""`registry rollout` carried out by the servers themselves (issue 55): two real replicas write their figures of each
stage to the registry and step the rollout; no process of the person who started it stays. A healthy copy is
promoted from its shadow stage through its canary steps, every stage stepped once; a copy whose head flips a few
percent of the decisive answers on a slice of realistic texts (its own references pass) is rolled back at its shadow
stage on agreement, before any caller saw it; a version that fails some calls, or a slow one, is rolled back during
its canary step with the check and its figures recorded, and traffic is back on the stable version. Over the file
store and the Consul stand-in."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ortserve_devtools.steady_load import SteadyLoad
from reload_harness import TEXTS, Registry, wait_until
from replica_set import ReplicaSet, client_options

MODEL = "sentiment"
STEP_S = "0.3"


def rollout_of(registry: Registry) -> dict[str, Any] | None:
    shown = json.loads(registry.cli("show", MODEL, "--json").stdout)
    return shown.get("rollout")


def ended(registry: Registry) -> dict[str, Any] | None:
    r = rollout_of(registry)
    return r if r is not None and r["status"] != "running" else None


def copy_of(bundle: Path, dest: Path) -> Path:
    """The same graph in other bytes (another note in its manifest): another version, the same answers."""
    shutil.copytree(bundle, dest)
    manifest = json.loads((dest / "manifest.json").read_text())
    manifest["notes"] = f"{manifest.get('notes', '')} (a copy)"
    (dest / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return dest


SLICE = 64
"""Realistic texts a call: the first of the built-in corpus (the gate's eval set), sent together in each call."""
FLIPS = 0.04
"""The share of the slice's decisive answers the nudged head flips: a few percent, as a retrained head might."""


def slice_texts() -> list[str]:
    from ortserve.prepare.accuracy import builtin_eval_set

    return list(builtin_eval_set().texts[:SLICE])


def nudged_head_of(bundle: Path, dest: Path, texts: list[str]) -> tuple[Path, float]:
    """The same encoder with its "positive" bias raised just past the decisive "negative" answers nearest the
    boundary, so that ~FLIPS of the slice's decisive answers flip and none other does. Its references are its own
    answers (reference_choice.attach), so the load-time check passes it: only live comparison can tell. Returns the
    bundle and the agreement the shadow must see (judged rows that keep their label, of the decisive rows)."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    from ortserve.bundle.agreement import MIN_MARGIN, margins
    from ortserve.prepare import reference_choice
    from ortserve.prepare.accuracy import make_batches, open_session, run_outputs

    copy_of(bundle, dest)
    manifest = json.loads((dest / "manifest.json").read_text())
    assert manifest["labels"] == ["negative", "positive"], manifest["labels"]
    logits = run_outputs(open_session(dest / "model.onnx", 1),
                         make_batches(dest / "tokenizer.json", manifest["max_seq_len"], texts, 16), len(texts))
    lead = logits[:, 1] - logits[:, 0]  # > 0: positive
    decisive = margins(logits) >= MIN_MARGIN
    near = np.sort(-lead[decisive & (lead < 0)])  # the decisive negatives' distances to the boundary
    flips = max(1, round(FLIPS * int(decisive.sum())))
    assert len(near) > flips and near[flips] - near[flips - 1] > 1e-3, "the slice has no clean cut"  # vs rounding
    nudge = float(near[flips - 1] + near[flips]) / 2
    model = onnx.load(dest / "model.onnx")
    (bias,) = [init for init in model.graph.initializer if init.name == "classifier.bias"]
    raised = numpy_helper.to_array(bias).copy()
    raised[1] += nudge
    bias.CopyFrom(numpy_helper.from_array(raised, bias.name))
    onnx.save(model, dest / "model.onnx")
    reference_choice.attach(dest)
    return dest, 1.0 - flips / int(decisive.sum())


MASKED = "a text that names [MASK] outright"
"""A call the erring copy fails: its head answers NaN for any text holding the [MASK] token, which no reference or
built-in corpus text does."""


def erring_on_mask_of(bundle: Path, dest: Path) -> Path:
    """The same graph plus 0 x log(1 - any(input_ids == [MASK])) on its logits: the same answers, except NaN (which
    the engine refuses: the call fails INTERNAL) for a text holding [MASK]. Its references pass."""
    import onnx
    from onnx import TensorProto, helper

    from ortserve.prepare import reference_choice

    copy_of(bundle, dest)
    mask_id = next(t["id"] for t in json.loads((dest / "tokenizer.json").read_text())["added_tokens"]
                   if t["content"] == "[MASK]")
    model = onnx.load(dest / "model.onnx")
    graph = model.graph
    for node in graph.node:
        node.output[:] = ["logits_clean" if o == "logits" else o for o in node.output]
    graph.initializer.extend([helper.make_tensor("mask_id", TensorProto.INT64, [], [mask_id]),
                              helper.make_tensor("one", TensorProto.FLOAT, [], [1.0]),
                              helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])])
    graph.node.extend([
        helper.make_node("Equal", ["input_ids", "mask_id"], ["is_mask"]),
        helper.make_node("Cast", ["is_mask"], ["is_mask_f"], to=TensorProto.FLOAT),
        helper.make_node("ReduceMax", ["is_mask_f"], ["has_mask"], axes=[1], keepdims=1),
        helper.make_node("Sub", ["one", "has_mask"], ["no_mask"]),
        helper.make_node("Log", ["no_mask"], ["log_no_mask"]),  # 0, or -inf with a [MASK]
        helper.make_node("Mul", ["log_no_mask", "zero"], ["poison"]),  # 0, or NaN
        helper.make_node("Add", ["logits_clean", "poison"], ["logits"]),
    ])
    onnx.checker.check_model(model)
    onnx.save(model, dest / "model.onnx")
    reference_choice.attach(dest)
    return dest


def run_rollout(registry: Registry, tmp_path: Path, candidate: str, *flags: str,
                texts: list[str] | None = None) -> dict[str, Any]:
    with ReplicaSet(registry, tmp_path, count=2, extra=["--rollout-step-s", STEP_S]) as replicas:
        replicas.wait_ready(MODEL, candidate)
        with SteadyLoad(replicas.target, MODEL, texts=texts or TEXTS[:2], concurrency=4,
                        options=client_options(retry=False)) as load:
            registry.cli("rollout", MODEL, candidate, "--min-calls", "30", *flags)
            done = wait_until(lambda: ended(registry), timeout=90, what="the rollout to end", interval=0.5)
        assert not load.failures(), load.failures()[:3]
    return done


def test_the_replicas_promote_an_equal_copy_by_themselves_each_step_once(
        registry: Registry, bundle: Callable[..., Path], tmp_path: Path) -> None:
    registry.publish(MODEL, "v1", bundle(1), weight=100, cli=False)
    registry.publish(MODEL, "v2", copy_of(bundle(1), tmp_path / "copy"), cli=False)
    done = run_rollout(registry, tmp_path, "v2", "--steps", "50,100", "--interval", "1s", "--max-p99-ratio", "10",
                       "--max-error-rate", "0.01")
    assert done["status"] == "promoted", done["story"]
    assert [(s["event"], s["stage"]) for s in done["story"]] == [
        ("started", "canary 50%"), ("advanced", "canary 100%"), ("promoted", "canary 100%")]
    assert "2 replica(s)" in done["story"][1]["detail"]  # judged on both replicas' figures
    assert registry.weights(MODEL) == {"v2": 100}


def test_an_equal_copy_passes_its_shadow_stage_on_agreement_then_its_canary(
        registry: Registry, bundle: Callable[..., Path], tmp_path: Path) -> None:
    registry.publish(MODEL, "v1", bundle(1), weight=100, cli=False)
    registry.publish(MODEL, "v2", copy_of(bundle(1), tmp_path / "copy"), cli=False)
    done = run_rollout(registry, tmp_path, "v2", "--shadow", "1s", "--shadow-percent", "100", "--min-judged", "20",
                       "--steps", "100", "--interval", "1s", "--max-p99-ratio", "10", "--max-error-rate", "0.01")
    assert done["status"] == "promoted", done["story"]
    assert [(s["event"], s["stage"]) for s in done["story"]] == [
        ("started", "shadow"), ("advanced", "canary 100%"), ("promoted", "canary 100%")]
    shadow_step = done["story"][1]["detail"]
    assert "agreement" in shadow_step and "2 replica(s)" in shadow_step, shadow_step
    judged = shadow_step.split("agreement ")[1].split(",")[0]
    agreed, of = (int(n) for n in judged.split("/"))
    assert agreed == of >= 20, shadow_step  # every judged answer of the copy was the stable one's
    assert registry.weights(MODEL) == {"v2": 100}


def test_a_copy_that_flips_a_few_percent_of_a_slice_is_rolled_back_at_its_shadow_stage(
        registry: Registry, bundle: Callable[..., Path], tmp_path: Path) -> None:
    texts = slice_texts()
    registry.publish(MODEL, "v1", bundle(1), weight=100, cli=False)
    nudged, expected = nudged_head_of(bundle(1), tmp_path / "nudged", texts)
    registry.publish(MODEL, "v2", nudged, cli=False)
    done = run_rollout(registry, tmp_path, "v2", "--shadow", "30s", "--shadow-percent", "100", "--min-judged", "200",
                       "--steps", "100", "--interval", "1s", texts=texts)
    assert done["status"] == "rolled_back", done["story"]
    assert done["reason"].startswith("agreement"), done["reason"]
    assert [(s["event"], s["stage"]) for s in done["story"]] == [("started", "shadow"), ("rolled back", "shadow")]
    # every call carries the slice: the agreement seen is the slice's (a row at the decisive margin may count on
    # one side of it in the server's batches and not in ours: a row's worth of slack)
    seen = float(done["reason"].split("agreement ")[1].split(" ")[0])
    assert abs(seen - expected) <= 0.02 and seen < 0.99, (expected, done["reason"])
    assert registry.weights(MODEL) == {"v1": 100}  # no caller was ever answered by it
    assert "agreement" in registry.cli("show", MODEL).stdout


def test_a_version_that_errors_is_rolled_back_in_its_canary_step_with_the_reason(
        registry: Registry, bundle: Callable[..., Path], tmp_path: Path) -> None:
    registry.publish(MODEL, "v1", bundle(1), weight=100, cli=False)
    registry.publish(MODEL, "v2", erring_on_mask_of(bundle(1), tmp_path / "erring"), cli=False)
    with ReplicaSet(registry, tmp_path, count=2, extra=["--rollout-step-s", STEP_S]) as replicas:
        replicas.wait_ready(MODEL, "v2")
        options = client_options(retry=False)
        with SteadyLoad(replicas.target, MODEL, texts=TEXTS[:2], concurrency=4, options=options) as load, \
                SteadyLoad(replicas.target, MODEL, texts=[MASKED], concurrency=1, tag="masked", options=options):
            registry.cli("rollout", MODEL, "v2", "--min-calls", "30", "--steps", "50,100", "--interval", "30s",
                         "--max-error-rate", "0.01", "--max-p99-ratio", "100")
            done = wait_until(lambda: ended(registry), timeout=90, what="the rollout to end", interval=0.5)
        assert not load.failures(), load.failures()[:3]  # the stable version answered every call, v2 the rest
    assert done["status"] == "rolled_back", done["story"]
    assert done["reason"].startswith("error rate"), done["reason"]
    assert [(s["event"], s["stage"]) for s in done["story"]] == [("started", "canary 50%"),
                                                                ("rolled back", "canary 50%")]
    assert registry.weights(MODEL) == {"v1": 100}
    assert "error rate" in registry.cli("show", MODEL).stdout


@pytest.mark.slow
def test_a_slow_version_is_rolled_back_in_its_canary_step_with_the_reason(
        file_registry: Registry, bundle: Callable[..., Path], tmp_path: Path) -> None:
    registry = file_registry
    registry.publish(MODEL, "v1", bundle(1), weight=100, cli=False)
    slow = bundle(2, hidden=256, layers=8, heads=4, intermediate=1024)
    registry.publish(MODEL, "v2", slow, cli=False)
    done = run_rollout(registry, tmp_path, "v2", "--steps", "50,100", "--interval", "30s", "--max-p99-ratio", "1.5")
    assert done["status"] == "rolled_back", done["story"]
    assert done["reason"].startswith("p99 ratio"), done["reason"]
    assert [s["event"] for s in done["story"]] == ["started", "rolled back"]
    assert registry.weights(MODEL) == {"v1": 100}
    shown = registry.cli("show", MODEL).stdout
    assert "rolled back" in shown and "p99 ratio" in shown

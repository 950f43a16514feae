"""Shadow copies over the wire (issue 55): a version routed as a shadow gets a copy of a sticky sample of the live
calls; its answers are compared with the live ones by its kind's judge and never returned. The live answers are the
same bytes with and without a shadow, on both front ends; an equal copy agrees on every judged answer, another model
does not, and `ortserve status` keeps the calls that disagree most."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ortserve_devtools.bert_bundle import build_tiny_tagger_bundle
from reload_harness import Registry, model_status, wait_routing, wait_until
from support.server_process import infer_request, running_server, stub_for

from ortserve import engine_ext

MODEL = "sentiment"
TEXTS = ["a good movie", "the plot was awful and far too long", "great", "bad acting, bad story",
         "not bad at all", "I would watch it again", "boring", "the best film of the year"]
KEYS = [f"caller-{i:04d}" for i in range(120)]


def copy_of(bundle: Path, dest: Path) -> Path:
    """The same graph in other bytes (another note in its manifest): another version, the same answers."""
    shutil.copytree(bundle, dest)
    manifest = json.loads((dest / "manifest.json").read_text())
    manifest["notes"] = f"{manifest.get('notes', '')} (a copy)"
    (dest / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return dest


def answers(address: str, keys: list[str]) -> dict[str, tuple[str, bytes]]:
    """key -> (the version that answered, the reply's output bytes), one call of four texts per key."""
    channel, stub = stub_for(address)
    out = {}
    with channel:
        for i, key in enumerate(keys):
            texts = [TEXTS[(i + j) % len(TEXTS)] for j in range(4)]
            reply = stub.ModelInfer(infer_request(texts, model=MODEL, routing_key=key), timeout=20)
            out[key] = (reply.model_version, b"".join(reply.raw_output_contents))
    return out


def shadow_figures(address: str, candidate: str) -> dict[str, Any] | None:
    for pair in model_status(address, MODEL).get("shadow_figures", []):
        if pair["candidate"] == candidate:
            return pair
    return None


def copied(address: str, candidate: str, calls: int) -> dict[str, Any]:
    """Until the server has judged `calls` copies to `candidate` (events reach the judge after the replies)."""
    def enough() -> dict[str, Any] | None:
        pair = shadow_figures(address, candidate)
        return pair if pair is not None and sum(pair["outcomes"].values()) >= calls else None

    return wait_until(enough, timeout=30, what=f"{calls} shadow copies to {candidate} judged")


def shadow_routed(reg: Registry, addr: str, version: str, percent: int) -> None:
    """`registry route` v1=100 with `version` as the shadow of `percent`, and wait until the server has it in force."""
    reg.cli("route", MODEL, "v1=100", "--shadow", f"{version}={percent}")
    wait_until(lambda: model_status(addr, MODEL).get("shadow") == {"version": version, "percent": percent},
               timeout=30, what=f"the shadow {version} in force")


def in_sample(keys: list[str], percent: int) -> list[str]:
    """The keys a shadow of `percent` copies: their canary bucket below percent x 100 (sticky by key)."""
    return [k for k in keys if engine_ext.route_bucket(MODEL, k) < percent * 100]


def test_shadow_copies_are_judged_and_change_no_live_answer(file_registry: Registry, bundle: Callable[..., Path],
                                                           tmp_path: Path, frontend: str) -> None:
    reg = file_registry
    reg.publish(MODEL, "v1", bundle(1), weight=100, cli=False)
    reg.publish(MODEL, "v2", copy_of(bundle(1), tmp_path / "copy"), cli=False)
    reg.publish(MODEL, "v3", bundle(2), cli=False)  # another model: other answers
    with running_server([*reg.server_args(tmp_path / "cache"), "--frontend", frontend]) as server:
        addr = server.address
        wait_routing(addr, MODEL, {"v1": 100})
        before = answers(addr, KEYS)
        assert {v for v, _ in before.values()} == {"v1"}

        shadow_routed(reg, addr, "v2", 100)
        assert answers(addr, KEYS) == before  # the caller's answer and version are the stable one's, byte for byte
        equal = copied(addr, "v2", len(KEYS))
        assert equal["stable"] == "v1"
        assert equal["outcomes"]["failed"] == equal["outcomes"]["stable_failed"] == 0
        assert equal["outcomes"]["compared"] + equal["outcomes"]["dropped"] == len(KEYS)
        assert equal["outcomes"]["compared"] > 0
        assert equal["agreed"] == equal["judged"]  # the same graph: every decisive answer the same
        assert equal["worst"] == []  # nothing differs at all

        shadow_routed(reg, addr, "v3", 50)
        assert answers(addr, KEYS) == before
        sampled = in_sample(KEYS, 50)
        assert 0 < len(sampled) < len(KEYS)
        other = copied(addr, "v3", len(sampled))
        assert sum(other["outcomes"].values()) == len(sampled)  # sticky: exactly the sampled keys' calls
        assert other["outcomes"]["compared"] > 0
        worst = other["worst"]
        assert worst and all(w["distance"] > 0 for w in worst)  # other weights: other probabilities
        order = [(w["judged"] - w["agreed"], w["distance"]) for w in worst]
        assert order == sorted(order, reverse=True)  # worst first: disagreed answers, then how far apart
        assert all("texts" not in w for w in worst)  # texts are kept only with --shadow-keep-texts


def test_a_token_classifiers_copies_are_judged_on_their_entities(file_registry: Registry, tmp_path: Path,
                                                                  frontend: str) -> None:
    reg = file_registry
    tagger = build_tiny_tagger_bundle(tmp_path / "tagger", seed=3).path
    reg.publish(MODEL, "v1", tagger, weight=100, cli=False)
    reg.publish(MODEL, "v2", copy_of(tagger, tmp_path / "tagger-copy"), cli=False)
    with running_server([*reg.server_args(tmp_path / "cache"), "--frontend", frontend]) as server:
        addr = server.address
        wait_routing(addr, MODEL, {"v1": 100})
        shadow_routed(reg, addr, "v2", 100)
        answers(addr, KEYS[:40])
        pair = copied(addr, "v2", 40)
    assert pair["outcomes"]["compared"] > 0 and pair["outcomes"]["failed"] == 0
    assert pair["judged"] > 0 and pair["agreed"] == pair["judged"]  # the same graph: the same entities


def on_hf_tokenizers(bundle: Path, dest: Path) -> Path:
    """The same bundle with its normalizer wrapped in a Sequence: HF tokenizers reads it exactly as before (the same
    ids), the C++ WordPiece refuses the shape, so the server tokenizes this version with HF tokenizers."""
    copy_of(bundle, dest)
    spec = json.loads((dest / "tokenizer.json").read_text())
    spec["normalizer"] = {"type": "Sequence", "normalizers": [spec["normalizer"]]}
    (dest / "tokenizer.json").write_text(json.dumps(spec))
    return dest


def test_copies_to_a_version_on_hf_tokenizers_are_tokenized_in_python_and_judged(
        file_registry: Registry, bundle: Callable[..., Path], tmp_path: Path, frontend: str) -> None:
    reg = file_registry
    reg.publish(MODEL, "v1", bundle(1), weight=100, cli=False)
    reg.publish(MODEL, "v2", on_hf_tokenizers(bundle(1), tmp_path / "hf-copy"), cli=False)
    reg.publish(MODEL, "v3", on_hf_tokenizers(bundle(2), tmp_path / "hf-other"), cli=False)
    with running_server([*reg.server_args(tmp_path / "cache"), "--frontend", frontend]) as server:
        addr = server.address
        wait_routing(addr, MODEL, {"v1": 100})
        versions = model_status(addr, MODEL)["versions"]
        assert versions["v1"]["tokenizer"] == "native" and versions["v2"]["tokenizer"] == "hf", versions
        before = answers(addr, KEYS)

        shadow_routed(reg, addr, "v2", 100)
        assert answers(addr, KEYS) == before
        equal = copied(addr, "v2", len(KEYS))
        assert equal["outcomes"]["failed"] == equal["outcomes"]["stable_failed"] == 0
        assert equal["outcomes"]["compared"] + equal["outcomes"]["dropped"] == len(KEYS)
        assert equal["outcomes"]["compared"] > 0
        assert equal["agreed"] == equal["judged"] > 0  # the same ids through the same graph
        assert equal["worst"] == []

        shadow_routed(reg, addr, "v3", 100)
        answers(addr, KEYS[:40])
        other = copied(addr, "v3", 40)
        assert other["outcomes"]["compared"] > 0 and other["outcomes"]["failed"] == 0
        assert other["worst"] and all(w["distance"] > 0 for w in other["worst"])  # other weights, judged

"""Pairs of texts, imported and served (issue 31 item 1), through one real server per front end on an embedded
registry:

- a sentence-transformers CrossEncoder directory (BERT, one label: the C++ WordPiece makes the pairs, token types
  from the second text) and a RoBERTa classifier imported with --task rerank (HF tokenizers make `<s> a </s></s> b
  </s>`, no token types) answer SCORE [N] equal to CrossEncoder.predict([(query, passage)]) within 1e-4, and LOGITS
  equal to transformers' logits of tokenizer(query, passage), in the README's call shape (the passages as TEXT [N],
  the query as TEXT_PAIR [1] or [N]: a pair is read query first), over gRPC and REST, with a short and a long query
  against short and long passages (both cut past max_seq_len, longest first);
- a three-label BERT classifier imported with --pairs (NLI-shaped) answers LOGITS equal to transformers on
  (premise, hypothesis) sent as TEXT_PAIR and TEXT, and the classification extension names its labels;
- ModelMetadata lists TEXT_PAIR and SCORE; each version passed its load-time check on its pair reference answers;
- a missing, unasked or mismatched TEXT_PAIR, a bad datatype or a classification on SCORE is INVALID_ARGUMENT naming
  the input and the shapes, over real gRPC, both front ends;
- property: concurrent calls of pairs of mixed lengths, batched together (small batches), answer each pair as it is
  answered alone (onnxruntime's own session, one pair a run).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.batching import burst_behind_busy
from support.hf_checkpoints import IMPORT_MAX_SEQ_LEN, make_checkpoint
from support.importing import SMALL_BATCHES
from support.reference import Reference
from support.server_process import (
    ServerProcess,
    ask_classification,
    logits_of,
    serving_published,
    write_texts,
)

from ortserve.prepare.importer import ImportResult, import_checkpoint
from ortserve.proto import grpc_service_pb2 as pb
from ortserve.proto import grpc_service_pb2_grpc as pb_grpc

QUERY = "Which phone has the longest battery life?"
LONG_QUERY = ("Which phone, among those sold this year in Europe and in Japan, has the longest battery life when "
              "streaming video over a mobile network, and does it still charge fast after two years?")
PASSAGES = [
    "The battery died after two days and support never answered.",
    "ok",
    "Das Akku hält eine Woche, sagt der Test.",
    "最高の電池でした 🎉",
    "a long one: " + " ".join(["the battery kept going, day after day, and nobody could believe it"] * 6),
]
NLI_LABELS = ("entailment", "neutral", "contradiction")
SCORE_TOLERANCE = 1e-4
TRITON_SCRIPT = Path(__file__).parents[2] / "support" / "triton_client.py"


@pytest.fixture(scope="session")  # not per front end: built once, kept across the frontend reorder
def bundles(tmp_path_factory: pytest.TempPathFactory, torch_one_thread: None) -> dict[str, tuple[Path, ImportResult]]:
    """model name -> (what users load: a CrossEncoder or a transformers directory, its import)."""
    from sentence_transformers import CrossEncoder

    root = tmp_path_factory.mktemp("pairs")
    bert = make_checkpoint(root / "bert-ck", "bert", labels=("score",), seed=11)
    cross_encoder = root / "bert-ce"
    CrossEncoder(str(bert), device="cpu").save(str(cross_encoder))  # the CrossEncoder layout (activation: sigmoid)
    roberta = make_checkpoint(root / "roberta-ck", "roberta", labels=("relevance",), seed=12)
    nli = make_checkpoint(root / "nli-ck", "bert", labels=NLI_LABELS, seed=13)
    single = make_checkpoint(root / "single-ck", "bert", seed=14)
    return {
        "ce-bert": (cross_encoder, import_checkpoint(cross_encoder, root / "ce-bert", max_seq_len=IMPORT_MAX_SEQ_LEN)),
        "rerank-roberta": (roberta, import_checkpoint(roberta, root / "rerank-roberta", task="rerank",
                                                      max_seq_len=IMPORT_MAX_SEQ_LEN)),
        "nli-bert": (nli, import_checkpoint(nli, root / "nli-bert", pairs=True, max_seq_len=IMPORT_MAX_SEQ_LEN)),
        "single": (single, import_checkpoint(single, root / "single", max_seq_len=IMPORT_MAX_SEQ_LEN)),
    }


@pytest.fixture(scope="module")
def served(bundles: dict[str, tuple[Path, ImportResult]], tmp_path_factory: pytest.TempPathFactory,
           frontend: str) -> Iterator[ServerProcess]:
    bundle_dirs = {name: result.path for name, (_, result) in bundles.items()}
    with serving_published(tmp_path_factory.mktemp("pairs-store"), bundle_dirs,
                           ["--frontend", frontend, *SMALL_BATCHES], http=True) as server:
        yield server


def pair_request(model: str, texts: Sequence[str], queries: Sequence[str], *, raw: bool = False,
                 pair_shape: list[int] | None = None, pair_datatype: str = "BYTES") -> pb.ModelInferRequest:
    """The README's call shape: `texts` (the passages) as TEXT [N], `queries` as TEXT_PAIR [N] or [1]."""
    request = pb.ModelInferRequest(model_name=model)
    for name, elements, shape, datatype in (("TEXT", texts, [len(texts)], "BYTES"),
                                            ("TEXT_PAIR", queries, pair_shape or [len(queries)], pair_datatype)):
        tensor = request.inputs.add(name=name, datatype=datatype, shape=shape)
        encoded = [e.encode() for e in elements]
        if raw:
            request.raw_input_contents.append(b"".join(len(e).to_bytes(4, "little") + e for e in encoded))
        else:
            tensor.contents.bytes_contents.extend(encoded)
    return request


def cross_encoder_scores(model_dir: Path, queries: Sequence[str], passages: Sequence[str]) -> np.ndarray:
    """What users get: sentence-transformers' CrossEncoder.predict([(query, passage), ...]) (its activation), at the
    bundle's max length."""
    from sentence_transformers import CrossEncoder

    model = CrossEncoder(str(model_dir), device="cpu", max_length=IMPORT_MAX_SEQ_LEN)
    return np.asarray(model.predict(list(zip(queries, passages, strict=True)), show_progress_bar=False), np.float32)


def transformers_logits(model_dir: Path, texts: Sequence[str], pairs: Sequence[str]) -> np.ndarray:
    """The raw model's logits of tokenizer(text, pair) (truncated as CrossEncoder truncates: longest first)."""
    import torch
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    model = transformers.AutoModelForSequenceClassification.from_pretrained(str(model_dir)).eval()
    with torch.inference_mode():
        return np.stack([model(**tokenizer(t, p, truncation=True, max_length=IMPORT_MAX_SEQ_LEN,
                                           return_tensors="pt")).logits[0].numpy()
                         for t, p in zip(texts, pairs, strict=True)])


@pytest.mark.parametrize("query", [QUERY, LONG_QUERY], ids=["short-query", "long-query"])
@pytest.mark.parametrize("model", ["ce-bert", "rerank-roberta"])
def test_reranker_scores_equal_cross_encoder_predict(stub: Any, served: ServerProcess,
                                                     bundles: dict[str, tuple[Path, ImportResult]], model: str,
                                                     query: str) -> None:
    source, result = bundles[model]
    assert result.manifest.pairs and result.manifest.score_activation == "sigmoid"
    loaded = served.wait_event("version_loaded", model=model)
    assert loaded["verify"] == "passed"  # its pair reference answers, through its own batcher
    assert loaded["tokenizer"] == ("native" if model == "ce-bert" else "hf")
    assert loaded["kind"] == "reranker"  # what `ortserve status` shows
    queries = [query] * len(PASSAGES)
    expected = cross_encoder_scores(source, queries, PASSAGES)
    logits_expected = transformers_logits(source, queries, PASSAGES)[:, 0]
    # The README's call: the passages as TEXT [N], the query as TEXT_PAIR [1]; and the query repeated, TEXT_PAIR [N].
    one_query = stub.ModelInfer(pair_request(model, PASSAGES, [query], pair_shape=[1]))
    each = stub.ModelInfer(pair_request(model, PASSAGES, queries, raw=True))
    assert one_query.outputs[0].name == "SCORE" and list(one_query.outputs[0].shape) == [len(PASSAGES)]
    np.testing.assert_allclose(logits_of(one_query), expected, atol=SCORE_TOLERANCE, rtol=0)
    np.testing.assert_allclose(logits_of(each), expected, atol=SCORE_TOLERANCE, rtol=0)

    # LOGITS on request: the raw logit the sigmoid was applied to, transformers' own for tokenizer(query, passage).
    asked = pair_request(model, PASSAGES, [query], pair_shape=[1])
    asked.outputs.add(name="LOGITS")
    logits = logits_of(stub.ModelInfer(asked))
    assert logits.shape == (len(PASSAGES), 1)
    scale = np.maximum(1.0, np.abs(logits_expected))
    assert (np.abs(logits[:, 0] - logits_expected) <= SCORE_TOLERANCE * scale).all(), logits[:, 0] - logits_expected
    np.testing.assert_allclose(1 / (1 + np.exp(-logits[:, 0])), expected, atol=SCORE_TOLERANCE, rtol=0)

    # REST: the same call, the same scores.
    doc = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [len(PASSAGES)], "data": PASSAGES},
                      {"name": "TEXT_PAIR", "datatype": "BYTES", "shape": [1], "data": [query]}]}
    rest = requests.post(f"http://127.0.0.1:{served.http_port}/v2/models/{model}/infer", json=doc, timeout=30).json()
    assert rest["outputs"][0]["name"] == "SCORE" and rest["outputs"][0]["shape"] == [len(PASSAGES)]
    np.testing.assert_allclose(rest["outputs"][0]["data"], expected, atol=SCORE_TOLERANCE, rtol=0)


def test_the_query_is_read_first(stub: Any, bundles: dict[str, tuple[Path, ImportResult]]) -> None:
    """The order matters to a cross-encoder (the random test model scores (a, b) and (b, a) differently), so the
    parity above would catch a reversed pair: this guards that the test model can tell."""
    source, _ = bundles["ce-bert"]
    forward = cross_encoder_scores(source, [QUERY] * len(PASSAGES), PASSAGES)
    backward = cross_encoder_scores(source, PASSAGES, [QUERY] * len(PASSAGES))
    assert np.abs(forward - backward).max() > 100 * SCORE_TOLERANCE
    served = logits_of(stub.ModelInfer(pair_request("ce-bert", PASSAGES, [QUERY], pair_shape=[1])))
    assert np.abs(served - backward).max() > 100 * SCORE_TOLERANCE


def test_a_pair_classifier_answers_logits_and_labels(stub: Any, served: ServerProcess,
                                                     bundles: dict[str, tuple[Path, ImportResult]]) -> None:
    source, result = bundles["nli-bert"]
    assert result.manifest.pairs and result.manifest.score_activation is None
    assert served.wait_event("version_loaded", model="nli-bert")["kind"] == "classifier of pairs"
    premises = PASSAGES
    hypotheses = ["The battery is good.", "Nothing was said.", "Es regnet.", "🎉", "short"]
    # (premise, hypothesis) as the model was trained: the premise is read first, so it is sent as TEXT_PAIR.
    got = logits_of(stub.ModelInfer(pair_request("nli-bert", hypotheses, premises)))
    expected = transformers_logits(source, premises, hypotheses)
    scale = np.maximum(1.0, np.abs(expected).max(axis=1, keepdims=True))
    assert (np.abs(got - expected) <= SCORE_TOLERANCE * scale).all(), np.abs(got - expected).max()
    reply = stub.ModelInfer(ask_classification(pair_request("nli-bert", hypotheses, premises), 1, binary_data=False))
    best = [entry.decode().split(":", 2) for entry in reply.outputs[0].contents.bytes_contents]
    assert [(int(i), label) for _, i, label in best] == [(int(k), NLI_LABELS[int(k)]) for k in expected.argmax(1)]


def test_metadata_lists_the_pair_input_and_the_score(stub: Any, served: ServerProcess) -> None:
    metadata = stub.ModelMetadata(pb.ModelMetadataRequest(name="ce-bert"))
    assert [(t.name, t.datatype, list(t.shape)) for t in metadata.inputs] == [("TEXT", "BYTES", [-1]),
                                                                              ("TEXT_PAIR", "BYTES", [-1])]
    assert [(t.name, list(t.shape)) for t in metadata.outputs] == [("SCORE", [-1]), ("LOGITS", [-1, 1])]
    assert metadata.parameters["pairs"].bool_param is True
    assert metadata.parameters["score_activation"].string_param == "sigmoid"
    nli = stub.ModelMetadata(pb.ModelMetadataRequest(name="nli-bert"))
    assert [t.name for t in nli.inputs] == ["TEXT", "TEXT_PAIR"] and [t.name for t in nli.outputs] == ["LOGITS"]
    single = stub.ModelMetadata(pb.ModelMetadataRequest(name="single"))
    assert [t.name for t in single.inputs] == ["TEXT"] and "pairs" not in single.parameters
    rest = requests.get(f"http://127.0.0.1:{served.http_port}/v2/models/ce-bert", timeout=30).json()
    assert [i["name"] for i in rest["inputs"]] == ["TEXT", "TEXT_PAIR"]


def test_tritonclient_and_status_see_a_reranker(served: ServerProcess, bundles: dict[str, tuple[Path, ImportResult]],
                                                tmp_path: Path) -> None:
    """The README's example: a stock tritonclient sends TEXT [N] and TEXT_PAIR [1] and reads SCORE; `ortserve status`
    shows the kind."""
    texts_path = write_texts(tmp_path / "passages.json", PASSAGES)
    out = subprocess.run([sys.executable, str(TRITON_SCRIPT), served.address, "ce-bert", str(texts_path), "--output",
                          "SCORE", "--pair", QUERY], capture_output=True, text=True, timeout=60, env={**os.environ})
    assert out.returncode == 0, out.stderr
    reply = json.loads(out.stdout)
    assert reply["shape"] == [len(PASSAGES)] and reply["dtype"] == "float32"
    expected = cross_encoder_scores(bundles["ce-bert"][0], [QUERY] * len(PASSAGES), PASSAGES)
    np.testing.assert_allclose(reply["score"], expected, atol=SCORE_TOLERANCE, rtol=0)
    assert [i["name"] for i in reply["metadata"]["inputs"]] == ["TEXT", "TEXT_PAIR"]
    status = subprocess.run([sys.executable, "-m", "ortserve.service.cli", "status", "--address", served.address],
                            capture_output=True, text=True, timeout=30)
    assert status.returncode == 0, status.stderr
    lines = {line.split(":")[0]: i for i, line in enumerate(status.stdout.splitlines())}
    rows = status.stdout.splitlines()
    assert "reranker device=cpu" in rows[lines["model ce-bert"] + 1]
    assert "classifier-of-pairs device=cpu" in rows[lines["model nli-bert"] + 1]


def test_rest_refuses_a_bad_pair_with_the_same_message(served: ServerProcess) -> None:
    doc = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [3], "data": ["a", "b", "c"]},
                      {"name": "TEXT_PAIR", "datatype": "BYTES", "shape": [2], "data": ["x", "y"]}]}
    reply = requests.post(f"http://127.0.0.1:{served.http_port}/v2/models/ce-bert/infer", json=doc, timeout=30)
    assert reply.status_code == 400
    assert "input 'TEXT_PAIR' has shape [2] and input 'TEXT' shape [3]" in reply.json()["error"]


def _missing_pair() -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="ce-bert")
    request.inputs.add(name="TEXT", datatype="BYTES", shape=[1]).contents.bytes_contents.append(b"q")
    return request


def _score_classification() -> pb.ModelInferRequest:
    return ask_classification(pair_request("ce-bert", ["q"], ["p"]), 1, output="SCORE")


BAD_CALLS = {
    "missing TEXT_PAIR": (_missing_pair, "missing input 'TEXT_PAIR': model 'ce-bert' takes pairs of texts; send "
                                         "'TEXT' [N] and 'TEXT_PAIR' [N] (one per text) or [1] (one for all)"),
    "TEXT_PAIR to a one-text model": (lambda: pair_request("single", ["q"], ["p"]),
                                      "unexpected input 'TEXT_PAIR': model 'single' (a classifier model) takes "
                                      "'TEXT' alone, not pairs"),
    "mismatched shapes": (lambda: pair_request("ce-bert", ["a", "b", "c"], ["x", "y"]),
                          "input 'TEXT_PAIR' has shape [2] and input 'TEXT' shape [3]: send 'TEXT_PAIR' [3] (one "
                          "per text) or [1] (one for all)"),
    "TEXT_PAIR of FP32": (lambda: pair_request("ce-bert", ["a"], ["x"], pair_datatype="FP32"),
                          "input 'TEXT_PAIR' has datatype FP32, expected BYTES"),
    "TEXT_PAIR [1, 2]": (lambda: pair_request("ce-bert", ["a", "b"], ["x", "y"], pair_shape=[1, 2]),
                         "input 'TEXT_PAIR' has shape [1, 2], expected [N] or [N, 1]"),
    "one raw entry for two inputs": (lambda: _one_raw_entry(), "raw_input_contents has 1 entries, expected 2 (one per "
                                                               "input)"),
    "classification on SCORE": (_score_classification, "output 'SCORE' does not take parameter 'classification'"),
}


def _one_raw_entry() -> pb.ModelInferRequest:
    request = pair_request("ce-bert", ["a"], ["x"], raw=True)
    del request.raw_input_contents[1]
    return request


@pytest.mark.parametrize("case", list(BAD_CALLS))
def test_bad_pairs_are_invalid_argument_naming_the_input(stub: Any, case: str) -> None:
    build, message = BAD_CALLS[case]
    with pytest.raises(grpc.RpcError) as refused:
        stub.ModelInfer(build(), timeout=30)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value.details()
    assert message in refused.value.details()
    assert logits_of(stub.ModelInfer(pair_request("ce-bert", ["q"], ["p"]))).shape == (1,)  # still serving


WORDS = ["battery", "phone", "the", "lasts", "days", "weeks", "not", "very", "good", "awful", "Akku", "電池", "🎉"]
text = st.lists(st.sampled_from(WORDS), min_size=0, max_size=30).map(" ".join)
call = st.lists(st.tuples(text, text), min_size=1, max_size=6)  # (query, passage)


@pytest.fixture(scope="session")  # not per front end: built once, kept across the frontend reorder
def ce_reference(bundles: dict[str, tuple[Path, ImportResult]]) -> Reference:
    return Reference(bundles["ce-bert"][1].path)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(calls=st.lists(call, min_size=1, max_size=10))
def test_pairs_batched_together_answer_as_one_by_one(served: ServerProcess, ce_reference: Reference,
                                                     calls: list[list[tuple[str, str]]]) -> None:
    async def send_all() -> list[Any]:
        async with grpc.aio.insecure_channel(served.address) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            requests_ = [pair_request("ce-bert", [p for _, p in c], [q for q, _ in c]) for c in calls]
            for request in requests_:
                request.outputs.add(name="LOGITS")
            return await asyncio.gather(*(stub.ModelInfer(r, timeout=60) for r in requests_))

    for pairs, reply in zip(calls, asyncio.run(send_all()), strict=True):
        expected = ce_reference.pair_logits([q for q, _ in pairs], [p for _, p in pairs])
        np.testing.assert_allclose(logits_of(reply), expected, atol=1e-5, rtol=0)


def test_pair_batches_really_formed(served: ServerProcess, stub: Any) -> None:
    """The property above means something only if pairs of different calls share engine runs on this server. Not left
    to the property's bursts (on a loaded machine an idle engine may answer each of them alone): a burst of calls of
    pairs sent right behind calls that keep the engine busy (support.batching.burst_behind_busy: sent again, a
    bounded number of times, until some shared a run) shares runs, and each reply is still what the same call
    answers alone."""
    calls = [(" ".join(WORDS[i % 5:i % 5 + 2 + i % 4]), " ".join(WORDS[i % 7:i % 7 + 3])) for i in range(12)]
    requests_ = [pair_request("ce-bert", [a], [b]) for a, b in calls]
    for request in requests_:
        request.outputs.add(name="LOGITS")
    alone = [logits_of(stub.ModelInfer(request, timeout=60)) for request in requests_]  # one at a time: each alone

    def unbatched(replies: list[pb.ModelInferResponse]) -> None:
        for one, reply in zip(alone, replies, strict=True):
            np.testing.assert_allclose(logits_of(reply), one, atol=1e-5, rtol=0)

    long = " ".join(WORDS * 3)
    burst_behind_busy(served, busy=pair_request("ce-bert", [long] * 128, [long] * 128), burst=requests_,
                      check=unbatched)


def test_the_native_front_end_serves_pairs_itself(served: ServerProcess, frontend: str) -> None:
    """Pairs are not passed on to Python: the native front end decodes, tokenizes and answers them natively."""
    if frontend != "native":
        pytest.skip("the native front end's own answers")
    answered = [e for e in served.events("request") if e.get("model") in ("ce-bert", "nli-bert")
                and e.get("status") == "OK" and e.get("transport") != "http"]  # REST is the Python server's
    passed_on = [e for e in answered if e.get("frontend") != "native"]
    assert answered and not passed_on, passed_on[:3]
    refused = [e for e in served.events("request") if e.get("status") == "INVALID_ARGUMENT"]
    assert refused and all(e.get("frontend") != "native" for e in refused)  # Python names a refused call's error


def test_manifest_and_references_record_the_pairs(bundles: dict[str, tuple[Path, ImportResult]]) -> None:
    manifest = json.loads((bundles["ce-bert"][1].path / "manifest.json").read_text())
    assert manifest["pairs"] is True and manifest["score_activation"] == "sigmoid"
    assert manifest["imported"]["task"] == "rerank" and manifest["imported"]["cross_encoder"] is True
    rows = [json.loads(line) for line in (bundles["ce-bert"][1].path / "references.jsonl").read_text().splitlines()]
    assert rows and all(isinstance(row["pair"], str) for row in rows)
    assert "pairs" not in json.loads((bundles["single"][1].path / "manifest.json").read_text())


def test_optimize_refuses_a_bundle_of_pairs(bundles: dict[str, tuple[Path, ImportResult]], tmp_path: Path) -> None:
    from ortserve.prepare.optimize import OptimizeError, optimize_bundle

    with pytest.raises(OptimizeError, match="a classifier of pairs"):
        optimize_bundle(bundles["ce-bert"][1].path, tmp_path / "int8", "int8")
    assert not (tmp_path / "int8").exists()

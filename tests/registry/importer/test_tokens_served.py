"""Token classification (named entities), imported and served (issue 31 item 2), through one real server per front
end on an embedded registry:

- a BERT (WordPiece, "##" subwords, BIO labels) and a RoBERTa (byte-level BPE, no subword prefix, IOBES labels)
  `*ForTokenClassification` checkpoint answer ENTITIES equal to transformers'
  `pipeline("token-classification", aggregation_strategy=...)` for every aggregation, character offsets into the
  caller's text included, on texts with accents, CJK and emoji; the pipeline is given the server's own
  TOKEN_LOGITS, so the comparison is exact (the aggregation rule), and TOKEN_LOGITS equal PyTorch's within 1e-4
  (the graph);
- a text longer than max_seq_len is answered for the part read, and CHARS_READ says where it stopped;
- TOKEN_OFFSETS are the tokenizer's spans, -1 past a text's tokens;
- calls of mixed lengths batched together answer each text as it is answered alone;
- property: each token's span and subword flag equal the pipeline's `gather_pre_entities` on generated text;
- REST answers what gRPC does; ModelMetadata lists the outputs and labels; `ortserve status` shows the kind;
- the native front end serves the WordPiece one itself (the C++ tokenizer's spans), passes the BPE one to Python;
- a bad aggregation, aggregation for a classifier, classification on ENTITIES, an unknown output or a TEXT_PAIR is
  INVALID_ARGUMENT with the message, over real gRPC, both front ends.
"""

from __future__ import annotations

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
from support.server_process import ServerProcess, serving_published

from ortserve.prepare.importer import ImportResult, import_checkpoint
from ortserve.proto import grpc_service_pb2 as pb

BIO = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC")
IOBES = ("O", "B-ORG", "I-ORG", "E-ORG", "S-ORG", "S-LOC")
AGGREGATIONS = ("none", "simple", "first", "average", "max")
TEXTS = [
    "John Smith lives in Paris.",
    "Zoë visited Malmö and Düsseldorf with José",
    "東京 と 大阪 に 行きました 🎉 yesterday",
    "ok",
    "",
    "Hello,world!! (parenthesised) e-mail: a.b@example.com #tag",
    "naïve café crème brûlée — Ångström",
]
LOGIT_TOLERANCE = 1e-4
TRITON_SCRIPT = Path(__file__).parents[2] / "support" / "triton_client.py"


@pytest.fixture(scope="session")  # not per front end: built once, kept across the frontend reorder
def bundles(tmp_path_factory: pytest.TempPathFactory, torch_one_thread: None) -> dict[str, tuple[Path, ImportResult]]:
    """model name -> (the transformers checkpoint directory, its import)."""
    root = tmp_path_factory.mktemp("tokens")
    bert = make_checkpoint(root / "bert-ck", "bert", task="tokens", labels=BIO, seed=21)
    roberta = make_checkpoint(root / "roberta-ck", "roberta", task="tokens", labels=IOBES, seed=22)
    single = make_checkpoint(root / "single-ck", "bert", seed=23)
    return {
        "ner-bert": (bert, import_checkpoint(bert, root / "ner-bert", max_seq_len=IMPORT_MAX_SEQ_LEN)),
        "ner-roberta": (roberta, import_checkpoint(roberta, root / "ner-roberta", max_seq_len=IMPORT_MAX_SEQ_LEN)),
        "single": (single, import_checkpoint(single, root / "single", max_seq_len=IMPORT_MAX_SEQ_LEN)),
    }


@pytest.fixture(scope="module")
def served(bundles: dict[str, tuple[Path, ImportResult]], tmp_path_factory: pytest.TempPathFactory,
           frontend: str) -> Iterator[ServerProcess]:
    bundle_dirs = {name: result.path for name, (_, result) in bundles.items()}
    with serving_published(tmp_path_factory.mktemp("tokens-store"), bundle_dirs,
                           ["--frontend", frontend, *SMALL_BATCHES], http=True) as server:
        yield server


@pytest.fixture(scope="session")  # not per front end: built once, kept across the frontend reorder
def pipelines(bundles: dict[str, tuple[Path, ImportResult]]) -> dict[str, Any]:
    """model name -> transformers' token-classification pipeline over the same checkpoint."""
    import transformers

    pipelines = {name: transformers.pipeline("token-classification", model=str(checkpoint),
                                             tokenizer=str(checkpoint), device="cpu")
                 for name, (checkpoint, _) in bundles.items() if name.startswith("ner-")}
    for pipe in pipelines.values():  # it truncates where the bundle does (texts past it are answered in part)
        pipe.tokenizer.model_max_length = IMPORT_MAX_SEQ_LEN
    return pipelines


def infer(stub: Any, model: str, texts: Sequence[str], *, aggregation: str | None = None,
          outputs: Sequence[str] = ("ENTITIES", "TOKEN_LOGITS", "CHARS_READ"), raw: bool = False,
          request_id: str | None = None) -> dict[str, Any]:
    """name -> the decoded output: ENTITIES a list of entity lists, TOKEN_LOGITS [N, T, labels], CHARS_READ [N]."""
    request = pb.ModelInferRequest(model_name=model)
    request.inputs.add(name="TEXT", datatype="BYTES", shape=[len(texts)]).contents.bytes_contents.extend(
        t.encode() for t in texts)
    if aggregation is not None:
        request.parameters["aggregation"].string_param = aggregation
    for name in outputs:
        request.outputs.add(name=name).parameters["binary_data"].bool_param = raw
    reply = stub.ModelInfer(request, timeout=60,
                            metadata=(("x-request-id", request_id),) if request_id is not None else None)
    return decode_reply(reply)


def decode_reply(reply: pb.ModelInferResponse) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for i, tensor in enumerate(reply.outputs):
        shape = list(tensor.shape)
        raw = reply.raw_output_contents[i] if reply.raw_output_contents else None
        if tensor.datatype == "BYTES":
            if raw is not None:
                elements, offset = [], 0
                while offset < len(raw):
                    size = int.from_bytes(raw[offset:offset + 4], "little")
                    elements.append(raw[offset + 4:offset + 4 + size])
                    offset += 4 + size
            else:
                elements = list(tensor.contents.bytes_contents)
            out[tensor.name] = [json.loads(e) for e in elements]
        elif tensor.datatype == "INT64":
            values = np.frombuffer(raw, "<i8") if raw is not None else np.array(tensor.contents.int64_contents)
            out[tensor.name] = values.reshape(shape)
        else:
            values = np.frombuffer(raw, "<f4") if raw is not None else np.array(tensor.contents.fp32_contents)
            out[tensor.name] = values.reshape(shape)
    return out


def pipeline_entities(pipe: Any, text: str, logits: np.ndarray, aggregation: str) -> list[dict[str, Any]]:
    """What transformers' pipeline reports for `text` when its model answers `logits` [T, labels] (the server's)."""
    import torch

    preprocess, _, postprocess = pipe._sanitize_parameters(aggregation_strategy=aggregation)
    chunks = []
    for model_inputs in pipe.preprocess(text, **preprocess):
        tokens = int(model_inputs["input_ids"].shape[1])
        outputs = {
            "logits": torch.from_numpy(np.array(logits[None, :tokens])),
            "special_tokens_mask": model_inputs.pop("special_tokens_mask"),
            "offset_mapping": model_inputs.pop("offset_mapping", None),
            "sentence": model_inputs.pop("sentence"), "is_last": model_inputs.pop("is_last"),
            **model_inputs,
        }
        chunks.append(outputs)
    return list(pipe.postprocess(chunks, **postprocess))


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.parametrize("model", ["ner-bert", "ner-roberta"])
def test_entities_equal_the_transformers_pipeline(stub: Any, pipelines: dict[str, Any], model: str,
                                                  aggregation: str) -> None:
    reply = infer(stub, model, TEXTS, aggregation=aggregation, raw=aggregation == "max")
    assert reply["TOKEN_LOGITS"].shape[0] == len(TEXTS)
    compared = 0
    for i, text in enumerate(TEXTS):
        expected = pipeline_entities(pipelines[model], text, reply["TOKEN_LOGITS"][i], aggregation)
        got = reply["ENTITIES"][i]
        key = "entity" if aggregation == "none" else "entity_group"
        assert [(e["label"], e["start"], e["end"]) for e in got] == [
            (e[key], e["start"], e["end"]) for e in expected], text
        for ours, theirs in zip(got, expected, strict=True):
            assert ours["text"] == text[ours["start"]:ours["end"]]
            assert np.float32(ours["score"]) == pytest.approx(np.float32(theirs["score"]), rel=1e-6, abs=1e-7)
            if aggregation == "none":
                assert ours["index"] == theirs["index"]
        compared += len(got)
    assert compared > 0, "no entity in any text: the comparison said nothing"


@pytest.mark.parametrize("model", ["ner-bert", "ner-roberta"])
def test_token_logits_equal_pytorch(stub: Any, bundles: dict[str, tuple[Path, ImportResult]], model: str) -> None:
    import torch
    import transformers

    checkpoint = bundles[model][0]
    tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint)
    net = transformers.AutoModelForTokenClassification.from_pretrained(checkpoint).eval()
    reply = infer(stub, model, TEXTS, outputs=("TOKEN_LOGITS", "CHARS_READ", "TOKEN_OFFSETS"), raw=True)
    logits, spans = reply["TOKEN_LOGITS"], reply["TOKEN_OFFSETS"]
    assert spans.shape == (*logits.shape[:2], 2)
    chars_read = []
    for i, text in enumerate(TEXTS):
        inputs = tokenizer(text, truncation=True, max_length=IMPORT_MAX_SEQ_LEN, return_tensors="pt",
                           return_offsets_mapping=True, return_special_tokens_mask=True)
        offsets, special = inputs.pop("offset_mapping")[0].tolist(), inputs.pop("special_tokens_mask")[0].tolist()
        with torch.no_grad():
            expected = net(**inputs).logits[0].numpy()
        tokens = len(expected)
        np.testing.assert_allclose(logits[i, :tokens], expected, atol=LOGIT_TOLERANCE, rtol=0)
        assert not logits[i, tokens:].any(), "positions past a text's tokens are zeros"
        assert spans[i, :tokens].tolist() == [list(o) for o in offsets]  # HF's offsets, special tokens (0, 0)
        assert (spans[i, tokens:] == -1).all()
        whole = len(tokenizer(text)["input_ids"]) <= IMPORT_MAX_SEQ_LEN
        chars_read.append(len(text) if whole else max(end for (_, end), s in zip(offsets, special, strict=True)
                                                      if not s))
    assert reply["CHARS_READ"].tolist() == chars_read
    assert chars_read[-2] < len(TEXTS[-2]), "one text is past max_seq_len: it is answered in part"


def test_a_long_text_is_answered_for_the_part_read(stub: Any, bundles: dict[str, tuple[Path, ImportResult]]) -> None:
    from tokenizers import Tokenizer

    text = " ".join(["Paris"] * IMPORT_MAX_SEQ_LEN) + " and then Berlin"
    tokenizer = Tokenizer.from_file(str(bundles["ner-bert"][1].path / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=IMPORT_MAX_SEQ_LEN)
    encoding = tokenizer.encode(text)
    last_read = max(end for (_, end), special in zip(encoding.offsets, encoding.special_tokens_mask, strict=True)
                    if not special)
    reply = infer(stub, "ner-bert", [text, "Paris"], aggregation="none")
    assert reply["CHARS_READ"].tolist() == [last_read, len("Paris")]
    assert last_read < len(text)
    assert all(e["end"] <= last_read for e in reply["ENTITIES"][0])
    assert reply["TOKEN_LOGITS"].shape[1] == IMPORT_MAX_SEQ_LEN


def test_mixed_lengths_batched_together_answer_as_alone(served: ServerProcess, stub: Any) -> None:
    """Calls of texts of mixed lengths that share engine runs answer what each answers alone. The sharing is arranged,
    not left to a burst (an idle engine may answer each call of a burst alone on a loaded machine): the burst is sent
    right behind calls that keep the engine busy (support.batching.burst_behind_busy: sent again, a bounded number of
    times, until some shared a run)."""
    texts = [" ".join(["Zoë"] * n) + " in Malmö" for n in (0, 1, 3, 7, 12, 20, 31, 2, 5, 9, 4, 15, 6, 11, 8, 10)]
    alone = [infer(stub, "ner-bert", [t], aggregation="first") for t in texts]

    def request(batch: Sequence[str], outputs: Sequence[str]) -> pb.ModelInferRequest:
        call = pb.ModelInferRequest(model_name="ner-bert")
        call.inputs.add(name="TEXT", datatype="BYTES", shape=[len(batch)]).contents.bytes_contents.extend(
            t.encode() for t in batch)
        call.parameters["aggregation"].string_param = "first"
        for name in outputs:
            call.outputs.add(name=name)
        return call

    def as_alone(replies: list[pb.ModelInferResponse]) -> None:
        for one, reply in zip(alone, replies, strict=True):
            batched = decode_reply(reply)
            np.testing.assert_allclose(batched["TOKEN_LOGITS"], one["TOKEN_LOGITS"], atol=1e-5, rtol=0)
            assert [(e["label"], e["start"], e["end"]) for e in batched["ENTITIES"][0]] == [
                (e["label"], e["start"], e["end"]) for e in one["ENTITIES"][0]]

    shared = burst_behind_busy(served, busy=request([" ".join(["Zoë in Malmö"] * 20)] * 128, ["ENTITIES"]),
                               burst=[request([t], ["ENTITIES", "TOKEN_LOGITS"]) for t in texts], check=as_alone)
    assert all(line["model"] == "ner-bert" for line in shared)


def test_rest_answers_what_grpc_does(served: ServerProcess, stub: Any) -> None:
    body = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [2], "data": TEXTS[:2]}],
            "parameters": {"aggregation": "average"}}
    reply = requests.post(f"http://127.0.0.1:{served.http_port}/v2/models/ner-bert/infer", json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    outputs = {o["name"]: o for o in reply.json()["outputs"]}
    assert set(outputs) == {"ENTITIES", "CHARS_READ"}
    assert outputs["CHARS_READ"]["datatype"] == "INT64" and outputs["CHARS_READ"]["data"] == [len(t) for t in TEXTS[:2]]
    grpc_reply = infer(stub, "ner-bert", TEXTS[:2], aggregation="average", outputs=("ENTITIES",))
    assert [json.loads(e) for e in outputs["ENTITIES"]["data"]] == grpc_reply["ENTITIES"]


def test_a_stock_tritonclient_reads_entities(served: ServerProcess, stub: Any, tmp_path: Path) -> None:
    """The README's example: tritonclient sends TEXT with the request parameter aggregation and reads ENTITIES."""
    texts_path = tmp_path / "texts.json"
    texts_path.write_text(json.dumps(TEXTS[:3]))
    out = subprocess.run([sys.executable, str(TRITON_SCRIPT), served.address, "ner-roberta", str(texts_path),
                          "--output", "ENTITIES", "--aggregation", "first"],
                         capture_output=True, text=True, timeout=60, env={**os.environ})
    assert out.returncode == 0, out.stderr
    reply = json.loads(out.stdout)
    assert reply["shape"] == [3] and reply["metadata"]["outputs"][0]["name"] == "ENTITIES"
    assert reply["entities"] == infer(stub, "ner-roberta", TEXTS[:3], aggregation="first")["ENTITIES"]


def test_metadata_and_status_say_what_it_answers(stub: Any, served: ServerProcess) -> None:
    loaded = served.wait_event("version_loaded", model="ner-bert")
    assert loaded["verify"] == "passed"  # its per-token reference answers, through its own batcher
    assert loaded["tokenizer"] == "native" and loaded["kind"] == "token classifier"
    metadata = stub.ModelMetadata(pb.ModelMetadataRequest(name="ner-bert"))
    assert [(t.name, t.datatype, list(t.shape)) for t in metadata.inputs] == [("TEXT", "BYTES", [-1])]
    assert [(t.name, t.datatype, list(t.shape)) for t in metadata.outputs] == [
        ("ENTITIES", "BYTES", [-1]), ("CHARS_READ", "INT64", [-1]), ("TOKEN_LOGITS", "FP32", [-1, -1, len(BIO)]),
        ("TOKEN_OFFSETS", "INT64", [-1, -1, 2])]
    assert metadata.parameters["kind"].string_param == "token-classifier"
    assert json.loads(metadata.parameters["labels"].string_param) == list(BIO)
    status = subprocess.run([sys.executable, "-m", "ortserve.service.cli", "status", "--address", served.address],
                            capture_output=True, text=True, timeout=30, env={**os.environ})
    assert status.returncode == 0, status.stderr
    rows = status.stdout.splitlines()
    at = next(i for i, row in enumerate(rows) if row.startswith("model ner-bert"))
    assert "token-classifier device=cpu" in rows[at + 1]



def test_the_front_end_reached_serves_a_wordpiece_one(served: ServerProcess, stub: Any, frontend: str) -> None:
    """ner-bert's spans come from the C++ WordPiece, so the native front end serves its calls itself (its log line
    names it); ner-roberta's come from HF tokenizers, so its calls are passed on to Python there."""
    for model in ("ner-bert", "ner-roberta"):
        infer(stub, model, ["Ada Lovelace wrote in London."], request_id=f"front-{frontend}-{model}")
    bert = served.wait_event("request", request_id=f"front-{frontend}-ner-bert")
    roberta = served.wait_event("request", request_id=f"front-{frontend}-ner-roberta")
    assert bert["status"] == roberta["status"] == "OK"
    assert bert.get("frontend") == ("native" if frontend == "native" else None)
    assert "frontend" not in roberta


BAD_CALLS = {
    "unknown aggregation": ("ner-bert", {"aggregation": "longest"}, (),
                            "request parameter 'aggregation' must be 'simple', 'first', 'average', 'max' or 'none', "
                            "got 'longest'"),
    "aggregation not a string": ("ner-bert", {"aggregation": 3}, (),
                                 "request parameter 'aggregation' must be a string (string_param), got int64_param"),
    "aggregation for a classifier": ("single", {"aggregation": "simple"}, (),
                                     "request parameter 'aggregation' applies to a token classifier's 'ENTITIES'; "
                                     "model 'single' is a classifier model"),
    "unknown output": ("ner-bert", {}, (("LOGITS", 0),),
                       "unknown output 'LOGITS' requested; model 'ner-bert' (a token-classifier model) has outputs "
                       "['ENTITIES', 'CHARS_READ', 'TOKEN_LOGITS', 'TOKEN_OFFSETS']"),
    "classification on entities": ("ner-bert", {}, (("ENTITIES", 2),),
                                   "output 'ENTITIES' does not take parameter 'classification'"),
}


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_bad_calls_are_invalid_argument(stub: Any, case: str) -> None:
    model, params, outputs, message = BAD_CALLS[case]
    request = pb.ModelInferRequest(model_name=model)
    request.inputs.add(name="TEXT", datatype="BYTES", shape=[1]).contents.bytes_contents.append(b"John in Paris")
    for key, value in params.items():
        if isinstance(value, str):
            request.parameters[key].string_param = value
        else:
            request.parameters[key].int64_param = value
    for name, k in outputs:
        out = request.outputs.add(name=name)
        if k:
            out.parameters["classification"].int64_param = k
    with pytest.raises(grpc.RpcError) as caught:
        stub.ModelInfer(request, timeout=30)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in (caught.value.details() or "")
    assert infer(stub, "ner-bert", ["still serving"], outputs=("CHARS_READ",))["CHARS_READ"].tolist() == [13]


def test_a_pair_sent_to_a_token_classifier_is_refused(stub: Any) -> None:
    request = pb.ModelInferRequest(model_name="ner-bert")
    for name in ("TEXT", "TEXT_PAIR"):
        request.inputs.add(name=name, datatype="BYTES", shape=[1]).contents.bytes_contents.append(b"Paris")
    with pytest.raises(grpc.RpcError) as caught:
        stub.ModelInfer(request, timeout=30)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "unexpected input 'TEXT_PAIR'" in (caught.value.details() or "")


WORDS = ["Zoë", "visited", "Malmö", "東京", "大阪", "🎉", "naïve", "e-mail", "a.b@example.com", "(x)", "Hello,world",
         "ﬁne", "İstanbul", "ß", "JOSÉ", "x" * 40, "don't", "12:30", "\u0301", "\t"]
texts_strategy = st.lists(st.sampled_from(WORDS), min_size=0, max_size=12).map(" ".join)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=texts_strategy)
@pytest.mark.parametrize("model", ["ner-bert", "ner-roberta"])
def test_token_spans_are_the_pipelines(bundles: dict[str, tuple[Path, ImportResult]], pipelines: dict[str, Any],
                                       model: str, text: str) -> None:
    """Each token's span and subword flag (what aggregation groups by) as the pipeline's gather_pre_entities."""
    from ortserve.service.tokenization import open_tokenizer

    bundle = bundles[model][1].path
    encoding = open_tokenizer(bundle / "tokenizer.json", 10_000, tokens=True).encode_tokens([text])[0]
    pipe = pipelines[model]
    inputs = pipe.tokenizer(text, return_special_tokens_mask=True, return_offsets_mapping=True)
    labels = len(pipe.model.config.id2label)
    pre = pipe.gather_pre_entities(text, np.array(inputs["input_ids"]), np.zeros((len(inputs["input_ids"]), labels)),
                                   inputs["offset_mapping"], np.array(inputs["special_tokens_mask"]), "simple")
    ours = [(int(s), int(e), bool(sub)) for s, e, sub, special in encoding.spans if not special]
    assert ours == [(p["start"], p["end"], bool(p["is_subword"])) for p in pre]
    assert encoding.ids.tolist() == inputs["input_ids"]

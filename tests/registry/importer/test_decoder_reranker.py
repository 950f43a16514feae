"""A decoder reranker in Qwen3-Reranker's form (issue 56 item 2): a tiny random Qwen3ForCausalLM with a byte-level BPE
tokenizer (that appends nothing, pads on the left), imported with --task rerank, held to the model card's reference
code, written out here as the card has it (its prompt around query and document, the ids truncated to leave room for
the prompt, left-padded batches, log_softmax over the "no" and "yes" logits at the last position, exp of "yes"):
- at import: the parity gate passed on every text, and the bundle's tokenizer makes the card's ids for short pairs
  and pairs cut at max_seq_len;
- served by one real server per front end: SCORE [N] over gRPC and REST for a short and a long query against short,
  long and multilingual passages, one pair and many, equal to the card's P(yes) within 1e-4; LOGITS is yes - no;
  Cohere's /v2/rerank, Jina's /v1/rerank and TEI's /rerank rank and score as the card; its load-time check passed;
  calls of mixed lengths sharing engine runs answer as alone; a call without TEXT_PAIR is INVALID_ARGUMENT."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import requests
from support.batching import burst_behind_busy
from support.hf_checkpoints import make_decoder_checkpoint
from support.importing import SMALL_BATCHES
from support.server_process import ServerProcess, infer_request, logits_of, serving_published

from ortserve.bundle import tokenizer as bundle_tokenizer
from ortserve.prepare.importer import LOGIT_TOLERANCE, ImportResult, import_checkpoint
from ortserve.proto import grpc_service_pb2 as pb

MAX_SEQ_LEN = 256
"""Room for the card's prompt (about 180 tokens with the test tokenizer: it knows few words) and a pair; the long
pairs are cut."""
SCORE_TOLERANCE = 1e-4
MODEL = "qwen3-reranker"
QUERY = "Which phone has the longest battery life?"
LONG_QUERY = "Which phone keeps its charge the longest when the screen is on all day, maps and calls included?"
"""Long for this tokenizer (it knows few words), leaving the passages some of the room the prompt leaves."""
PASSAGES = [
    "The battery lasts two days.",
    "ok",
    "Das Essen war ausgezeichnet, der Service freundlich.",
    "最高の映画でした 🎉",
    "Обслуживание было медленным, но еда вкусная.",
    " ".join(["This phone's battery kept going through a full day of video, maps and calls."] * 8),
]

# -- the model card's reference code (Qwen3-Reranker), as it is written there -------------------------------------

PREFIX = ("<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct "
          "provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n")
SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"


def format_instruction(instruction: str, query: str, doc: str) -> str:
    return f"<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {doc}"


class Card:
    """The card's process_inputs and compute_logits around the checkpoint, max_length = MAX_SEQ_LEN."""

    def __init__(self, path: Path) -> None:
        import transformers

        self.tokenizer = transformers.AutoTokenizer.from_pretrained(str(path), padding_side="left")
        self.model = transformers.AutoModelForCausalLM.from_pretrained(str(path)).eval()
        self.token_false_id = self.tokenizer.convert_tokens_to_ids("no")
        self.token_true_id = self.tokenizer.convert_tokens_to_ids("yes")
        self.prefix_tokens = self.tokenizer.encode(PREFIX, add_special_tokens=False)
        self.suffix_tokens = self.tokenizer.encode(SUFFIX, add_special_tokens=False)

    def ids(self, queries: Sequence[str], docs: Sequence[str]) -> list[list[int]]:
        pairs = [format_instruction(INSTRUCTION, q, d) for q, d in zip(queries, docs, strict=True)]
        inputs = self.tokenizer(pairs, padding=False, truncation="longest_first", return_attention_mask=False,
                                max_length=MAX_SEQ_LEN - len(self.prefix_tokens) - len(self.suffix_tokens))
        return [self.prefix_tokens + list(ele) + self.suffix_tokens for ele in inputs["input_ids"]]

    def stacked(self, queries: Sequence[str], docs: Sequence[str]) -> Any:
        import torch

        inputs = self.tokenizer.pad({"input_ids": self.ids(queries, docs)}, padding=True, return_tensors="pt",
                                    max_length=MAX_SEQ_LEN)
        with torch.no_grad():
            batch_scores = self.model(**inputs).logits[:, -1, :]
            true_vector = batch_scores[:, self.token_true_id]
            false_vector = batch_scores[:, self.token_false_id]
            return torch.stack([false_vector, true_vector], dim=1)

    def scores(self, queries: Sequence[str], docs: Sequence[str]) -> np.ndarray:
        import torch

        batch_scores = torch.nn.functional.log_softmax(self.stacked(queries, docs), dim=1)
        return np.asarray(batch_scores[:, 1].exp().tolist(), np.float32)

    def logits(self, queries: Sequence[str], docs: Sequence[str]) -> np.ndarray:
        stacked = self.stacked(queries, docs).numpy()
        return (stacked[:, 1] - stacked[:, 0]).astype(np.float32)


# -- fixtures ------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")  # not per front end: built once, kept across the frontend reorder
def reranker(tmp_path_factory: pytest.TempPathFactory, torch_one_thread: None) -> tuple[Path, ImportResult]:
    root = tmp_path_factory.mktemp("decoder-reranker")
    checkpoint = make_decoder_checkpoint(root / "checkpoint", "qwen3", seed=70, reranker=True)
    return checkpoint, import_checkpoint(checkpoint, root / "bundle", task="rerank", max_seq_len=MAX_SEQ_LEN)


@pytest.fixture(scope="session")
def card(reranker: tuple[Path, ImportResult]) -> Card:
    return Card(reranker[0])


@pytest.fixture(scope="module")
def served(reranker: tuple[Path, ImportResult], tmp_path_factory: pytest.TempPathFactory,
           frontend: str) -> Iterator[ServerProcess]:
    with serving_published(tmp_path_factory.mktemp("reranker-store"), {MODEL: reranker[1].path},
                           ["--frontend", frontend, *SMALL_BATCHES], http=True) as server:
        yield server


def pair_request(texts: Sequence[str], queries: Sequence[str], *, outputs: Sequence[str] = ()) -> pb.ModelInferRequest:
    """The README's call shape: the passages as TEXT [N], the query as TEXT_PAIR [1] or [N]."""
    request = pb.ModelInferRequest(model_name=MODEL)
    for name, elements in (("TEXT", texts), ("TEXT_PAIR", queries)):
        request.inputs.add(name=name, datatype="BYTES", shape=[len(elements)]).contents.bytes_contents.extend(
            e.encode() for e in elements)
    for name in outputs:
        request.outputs.add(name=name)
    return request


# -- import --------------------------------------------------------------------------------------------------------


def test_imports_as_a_reranker_with_the_cards_template(reranker: tuple[Path, ImportResult]) -> None:
    manifest = reranker[1].manifest
    assert (manifest.format, manifest.labels, manifest.pairs, manifest.score_activation) == (
        "onnx-text-classifier", ("yes",), True, "sigmoid")
    assert manifest.pair_template == (f"<Instruct>: {INSTRUCTION}\n<Query>: ", "\n<Document>: ", "")
    assert reranker[1].parity.passed and reranker[1].parity.tokenizer_mismatches == 0
    assert "Qwen3-Reranker's reference code" in reranker[1].parity.reference


def test_the_bundle_tokenizer_makes_the_cards_ids(reranker: tuple[Path, ImportResult], card: Card) -> None:
    """The template's text, then tokenizer.json's prefix and suffix ids around it, truncated inside them."""
    template = reranker[1].manifest.pair_template
    assert template is not None
    tokenizer = bundle_tokenizer.load(reranker[1].path / "tokenizer.json", MAX_SEQ_LEN)
    for query in (QUERY, LONG_QUERY):
        queries = [query] * len(PASSAGES)
        expected = card.ids(queries, PASSAGES)
        got = [tokenizer.encode(template[0] + q + template[1] + d + template[2]).ids
               for q, d in zip(queries, PASSAGES, strict=True)]
        assert got == expected
    assert len(expected[-1]) == MAX_SEQ_LEN and expected[-1][-len(card.suffix_tokens):] == card.suffix_tokens


# -- served --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("query", [QUERY, LONG_QUERY], ids=["short-query", "long-query"])
def test_score_equals_the_cards_p_yes(stub: Any, served: ServerProcess, card: Card, query: str) -> None:
    loaded = served.wait_event("version_loaded", model=MODEL)
    assert loaded["verify"] == "passed" and loaded["tokenizer"] == "hf" and loaded["kind"] == "reranker"
    queries = [query] * len(PASSAGES)
    expected = card.scores(queries, PASSAGES)
    assert np.ptp(expected) > 100 * SCORE_TOLERANCE  # the random model tells the passages apart
    many = stub.ModelInfer(pair_request(PASSAGES, [query]))
    assert many.outputs[0].name == "SCORE" and list(many.outputs[0].shape) == [len(PASSAGES)]
    np.testing.assert_allclose(logits_of(many), expected, atol=SCORE_TOLERANCE, rtol=0)
    one = stub.ModelInfer(pair_request(PASSAGES[:1], [query]))
    np.testing.assert_allclose(logits_of(one), expected[:1], atol=SCORE_TOLERANCE, rtol=0)

    logits = logits_of(stub.ModelInfer(pair_request(PASSAGES, queries, outputs=["LOGITS"])))[:, 0]
    want = card.logits(queries, PASSAGES)
    assert (np.abs(logits - want) <= LOGIT_TOLERANCE * np.maximum(1.0, np.abs(want))).all(), logits - want

    doc = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [len(PASSAGES)], "data": PASSAGES},
                      {"name": "TEXT_PAIR", "datatype": "BYTES", "shape": [1], "data": [query]}]}
    rest = requests.post(f"http://127.0.0.1:{served.http_port}/v2/models/{MODEL}/infer", json=doc, timeout=30).json()
    np.testing.assert_allclose(rest["outputs"][0]["data"], expected, atol=SCORE_TOLERANCE, rtol=0)


def test_the_rerank_routes_rank_and_score_as_the_card(served: ServerProcess, card: Card) -> None:
    url = f"http://127.0.0.1:{served.http_port}"
    expected = card.scores([QUERY] * len(PASSAGES), PASSAGES)
    best_first = sorted(range(len(PASSAGES)), key=lambda i: -expected[i])
    for path, body in (("/v2/rerank", {"documents": PASSAGES}),
                       ("/v1/rerank", {"documents": [{"text": p} for p in PASSAGES]})):
        reply = requests.post(url + path, json={"model": MODEL, "query": QUERY, **body}, timeout=30)
        assert reply.status_code == 200, reply.text
        results = reply.json()["results"]
        assert [r["index"] for r in results] == best_first, path
        if path == "/v1/rerank":  # the tokens the model read: the card's ids, its prompt included
            assert reply.json()["usage"]["total_tokens"] == sum(map(len, card.ids([QUERY] * len(PASSAGES), PASSAGES)))
        np.testing.assert_allclose([r["relevance_score"] for r in results], expected[best_first],
                                   atol=SCORE_TOLERANCE, rtol=0)
    tei = requests.post(url + "/rerank", json={"model": MODEL, "query": QUERY, "texts": PASSAGES}, timeout=30).json()
    assert [r["index"] for r in tei] == best_first
    np.testing.assert_allclose([r["score"] for r in tei], expected[best_first], atol=SCORE_TOLERANCE, rtol=0)


def test_pairs_sharing_engine_runs_answer_as_alone(served: ServerProcess, stub: Any) -> None:
    """No answer changes with its batch neighbours: passages of mixed lengths, each its own call, sent behind calls
    that keep the engine busy so that they share runs (support.batching.burst_behind_busy)."""
    passages = [" ".join(["battery"] * n) + " life" for n in (0, 1, 3, 7, 12, 20, 31, 2, 5, 9, 4, 15, 6, 11, 8, 10)]
    alone = [logits_of(stub.ModelInfer(pair_request([p], [QUERY]))) for p in passages]

    def as_alone(replies: list[pb.ModelInferResponse]) -> None:
        for one, reply in zip(alone, replies, strict=True):
            np.testing.assert_allclose(logits_of(reply), one, atol=1e-5, rtol=0)

    busy = pair_request([PASSAGES[-1]] * 64, [LONG_QUERY])
    shared = burst_behind_busy(served, busy=busy, burst=[pair_request([p], [QUERY]) for p in passages],
                               check=as_alone)
    assert all(line["model"] == MODEL for line in shared)


def test_a_text_without_its_pair_is_refused(stub: Any) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        stub.ModelInfer(infer_request(["just one text"], model=MODEL))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "TEXT_PAIR" in caught.value.details()


def test_the_server_tokenizer_reads_the_template_query_first(reranker: tuple[Path, ImportResult], card: Card) -> None:
    """open_tokenizer with the manifest's template: HF tokenizers (`native` refused naming why), each pair as the
    card's ids, the query first."""
    from ortserve.service.tokenization import TokenizerError, open_tokenizer

    path, manifest = reranker[1].path / "tokenizer.json", reranker[1].manifest
    tokenizer = open_tokenizer(path, MAX_SEQ_LEN, pairs=True, pair_template=manifest.pair_template)
    assert tokenizer.kind == "hf" and tokenizer.encode_pairs is not None
    ids, seconds = tokenizer.encode_pairs([QUERY] * len(PASSAGES), PASSAGES)
    assert [row.tolist() for row in ids] == card.ids([QUERY] * len(PASSAGES), PASSAGES) and set(seconds) == {0}
    backwards, _ = tokenizer.encode_pairs(PASSAGES[:1], [QUERY])
    assert backwards[0].tolist() != ids[0].tolist()
    with pytest.raises(TokenizerError, match="a pair template"):
        open_tokenizer(path, MAX_SEQ_LEN, "native", pairs=True, pair_template=manifest.pair_template)

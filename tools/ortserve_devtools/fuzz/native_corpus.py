"""The seed corpus of the native fuzz targets (ortserve/engine_ext/fuzz/corpus), written from code so that it can be
reviewed and regenerated: `scripts/fuzz_native --make-corpus`.

corpus/decode/: serialised ModelInferRequests, one per path through infer_codec.cc (well-formed in both encodings,
each refusal, the classification extension's parameters), plus UTF-8 edge cases as raw bytes (the target also runs
IsValidUtf8 on its whole input). corpus/wordpiece/: a configuration byte (see wordpiece_fuzzer.cc), then a text.
A crash input a run finds (fuzz-findings/native/, replayed by scripts/fuzz_native --replay FILE) joins the seeds
here once fixed, as a regression seed (huge-count).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path

from ortserve.proto import grpc_service_pb2 as pb
from ortserve_devtools.checkout import ROOT
from ortserve_devtools.fuzz.requests import join_raw

CORPUS = ROOT / "ortserve" / "engine_ext" / "fuzz" / "corpus"


def _request(texts: Iterable[bytes], *, raw: bool = False, shape: list[int] | None = None) -> pb.ModelInferRequest:
    elements = list(texts)
    request = pb.ModelInferRequest(model_name="classifier", id="seed")
    tensor = request.inputs.add(name="TEXT", datatype="BYTES", shape=shape or [len(elements)])
    if raw:
        request.raw_input_contents.append(join_raw(elements))
    else:
        tensor.contents.bytes_contents.extend(elements)
    return request


def decode_seeds() -> dict[str, bytes]:
    seeds: dict[str, pb.ModelInferRequest] = {
        "contents": _request([b"the movie was great", b"bad plot"]),
        "raw": _request([b"one", b"", "caf\u00e9 \u4e2d\u6587 \U0001f600".encode()], raw=True),
        "shape-n-1": _request([b"a", b"b"], shape=[2, 1]),
        "not-utf8": _request([b"ok", b"\xff\xfe bad", b"\xed\xa0\x80"]),
        "raw-overrun": _request([b"ab"], raw=True),
        "raw-truncated-prefix": _request([b"ab"], raw=True),
        "raw-and-contents": _request([b"ab"], raw=True),
        "count-mismatch": _request([b"a", b"b"], shape=[3]),
        "negative-count": _request([b"a"], shape=[-1]),
        "wrong-datatype": _request([b"a"]),
        "binary-data-false": _request([b"x"]),
        "classification": _request([b"x", b"y"], raw=True),
        "classification-uint64-huge": _request([b"x"]),
        "output-twice": _request([b"x"]),
        "embedding-output": _request([b"x"]),
        "routing-key": _request([b"x"]),
        "routing-key-int": _request([b"x"]),
        # A regression seed (a crash until infer_codec.cc reserved at most what the message holds): shape [2**40]
        # with one element, which DecodeRequest once answered by reserving 2**40 text views.
        "huge-count": _request([b"x"], shape=[2**40]),
        # Pairs (a cross-encoder's TEXT_PAIR): one per text, one for all, raw (an entry per input), a count that fits
        # neither.
        "pairs": _request([b"query one", b"query two"]),
        "pairs-one-for-all": _request([b"passage", b"another", b""]),
        "pairs-raw": _request([b"q", "caf\u00e9".encode()], raw=True),
        "pairs-mismatch": _request([b"a", b"b", b"c"]),
        "score-output": _request([b"x"]),
        # A token classifier's call: an aggregation, its outputs (ENTITIES, TOKEN_LOGITS, TOKEN_OFFSETS, CHARS_READ),
        # bad ones.
        "entities": _request(["Zo\u00eb flew to \u6771\u4eac \U0001f600".encode(), b""]),
        "entities-raw": _request([b"John in Paris", b"x"], raw=True),
        "aggregation-unknown": _request([b"x"]),
        "aggregation-int": _request([b"x"]),
    }
    for name, second in (("pairs", [b"p1", b"p2"]), ("pairs-one-for-all", [b"the query"]), ("pairs-raw", [b"x", b"y"]),
                         ("pairs-mismatch", [b"x", b"y"]), ("score-output", [b"p"])):
        tensor = seeds[name].inputs.add(name="TEXT_PAIR", datatype="BYTES", shape=[len(second)])
        if name == "pairs-raw":
            seeds[name].raw_input_contents.append(join_raw(second))
        else:
            tensor.contents.bytes_contents.extend(second)
    seeds["score-output"].outputs.add(name="SCORE")
    seeds["entities"].parameters["aggregation"].string_param = "first"
    for name in ("ENTITIES", "TOKEN_LOGITS", "TOKEN_OFFSETS", "CHARS_READ"):
        seeds["entities"].outputs.add(name=name).parameters["binary_data"].bool_param = False
    seeds["entities-raw"].parameters["aggregation"].string_param = "none"
    seeds["aggregation-unknown"].parameters["aggregation"].string_param = "longest"
    seeds["aggregation-int"].parameters["aggregation"].int64_param = 1
    seeds["raw-overrun"].raw_input_contents[0] = b"\x09\x00\x00\x00ab"
    seeds["raw-truncated-prefix"].raw_input_contents[0] += b"\x01\x00"
    seeds["raw-and-contents"].inputs[0].contents.bytes_contents.append(b"ab")
    seeds["wrong-datatype"].inputs[0].datatype = "FP32"
    seeds["binary-data-false"].outputs.add(name="LOGITS").parameters["binary_data"].bool_param = False
    out = seeds["classification"].outputs.add(name="LOGITS")
    out.parameters["classification"].int64_param = 2
    seeds["classification"].parameters["scores"].string_param = "probabilities"
    seeds["classification-uint64-huge"].outputs.add(name="LOGITS").parameters["classification"].uint64_param = 2**64 - 1
    seeds["output-twice"].outputs.add(name="LOGITS")
    seeds["output-twice"].outputs.add(name="LOGITS")
    seeds["embedding-output"].outputs.add(name="EMBEDDING")
    seeds["routing-key"].parameters["routing_key"].string_param = "user-42"
    seeds["routing-key-int"].parameters["routing_key"].int64_param = 5
    out_bytes = {name: request.SerializeToString() for name, request in seeds.items()}
    # Raw bytes for IsValidUtf8: every boundary of every sequence length, valid and not.
    out_bytes["utf8-edges"] = ("\x7f\u0080\u07ff\u0800\ud7ff\ue000\uffff\U00010000\U0010ffff".encode()
                               + b"\xc2\x80\xdf\xbf\xe0\xa0\x80\xed\x9f\xbf\xf0\x90\x80\x80\xf4\x8f\xbf\xbf")
    out_bytes["utf8-invalid"] = (b"\xc0\x80\xc1\xbf\xe0\x9f\xbf\xed\xa0\x80\xf0\x8f\xbf\xbf"
                                 b"\xf4\x90\x80\x80\xf5\xff\xe2\x82")
    return out_bytes


def wordpiece_seeds() -> dict[str, bytes]:
    texts: dict[str, tuple[int, str | bytes]] = {
        "plain": (0, "The movie was GREAT!! unaffable playing"),
        "accents-cjk-emoji": (0, "Caf\u00e9 na\u00efve \u4e2d\u6587\u5b57 \U0001f600 e\u0301"),
        "added-tokens": (0, "[CLS] hello [SEP][MASK]x[UNK]"),
        "long": (0, " ".join(["the movie", "caf\u00e9", "\u4e2d", "playing!"] * 120)),
        "long-word": (0, "a" * 150 + " " + "\u00e9" * 101),
        "combining": (0, "a\u0301\u0300\u0302\u0316 \u1e9b\u0323"),
        "overlapping-added": (1, "abc ab <x> abcd Movie THE cafe\u0301"),
        "spaces": (1, "a\u3000b\u00a0c\u2028d\te\r\nf\u200bg"),
        "no-prefix": (2, "\u4e2d\u6587\x00\x7f\tplaying"),
        "cased-strip": (3, "\u00c5ngstr\u00f6m \u01c4 \u00df \ufb03 \u0130 playing"),
        "invalid-bytes": (3, b"\xff\xc0\x80\xed\xa0\x80ok\xe2\x82"),
        # The first text byte cuts the rest into a pair: here both texts pass max_len (the odd token's owner).
        "pair-both-long": (0, "\x53" + " ".join(["the movie", "caf\u00e9", "playing!"] * 60)),
    }
    return {name: bytes([config]) + (text if isinstance(text, bytes) else text.encode())
            for name, (config, text) in texts.items()}


def write(root: Path = CORPUS) -> None:
    for directory, seeds in ((root / "decode", decode_seeds()), (root / "wordpiece", wordpiece_seeds())):
        directory.mkdir(parents=True, exist_ok=True)
        for old in directory.iterdir():
            old.unlink()
        for name, data in seeds.items():
            (directory / name).write_bytes(data)
        print(f"native_corpus: {len(seeds)} inputs in {directory}")


if __name__ == "__main__":
    write(Path(sys.argv[1]) if len(sys.argv) > 1 else CORPUS)

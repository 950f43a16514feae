"""The HTTP port's limits against slow and vanishing clients (issue 54), over real sockets to a real server: a body
that stalls is answered 408 within http_body_timeout_s and its connection closed; a client that goes mid-body is one
info line and a count, never an error with a traceback; connections past http_max_connections are answered 503 and
closed; and 1,000 stalled clients neither delay a valid call past 1 s nor write an error line each.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from support.prometheus_text import metric, scrape
from support.server_process import ServerProcess, running_server

BODY_TIMEOUT_S = 1.0
MAX_CONNECTIONS = 40
INFER = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": ["a fine movie"]}]}


@pytest.fixture(scope="module")
def limited(tiny_bundle: Path) -> Iterator[ServerProcess]:
    with running_server(["--bundle", str(tiny_bundle), "--model-name", "classifier", "--frontend", "python",
                         "--http-body-timeout-s", str(BODY_TIMEOUT_S), "--http-max-connections",
                         str(MAX_CONNECTIONS)], http=True) as server:
        yield server


def _stalled(port: int, path: str = "/v2/models/classifier/infer", *, declared: int = 1000) -> socket.socket:
    """A connection whose request declares `declared` body bytes and sends 10 of them."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {declared}\r\n\r\n{{\"inputs\":".encode())
    return sock


def _read_all(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def _errors(server: ServerProcess) -> list[str]:
    return [line for line in server.raw_lines + server.stderr_lines
            if "Traceback" in line or '"level":"error"' in line.replace(" ", "") or line.startswith("ERROR")]


@pytest.mark.parametrize("path", ["/v2/models/classifier/infer", "/v1/embeddings", "/embed", "/v2/rerank"])
def test_a_stalled_body_is_408_within_the_timeout_and_closed(limited: ServerProcess, path: str) -> None:
    started = time.monotonic()
    with _stalled(limited.http_port, path) as sock:
        reply = _read_all(sock)  # the server closes the connection after its answer
    took = time.monotonic() - started
    assert reply.startswith(b"HTTP/1.1 408 "), reply[:200]
    assert b"http_body_timeout_s" in reply
    assert BODY_TIMEOUT_S - 0.1 < took < BODY_TIMEOUT_S + 2.0
    limited.wait_event("http_body_timeout", path=path)
    assert not _errors(limited)


def test_a_client_gone_mid_body_is_one_info_line_and_a_count(limited: ServerProcess) -> None:
    before = metric(scrape(limited.metrics_port), "ortserve_http_connections_lost_total", reason="reset")
    for path in ("/v2/models/classifier/infer", "/v1/embeddings"):
        _stalled(limited.http_port, path).close()
        event = limited.wait_event("http_client_gone", path=path)
        assert event["level"] == "info"
    assert metric(scrape(limited.metrics_port), "ortserve_http_connections_lost_total", reason="reset") == before + 2
    assert not _errors(limited)


def test_connections_past_the_cap_are_503_and_closed(limited: ServerProcess) -> None:
    held = [socket.create_connection(("127.0.0.1", limited.http_port), timeout=10) for _ in range(MAX_CONNECTIONS)]
    try:
        time.sleep(0.2)  # every one accepted and counted
        with socket.create_connection(("127.0.0.1", limited.http_port), timeout=10) as extra:
            reply = _read_all(extra)
        assert reply.startswith(b"HTTP/1.1 503 "), reply[:200]
        assert b"Retry-After: 1" in reply and b"http_max_connections" in reply
    finally:
        for sock in held:
            sock.close()
    time.sleep(0.2)
    url = f"http://127.0.0.1:{limited.http_port}/v2/models/classifier/infer"
    assert requests.post(url, json=INFER, timeout=10).status_code == 200
    assert metric(scrape(limited.metrics_port), "ortserve_http_connections_refused_total") >= 1


@pytest.mark.parametrize("request_bytes", [b"POST /embed HTTP/1.1\r\nHost x\r\n\r\n",
                                           b"POST /embed HTTP/1.1\r\nHost: x\r\nContent-Length: -4\r\n\r\n",
                                           b"POST /embed HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                                           b"zz\r\n{}\r\n0\r\n\r\n"],
                         ids=["header without colon", "negative length", "bad chunk size"])
def test_a_request_aiohttp_cannot_parse_is_400_and_no_error_line(limited: ServerProcess, request_bytes: bytes) -> None:
    with socket.create_connection(("127.0.0.1", limited.http_port), timeout=10) as sock:
        sock.sendall(request_bytes)
        reply = _read_all(sock)
    assert reply.split(b" ", 2)[1] == b"400", reply[:200]  # aiohttp answers a request it cannot parse in HTTP/1.0
    time.sleep(0.2)  # its log line, if any, is written
    assert not _errors(limited)


@pytest.mark.slow  # 1,000 sockets held for a few seconds beside live calls
def test_a_thousand_stalled_clients_neither_delay_live_calls_nor_log_an_error_each(tiny_bundle: Path) -> None:
    with running_server(["--bundle", str(tiny_bundle), "--model-name", "classifier", "--frontend", "python",
                         "--http-body-timeout-s", "30", "--http-max-connections", "1100"], http=True) as server:
        url = f"http://127.0.0.1:{server.http_port}/v2/models/classifier/infer"
        with requests.Session() as live:
            assert live.post(url, json=INFER, timeout=10).status_code == 200
            stalled = [_stalled(server.http_port) for _ in range(1000)]
            try:
                slowest = 0.0
                for _ in range(50):
                    started = time.monotonic()
                    assert live.post(url, json=INFER, timeout=10).status_code == 200
                    slowest = max(slowest, time.monotonic() - started)
                assert slowest < 1.0, f"a live call took {slowest:.2f} s beside 1,000 stalled clients"
            finally:
                for sock in stalled:
                    sock.close()  # all of them vanish mid-body
            deadline = time.monotonic() + 20
            while len(server.events("http_client_gone")) < 1000 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert len(server.events("http_client_gone")) == 1000
            assert live.post(url, json=INFER, timeout=10).status_code == 200
        assert not _errors(server)
        assert metric(scrape(server.metrics_port), "ortserve_http_connections_lost_total", reason="reset") == 1000

"""The one server launcher (tools/ortserve_devtools/server_process.py) with its log in a file, as the bench, the
soak, the swap bench and the GPU check run it (the suite's own servers run it with pipes, through
support.server_process)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ortserve_devtools.server_process import ServerLog, ServerProcess, ServerStartError, start_until_ready


def test_a_server_logging_to_a_file_starts_answers_and_stops(tiny_bundle: Path, tmp_path: Path) -> None:
    log = tmp_path / "logs" / "server.log"
    server = start_until_ready(["--bundle", str(tiny_bundle), "--model-name", "m", "--frontend", "python"],
                               model="m", log_path=log, timeout=90)
    try:
        assert server.port and server.metrics_port and server.http_port == 0  # REST off unless asked
        assert server.address == f"127.0.0.1:{server.port}"
        assert server.events("version_loaded")[0]["version"]
        assert "ortserve_" in server.scrape()
        assert server.alive()
    finally:
        assert server.stop() == 0  # SIGTERM: a clean shutdown
    assert not server.alive()
    assert not server.raw_lines  # the log went to the file, not through this process
    assert [e["event"] for e in ServerLog(log).poll()][:1] != []


def test_a_version_that_fails_ends_the_wait_with_the_log(tmp_path: Path) -> None:
    """A bundle that cannot load is retried with backoff by the server; `give_up_on` stops waiting at the first
    failure (the GPU check's drills), and the server is stopped before the error is raised."""
    with pytest.raises(ServerStartError, match="logged version_failed") as failed:
        start_until_ready(["--bundle", str(tmp_path / "missing"), "--model-name", "m"], model="m",
                          log_path=tmp_path / "server.log", timeout=60, give_up_on="version_failed")
    assert "No such file or directory" in str(failed.value)  # the message carries the log's tail


def test_a_server_that_exits_fails_with_its_status(tmp_path: Path) -> None:
    server = ServerProcess(["--no-such-flag"], log_path=tmp_path / "server.log")
    with pytest.raises(ServerStartError, match="exited with status 2") as failed:
        server.wait_ready(30)
    assert str(tmp_path / "server.log") in str(failed.value)


def test_pipes_keep_every_line_and_http_opens_the_rest_port(tiny_bundle: Path) -> None:
    server = ServerProcess(["--bundle", str(tiny_bundle), "--model-name", "m", "--frontend", "python"], http=True)
    try:
        server.wait_ready(90, "m")
        assert server.http_port
        assert server.wait_event("server_started")["port"] == server.port
        assert len(server.logs) <= len(server.raw_lines)
    finally:
        assert server.terminate() == 0


def test_server_log_follower_skips_request_lines_and_partial_lines(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    log = ServerLog(path)
    path.write_text('{"event":"request","status":"OK"}\n{"model":"m","event":"version_loaded"}\n{"event":"ver')
    assert [e["event"] for e in log.poll()] == ["version_loaded"]
    with path.open("a") as f:
        f.write('sion_swapped"}\nnot json\n')
    assert [e["event"] for e in log.poll()] == ["version_swapped"]
    assert len(log.events) == 2

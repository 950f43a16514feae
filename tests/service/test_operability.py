"""Metrics, logs, configuration, TLS/mTLS and graceful shutdown, each with a real server process."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest
import requests
from grpc_health.v1 import health_pb2, health_pb2_grpc
from support.certs import make_certs
from support.prometheus_text import metric
from support.server_process import ServerProcess, infer_request, running_server, stub_for

from ortserve.proto import grpc_service_pb2 as pb
from ortserve.proto import grpc_service_pb2_grpc as pb_grpc
from ortserve.service import config

# ---- metrics and logs ------------------------------------------------------------------------------


def test_metrics_move_with_the_right_labels(server: ServerProcess) -> None:
    before = server.scrape()
    channel, stub = stub_for(server.address)
    with channel:
        for _ in range(3):
            stub.ModelInfer(infer_request(["count me", "and me"]))
        with pytest.raises(grpc.RpcError):
            stub.ModelInfer(infer_request(["x"], model="missing"))
    after = server.scrape()
    ok = dict(model="classifier", version="1", code="OK")
    assert metric(after, "ortserve_requests_total", **ok) - metric(before, "ortserve_requests_total", **ok) == 3
    assert metric(after, "ortserve_requests_total", model="missing", code="NOT_FOUND") >= 1
    assert metric(after, "ortserve_texts_total", model="classifier", version="1") - metric(
        before, "ortserve_texts_total", model="classifier", version="1") == 6
    labels = dict(model="classifier", version="1")
    for histogram in ("ortserve_request_duration_seconds", "ortserve_queue_duration_seconds",
                      "ortserve_engine_duration_seconds", "ortserve_batch_size", "ortserve_batch_padding_ratio",
                      "ortserve_tokenize_duration_seconds"):
        assert metric(after, histogram + "_count", **labels) > metric(before, histogram + "_count", **labels), histogram
        assert metric(after, histogram + "_bucket", le="+Inf", **labels) > 0
    assert metric(after, "ortserve_version_loaded", model="classifier", version="1", state="ready") == 1
    assert metric(after, "ortserve_routing_weight_percent", model="classifier", version="1") == 100
    assert metric(after, "ortserve_reloads_total", model="classifier", result="success") == 1
    assert "ortserve_queue_depth" in after and "ortserve_inflight_requests" in after


def test_log_lines_are_json_with_lifecycle_events(server: ServerProcess) -> None:
    assert server.raw_lines and len(server.logs) == len([line for line in server.raw_lines if line.strip()])
    for name in ("server_started", "version_loading", "version_loaded", "version_swapped"):
        assert server.events(name), name
    loaded = server.events("version_loaded")[0]
    assert loaded["model"] == "classifier" and loaded["version"] == "1" and loaded["load_s"] >= 0
    for line in server.logs:
        assert {"event", "level", "timestamp"} <= set(line)


# ---- configuration ---------------------------------------------------------------------------------


def test_settings_layering_file_env_flags(tmp_path: Path) -> None:
    file = tmp_path / "ortserve.toml"
    file.write_text('max_batch_size = 8\nmax_queue_items = 50\nlog_format = "console"\nmodels = ["a", "b"]\n')
    s = config.load_settings(file=str(file), env={"ORTSERVE_MAX_QUEUE_ITEMS": "70", "ORTSERVE_PORT": "9001"},
                             flags={"port": "9100"})
    assert (s.max_batch_size, s.max_queue_items, s.port, s.log_format, s.models) == (8, 70, 9100, "console",
                                                                                       ("a", "b"))
    # Integer lists: a TOML list, "a,b" and repeated flags all read the same.
    file.write_text("bucket_rows = [1, 4, 16]\n")
    assert config.load_settings(file=str(file), env={}).bucket_rows == (1, 4, 16)
    assert config.load_settings(env={"ORTSERVE_BUCKET_TOKENS": "8, 32"}).bucket_tokens == (8, 32)
    assert config.load_settings(env={}, flags={"bucket_rows": ["1,2", "8"]}).bucket_rows == (1, 2, 8)
    yaml_file = tmp_path / "ortserve.yaml"
    yaml_file.write_text("ortserve:\n  max_batch_size: 12\n  allow_spinning: true\n")
    s = config.load_settings(file=str(yaml_file), env={})
    assert s.max_batch_size == 12 and s.allow_spinning is True


@pytest.mark.parametrize(("args", "env", "fragment"), [
    (["--max-batch-size", "zero"], {}, "max_batch_size (from --max-batch-size)"),
    (["--max-batch-size", "0"], {}, "invalid setting max_batch_size=0"),
    ([], {"ORTSERVE_DEVICE": "tpu"}, "invalid setting device='tpu'"),
    (["--tokenizer", "sentencepiece"], {}, "invalid setting tokenizer='sentencepiece'"),
    ([], {"ORTSERVE_ALLOW_SPINNING": "maybe"}, "allow_spinning (from ORTSERVE_ALLOW_SPINNING)"),
    (["--tls-cert", "/x.pem"], {}, "tls_key"),
    (["--config", "/nonexistent.toml"], {}, "cannot read config file"),
    (["--bucket-rows", "4,2"], {}, "invalid setting bucket_rows=(4, 2): expected ascending positive integers"),
    ([], {"ORTSERVE_BUCKET_TOKENS": "16,x"}, "bucket_tokens (from ORTSERVE_BUCKET_TOKENS)"),
    (["--gpu-oom-fallback", "always"], {}, "invalid setting gpu_oom_fallback='always'"),
    (["--shape-buckets", "maybe"], {}, "invalid setting shape_buckets='maybe'"),
    (["--memory-budget-mb", "-1"], {}, "invalid setting memory_budget_mb=-1"),
])
def test_invalid_settings_fail_at_start_naming_the_setting(tiny_bundle: Path, args, env, fragment) -> None:
    out = subprocess.run([sys.executable, "-m", "ortserve.service.cli", "serve", "--bundle", str(tiny_bundle), *args],
                         capture_output=True, text=True, timeout=60, env={**__import__("os").environ, **env})
    assert out.returncode == 2
    assert fragment in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("which", ["port", "metrics-port", "http-port"])
def test_a_port_clash_is_one_line_naming_the_setting(tiny_bundle: Path, frontend: str, which: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ports = {"port": "0", "metrics-port": "0", "http-port": "0", which: str(port)}
        out = subprocess.run([sys.executable, "-m", "ortserve.service.cli", "serve", "--bundle", str(tiny_bundle),
                              "--frontend", frontend, "--host", "127.0.0.1", "--metrics-host", "127.0.0.1",
                              "--port", ports["port"], "--metrics-port", ports["metrics-port"],
                              "--http-port", ports["http-port"]],
                             capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    ours = [line for line in out.stderr.splitlines() if line.startswith("ortserve:")]
    assert ours == [f"ortserve: cannot listen on 127.0.0.1:{port} (--{which}): " + ours[0].split("): ", 1)[1]]
    assert "Traceback" not in out.stderr and "leaked" not in out.stderr


def test_status_of_a_bundle_server_names_the_bundle(server: ServerProcess, tiny_bundle: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "ortserve.service.cli", "status", "--address", server.address],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == f"serving the bundle {tiny_bundle}" and "registry" not in out.stdout
    # What runs it, and whether the native front end serves it (the C++ tokenizer).
    assert re.search(r"device=cpu precision=fp32 runtime=onnxruntime-[0-9.]+ tokenizer=native", out.stdout)
    started = server.events("server_started")[0]
    # The shared server serves REST too (tests/conftest.py): every port it listens on is named.
    assert started["listening"] == {"grpc": server.address, "http": f"127.0.0.1:{server.http_port}",
                                    "metrics": f"127.0.0.1:{server.metrics_port}"}


def test_unknown_key_in_config_file_is_refused(tmp_path: Path) -> None:
    file = tmp_path / "bad.toml"
    file.write_text("max_batch_sise = 8\n")
    with pytest.raises(config.ConfigError, match="unknown setting 'max_batch_sise'"):
        config.load_settings(file=str(file), env={})


def test_help_documents_every_setting() -> None:
    out = subprocess.run([sys.executable, "-m", "ortserve.service.cli", "serve", "--help"], capture_output=True,
                         text=True, timeout=60)
    text = " ".join(out.stdout.split())
    for field in config.fields(config.Settings):
        assert "--" + field.name.replace("_", "-") in text, field.name
        assert "ORTSERVE_" + field.name.upper() in text, field.name


# ---- TLS -------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")  # not per front end: built once, kept across the frontend reorder
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_certs(tmp_path_factory.mktemp("certs"))


def _secure_live(address: str, certs: Path, *, client_cert: bool) -> bool:
    creds = grpc.ssl_channel_credentials(
        root_certificates=(certs / "ca.pem").read_bytes(),
        private_key=(certs / "client.key").read_bytes() if client_cert else None,
        certificate_chain=(certs / "client.pem").read_bytes() if client_cert else None,
    )
    with grpc.secure_channel(address, creds) as channel:
        return pb_grpc.GRPCInferenceServiceStub(channel).ServerLive(pb.ServerLiveRequest(), timeout=5).live


def _plaintext_fails(address: str) -> None:
    with grpc.insecure_channel(address) as channel, pytest.raises(grpc.RpcError) as e:
        pb_grpc.GRPCInferenceServiceStub(channel).ServerLive(pb.ServerLiveRequest(), timeout=3)
    assert e.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


def test_tls_and_mtls(tiny_bundle: Path, certs: Path, frontend: str) -> None:
    tls = ["--bundle", str(tiny_bundle), "--frontend", frontend, "--tls-cert", str(certs / "server.pem"),
           "--tls-key", str(certs / "server.key")]
    with running_server(tls, ready=False, http=True) as server:
        address = f"localhost:{server.port}"
        assert _secure_live(address, certs, client_cert=False)
        _plaintext_fails(address)
        rest = f"localhost:{server.http_port}/v2/health/live"  # the REST port has the same TLS
        assert requests.get(f"https://{rest}", verify=certs / "ca.pem", timeout=10).status_code == 200
        with pytest.raises(requests.ConnectionError):
            requests.get(f"http://{rest}", timeout=10)
    with running_server([*tls, "--tls-client-ca", str(certs / "ca.pem")], ready=False, http=True) as server:
        address = f"localhost:{server.port}"
        assert _secure_live(address, certs, client_cert=True)
        with pytest.raises(grpc.RpcError):
            _secure_live(address, certs, client_cert=False)  # mTLS: no client certificate, no call
        _plaintext_fails(address)
        rest = f"https://localhost:{server.http_port}/v2/health/live"
        client = (str(certs / "client.pem"), str(certs / "client.key"))
        assert requests.get(rest, verify=certs / "ca.pem", cert=client, timeout=10).status_code == 200
        with pytest.raises(requests.ConnectionError):  # TLS 1.3: the refusal comes after the handshake
            requests.get(rest, verify=certs / "ca.pem", timeout=10)


# ---- graceful shutdown -----------------------------------------------------------------------------


def test_sigterm_under_load_fails_no_accepted_call(tmp_path: Path, frontend: str) -> None:
    from ortserve_devtools.bert_bundle import build_tiny_bundle

    bundle = tmp_path / "bundle"
    build_tiny_bundle(bundle, seed=3, hidden=128, layers=4, heads=4, intermediate=256, max_position=128,
                      max_seq_len=128)
    text = "word " * 100
    with running_server(["--bundle", str(bundle), "--frontend", frontend, "--intra-op-threads", "1",
                         "--max-queue-items", "256", "--default-timeout-ms", "0",
                         "--shutdown-grace-s", "20"]) as server:
        results: list[tuple[float, str]] = []  # (sent at, outcome)
        stop = threading.Event()
        signalled_at: list[float] = []

        def client() -> None:
            channel, stub = stub_for(server.address)
            with channel:
                while not stop.is_set():
                    sent = time.monotonic()
                    try:
                        stub.ModelInfer(infer_request([text]), timeout=30)
                        results.append((sent, "OK"))
                    except grpc.RpcError as e:
                        results.append((sent, e.code().name))
                        time.sleep(0.01)

        threads = [threading.Thread(target=client) for _ in range(8)]
        for t in threads:
            t.start()
        until = time.monotonic() + 60
        while len(results) <= 10:  # under way (what `before` below needs), however slow the machine
            assert time.monotonic() < until, f"only {len(results)} calls answered in 60 s"
            time.sleep(0.05)
        time.sleep(0.2)  # and calls in flight at the signal (8 callers keep them so)
        with grpc.insecure_channel(server.address) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            assert health.Check(health_pb2.HealthCheckRequest(), timeout=5).status == \
                health_pb2.HealthCheckResponse.SERVING
            signalled_at.append(time.monotonic())
            server.proc.send_signal(signal.SIGTERM)
            # Readiness flips at once, while in-flight calls are still finishing. "At once" is as soon as the
            # signal handler runs: the native front end answers health on its own threads, which can answer a
            # probe sent right after the signal before the event loop has run the handler.
            flipped_by = time.monotonic() + 1.0
            while True:
                try:
                    status = health.Check(health_pb2.HealthCheckRequest(), timeout=2).status
                except grpc.RpcError as e:  # already closed for new calls, or the connection went away
                    assert e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
                    break
                if status == health_pb2.HealthCheckResponse.NOT_SERVING:
                    break
                assert time.monotonic() < flipped_by, "readiness still SERVING 1 s after SIGTERM"
                time.sleep(0.01)
        assert server.proc.wait(30) == 0
        stop.set()
        for t in threads:
            t.join(30)
    before = [outcome for sent, outcome in results if sent < signalled_at[0] - 0.05]
    after = [outcome for sent, outcome in results if sent >= signalled_at[0]]
    assert len(before) > 10 and set(before) == {"OK"}, sorted(set(before))
    # Calls sent after the signal may be refused, or cut when the process exits; never a server error.
    assert set(after) <= {"OK", "UNAVAILABLE", "CANCELLED"}, sorted(set(after))
    assert server.events("shutdown_complete")

"""scripts/dev bench serve end to end on the tiny bundle: a real server process, real gRPC load, the real engine.

Timings are far too short to mean anything; these check that every number the report promises is
there and sane, and that failures end with a clear message and the documented exit status.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.server_process import ServerProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]  # slow: the benchmark end to end


def _bench(repo_root: Path, tmp_path: Path, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(repo_root / "scripts" / "bench"), "--cache-dir", str(tmp_path / "cache"),
                           *args], capture_output=True, text=True, timeout=timeout, cwd=repo_root)


def _check_run(run: dict[str, Any]) -> None:
    lat = run["latency_ms"]
    assert run["ok"] > 0 and run["window_s"] > 0
    assert run["texts_per_s"] == pytest.approx(run["requests_per_s"] * run["texts_per_request"], rel=0.2)
    assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]


def test_sweep_with_spin_compare_reports_every_figure(repo_root: Path, tiny_bundle: Path, tmp_path: Path) -> None:
    out, png = tmp_path / "bench.json", tmp_path / "bench.png"
    done = _bench(repo_root, tmp_path, "--bundle", str(tiny_bundle), "--model", "tiny", "--sweep",
                  "--sweep-concurrency", "1,4", "--spin-compare", "--duration", "0.3", "--warmup", "0.15",
                  "--limit-texts", "32", "--limit-repeats", "1", "--limit-batch-sizes", "1,8",
                  "--paired-rounds", "3", "--paired-texts", "5", "--json-out", str(out), "--plot", str(png))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "[bench " in done.stderr and "engine alone" in done.stderr  # progress lines
    rep = json.loads(out.read_text())
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    limit = rep["limit"]
    assert [p["batch_size"] for p in limit["sorted_passes"]] == [1, 8]
    assert limit["texts_per_s"] == max(p["texts_per_s"] for p in limit["sorted_passes"]) > 0
    assert limit["batch1_latency_ms"]["p50"] > 0
    assert limit["batch1_after_idle_ms"]["p50"] > 0 and limit["batch1_after_idle_ms"]["idle_ms"] > 0

    names = [r["name"] for r in rep["runs"]]
    assert names[:4] == ["closed c=1 x1", "closed c=4 x1", "closed c=1 x8", "closed c=8 x8"]
    # Spinning on, then off, each at the saturation concurrency and (when that is not 1) at concurrency 1.
    assert (names[4].startswith("open rate=") and names[5:] == [
        "closed c=4 x1 spin=on", "closed c=1 x1 spin=on", "closed c=4 x1 spin=off", "closed c=1 x1 spin=off"]) \
        or names[5:] == ["closed c=1 x1 spin=on", "closed c=1 x1 spin=off"]
    for run in rep["runs"]:
        if run["mode"] == "closed":
            _check_run(run)
            assert run["errors"] == {}
            server = run["server"]  # from the started server's /metrics, deltas over the window
            assert server["mean_batch_texts"] >= 1 and sum(server["batch_size_distribution"].values()) >= 1
            assert server["mean_padding_ratio"] >= 0.999  # float sums: 1.0 can come back as 0.99999...
            assert run["served_over_limit"] > 0 and run["server_cpu_percent"] > 0
            # The engine's named lane threads are part of the server's CPU (ticks: 1% of a core of slack).
            assert 0 <= run["server_engine_threads_cpu_percent"] <= run["server_cpu_percent"] + 1
    # Every run is bracketed by the limit's batch size measured right before and right after it, and each
    # run's "after" is the next run's "before" (nothing but an idle server in between).
    arounds = [run["limit_around"] for run in rep["runs"]]
    assert all(a["batch_size"] == limit["best_batch_size"] and a["before"] > 0 and a["after"] > 0 for a in arounds)
    assert all(nxt["before"] == prev["after"] for prev, nxt in itertools.pairwise(arounds))
    for run in rep["runs"]:
        around = run["limit_around"]
        assert run["served_over_local_limit"] == pytest.approx(
            run["texts_per_s"] / ((around["before"] + around["after"]) / 2))
    eight = rep["runs"][3]
    assert eight["texts_per_s"] == pytest.approx(8 * eight["requests_per_s"], rel=0.01)

    summary = rep["summary"]
    sat = summary["saturation"]
    assert sat["texts_per_s"] == max(r["texts_per_s"] for r in rep["runs"][:2])
    assert sat["served_over_limit"] == pytest.approx(sat["texts_per_s"] / limit["texts_per_s"])
    again = limit["after_runs"]  # the best size once more after the load runs: the machine's drift
    assert again["batch_size"] == limit["best_batch_size"] and again["texts_per_s"] > 0
    assert sat["served_over_limit_both"] == pytest.approx(
        sat["texts_per_s"] / ((limit["texts_per_s"] + again["texts_per_s"]) / 2))
    assert sat["limit_around"] == rep["runs"][[r["name"] for r in rep["runs"]].index(sat["run"])]["limit_around"]
    paired = summary["concurrency1_paired"]  # the same texts through the engine alone, then served, per round
    assert paired["rounds"] == 3 and paired["texts_per_round"] == 5 and len(paired["round_added_ms"]) == 3
    assert paired["served_p50_ms"] > 0 and paired["engine_batch1_p50_ms"] > 0
    assert paired["added_ms"] == pytest.approx(paired["served_p50_ms"] - paired["engine_batch1_p50_ms"])
    assert rep["concurrency1_paired"]["served_ms"]["p50"] == pytest.approx(paired["served_p50_ms"])
    c1 = summary["concurrency1"]
    assert c1["added_ms"] == pytest.approx(c1["p50_ms"] - c1["engine_batch1_p50_ms"])
    idle = c1["after_idle"]  # the engine and an empty call, each after the idle a c=1 request meets
    assert idle["engine_batch1_p50_ms"] > 0 and idle["grpc_floor_p50_ms"] > 0
    assert idle["floor_idle_ms"] == pytest.approx(limit["batch1_latency_ms"]["p50"])
    assert rep["grpc_floor_after_idle_ms"]["p50"] == idle["grpc_floor_p50_ms"]
    means = c1["breakdown_mean_ms"]
    assert means["client"] >= means["server_handler"] > means["engine"] > 0
    over = summary["overload"]
    assert over["rate"] == pytest.approx(2 * sat["requests_per_s"])
    assert over["sent"] >= over["resource_exhausted"] >= 0
    spin = summary["spinning"]
    assert set(spin) == {"on", "off"}
    for label in ("on", "off"):
        assert spin[label]["run"].endswith(f"spin={label}") and spin[label]["texts_per_s"] > 0
        if names[5] == "closed c=4 x1 spin=on":
            assert spin[label]["concurrency1"]["run"] == f"closed c=1 x1 spin={label}"
            assert spin[label]["concurrency1"]["p50_ms"] > 0
    assert sat["server_engine_threads_cpu_percent"] is not None and sat["client_cpu_percent"] > 0
    assert "saturation:" in done.stdout and "overload:" in done.stdout and "spinning  on" in done.stdout
    assert "the engine's lane threads" in done.stdout
    assert "after idle, as a c=1 request meets them" in done.stdout and "limit re-measured after" in done.stdout
    assert "concurrency 1, paired:" in done.stdout and "measured right before and right after that run" in done.stdout


def test_any_v2_server_by_address_open_loop(repo_root: Path, server: ServerProcess, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = _bench(repo_root, tmp_path, "--address", server.address, "--model", "classifier", "--no-limit",
                  "--metrics-url", f"http://127.0.0.1:{server.metrics_port}/metrics", "--mode", "open",
                  "--rate", "200", "--texts-per-request", "8", "--duration", "0.5", "--warmup", "0.2",
                  "--json-out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    rep = json.loads(out.read_text())
    (run,) = rep["runs"]
    _check_run(run)
    assert run["mode"] == "open" and run["rate"] == 200 and run["skipped_at_client_cap"] == 0
    assert 40 <= run["sent_in_window"] <= 250  # Poisson arrivals at 200/s over 0.5 s
    assert run["server"]["mean_batch_texts"] >= 1
    assert rep["limit"] is None and "server_cpu_percent" not in run  # not our process: no CPU figure
    assert "limit_around" not in run and rep["concurrency1_paired"] is None  # both need the engine alone


def test_wrong_model_fails_with_the_servers_reason(repo_root: Path, server: ServerProcess, tmp_path: Path) -> None:
    done = _bench(repo_root, tmp_path, "--address", server.address, "--model", "no-such-model", "--no-limit")
    assert done.returncode == 4
    assert "NOT_FOUND" in done.stderr and "no-such-model" in done.stderr


def test_server_that_cannot_start_exits_non_zero(repo_root: Path, tiny_bundle: Path, tmp_path: Path) -> None:
    done = _bench(repo_root, tmp_path, "--bundle", str(tiny_bundle), "--no-limit",
                  "--server-arg=--max-batch-size=0")
    assert done.returncode == 3
    assert "server failed to start" in done.stderr and "max_batch_size" in done.stderr


def test_tokenizer_flag_reaches_the_server_and_the_limit(repo_root: Path, tiny_bundle: Path, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = _bench(repo_root, tmp_path, "--bundle", str(tiny_bundle), "--model", "tiny", "--tokenizer", "hf",
                  "--concurrency", "1", "--duration", "0.3", "--warmup", "0.1", "--paired-rounds", "0",
                  "--limit-texts", "8", "--limit-repeats", "1", "--limit-batch-sizes", "1", "--json-out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(out.read_text())["limit"]["engine"]["tokenizer"] == "hf"  # the engine alone used it too
    (log,) = (tmp_path / "cache" / "logs").glob("server-*-main.log")
    loaded = [json.loads(line) for line in log.read_text().splitlines() if '"version_loaded"' in line]
    assert [e["tokenizer"] for e in loaded] == ["hf"]


@pytest.mark.parametrize("frontend", ["python", "native"])
def test_frontend_flag_reaches_the_server_and_the_report(repo_root: Path, tiny_bundle: Path, tmp_path: Path,
                                                         frontend: str) -> None:
    from ortserve import engine_ext

    if frontend == "native" and not engine_ext.HAS_FRONTEND:
        pytest.skip(f"native front end not built: {engine_ext.FRONTEND_MISSING}")
    out = tmp_path / "bench.json"
    done = _bench(repo_root, tmp_path, "--bundle", str(tiny_bundle), "--model", "tiny", "--frontend", frontend,
                  "--concurrency", "1", "--duration", "0.3", "--warmup", "0.1", "--paired-rounds", "0", "--no-limit",
                  "--json-out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(out.read_text())["target"]["frontend"] == frontend
    (log,) = (tmp_path / "cache" / "logs").glob("server-*-main.log")
    started = [json.loads(line) for line in log.read_text().splitlines() if '"server_started"' in line]
    assert [e["frontend"] for e in started] == [frontend]

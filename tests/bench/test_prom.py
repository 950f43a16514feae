"""Histogram deltas from two /metrics scrapes: what the server did inside one run's window."""

from __future__ import annotations

from ortserve_devtools.bench.prom import parse, window_stats


def _exposition(batches: list[int], ok: int, model: str = "m") -> str:
    bounds = (1, 2, 4, 8, 12, 16, 24, 32)
    lines = ["# HELP ortserve_batch_size Texts per engine run.", "# TYPE ortserve_batch_size histogram"]
    for le in bounds:
        n = sum(b <= le for b in batches)
        lines.append(f'ortserve_batch_size_bucket{{le="{le}.0",model="{model}",version="1"}} {n}.0')
    lines.append(f'ortserve_batch_size_bucket{{le="+Inf",model="{model}",version="1"}} {len(batches)}.0')
    lines.append(f'ortserve_batch_size_count{{model="{model}",version="1"}} {len(batches)}.0')
    lines.append(f'ortserve_batch_size_sum{{model="{model}",version="1"}} {sum(batches)}.0')
    lines += ["# HELP ortserve_requests_total ModelInfer calls by outcome.", "# TYPE ortserve_requests_total counter",
              f'ortserve_requests_total{{code="OK",model="{model}",version="1"}} {ok}.0']
    return "\n".join(lines) + "\n"


def test_deltas_cover_only_the_window() -> None:
    before = parse(_exposition([1, 1, 2], ok=3), model="m")
    after = parse(_exposition([1, 1, 2, 4, 4, 16, 1], ok=30), model="m")
    stats = window_stats(before, after, window_s=2.0)
    assert stats["engine_runs"] == 4
    assert stats["mean_batch_texts"] == (4 + 4 + 16 + 1) / 4
    assert stats["batch_size_distribution"] == {"1": 1, "3-4": 2, "13-16": 1}
    assert stats["server_requests_by_code"] == {"OK": 27}


def test_other_models_are_ignored() -> None:
    snap = parse(_exposition([8, 8], ok=2, model="other"), model="m")
    assert "batch_size" not in snap.histograms and not snap.requests_by_code

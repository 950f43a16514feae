"""One definition of each setting: the structures that carry a setting of their own, in Python and in C++, start
from config.Settings' defaults (a change of default in one place must not leave another behind)."""

from __future__ import annotations

import pytest

from ortserve import engine_ext
from ortserve.service import config
from ortserve.service.data_plane import batcher_settings
from ortserve.service.instance import engine_options


def test_the_native_structs_default_to_the_settings() -> None:
    native = engine_ext._engine.batcher_defaults()
    assert native == pytest.approx({name: config.default(name) for name in native})
    policy = engine_ext.BatchPolicy()
    assert policy.max_padding_ratio == config.default("max_padding_ratio")
    assert policy.sort_window == config.default("sort_window")


def test_the_batcher_gets_every_setting_from_the_settings() -> None:
    settings = config.Settings(max_batch_size=7, max_queue_delay_ms=3, max_padding_ratio=1.5, batch_overhead_tokens=9,
                               max_batch_tokens=700, sort_window=5, max_queue_items=11, default_timeout_ms=40,
                               engine_concurrency=3, bulk_min_texts=13, bulk_batch_tokens=17,
                               interactive_lane_ms=250)
    native = batcher_settings(settings)
    policy = native.policy
    assert (policy.max_batch_size, policy.max_queue_delay_s, policy.max_padding_ratio, policy.batch_overhead_tokens,
            policy.max_batch_tokens, policy.sort_window, policy.bulk_batch_tokens) == (
        7, pytest.approx(0.003), 1.5, 9, 700, 5, 17)
    assert (native.max_queue_items, native.default_timeout_s, native.engine_concurrency, native.bulk_min_texts,
            native.interactive_lane_s) == (11, 0.04, 3, 13, 0.25)


@pytest.mark.skipif(not engine_ext.HAS_FRONTEND, reason=f"native front end not built: {engine_ext.FRONTEND_MISSING}")
def test_the_front_end_defaults_to_the_settings() -> None:
    native = engine_ext._engine.native_frontend_defaults()
    assert native == {"max_message_bytes": config.default("max_message_bytes"),
                      "max_header_bytes": config.default("max_header_bytes"),
                      "max_texts_per_request": config.default("max_texts_per_request")}


def test_an_unknown_setting_has_no_default() -> None:
    with pytest.raises(KeyError, match="no setting 'max_batch_sise'"):
        config.default("max_batch_sise")


def test_the_engine_options_default_to_the_settings_of_the_same_names() -> None:
    defaults = engine_ext.EngineOptions()
    # check_finite and precision are not settings: the engine's own check, and the version's manifest.
    names = [n for n in dir(defaults) if not n.startswith("_") and n not in ("check_finite", "precision")]
    assert len(names) == 12
    assert defaults.precision == "fp32"
    assert {n: getattr(defaults, n) for n in names} == {n: config.default(n) for n in names}
    built = engine_options(config.Settings(intra_op_threads=3, gpu_oom_fallback="warm", gpu_fallback_cooldown_s=5.0))
    assert (built.intra_op_threads, built.gpu_oom_fallback, built.gpu_fallback_cooldown_s) == (3, "warm", 5.0)

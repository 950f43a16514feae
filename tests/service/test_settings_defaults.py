"""One definition of each setting: the structures that carry a setting of their own, in Python and in C++, start
from config.Settings' defaults (a change of default in one place must not leave another behind)."""

from __future__ import annotations

import pytest

from ortserve import engine_ext
from ortserve.service import config
from ortserve.service.batch_policy import BatchPolicy


def test_the_native_structs_default_to_the_settings() -> None:
    native = engine_ext._engine.native_defaults()
    assert native == pytest.approx({name: config.default(name) for name in native})
    policy = engine_ext.NativeBatchPolicy()
    assert policy.max_padding_ratio == config.default("max_padding_ratio")
    assert policy.sort_window == config.default("sort_window")


def test_the_python_batch_policy_defaults_to_the_settings() -> None:
    policy = BatchPolicy()
    assert policy.max_queue_delay_s == pytest.approx(config.default("max_queue_delay_ms") / 1000)
    for name in ("max_batch_size", "max_padding_ratio", "batch_overhead_tokens", "max_batch_tokens", "sort_window"):
        assert getattr(policy, name) == config.default(name), name


@pytest.mark.skipif(not engine_ext.HAS_FRONTEND, reason=f"native front end not built: {engine_ext.FRONTEND_MISSING}")
def test_the_front_end_defaults_to_the_settings() -> None:
    native = engine_ext._engine.native_frontend_defaults()
    assert native == {"max_message_bytes": config.default("max_message_bytes"),
                      "max_texts_per_request": config.default("max_texts_per_request")}


def test_an_unknown_setting_has_no_default() -> None:
    with pytest.raises(KeyError, match="no setting 'max_batch_sise'"):
        config.default("max_batch_sise")

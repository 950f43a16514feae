"""The bench's engine settings default to the server's: the engine-alone limit runs the engine as the server does."""

from __future__ import annotations

import dataclasses

from ortserve_devtools.bench.engine_limit import EngineSettings

from ortserve.service import config


def test_defaults_are_the_servers() -> None:
    served = config.Settings()
    for field in dataclasses.fields(EngineSettings):
        assert getattr(EngineSettings(), field.name) == getattr(served, field.name), field.name

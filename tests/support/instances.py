"""A loaded version's options for tests, built the way the server builds them: from Settings."""

from __future__ import annotations

import dataclasses
from typing import Any

from ortserve.service.config import Settings
from ortserve.service.instance import InstanceOptions, instance_options


def options(*, narrow_engine: bool | None = None, **settings: Any) -> InstanceOptions:
    """instance_options(Settings(**settings)); `narrow_engine` forces the one-thread session on or off."""
    built = instance_options(Settings(**settings))
    return built if narrow_engine is None else dataclasses.replace(built, narrow_engine=narrow_engine)

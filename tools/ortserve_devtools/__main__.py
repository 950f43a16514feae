"""`python -m ortserve_devtools GROUP [COMMAND] ARGS`: the tools' one launcher (scripts/dev runs it)."""

from __future__ import annotations

import sys

from ortserve_devtools.launcher import main

sys.exit(main())

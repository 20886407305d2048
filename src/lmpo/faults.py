"""Deterministic crash injection, for testing that a killed run resumes exactly.

`LMPO_CRASH_AT=<point>@<step>` makes the process exit at once (`os._exit`, no
cleanup, no flush: as abrupt as SIGKILL) when the trainer reaches the named
point of that step:

    before_row        the update is done, the metrics row is not yet written
    after_row         the row is fsynced, the checkpoint not yet written
    mid_checkpoint    the checkpoint's temporary file is written, not yet renamed
    after_checkpoint  the checkpoint is in place
"""

from __future__ import annotations

import os

from lmpo.errors import ConfigError

CRASH_ENV = "LMPO_CRASH_AT"
CRASH_POINTS = ("before_row", "after_row", "mid_checkpoint", "after_checkpoint")
CRASH_EXIT_CODE = 86


def parse_crash_spec(spec: str | None) -> tuple[str, int] | None:
    if not spec:
        return None
    point, sep, step = spec.partition("@")
    if not sep or point not in CRASH_POINTS or not step.isdigit():
        raise ConfigError(f"{CRASH_ENV}={spec!r}: expected <point>@<step> with point one of "
                         f"{', '.join(CRASH_POINTS)}")
    return point, int(step)


def crash_point(name: str, step: int) -> None:
    """Exit here if LMPO_CRASH_AT names this point and step."""
    target = parse_crash_spec(os.environ.get(CRASH_ENV))
    if target == (name, step):
        os._exit(CRASH_EXIT_CODE)

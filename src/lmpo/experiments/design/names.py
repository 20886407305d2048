"""Safe names: an experiment's, its arms' and its levels' names become path components
(`runs/<arm>@<level>/seed<k>`, `configs/<arm>-seed<k>.yaml`) and words of printed shell
commands, so each is refused in one line before anything is written unless it is one."""

from __future__ import annotations

import re

from lmpo.errors import ConfigError

# experiment, arm and level names become path components (runs/<arm>@<level>/seed<k>,
# configs/<arm>-seed<k>.yaml) and words of printed commands: a letter or digit first, then
# letters, digits and . _ + - (not @, which joins an arm and its level), at most 100
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,99}")


def check_name(name, what: str, where: str) -> str:
    """`name` if it is a safe name for `what` (NAME), else a one-line ConfigError."""
    text = str(name)
    if not NAME.fullmatch(text):
        shown = text if len(text) <= 60 else text[:57] + "..."
        raise ConfigError(f"{where}: {what} name {shown!r} is not a safe name: a letter or "
                          "digit first, then letters, digits and . _ + - (no '@', '/', "
                          "spaces or shell characters), at most 100 characters")
    return text

"""The fenced code blocks of a docs page, each with the paragraph that introduces it: the
pages whose files and commands a test runs as written (docs/your-method.md,
docs/tutorial.md) name each block's file in that paragraph."""

from __future__ import annotations

import re
from pathlib import Path


def fenced_blocks(page: Path) -> list[tuple[str, str, str]]:
    """(language, introducing paragraph, code) of every fenced block of `page`."""
    text = page.read_text()
    return [(fence.group(1), text[:fence.start()].rstrip().rsplit("\n\n", 1)[-1],
             fence.group(2)) for fence in re.finditer(r"```(\w+)\n(.*?)```", text, re.S)]

"""Output files that other programs poll, replaced whole.

The learner rewrites ``progress.csv``, ``endpoints.json`` and
``directory.json`` while scripts, the cluster example and the tests read
them. Writing in place truncates first, so a reader could find the file
empty or cut short; writing beside it and renaming makes every read see
one whole version, the old or the new (``os.replace`` is atomic within a
directory).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional

__all__ = ["write_text_whole", "write_json_whole"]


def write_text_whole(path: Path, text: str) -> None:
    """Put ``text`` at ``path`` so that no reader ever sees part of it; OSError if it can't be written."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        partial.write_text(text)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


def write_json_whole(path: Path, value: Any, *, indent: Optional[int] = 2) -> None:
    """``value`` as JSON at ``path``, replaced whole (:func:`write_text_whole`); ``indent=None``: one line."""
    write_text_whole(path, json.dumps(value, indent=indent))

"""Where this code runs: a Jupyter kernel (whose outputs are kept in the notebook) or not.

In a kernel, `plain_rich_text` keeps terminal colour codes out of what the notebook saves.
"""

from __future__ import annotations

import re
from typing import Any

# A terminal escape sequence: CSI ("\x1b[1m", "\x1b[38;5;33m"), OSC up to its terminator (a link), or
# a two-character one ("\x1b7"). Match anywhere with `ANSI_ESCAPE.search(text)`.
ANSI_ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[0-~])")


def in_jupyter() -> bool:
    """True inside a Jupyter kernel (JupyterLab, papermill, nbconvert), not in plain or terminal Python."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def _plain(renderable: Any, printer: Any, cycle: bool) -> None:
    printer.text(ANSI_ESCAPE.sub("", renderable.text))


def plain_rich_text(shell: Any = None) -> bool:
    """Save rich's displays (Keras's ``model.summary()``) in a notebook without colour codes.

    In a kernel, rich shows a table as HTML, coloured, and as plain text beside it for
    readers without HTML; rich renders that text for a colour terminal, so the notebook
    file, a text export or a diff shows "\\x1b[1m" around every word. This registers the
    plain-text form of rich's `JupyterRenderable` as its text without escapes (the HTML
    is untouched), on `shell` or the running kernel's. Returns whether it did: False
    outside Jupyter. Idempotent, and rich is not imported until it displays something.
    """
    if shell is None:
        if not in_jupyter():
            return False
        from IPython import get_ipython

        shell = get_ipython()
    formatter = shell.display_formatter.formatters["text/plain"]
    formatter.for_type_by_name("rich.jupyter", "JupyterRenderable", _plain)
    return True

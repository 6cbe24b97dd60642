"""mgtutor.support.session: rich's tables (Keras's model.summary()) are saved in a notebook as plain text."""

from __future__ import annotations

import io
from types import SimpleNamespace

from IPython.core.formatters import DisplayFormatter
from rich.console import Console
from rich.jupyter import JupyterRenderable

from mgtutor.support.session import ANSI_ESCAPE, in_jupyter, plain_rich_text

MARKUP = (
    '[bold]Model: "lenet"[/bold]\n│ conv2d ([color(33)]Conv2D[/]) │ ([color(45)]None[/], [color(34)]24[/]) │'
)
PLAIN = 'Model: "lenet"\n│ conv2d (Conv2D) │ (None, 24) │\n'


def _summary_as_rich_shows_it() -> JupyterRenderable:
    """What rich hands Jupyter for a printed table: HTML, and its text as a colour terminal shows it."""
    terminal = Console(file=io.StringIO(), force_terminal=True, color_system="truecolor", width=80)
    terminal.print(MARKUP)
    html = '<pre><span style="font-weight: bold">Model</span></pre>'
    return JupyterRenderable(html, terminal.file.getvalue())


def test_the_plain_text_of_a_rich_display_loses_its_colour_codes_and_keeps_its_html():
    shell = SimpleNamespace(display_formatter=DisplayFormatter())
    shown = _summary_as_rich_shows_it()
    before, _ = shell.display_formatter.format(shown)
    assert "\x1b[1m" in before["text/plain"] and "\x1b[38;5;33m" in before["text/plain"]  # the cause
    assert plain_rich_text(shell) is True
    after, _ = shell.display_formatter.format(shown)
    assert after["text/plain"] == PLAIN
    assert after["text/html"] == before["text/html"]


def test_outside_jupyter_nothing_is_registered():
    assert not in_jupyter() and plain_rich_text() is False


def test_ansi_escape_matches_colour_codes_and_links_and_nothing_else():
    text = "\x1b[1mbold\x1b[0m \x1b[38;5;34m520\x1b[0m \x1b]8;;https://keras.io\x1b\\link\x1b]8;;\x1b\\ \x1b7"
    assert ANSI_ESCAPE.sub("", text) == "bold 520 link "
    assert not ANSI_ESCAPE.search("[1m no escape character │ ━━ 12/12 [worker 0]")

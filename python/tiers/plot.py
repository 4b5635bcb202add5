"""Shared plotting set-up: a non-interactive backend and one way to save."""

from __future__ import annotations

import io
import os
import shlex
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path



def pyplot():
    """matplotlib's pyplot on the non-interactive Agg backend, imported on
    the first plot: importing it takes about a second, which every command
    that draws nothing (``tiers mbc run``, a refused option, ``--help``)
    would otherwise pay at start."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure(ncols: int = 1, nrows: int = 1, width: float = 6.4, height: float = 4.2):
    """Return (fig, axes) sized for ``ncols`` x ``nrows`` panels; inside
    ``stamping(doc)`` the figure carries ``doc``'s stamp."""
    fig, axes = pyplot().subplots(nrows, ncols, figsize=(width * ncols, height * nrows),
                             squeeze=False)
    doc = _stamp_doc.get()
    if doc is not None:
        stamp(fig, doc)
        noise_note(fig, doc)
    return fig, axes


# The document whose plots are being drawn (see ``stamping``).
_stamp_doc: ContextVar[dict | None] = ContextVar("tiers_plot_stamp", default=None)


def stamp_text(doc: dict, limit: int = 160) -> str:
    """Return the stamp of a plot of ``doc``: host, date (UTC) and the
    command that measured it, cut to ``limit`` characters."""
    host = (doc.get("machine") or {}).get("hostname") or "unknown host"
    created = str(doc.get("created") or "").replace("T", " ")[:16]
    command = shlex.join(str(w) for w in doc.get("command") or [])
    text = f"{host}  {created} UTC  {command}" if created else f"{host}  {command}"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def stamp(fig, doc: dict) -> None:
    """Write ``doc``'s host, date and command in small grey letters along
    the bottom edge of ``fig``.  Returns nothing."""
    limit = max(40, int(fig.get_figwidth() * 72 / 3.4))  # characters of 6 pt that fit
    fig.text(0.995, 0.004, stamp_text(doc, limit), ha="right", va="bottom", fontsize=6,
             color="0.45", family="monospace")


def noise_note(fig, doc: dict) -> None:
    """Write the one-line summary of ``doc``'s machine-noise check (its
    ``"noise"`` block, see tiers.noise) along the bottom left of ``fig``,
    above the stamp; red when the machine was busy or moving.  Nothing without one."""
    noise = doc.get("noise") or {}
    text = noise.get("summary")
    if not text:
        return
    limit = max(40, int(fig.get_figwidth() * 72 / 3.4))
    if len(text) > limit:
        text = text[:limit - 3] + "..."
    fig.text(0.005, 0.022, text, ha="left", va="bottom", fontsize=6, family="monospace",
             color="#b00000" if noise.get("verdict") in ("busy", "moving") else "0.45")


@contextmanager
def stamping(doc: dict):
    """Within this context every ``figure()`` is stamped with ``doc``."""
    token = _stamp_doc.set(doc)
    try:
        yield
    finally:
        _stamp_doc.reset(token)


def save(fig, path: str | os.PathLike, *, follow_symlinks: bool = False) -> Path:
    """Save ``fig`` as PNG at ``path`` (folders created) through
    ``output.write_bytes`` (atomic, no devices or symbolic links; ``"-"`` is
    standard output), close it, return the path."""
    from . import output

    buf = io.BytesIO()
    try:
        fig.tight_layout()
        fig.savefig(buf, format="png", dpi=110)
    finally:
        pyplot().close(fig)
    output.write_bytes(path, buf.getvalue(), follow_symlinks=follow_symlinks)
    return Path(path)


def default_plot_path(json_path: str | None, plot_path: str | None) -> Path | None:
    """Return where a command's plot goes: ``--plot`` if given, else next to
    ``--json`` with a .png suffix, else nowhere (None)."""
    if plot_path:
        return Path(plot_path)
    if json_path and json_path != "-":
        return Path(json_path).with_suffix(".png")
    return None


def write_outputs(doc: dict, json_path: str | None, plot_path: str | None,
                  plot_fn, console) -> list[Path]:
    """Write a command's result document to ``json_path`` (when given) and its
    plot where ``default_plot_path`` says, printing each file written.
    ``plot_fn(doc, path)`` draws the plot and may return None when it has
    nothing to draw.  Return the paths written."""
    from . import result  # late: result imports nothing from here

    written = []
    if json_path:
        written.append(result.write(doc, json_path))
    target = default_plot_path(json_path, plot_path)
    if target is not None:
        with stamping(doc):
            drawn = plot_fn(doc, target)
        if drawn is not None:
            written.append(Path(drawn))
    for path in written:
        if str(path) != "-":  # the document itself is on standard output
            console.print(f"Wrote {path}", markup=False)
    return written

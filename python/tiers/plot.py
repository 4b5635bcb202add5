"""Shared plotting set-up: a non-interactive backend and one way to save."""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)

from .errors import TiersError  # noqa: E402


def figure(ncols: int = 1, nrows: int = 1, width: float = 6.4, height: float = 4.2):
    """Return (fig, axes) sized for ``ncols`` x ``nrows`` panels."""
    return plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False)


def save(fig, path: str | os.PathLike) -> Path:
    """Save ``fig`` as PNG at ``path`` (folders created), close it, return the path."""
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fig.tight_layout()
        fig.savefig(p, dpi=110)
    except OSError as exc:
        raise TiersError(f"cannot write {p}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)
    return p


def default_plot_path(json_path: str | None, plot_path: str | None) -> Path | None:
    """Return where a command's plot goes: ``--plot`` if given, else next to
    ``--json`` with a .png suffix, else nowhere (None)."""
    if plot_path:
        return Path(plot_path)
    if json_path:
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
        drawn = plot_fn(doc, target)
        if drawn is not None:
            written.append(Path(drawn))
    for path in written:
        console.print(f"Wrote {path}")
    return written

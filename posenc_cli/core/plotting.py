"""Writing matplotlib figures: headless, PNG for reading and SVG beside it for papers, atomically."""

from __future__ import annotations

from pathlib import Path

from posenc_cli.core.atomic import write_with


def pyplot():
    """matplotlib.pyplot on the Agg backend (no display needed), imported only when a figure is drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: Path, dpi: int = 120) -> Path:
    """Write the figure as PNG at `path` and as SVG beside it, each atomically, and close it."""
    fig.tight_layout()
    write_with(path, lambda p: fig.savefig(p, format="png", dpi=dpi))
    write_with(path.with_suffix(".svg"), lambda p: fig.savefig(p, format="svg"))
    pyplot().close(fig)
    return path

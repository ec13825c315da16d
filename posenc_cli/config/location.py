"""Where the Hydra configs live: configs/ beside the package in a checkout, the packaged copy in a wheel."""

from __future__ import annotations

from pathlib import Path


def config_dir() -> Path:
    """configs/ beside the package in a checkout; the packaged copy in an installed wheel."""
    package = Path(__file__).resolve().parents[1]  # posenc_cli/
    checkout = package.parent / "configs"
    return checkout if (checkout / "config.yaml").is_file() else package / "configs"

"""The GPT and its positional schemes. The package's names are imported on first use (PEP 562), so that
the typed config can import the torch-free `model.shape` without importing torch."""

from __future__ import annotations

import importlib
from typing import Any

from posenc_cli.model.shape import ModelConfig, ModelSize  # noqa: F401 (doors)

LAZY = dict.fromkeys(("GPT", "token_nll"), "gpt")  # name -> the module of this package that defines it

__all__ = ["GPT", "ModelConfig", "ModelSize", "token_nll"]


def __getattr__(name: str) -> Any:
    if name in LAZY:
        return getattr(importlib.import_module(f"posenc_cli.model.{LAZY[name]}"), name)
    raise AttributeError(f"module 'posenc_cli.model' has no attribute {name!r}")

"""The wheel ships every module and config group: each package directory is listed in pyproject."""

from __future__ import annotations

import tomllib

from conftest import ROOT


def test_every_package_and_config_group_is_listed_in_pyproject():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    code = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for package in ("posenc", "posenc_cli")  # the API and the command
        for p in (ROOT / package).rglob("__init__.py")
    }
    groups = {f"posenc_cli.configs.{d.name}" for d in (ROOT / "configs").iterdir() if d.is_dir()}
    assert code | groups | {"posenc_cli.configs"} == set(setuptools["packages"])
    assert setuptools["package-dir"] == {"posenc_cli.configs": "configs"}

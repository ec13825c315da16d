"""Install hints: one helper spells them for how posenc is installed, a source checkout (editable:
`pip install -e '.[hf]'`) or a package (`pip install 'posenc[hf]'`), and every hint is one of its
answers, naming an extra pyproject.toml has."""

from __future__ import annotations

import ast
import re

import pytest

from conftest import ROOT, invoke
from posenc_cli.core import install
from posenc_cli.core.install import EXTRAS, install_hint, needs, source_checkout


def test_a_checkout_spells_the_editable_install_from_its_root_or_by_its_path(monkeypatch, tmp_path):
    assert source_checkout() == ROOT
    monkeypatch.chdir(ROOT)
    assert install_hint("hf") == "pip install -e '.[hf]'"
    monkeypatch.chdir(tmp_path)
    assert install_hint("track") == f"pip install -e '{ROOT}[track]'"


def test_an_installed_package_spells_the_extra_of_posenc(monkeypatch):
    monkeypatch.setattr(install, "source_checkout", lambda: None)
    assert install_hint("hf") == "pip install 'posenc[hf]'"
    assert install_hint("data") == "pip install 'posenc[data]'"


def test_every_extra_a_hint_names_is_one_pyproject_declares():
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    declared = re.findall(
        r"^(\w+) = \[", text.split("[project.optional-dependencies]")[1].split("\n[")[0], re.M
    )
    assert set(EXTRAS) <= set(declared)
    with pytest.raises(ValueError, match="not one of posenc's extras"):
        install_hint("transformers")


def test_a_help_names_an_extra_only_while_it_is_missing(monkeypatch):
    import importlib.util

    assert needs("hf", "safetensors", "tokenizers") == "the hf extra, installed"
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "safetensors" else real(n, *a)
    )
    assert needs("hf", "safetensors", "tokenizers") == f"safetensors missing: {install_hint('hf')}"


def hand_spelled_hints(path) -> list[int]:
    """Lines of `path` whose strings (docstrings aside: they describe, users never see them as advice)
    spell an install command by hand."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and re.search(r"pip install (-e )?'?(posenc|\.)\\*\[", node.value)
    ]


def test_no_install_hint_is_spelled_by_hand_in_the_code():
    """Each hint comes from install_hint: a literal `pip install 'posenc[...]'` is the one spelling that
    is wrong in a checkout."""
    spelled = {
        str(path.relative_to(ROOT)): lines
        for path in sorted((ROOT / "posenc_cli").rglob("*.py"))
        if path.name != "install.py" and (lines := hand_spelled_hints(path))
    }
    assert spelled == {}


def test_export_help_says_how_its_packages_come(monkeypatch):
    result = invoke("export", "--help")
    assert result.code == 0 and "Needs safetensors and tokenizers (the hf extra, installed)" in result.stdout


def test_train_help_spells_both_installs_since_a_help_is_read_before_knowing_which_one_is_there():
    helped = " ".join(invoke("train", "--help").stdout.split())
    for extra in ("track", "data", "cluster"):
        assert f"pip install 'posenc[{extra}]', or in a checkout pip install -e '.[{extra}]'" in helped
    assert str(ROOT) not in helped  # no path of this machine's checkout

"""The house's rules, checked: imports run downward with no cycle (import-linter's layers contract in
pyproject.toml, and scripts/import_cycles.py), no internal import hides in a function body outside cli/,
functions and modules keep to their sizes (scripts/function_sizes.py),
no two modules share a basename, and the docs that describe the code are generated from it or checked
against it (the package list of docs/development.md, docs/reference/config.md)."""

from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "posenc_cli"


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


# Imports deferred into a function outside cli/, each for start-up (issue #33): the typed config and the
# override check are imported and run before torch is, so a refused override answers in about a second.
DEFERRED_IMPORTS = {
    ("posenc_cli/config/hydra_args.py", "known_keys"): "scheme options: only once a key is misspelt",
    ("posenc_cli/data/corpus_config.py", "__post_init__"): "the task generators: only once data=task is set",
    ("posenc_cli/config/schema.py", "check_keys"): "the task generators: only once data=task is set",
}


def test_no_internal_import_sits_inside_a_function_outside_the_command_line_but_the_deferred_ones():
    """cli/ imports inside its commands so that `posenc --help` stays free of torch; elsewhere only the
    named start-up deferrals do, and every one named is still there."""
    hidden = set()
    for path in modules():
        if path.relative_to(PACKAGE).parts[0] == "cli":
            continue
        for function in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                hidden |= {
                    (str(path.relative_to(ROOT)), function.name)
                    for node in ast.walk(function)
                    if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("posenc_cli")
                }
    assert hidden == set(DEFERRED_IMPORTS), hidden ^ set(DEFERRED_IMPORTS)


# A config outside config/ is its typed dataclass, read by attribute: config/ composes and checks the plain
# mappings Hydra gives, and a record boundary (a run's recorded data config typed again) reads one once.
CONFIG_NAMES = {
    "cfg",
    "cfgs",
    "config",
    "data_cfg",
    "data",
    "tc",
    "mc",
    "model",
    "scheme",
    "typed",
    "values",
    "record",
}
EXPORT_READERS = ("is_export", "verified_config", "parsed_export", "trained_text")
RESULTS_READERS = ("read_section", "read_label", "legacy_label", "read_table")
RECORD_BOUNDARIES = {  # the readers of files posenc wrote, each the one home of its format's keys
    ("posenc_cli/data/corpus_config.py", "corpus_kind"): "the kind of a composed or recorded data mapping",
    ("posenc_cli/data/corpus_config.py", "data_config"): "a run's recorded data config, typed again",
    ("posenc_cli/rundir/record.py", "load_checkpoint"): "checkpoint.pt's record",
    ("posenc_cli/evaluation/labels.py", "run_setting"): "a record from before posenc recorded its config",
    **{("posenc_cli/hf/export_loading.py", f): "an export's config.json" for f in EXPORT_READERS},
    **{("posenc_cli/report/results_file.py", f): "results.json's sections" for f in RESULTS_READERS},
}


def string_key_reads(source: str) -> list[tuple[str, str]]:
    """(function, code) of each `NAME["key"]` or `NAME.get/pop/setdefault("key")` whose receiver (a name,
    an attribute, or a subscript of one: cfg["model"]["n_embd"], run.trained_text.data.get(...)) is
    named like a config."""

    def receiver(node: ast.expr) -> str | None:
        while isinstance(node, ast.Subscript):
            node = node.value
        return (
            node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
        )

    def string(node: ast.expr) -> bool:
        return isinstance(node, ast.Constant) and isinstance(node.value, str)

    found = []
    for function in ast.walk(ast.parse(source)):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.Subscript) and string(node.slice):
                owner = node.value
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("get", "pop", "setdefault")
                and node.args
                and string(node.args[0])
            ):
                owner = node.func.value
            else:
                continue
            if receiver(owner) in CONFIG_NAMES:
                found.append((function.name, ast.unparse(node)))
    return found


def test_no_module_outside_config_reads_a_config_by_string_key():
    """Every layer takes the typed config (the dataclasses of data/corpus_config.py, model/shape.py and
    config/schema.py), never a dict's keys: config/ composes and checks the plain mapping Hydra gives,
    and only the named readers of posenc's own files read a record's keys."""
    reads = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = str(path.relative_to(ROOT))
        if path.is_relative_to(PACKAGE / "config"):
            continue
        reads += [
            f"{where}:{function}: {code}"
            for function, code in string_key_reads(path.read_text(encoding="utf-8"))
            if (where, function) not in RECORD_BOUNDARIES
        ]
    assert reads == []
    for where, function in RECORD_BOUNDARIES:  # every boundary named still reads a mapping
        assert function in {f for f, _ in string_key_reads((ROOT / where).read_text(encoding="utf-8"))}


def test_the_string_key_scan_finds_the_forms_configs_were_read_in_before_they_were_typed():
    old = """
def f(data_cfg, cfg, run, tc):
    data_cfg.get("path"); data_cfg["name"]; tc["max_steps"] = 1; cfg["model"]["n_embd"]
    run.trained_text.data.get("val_fraction"); cfg["scheme"].pop("name")
    summary["status"]; meta.get("dtype"); cfg.get(key)
"""
    assert {code for _, code in string_key_reads(old)} == {
        "data_cfg.get('path')",
        "data_cfg['name']",
        "tc['max_steps']",
        "cfg['model']['n_embd']",
        "cfg['model']",
        "run.trained_text.data.get('val_fraction')",
        "cfg['scheme'].pop('name')",
        "cfg['scheme']",
    }


def test_no_import_cycle_remains_counting_imports_inside_functions():
    result = subprocess.run(
        [sys.executable, "scripts/import_cycles.py"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0 and "no import cycle" in result.stdout, result.stdout


def test_evals_options_and_trains_args_climb_back_to_a_higher_layer_at_most_8_and_12_times():
    """Following `options` from report.run_eval:run_eval down the calls, they climb back to a higher
    layer at most 8 times; `args` from training.launch:train_with at most 12 (scripts/layer_climbs.py,
    which `--check`s the same bounds)."""
    spec = importlib.util.spec_from_file_location("layer_climbs", ROOT / "scripts" / "layer_climbs.py")
    climbs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(climbs)
    options = climbs.walk("posenc_cli.report.run_eval:run_eval", "options", ROOT)
    args = climbs.walk("posenc_cli.training.launch:train_with", "args", ROOT)
    assert options.climbs() <= 8, climbs.report(options)
    assert args.climbs() <= 12, climbs.report(args)
    assert len(options.order) > 10  # the walk found the path: checks, loading, scoring, writing


def test_every_function_and_module_keeps_to_the_size_rules_or_is_a_named_exception():
    """No function over 60 lines, none with more than three positional parameters, no module over 350
    lines, unless scripts/function_sizes.py's EXCEPTIONS or LONG_MODULES names it and says why (and they
    name nothing that keeps the rules)."""
    spec = importlib.util.spec_from_file_location("function_sizes", ROOT / "scripts" / "function_sizes.py")
    sizes = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sizes)
    found = sizes.findings()
    assert sizes.unexplained(found) == {}
    assert sizes.stale(found) == []


def test_no_two_modules_share_a_basename():
    names = Counter(p.stem for p in modules() if p.stem != "__init__")
    packages = {p.parent.name for p in modules() if p.name == "__init__.py"}
    assert [n for n, count in names.items() if count > 1] == []
    assert sorted(names.keys() & packages) == []  # a module named like a package reads as that package


def test_the_development_pages_package_list_names_exactly_the_packages_of_posenc_cli():
    page = (ROOT / "docs" / "development.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^- `posenc_cli/(\w+)/`", page, flags=re.M))
    present = {p.parent.name for p in PACKAGE.glob("*/__init__.py")} - {"configs"}
    assert listed == present


def test_the_config_reference_is_generated_from_the_dataclasses():
    result = subprocess.run(
        [sys.executable, "scripts/config_reference.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr

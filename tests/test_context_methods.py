"""--rope-scaling's context methods on posenc's own runs, end to end: `yarn+logn`, `self_extend`,
`rerope` parsed once into ContextMethods, their options (--self-extend-window, ...) reaching the model,
the columns they make in eval's and probe's tables and results.json, and what a run cannot take."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

import posenc
from conftest import evaluate
from posenc_cli.core.choices import CONTEXT_REMAPS
from posenc_cli.core.errors import UsageError
from posenc_cli.evaluation.labels import Label, Variant
from posenc_cli.evaluation.run_target import RunTarget, RunVariant
from posenc_cli.evaluation.target import RefusedColumn
from posenc_cli.model import GPT, ModelConfig
from posenc_cli.model.extension.method import REMAPS, ExtensionSettings, parse_methods
from posenc_cli.model.shape import ModelSize
from posenc_cli.report.results_file import read_label, read_results_file

SETTINGS = ExtensionSettings(self_extend_window=16)


def test_a_methods_text_parses_back_to_the_same_method():
    methods = parse_methods(
        "none,yarn+logn,self_extend,logn+dca,ntk+rerope,leaky_rerope", ExtensionSettings()
    )
    texts = [m.text for m in methods]
    assert texts == ["none", "yarn+logn", "self_extend", "dca+logn", "ntk+rerope", "leaky_rerope"]
    assert parse_methods(",".join(texts), ExtensionSettings()) == methods


def rotary_run(scheme: str, train_len: int = 64, **options) -> RunTarget:
    """What RunTarget.variants reads of a run: its model, training length and path."""
    cfg = ModelConfig(11, train_len, ModelSize(n_layer=1, n_head=2, n_embd=32), scheme, options)
    return RunTarget(Path(f"{scheme}_run"), GPT(cfg), None, train_len, SimpleNamespace(), SimpleNamespace())


def test_an_extension_past_the_runs_context_is_refused_naming_the_run_and_the_method():
    (method,) = parse_methods("self_extend", ExtensionSettings(self_extend_window=100))
    with pytest.raises(UsageError, match="self_extend for rope_run: --self-extend-window 100 is past .* 64"):
        RunTarget.variants(rotary_run("rope"), [method], None)
    (dca,) = parse_methods("dca", ExtensionSettings(dca_chunk=60, dca_local=8))
    with pytest.raises(UsageError, match="--dca-chunk 60 \\+ --dca-local 8 = 68 is past"):
        RunTarget.variants(rotary_run("rope"), [dca], None)


def test_a_scalable_scheme_without_a_plain_rotation_refuses_an_extensions_column_with_its_reason():
    xpos = rotary_run("xpos")
    none, rerope = RunTarget.variants(xpos, parse_methods("none,rerope", ExtensionSettings()), None)
    assert isinstance(none, RunVariant) and none.extension is None
    assert isinstance(rerope, RefusedColumn) and rerope.why == "scheme xpos has no RoPE rotation to extend"
    assert xpos.use_variant(rerope).variant.extension == ("rerope",)
    assert xpos.active is None  # a refused column changes nothing


def test_a_run_trained_with_a_scaling_takes_an_extension_on_top_but_no_second_scaling():
    run = rotary_run("rope", 128, scaling="linear", scaling_factor=2)
    none, logn = RunTarget.variants(run, parse_methods("none,self_extend+logn", ExtensionSettings()), None)
    assert none.options == {} and none.extension is None
    assert logn.options == {} and logn.extension.names == ("self_extend", "logn")
    assert logn.extension.marks == (("G", "8"), ("W", "32"))  # the defaults at 128 tokens: G = 8, W = L/4
    assert all(layer.remap is None for layer in run.model.attention)  # the check left the model as trained
    trained, second = RunTarget.variants(run, parse_methods("yarn+logn", ExtensionSettings()), None)
    assert trained == RunVariant()  # scored as trained beside the refused column
    assert isinstance(second, RefusedColumn) and "scalings do not compose" in second.why


def test_an_extension_of_the_api_that_is_not_a_whole_number_is_refused_before_any_run_is_read(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match="--self-extend-group"):
        posenc.evaluate("no-such-run", rope_scaling="self_extend", self_extend_group=2.5)
    with pytest.raises(UsageError, match="--dca-chunk"):
        posenc.probe("no-such-run", rope_scaling=["none", "dca"], dca_chunk="64")
    assert list(tmp_path.iterdir()) == []


def rope_run(sweep: Path) -> str:
    return str(next(p for p in sweep.iterdir() if p.name.endswith("rope_seed0")))


def test_self_extend_reaches_the_model_and_equals_plain_rope_within_its_window(smoke_sweep, tmp_path):
    """`--rope-scaling none,self_extend --self-extend-window 16` on the sweep: a column of its own, named
    with its parameters in ppl.csv, comparison.md and results.json; within W it is plain attention, to the
    bit; past W it is another model; a run with no rotary scheme is scored once, as trained, and says so."""
    args = ["--lengths", "16,128", "--max-tokens", "512", "--rope-scaling", "none,self_extend"]
    df = evaluate(tmp_path, str(smoke_sweep), *args, "--self-extend-window", "16")
    column = "rope+self_extend (G=8, W=16)"
    ppl = df.set_index(["scheme", "eval_len"])["ppl"]
    assert ppl[column, 16] == ppl["rope", 16]  # exactly: no pair is W apart
    assert ppl[column, 128] != ppl["rope", 128]
    assert not df["scheme"].str.contains(r"alibi\+|learned\+").any()
    comparison = (tmp_path / "eval" / "comparison.md").read_text(encoding="utf-8")
    header = comparison.splitlines()[2]
    assert column in header and header.index(" rope ") < header.index(column)  # after the plain column
    assert "alibi takes no RoPE scaling: scored once, as trained" in comparison
    (section,) = read_results_file(tmp_path / "eval")
    label = next(s for s in section.tables["ppl"]["scheme"] if str(s) == column)
    assert label.variant == Variant(extension=("self_extend",), settings=(("G", "8"), ("W", "16")))
    document = json.loads((tmp_path / "eval" / "results.json").read_text())
    assert document["format_version"] == 3


def test_a_results_json_of_version_2_reads_its_labels_with_no_extension():
    written = {
        "scheme": ["rope"],
        "variant": {"options": [], "scaling": "yarn", "factor": 4.0, "randomized": False, "overflow": ""},
        "model": "",
        "tokenizer": "",
        "distinct": [],
        "context": None,
    }
    assert read_label(written) == Label(("rope",), Variant(scaling="yarn", factor=4.0))


def test_the_command_lines_remap_names_are_the_model_layers_registry():
    """core.choices.CONTEXT_REMAPS (which the torch-free command line reads) lists method.REMAPS, in order,
    and each remap reads only options of the Extension group that ExtensionSettings is."""
    assert CONTEXT_REMAPS == tuple(REMAPS)
    options = {field.name for field in dataclasses.fields(ExtensionSettings)}
    assert all(set(reads) <= options for reads, _ in REMAPS.values())

"""results.json: every eval and probe output set records how it was made and every row of its tables, with
structured column labels; `posenc report` rebuilds the tables and figures from it as eval and probe wrote
them, merges sets (a run counts once), and refuses in one line a file it cannot vouch for."""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from dataclasses import asdict
from pathlib import Path

import pandas as pd
import pytest
import torch

from conftest import assert_refused, column, posenc, run_cli
from posenc_cli.core.errors import UsageError
from posenc_cli.core.file_sets import MANIFEST
from posenc_cli.evaluation.labels import Label, Variant
from posenc_cli.report.output_sets import write_eval_outputs, write_probe_outputs
from posenc_cli.report.results_file import FORMAT_VERSION, RESULTS, parse_results, provenance, read_label

TABLES = ("ppl.csv", "ppl.md", "comparison.md", "loss_by_position.csv", "probe.csv", "passkey.md")
FIGURES = ("ppl_vs_length.svg", "loss_by_position.svg", "probe_summary.svg", "probe_rope.svg")
COLUMNS = {  # a scheme's column -> (its label, its run, its facts)
    "rope": (column("rope"), "runs/rope", {"positional_params": 0, "relative": "explicit"}),
    "rope+yarn": (
        column("rope", "yarn"),
        "runs/rope",
        {"positional_params": 0, "relative": "explicit"},
    ),
    "learned": (column("learned"), "runs/learned", {"positional_params": 8192, "relative": "none"}),
    "alibi": (column("alibi"), "runs/alibi", {"positional_params": 0, "relative": "explicit"}),
    "smollm2 (rope)": (
        column("rope", model="smollm2"),
        "hf:smollm2",
        {"positional_params": 0, "relative": "explicit", "used_by": "smollm2"},
    ),
}


def ppl_row(label: Label, run: str, length: int, ppl: float) -> dict:
    scored = not math.isnan(ppl)
    return {
        "run": run,
        "model_id": f"{run.split('/')[-1]}-id@100",
        "scheme": label,
        "seed": 0,
        "train_len": 64,
        "eval_len": length,
        "mode": "nonoverlap",
        "tokens": 512 if scored else 0,
        "nll": math.log(ppl) if scored else math.nan,
        "ppl": ppl,
        "note": "" if scored else f"{label} past max_len=64",
        "tokenizer": "char",
        "bytes": 512.0 if scored else math.nan,
        "chars": 512.0 if scored else math.nan,
        "bpb": math.log2(ppl) if scored else math.nan,
        "unigram_ppl": 21.3,
        "precision": "fp32",
        "context": 64,
        "reference_len": 64,
        "text": "its validation split",
        "differs": "",
    }


def tables(columns: list[str]) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, dict]:
    """Hand-made ppl, loss-by-position and probe tables of `columns`, with their facts."""
    ppl, positions, probe = [], [], []
    for k, name in enumerate(columns):
        label, run, _ = COLUMNS[name]
        for length in (64, 128, 256):
            value = math.nan if name == "learned" and length > 64 else 3.0 + k / 7 + length / 1000
            ppl.append(ppl_row(label, run, length, value))
        row = ppl[-3]
        positions += [
            {**{c: row[c] for c in ("run", "model_id", "scheme", "seed")}, "eval_len": 64}
            | {"position": p, "nll": 1.0 + k / 3 + p / 100, "tokens": 8}
            for p in (1, 2, 4, 8, 16, 32, 64)
        ]
        if not label.variant.scaling:
            probe += [
                {**{c: row[c] for c in ("run", "model_id", "scheme", "seed", "train_len")}}
                | {
                    "length": length,
                    "depth": depth,
                    "trials": 4,
                    "accuracy": 0.25 * k,
                    "key_nll": 0.1 + depth,
                }
                for length in (64, 128)
                for depth in (0.1, 0.9)
            ]
    info = {COLUMNS[n][0]: COLUMNS[n][2] for n in columns}
    return pd.DataFrame(ppl), pd.DataFrame(positions), pd.DataFrame(probe), info


def written_set(out: Path, columns: list[str], *, probe: bool = True) -> None:
    """An eval set, and a probe set of the same runs into the same directory, as the commands write them."""
    ppl, positions, passkey, info = tables(columns)
    made = provenance([], options={"lengths": "64,128,256"}, data_path=None, device=torch.device("cpu"))
    write_eval_outputs(ppl, positions, info, out=out, made=[made])
    if probe:
        probe_info = {k: v for k, v in info.items() if not k.variant.scaling}
        write_probe_outputs(passkey, probe_info, out, made=[made])


def drawn(svg: Path) -> str:
    """An SVG as drawn: without its date and the random ids matplotlib gives clip paths and markers."""
    text = re.sub(r"<dc:date>[^<]*</dc:date>", "", svg.read_text())
    return re.sub(r'(id="|#)[a-z]+[0-9a-f]{6,}', r"\1ID", text)


def report(cwd: Path, *args: str) -> tuple[int, str]:
    here = Path.cwd()
    os.chdir(cwd)
    try:
        return posenc("report", *args)
    finally:
        os.chdir(here)


@pytest.mark.slow
def test_report_rebuilds_an_eval_and_probe_set_to_the_same_tables_and_figures(tmp_path):
    written_set(tmp_path / "a", ["rope", "rope+yarn", "learned", "alibi", "smollm2 (rope)"])
    code, err = report(tmp_path, "a", "--out", "b")
    assert code == 0, err
    for name in TABLES:
        assert (tmp_path / "b" / name).read_bytes() == (tmp_path / "a" / name).read_bytes(), name
    assert "passkey @" in (tmp_path / "b" / "comparison.md").read_text()
    for name in FIGURES:  # colour by scheme, line style by variant, marker by tokenizer: read from Labels
        assert drawn(tmp_path / "b" / name) == drawn(tmp_path / "a" / name), name
    manifest = json.loads((tmp_path / "b" / MANIFEST).read_text())
    assert list(manifest["files"])[-1] == RESULTS  # written last, before the manifest


def test_results_json_is_strict_json_with_every_row_exactly_and_labels_as_fields(tmp_path):
    written_set(tmp_path / "a", ["rope", "rope+yarn", "learned"])

    def no_nan(constant):
        raise AssertionError(f"{constant} is not JSON")

    document = json.loads((tmp_path / "a" / RESULTS).read_text(), parse_constant=no_nan)
    assert document["format"] == "posenc-results" and document["format_version"] == FORMAT_VERSION
    ppl, _, _, _ = tables(["rope", "rope+yarn", "learned"])
    section = document["eval"]
    rows = section["results"]["ppl"]["rows"]
    assert [r["ppl"] for r in rows] == [None if math.isnan(v) else v for v in ppl["ppl"]]  # not rounded
    assert section["labels"]["rope+yarn"] == json.loads(json.dumps(asdict(column("rope", "yarn"))))
    made = section["provenance"][0]
    assert made["versions"]["torch"] == torch.__version__ and made["machine"]["device"] == "cpu"
    assert made["options"] == {"lengths": "64,128,256"} and made["date"].endswith("+00:00")
    assert set(document) == {"format", "format_version", "eval", "probe"}  # probe carried eval's section


def test_a_results_json_label_from_before_variant_reads_back_as_the_column_it_showed():
    """An older posenc wrote a label's scheme and variant as text, the factor and a pretended context among
    its distinctions: read back, it is the Label this posenc builds for that column, and shows the same text."""
    legacy = {
        "scheme": "rope",
        "variant": "interleaved+yarn",
        "scaling": "yarn",
        "model": "m",
        "overflow": "",
        "tokenizer": "bpe",
        "distinct": [["train.block_size", "64"], ["s", "4"], ["hf-context", "256"]],
    }
    variant = Variant(("interleaved",), "yarn", factor=4.0)
    label = Label(
        ("rope",), variant, model="m", tokenizer="bpe", distinct=(("train.block_size", "64"),), context=256
    )
    assert (
        read_label(legacy) == label
        and str(label) == "m (rope+interleaved+yarn) (train.block_size=64, s=4, hf-context=256) [bpe]"
    )
    composite = {
        **legacy,
        "scheme": "sinusoidal+learned",
        "variant": "randomized",
        "scaling": "",
        "distinct": [],
    }
    assert read_label(composite) == Label(
        ("sinusoidal", "learned"), Variant(randomized=True), model="m", tokenizer="bpe"
    )
    assert read_label(json.loads(json.dumps(asdict(label)))) == label  # as this posenc writes it


def test_a_results_json_of_format_version_1_still_reads_and_a_later_one_is_named():
    """Version 2 made labels records of fields, version 3 added a Variant's extension and settings;
    version 1's text labels read through legacy_label."""
    for version, readable in ((1, True), (2, True), (FORMAT_VERSION, True), (FORMAT_VERSION + 1, False)):
        data = json.dumps({"format": "posenc-results", "format_version": version}).encode()
        if readable:
            assert parse_results(data, Path("r.json"))["format_version"] == version
        else:
            with pytest.raises(
                UsageError, match=f"format version {version}; this posenc reads versions 1, 2 and 3"
            ):
                parse_results(data, Path("r.json"))


def test_report_merges_sets_of_different_runs_and_keeps_each_provenance(tmp_path):
    written_set(tmp_path / "a", ["rope", "rope+yarn"], probe=False)
    written_set(tmp_path / "b", ["alibi"], probe=False)
    code, err = report(tmp_path, "a", "b", "--out", "both")
    assert code == 0, err
    merged = pd.read_csv(tmp_path / "both" / "ppl.csv")
    assert set(merged["scheme"]) == {"rope", "rope+yarn", "alibi"} and len(merged) == 9
    assert len(json.loads((tmp_path / "both" / RESULTS).read_text())["eval"]["provenance"]) == 2
    code, err = report(tmp_path, "both", "--out", "again")  # a report's own set reads back too
    assert (
        code == 0
        and (tmp_path / "again" / "ppl.csv").read_bytes() == (tmp_path / "both" / "ppl.csv").read_bytes()
    )


def rehashed(directory: Path, document: dict) -> None:
    """results.json replaced and its manifest entry made to match: only the format itself can refuse it."""
    data = (json.dumps(document) + "\n").encode()
    (directory / RESULTS).write_bytes(data)
    manifest = json.loads((directory / MANIFEST).read_text())
    manifest["files"][RESULTS] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    (directory / MANIFEST).write_text(json.dumps(manifest))


def hostile(tmp_path: Path) -> dict[str, tuple[list[str], str]]:
    """Directories report must refuse: (its arguments, what the one line names)."""
    written_set(tmp_path / "good", ["rope"], probe=False)
    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "bare").mkdir()
    cases = {}
    for name, change in {
        "tampered": lambda p: p.write_text(p.read_text().replace('"ppl": 3', '"ppl": 1')),
        "truncated": lambda p: p.write_bytes(p.read_bytes()[:100]),
    }.items():
        (tmp_path / name).mkdir()
        for f in ("results.json", MANIFEST):
            (tmp_path / name / f).write_bytes((tmp_path / "good" / f).read_bytes())
        change(tmp_path / name / RESULTS)
        cases[name] = ([name], "does not match its manifest")
    for name, edit, needle in (
        ("future", {"format_version": 99}, "format version 99"),
        ("alien", {"format": "lm-eval"}, "not a posenc results file"),
        ("unlabelled", {"eval": {"labels": {}}}, "eval section is damaged"),
    ):
        (tmp_path / name).mkdir()
        (tmp_path / name / MANIFEST).write_bytes((tmp_path / "good" / MANIFEST).read_bytes())
        document = json.loads((tmp_path / "good" / RESULTS).read_text())
        document.update(edit if "eval" not in edit else {"eval": {**document["eval"], **edit["eval"]}})
        rehashed(tmp_path / name, document)
        cases[name] = ([name], needle)
    written_set(tmp_path / "copy", ["rope"], probe=False)  # the same model measured again
    cases |= {
        "missing": (["no-such-dir"], "no-such-dir is not a directory"),
        "a file": (["file.txt"], "file.txt is not a directory"),
        "no manifest": (["bare"], "bare has no results.json that a complete manifest.json lists"),
        "twice": (["good", "./good/"], "are one directory"),
        "one run twice": (["good", "copy"], "would count twice"),
    }
    return cases


def test_report_refuses_each_bad_directory_in_one_line_and_writes_nothing(tmp_path):
    for what, (args, needle) in hostile(tmp_path).items():
        code, err = report(tmp_path, *args)
        assert_refused(code, err, needle)
        assert not (tmp_path / "outputs").exists(), what


@pytest.mark.slow
def test_eval_records_its_targets_and_text_and_report_rebuilds_its_tables(smoke_sweep, tmp_path):
    run = next(p for p in smoke_sweep.iterdir() if p.name.endswith("rope_seed0"))
    (tmp_path / "text.txt").write_text("to be or not to be that is the theme " * 60)
    args = ["eval", str(run), "--lengths", "64", "--max-tokens", "256", "--data", "text.txt", "--out", "ev"]
    result = run_cli(*args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    made = json.loads((tmp_path / "ev" / RESULTS).read_text())["eval"]["provenance"][0]
    summary = json.loads((run / "summary.json").read_text())
    target = made["targets"][0]
    assert (target["run_id"], target["step"]) == (summary["run_id"], summary["steps"])
    assert target["config"]["scheme"]["name"] == "rope" and made["command"].startswith("posenc eval ")
    text = (tmp_path / "text.txt").read_bytes()
    assert made["data"]["sha256"] == hashlib.sha256(text).hexdigest() and made["data"]["size"] == len(text)
    assert made["git_hash"] is None or re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", made["git_hash"])
    result = run_cli("report", "ev", "--out", "re", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    for name in ("ppl.csv", "ppl.md", "comparison.md", "loss_by_position.csv"):
        assert (tmp_path / "re" / name).read_bytes() == (tmp_path / "ev" / name).read_bytes(), name


def test_a_pretrained_models_row_names_no_seeds_and_a_posenc_runs_counts_them():
    from posenc_cli.report.tables import ppl_pivot

    ppl, _, _, _ = tables(["rope", "smollm2 (rope)"])
    _, rows = ppl_pivot(ppl)
    assert {row[0]: row[1] for row in rows} == {"rope": "1", "smollm2 (rope)": "—"}

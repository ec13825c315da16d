"""`posenc export` writes a transformers model: AutoModelForCausalLM with trust_remote_code gives posenc's
logits exactly for every scheme, PreTrainedTokenizerFast gives posenc's ids for char, byte and bpe
tokenizers, and `posenc eval` of an export (EXPORT_DIR or hf:EXPORT_DIR) scores it as the run it came from."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from conftest import ALL_SCHEMES, BEYOND_CHAPTERS, assert_refused, evaluate, posenc, train
from posenc_cli.data.tokenizers import ByteTokenizer
from posenc_cli.data.vocab import UNK, Vocab
from posenc_cli.evaluation.export import export_run, tokenizer_json
from posenc_cli.rundir.loading import load_run

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

TEXT = "héllo, wörld: ∑ 🙂 the end\n"


def fast_tokenizer(tokenizer):
    import tokenizers

    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizers.Tokenizer.from_str(tokenizer_json(tokenizer))
    )


@pytest.mark.parametrize(
    "tokenizer, text",
    [
        (Vocab.from_text(TEXT), TEXT),
        (Vocab.from_text("abc ", with_unk=True), "a cab, bad"),  # unseen characters map to its <unk>
        (ByteTokenizer(), TEXT),
    ],
    ids=["char", "char-with-unk", "byte"],
)
def test_the_exported_tokenizer_gives_posencs_ids_and_decodes_back(tokenizer, text):
    fast = fast_tokenizer(tokenizer)
    ids = fast(text)["input_ids"]
    assert ids == tokenizer.encode(text, strict=False).tolist()
    if not (isinstance(tokenizer, Vocab) and tokenizer.has_unk):
        assert fast.decode(ids) == text
    else:
        assert ids.count(tokenizer.chars.index(UNK)) == len([c for c in text if c not in "abc "])


def exported_logits_match(run: Path, out: Path) -> None:
    export_run(run, out)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(out), trust_remote_code=True)
    tokenizer = transformers.PreTrainedTokenizerFast.from_pretrained(str(out))
    posenc_run = load_run(run)
    text = posenc_run.tokenizer.decode(torch.arange(len(posenc_run.tokenizer)).tolist()) * 2
    ids = tokenizer(text, return_tensors="pt").input_ids
    assert ids[0].tolist() == posenc_run.tokenizer.encode(text).tolist()
    with torch.no_grad():
        assert torch.equal(model(ids).logits, posenc_run.model(ids)), run.name
        greedy = model.generate(ids[:, :8], max_new_tokens=4, do_sample=False)
        expected = ids[:, :8]
        for _ in range(4):  # posenc's own greedy decoding, token by token
            expected = torch.cat([expected, posenc_run.model(expected)[:, -1:].argmax(-1)], dim=1)
    assert torch.equal(greedy, expected)


@pytest.mark.parametrize("scheme", ALL_SCHEMES)
def test_a_chapter_scheme_loads_in_transformers_with_posencs_logits(scheme, smoke_sweep, tmp_path):
    run = next(p for p in smoke_sweep.iterdir() if p.name.endswith(f"{scheme}_seed0"))
    exported_logits_match(run, tmp_path / "export")


@pytest.mark.parametrize("scheme", BEYOND_CHAPTERS)
def test_a_scheme_beyond_the_chapters_loads_in_transformers_with_posencs_logits(
    scheme, beyond_chapters_sweep, tmp_path
):
    run = next(p for p in beyond_chapters_sweep.iterdir() if p.name.endswith(f"{scheme}_seed0"))
    exported_logits_match(run, tmp_path / "export")


@pytest.fixture(scope="module")
def fire_run(tmp_path_factory) -> Path:
    """A tiny FIRE run (its learned MLP over relative positions): beyond the sweeps the suite shares."""
    return train(tmp_path_factory.mktemp("fire"), "scheme=fire")


@pytest.mark.slow
def test_fire_loads_in_transformers_with_posencs_logits(fire_run, tmp_path):
    exported_logits_match(fire_run, tmp_path / "export")


def text_in_vocabulary(run: Path, path: Path, n: int = 3000) -> Path:
    """A text of the run's own characters, so that the run and its export score every byte of it."""
    chars = load_run(run).tokenizer.chars
    path.write_text("".join(chars[(i * 7 + i // 5) % len(chars)] for i in range(n)), encoding="utf-8")
    return path


@pytest.mark.parametrize("scheme", ["rope", "learned"])
def test_eval_of_an_export_as_a_directory_or_hf_scores_the_run_it_came_from(scheme, smoke_sweep, tmp_path):
    run = next(p for p in smoke_sweep.iterdir() if p.name.endswith(f"{scheme}_seed0"))
    export_run(run, tmp_path / "export")
    data = str(text_in_vocabulary(run, tmp_path / "text.txt"))
    options = ["--data", data, "--lengths", "64,128", "--max-tokens", "1024"]
    own = evaluate(tmp_path, str(run), *options, out="run_eval")
    for name in ("export", "hf:export"):
        exported = evaluate(tmp_path, name, *options, out=f"eval_{name.replace(':', '_')}")
        assert exported["scheme"].unique().tolist() == [f"export ({scheme})"]
        assert exported["ppl"].tolist() == pytest.approx(own["ppl"].tolist(), rel=1e-6, nan_ok=True)
        assert exported["ppl"].isna().tolist() == own["ppl"].isna().tolist()  # learned: — past its table


def test_eval_of_an_export_needs_data_refuses_a_scaling_and_runs_no_code_but_posencs(smoke_sweep, tmp_path):
    run = next(p for p in smoke_sweep.iterdir() if p.name.endswith("rope_seed0"))
    export = export_run(run, tmp_path / "export")
    data = str(text_in_vocabulary(run, tmp_path / "text.txt"))
    assert_refused(
        *posenc("eval", str(export)),
        f"{export} is a posenc export, scored as hf:{export}, which needs --data",
    )
    scaled = ("eval", f"hf:{export}", "--data", data, "--lengths", "64", "--rope-scaling", "yarn")
    assert_refused(*posenc(*scaled), "is a posenc export, scored as exported", "run directory")
    (export / "modeling_posenc.py").write_text("raise SystemExit('foreign code ran')\n")
    assert_refused(
        *posenc("eval", f"hf:{export}", "--data", data), "modeling_posenc.py is not the one posenc writes"
    )
    (export / "model.safetensors").write_bytes(b"not the weights")
    assert_refused(*posenc("eval", f"hf:{export}", "--data", data), "is not a complete posenc export")


def test_an_export_with_a_tokenizer_file_missing_or_changed_or_one_transformers_reads_added_is_refused(
    smoke_sweep, tmp_path
):
    import shutil

    from posenc_cli.core.errors import UsageError
    from posenc_cli.evaluation.export import verified_config

    run = next(p for p in smoke_sweep.iterdir() if p.name.endswith("rope_seed0"))
    export = export_run(run, tmp_path / "export")
    (export / "notes.txt").write_text("a file transformers never reads is left alone")
    verified_config(export)
    for edit, said in (
        (lambda d: (d / "tokenizer.json").unlink(), "it has no tokenizer.json"),
        (
            lambda d: (d / "tokenizer_config.json").write_text("{}"),
            "its tokenizer_config.json is not the one",
        ),
        (lambda d: (d / "added_tokens.json").write_text('{"x": 99}'), "it holds added_tokens.json"),
    ):
        shutil.rmtree(tmp_path / "edited", ignore_errors=True)
        edited = Path(shutil.copytree(export, tmp_path / "edited"))
        edit(edited)
        with pytest.raises(UsageError, match=said):
            verified_config(edited)


def test_a_run_holding_its_own_export_is_still_evaluated_as_the_run_and_hf_run_names_the_export(
    smoke_sweep, tmp_path
):
    import shutil

    from posenc_cli.evaluation.export import is_export
    from posenc_cli.evaluation.targets import exports_as_hf

    run = Path(
        shutil.copytree(
            next(p for p in smoke_sweep.iterdir() if p.name.endswith("rope_seed0")), tmp_path / "run"
        )
    )
    export_run(run)  # the default: into the run directory
    assert exports_as_hf([str(run)]) == [str(run)]  # posenc eval RUN: the run, scalable, no --data needed
    assert is_export(run, in_a_run=True) and is_export(export_run(run, tmp_path / "elsewhere"))

"""`posenc export` writes a transformers model: AutoModelForCausalLM with trust_remote_code gives posenc's
logits exactly for every scheme, PreTrainedTokenizerFast gives posenc's ids for char, byte and bpe
tokenizers, and `posenc eval` of an export (EXPORT_DIR or hf:EXPORT_DIR) scores it as the run it came from."""

from __future__ import annotations

import json
from importlib.util import find_spec
from pathlib import Path

import pytest
import torch

from conftest import ALL_SCHEMES, BEYOND_CHAPTERS, assert_refused, evaluate, invoke, posenc, train
from posenc_cli.data.tokenizers import ByteTokenizer
from posenc_cli.data.vocab import UNK, Vocab
from posenc_cli.hf.export import (
    MODELING,
    MODELING_SOURCE,
    TOKENIZER,
    TOKENIZER_CONFIG,
    document_end_id,
    export_run,
    tokenizer_config,
    tokenizer_json,
)
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


@pytest.mark.parametrize(
    "tokenizer, newline",
    [(Vocab.from_text(TEXT + "Ċ"), TEXT.index("\n")), (ByteTokenizer(), 10), (Vocab.from_text("abc "), None)],
    ids=["char", "byte", "char-without-a-newline"],
)
def test_an_exports_tokenizer_ends_a_document_with_its_newline_and_keeps_posencs_ids(
    tokenizer, newline, tmp_path
):
    """The end of text lm-evaluation-harness starts each rolling window with is the newline posenc ends
    every document with, set without adding a token: ids, vocabulary size and decoding stay posenc's,
    including the letter Ċ that stands for the newline in byte-level vocabularies."""
    (tmp_path / TOKENIZER).write_text(tokenizer_json(tokenizer), encoding="utf-8")
    (tmp_path / TOKENIZER_CONFIG).write_text(json.dumps(tokenizer_config(tokenizer)), encoding="utf-8")
    (tmp_path / MODELING).write_text(MODELING_SOURCE, encoding="utf-8")
    fast = transformers.AutoTokenizer.from_pretrained(str(tmp_path), trust_remote_code=True)
    newline = None if newline is None else tokenizer.encode("\n").tolist()[0]
    assert document_end_id(tokenizer) == fast.eos_token_id == newline
    text = "a cab" if newline is None else TEXT + "Ċ\n"
    assert fast(text)["input_ids"] == tokenizer.encode(text).tolist()
    assert len(fast) == len(tokenizer) and fast.decode(tokenizer.encode(text).tolist()) == text


def exported_tokenizer(tokenizer, directory: Path):
    """The tokenizer of an export holding `tokenizer`, as AutoTokenizer loads it."""
    (directory / TOKENIZER).write_text(tokenizer_json(tokenizer), encoding="utf-8")
    (directory / TOKENIZER_CONFIG).write_text(json.dumps(tokenizer_config(tokenizer)), encoding="utf-8")
    (directory / MODELING).write_text(MODELING_SOURCE, encoding="utf-8")
    return transformers.AutoTokenizer.from_pretrained(str(directory), trust_remote_code=True)


def test_an_exports_char_tokenizer_refuses_characters_its_vocabulary_lacks_instead_of_dropping_them(
    tmp_path,
):
    """tokenizers drops a character a vocabulary without <unk> lacks, so lm-evaluation-harness (or
    eval hf:DIR) would score a shorter text than it was given; posenc refuses such a text, and so does
    the export's tokenizer, however it is called. One with <unk> maps them to it; a byte vocabulary has
    every character."""
    from posenc_cli.core.errors import UsageError

    plain, with_unk = Vocab.from_text("abc \n"), Vocab.from_text("abc ", with_unk=True)
    for name in ("plain", "unk", "byte"):
        (tmp_path / name).mkdir()
    fast = exported_tokenizer(plain, tmp_path / "plain")
    assert fast("a cab\n")["input_ids"] == plain.encode("a cab\n").tolist()
    for call in (fast, fast.encode, fast.tokenize, lambda t: fast(["a", t]), lambda t: fast(["a"], [t])):
        with pytest.raises(UsageError, match="1 character\\(s\\) outside the export's vocabulary: 'x'"):
            call("a xab")
    unk_ids = exported_tokenizer(with_unk, tmp_path / "unk")("a xb")["input_ids"]
    assert unk_ids == with_unk.encode("a xb", strict=False).tolist()
    byte_ids = exported_tokenizer(ByteTokenizer(), tmp_path / "byte")(TEXT)["input_ids"]
    assert byte_ids == ByteTokenizer().encode(TEXT).tolist()


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


@pytest.fixture(scope="module")
def lines_run(tmp_path_factory) -> Path:
    """A tiny run on a text of lines, so that its vocabulary holds the newline that ends a document."""
    cwd = tmp_path_factory.mktemp("lines")
    words = "to be or not that is the question whether tis nobler in the mind".split()
    lines = [" ".join(words[(i * 5) % len(words) :][: 3 + i % 7]) for i in range(400)]
    (cwd / "lines.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return train(cwd, "data=text", f"data.path={cwd / 'lines.txt'}")


@pytest.mark.slow
@pytest.mark.skipif(find_spec("lm_eval") is None, reason="lm-evaluation-harness is not installed")
def test_lm_evaluation_harness_scores_every_token_of_an_export_once_in_windows_of_its_training_length(
    lines_run, tmp_path
):
    """lm-evaluation-harness's `hf` model on an export: loglikelihood_rolling of a text three windows
    long is posenc's own log-likelihood of it, each window of the training length read by the model
    after the token before it (the document end before the first)."""
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    export = export_run(lines_run, tmp_path / "export")
    harness = HFLM(pretrained=str(export), trust_remote_code=True, batch_size=2, device="cpu")
    run = load_run(lines_run)
    text = text_in_vocabulary(lines_run, tmp_path / "text.txt", n=3 * run.train_len).read_text("utf-8")
    ids = run.tokenizer.encode(text)
    inputs = torch.cat([torch.tensor([document_end_id(run.tokenizer)]), ids[:-1]])
    with torch.no_grad():
        expected = sum(
            torch.log_softmax(run.model(inputs[None, start : start + run.train_len]), dim=-1)[0]
            .gather(1, ids[start : start + run.train_len, None])
            .sum()
            .item()
            for start in range(0, len(ids), run.train_len)
        )
    assert harness.max_length == run.train_len
    rolling = harness.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (text,), 0)])
    assert rolling == pytest.approx([expected], rel=1e-5)


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
    (export / "modeling_posenc.py").write_text(MODELING_SOURCE, encoding="utf-8")
    (export / "model.safetensors").write_bytes(b"not the weights")
    assert_refused(*posenc("eval", f"hf:{export}", "--data", data), "is not a complete posenc export")


def test_an_export_with_a_tokenizer_file_missing_or_changed_or_one_transformers_reads_added_is_refused(
    smoke_sweep, tmp_path
):
    import shutil

    from posenc_cli.core.errors import UsageError
    from posenc_cli.hf.export_loading import verified_config

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


def test_a_tokenizer_added_to_an_export_of_token_ids_is_refused(smoke_sweep, tmp_path):
    """An export of token ids (data=bin) has no tokenizer files; ones put beside it would give
    transformers another tokenizer's ids (and eval hf:DIR an IndexError past the vocabulary)."""
    from posenc_cli.core.errors import UsageError
    from posenc_cli.core.file_sets import MANIFEST, read_manifest
    from posenc_cli.hf.export_loading import verified_config

    run = next(p for p in smoke_sweep.iterdir() if p.name.endswith("rope_seed0"))
    export = export_run(run, tmp_path / "export")
    manifest = read_manifest(export)
    for name in (TOKENIZER, TOKENIZER_CONFIG):  # the manifest of an export without a tokenizer
        del manifest["files"][name]
    (export / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(UsageError, match="it holds tokenizer.json, which transformers would read"):
        verified_config(export)
    (export / TOKENIZER).unlink()
    with pytest.raises(UsageError, match="it holds tokenizer_config.json, which transformers would read"):
        verified_config(export)
    (export / TOKENIZER_CONFIG).unlink()
    verified_config(export)


def test_an_export_of_token_ids_over_a_text_runs_export_removes_the_tokenizer_it_replaces(
    smoke_sweep, tmp_path
):
    """Exporting a data=bin run into a directory holding a text run's export: that export's tokenizer
    files go with it, so the new export loads (transformers would read them, and verified_config refuses
    them); a tokenizer file its manifest did not vouch for is left, and refused."""
    import numpy as np

    from posenc_cli.hf.export_loading import verified_config

    (np.arange(3000) % 40).astype(np.uint16).tofile(tmp_path / "train.bin")
    (np.arange(1000) % 40).astype(np.uint16).tofile(tmp_path / "val.bin")
    (tmp_path / "meta.json").write_text(json.dumps({"dtype": "uint16", "vocab_size": 40}))
    ids_run = train(tmp_path, "data=bin", "data.train=train.bin", "data.val=val.bin", run="ids")
    text_run = next(p for p in smoke_sweep.iterdir() if p.name.endswith("rope_seed0"))
    export_run(text_run, tmp_path / "export")
    export = export_run(ids_run, tmp_path / "export")
    assert not (export / TOKENIZER).exists() and not (export / TOKENIZER_CONFIG).exists()
    verified_config(export)
    export_run(text_run, export)
    (export / TOKENIZER_CONFIG).write_text("{}", encoding="utf-8")  # edited: no longer posenc's
    export_run(ids_run, export)
    assert (export / TOKENIZER_CONFIG).exists() and not (export / TOKENIZER).exists()
    assert_refused(
        *posenc("eval", f"hf:{export}", "--data", str(tmp_path / "val.bin")), "it holds tokenizer_config.json"
    )


def test_an_export_of_an_older_version_is_refused_by_its_version_and_one_without_a_newline_says_so(
    smoke_sweep, tmp_path
):
    from posenc_cli.core.errors import UsageError
    from posenc_cli.core.file_sets import MANIFEST, hashed_entry, read_manifest
    from posenc_cli.hf.export import CONFIG
    from posenc_cli.hf.export_loading import verified_config

    run = next(p for p in smoke_sweep.iterdir() if p.name.endswith("rope_seed0"))
    result = invoke("export", str(run), "--out", str(tmp_path / "export"))
    assert result.code == 0 and "lm-evaluation-harness needs prefix_token_id" in " ".join(
        result.stderr.split()
    )
    export = tmp_path / "export"
    config = json.loads((export / CONFIG).read_text(encoding="utf-8")) | {"version": 2}
    (export / CONFIG).write_text(json.dumps(config), encoding="utf-8")
    manifest = read_manifest(export)
    manifest["files"][CONFIG] = hashed_entry(export / CONFIG)  # consistent, as a version-2 export was
    (export / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(UsageError, match="export version 2, and this posenc reads version 3"):
        verified_config(export)


def test_a_run_holding_its_own_export_is_still_evaluated_as_the_run_and_hf_run_names_the_export(
    smoke_sweep, tmp_path
):
    import shutil

    from posenc_cli.hf.export_loading import is_export
    from posenc_cli.hf.targets import exports_as_hf

    run = Path(
        shutil.copytree(
            next(p for p in smoke_sweep.iterdir() if p.name.endswith("rope_seed0")), tmp_path / "run"
        )
    )
    export_run(run)  # the default: into the run directory
    assert exports_as_hf([str(run)]) == [str(run)]  # posenc eval RUN: the run, scalable, no --data needed
    assert is_export(run, in_a_run=True) and is_export(export_run(run, tmp_path / "elsewhere"))


def vouched(export: Path, *names: str) -> None:
    """The export's manifest rewritten to list `names` as they are now: what anyone can do to it."""
    from posenc_cli.core.file_sets import MANIFEST, hashed_entry, read_manifest

    manifest = read_manifest(export)
    for name in names:
        manifest["files"][name] = hashed_entry(export / name)
    (export / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")


def planted(export: Path, marker: Path) -> str:
    """evil.py in the export: importing it writes `marker`, then gives posenc's classes (so that a load
    it is imported by goes on as if nothing happened). Its source."""
    source = (
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\n"
        "from posenc_cli.evaluation.hf_modeling import *  # noqa: F403\n"
    )
    (export / "evil.py").write_text(source, encoding="utf-8")
    return source


def edited_json(export: Path, name: str, edit) -> None:
    value = json.loads((export / name).read_text(encoding="utf-8"))
    edit(value)
    (export / name).write_text(json.dumps(value), encoding="utf-8")
    vouched(export, name)


def generate_py(export: Path, source: str) -> None:
    (export / "custom_generate").mkdir()
    (export / "custom_generate" / "generate.py").write_text(source + "def generate(model, **_):\n    pass\n")


PLANTS = {  # how each variant points transformers at evil.py, and what the refusal names
    "config.json auto_map": (
        lambda e, _: edited_json(
            e, "config.json", lambda c: c["auto_map"].update(AutoConfig="evil.PosencConfig")
        ),
        "config.json: its key 'auto_map.AutoConfig' names code posenc did not write",
    ),
    "tokenizer_config.json auto_map": (
        lambda e, _: edited_json(
            e,
            TOKENIZER_CONFIG,
            lambda c: c["auto_map"].update(AutoTokenizer=[None, "evil.PosencTokenizerFast"]),
        ),
        "tokenizer_config.json: its key 'auto_map.AutoTokenizer' names code posenc did not write",
    ),
    "an AutoProcessor key": (
        lambda e, _: edited_json(e, "config.json", lambda c: c["auto_map"].update(AutoProcessor="evil.P")),
        "config.json: its key 'auto_map.AutoProcessor' names code posenc did not write",
    ),
    "modeling_posenc.py replaced": (
        lambda e, source: ((e / MODELING).write_text(source, encoding="utf-8"), vouched(e, MODELING)),
        "modeling_posenc.py is not the one posenc writes",
    ),
    "custom_generate": (generate_py, "custom_generate holds code transformers would run"),
}


@pytest.mark.parametrize("variant", PLANTS)
def test_code_planted_in_an_export_never_runs_and_every_command_refuses_it_before_transformers_loads(
    variant, smoke_sweep, tmp_path, monkeypatch
):
    """evil.py beside an export, named by its configs (the manifest rewritten to vouch for them), or
    posenc's own module replaced: eval (EXPORT or hf:EXPORT), sample and probe refuse it in one line
    naming the file and the key, before transformers reads the directory, and evil.py never runs."""
    from posenc_cli.hf import model_loading as hf_loading

    def never(*_, **__):
        raise AssertionError("transformers was asked to load the directory")

    run = next(p for p in smoke_sweep.iterdir() if p.name.endswith("rope_seed0"))
    export, marker = export_run(run, tmp_path / "export"), tmp_path / "ran"
    data = str(text_in_vocabulary(run, tmp_path / "text.txt"))
    plant, said = PLANTS[variant]
    plant(export, planted(export, marker))
    monkeypatch.setattr(hf_loading, "load_pretrained", never)
    for command in (
        ("eval", f"hf:{export}", "--data", data, "--lengths", "64", "--out", str(tmp_path / "a")),
        ("eval", str(export), "--data", data, "--lengths", "64", "--out", str(tmp_path / "b")),
        ("sample", f"hf:{export}", "--tokens", "3"),
        ("probe", str(export), "--lengths", "64", "--out", str(tmp_path / "c")),
    ):
        assert_refused(*posenc(*command), said)
    assert not marker.exists()
    assert not any((tmp_path / out).exists() for out in "abc")


def test_a_local_hf_directory_that_names_code_is_refused_and_its_code_never_runs(tmp_path, monkeypatch):
    """A model directory that is not a posenc export never gets trust_remote_code: one whose JSONs name
    code (posenc's own auto_map copied there too), or a GGUF file beside such a directory's files, is
    refused in one line before transformers reads it."""
    from posenc_cli.hf import model_loading as hf_loading
    from posenc_cli.hf.export import HF_FIELDS

    monkeypatch.setattr(hf_loading, "load_pretrained", lambda *_, **__: pytest.fail("transformers loaded it"))
    model, marker = tmp_path / "model", tmp_path / "ran"
    model.mkdir()
    planted(model, marker)
    (model / "config.json").write_text(
        json.dumps({"model_type": "llama", "auto_map": {"AutoConfig": "evil.C"}})
    )
    (model / "model.gguf").write_bytes(b"GGUF")
    for name in (f"hf:{model}", f"hf:{model / 'model.gguf'}"):
        assert_refused(*posenc("sample", name), "config.json: its key 'auto_map' names code for transformers")
    (model / "config.json").write_text(json.dumps(HF_FIELDS))  # posenc's auto_map, in no export
    (model / MODELING).write_text(MODELING_SOURCE, encoding="utf-8")
    assert_refused(
        *posenc("sample", f"hf:{model}"), "gives trust_remote_code to no directory but a posenc export"
    )
    assert not marker.exists()


@pytest.fixture(scope="module")
def two_layer_run(tmp_path_factory) -> Path:
    """A tiny run of two layers on a text file (data=text): an export of it can be edited to one."""
    cwd = tmp_path_factory.mktemp("two_layers")
    words = "to be or not that is the question whether tis nobler in the mind".split()
    text = " ".join(words[(i * 7) % len(words)] for i in range(6000))
    (cwd / "corpus.txt").write_text(text, encoding="utf-8")
    return train(cwd, "data=text", f"data.path={cwd / 'corpus.txt'}", "model.n_layer=2")


@pytest.mark.slow
def test_an_export_edited_to_another_model_than_its_weights_is_refused_however_it_is_named(
    two_layer_run, tmp_path
):
    """One verification for an export named EXPORT or hf:EXPORT (and load_export): config.json edited to
    1 of its 2 layers, or 3, the manifest rewritten to vouch for it, is refused in one line naming the
    weights it lacks or has beyond, never scored with a layer dropped or made up."""
    from posenc_cli.core.errors import UsageError
    from posenc_cli.hf.export_loading import load_export

    data = str(text_in_vocabulary(two_layer_run, tmp_path / "text.txt"))
    for layers, said in ((1, "unexpected ['blocks.1."), (3, "missing ['blocks.2.")):
        export = export_run(two_layer_run, tmp_path / f"export{layers}")
        edited_json(export, "config.json", lambda c: c["model_config"].update(n_layer=layers))
        for name in (str(export), f"hf:{export}"):
            refused = posenc("eval", name, "--data", data, "--lengths", "64", "--out", str(tmp_path / "eval"))
            assert_refused(*refused, "model.safetensors does not match its config.json", said)
        with pytest.raises(UsageError, match="does not match its config.json"):
            load_export(export)
    assert not (tmp_path / "eval").exists()


@pytest.mark.slow
def test_an_exports_configs_must_be_what_posenc_writes_for_its_model_and_tokenizer(two_layer_run, tmp_path):
    """config.json's transformers fields and tokenizer_config.json change what transformers builds and
    how it tokenizes, so each is held to what posenc writes for the model and tokenizer config.json
    states, whatever the manifest says."""
    import shutil

    from posenc_cli.core.errors import UsageError
    from posenc_cli.hf.export_loading import verified_export

    export = export_run(two_layer_run, tmp_path / "export")
    verified_export(export)
    edits = {
        "tie_word_embeddings false, where posenc writes true": lambda c: c.update(tie_word_embeddings=False),
        "max_position_embeddings 4096, where posenc writes 64": lambda c: c.update(
            max_position_embeddings=4096
        ),
        "holds 'quantization_config', which posenc does not write": lambda c: c.update(
            quantization_config={}
        ),
    }
    for said, edit in edits.items():
        shutil.rmtree(tmp_path / "edited", ignore_errors=True)
        edited = Path(shutil.copytree(export, tmp_path / "edited"))
        edited_json(edited, "config.json", edit)
        with pytest.raises(UsageError, match=said):
            verified_export(edited)
    shutil.rmtree(tmp_path / "edited")
    edited = Path(shutil.copytree(export, tmp_path / "edited"))
    edited_json(edited, TOKENIZER_CONFIG, lambda c: c.update(tokenizer_class="PreTrainedTokenizerFast"))
    with pytest.raises(UsageError, match="its tokenizer_config.json is not the one posenc writes"):
        verified_export(edited)


@pytest.mark.slow
def test_an_export_evaluated_on_its_runs_own_corpus_is_scored_on_its_validation_split_as_the_run_is(
    two_layer_run, tmp_path
):
    """An export carries its run's corpus identity (corpus_sha256, data): `eval hf:EXPORT --data T` on the
    text the run trained on scores T's validation split, as `eval RUN --data T` does, and says so; it was
    once scored on T's first bytes, training split included, with no word of it."""
    export = export_run(two_layer_run, tmp_path / "export")
    corpus = load_run(two_layer_run).record.data["path"]
    options = ["--data", corpus, "--lengths", "64", "--max-tokens", "512"]
    own = evaluate(tmp_path, str(two_layer_run), *options, out="run_eval")
    exported = evaluate(tmp_path, f"hf:{export}", *options, out="export_eval")
    assert exported["ppl"].tolist() == pytest.approx(own["ppl"].tolist(), rel=1e-6)
    assert exported["text"].tolist() == [own["text"].iloc[0].replace(two_layer_run.name, "export")]
    assert "the validation split of the text export was trained on" in exported["text"].iloc[0]
    assert "the validation split" in (tmp_path / "export_eval" / "comparison.md").read_text()


def rope_export(smoke_sweep, directory: Path) -> Path:
    return export_run(next(p for p in smoke_sweep.iterdir() if p.name.endswith("rope_seed0")), directory)


def test_files_swapped_in_an_export_after_its_check_are_never_loaded(smoke_sweep, tmp_path, monkeypatch):
    """The bytes checked are the bytes loaded: modeling_posenc.py and config.json replaced (os.replace, as
    a racing process would) between posenc's check and transformers' load once ran the planted code. The
    export is loaded from a private copy (mode 0700) of what was checked, gone once loaded."""
    import os
    import stat

    from posenc_cli.hf import model_loading as hf_loading

    export, marker = rope_export(smoke_sweep, tmp_path / "export"), tmp_path / "ran"
    source = planted(export, marker)
    config = json.loads((export / "config.json").read_text(encoding="utf-8"))
    config["auto_map"]["AutoConfig"] = "evil.PosencConfig"
    real, loaded_from = hf_loading.load_config, []

    def swap_then_load(tf, where, name, **kwargs):
        """After every check, before transformers reads a file: the export's files swapped."""
        for name_in_export, text in ((MODELING, source), ("config.json", json.dumps(config))):
            (tmp_path / "swap").write_text(text, encoding="utf-8")
            os.replace(tmp_path / "swap", export / name_in_export)
        loaded_from.append((Path(where), stat.S_IMODE(Path(where).parent.stat().st_mode)))
        return real(tf, where, name, **kwargs)

    monkeypatch.setattr(hf_loading, "load_config", swap_then_load)
    model = hf_loading.load_hf_model(f"hf:{export}")
    assert not marker.exists()
    (where, mode), *_ = loaded_from
    assert where != export and mode == 0o700 and not where.exists()
    assert model.tokenizer_name == f"hf:{export}" and model.config._name_or_path == str(export)


def test_a_link_or_a_fifo_among_an_exports_files_is_refused_naming_it_however_it_is_named(
    smoke_sweep, tmp_path
):
    """A link to genuine bytes passed the check and could then be pointed elsewhere; a FIFO would block.
    Every file of an export is read once, never through a link: one line, for hf:EXPORT and load_export."""
    import os
    import shutil

    from posenc_cli.core.errors import UsageError
    from posenc_cli.hf.export_loading import load_export
    from posenc_cli.hf.model_loading import load_hf_model

    export = rope_export(smoke_sweep, tmp_path / "export")
    for name in (MODELING, "config.json", "model.safetensors", TOKENIZER):
        edited = Path(shutil.copytree(export, tmp_path / "edited", dirs_exist_ok=True))
        (tmp_path / "genuine").write_bytes((edited / name).read_bytes())
        (edited / name).unlink()
        (edited / name).symlink_to(tmp_path / "genuine")
        for load in (lambda: load_hf_model(f"hf:{edited}"), lambda: load_export(edited)):
            with pytest.raises(UsageError, match=f"^{edited / name} is a symbolic link"):
                load()
        shutil.rmtree(edited)
    (export / TOKENIZER).unlink()
    os.mkfifo(export / TOKENIZER)
    with pytest.raises(UsageError, match=f"^{export / TOKENIZER} is not a regular file"):
        load_export(export)


def test_an_export_whose_weight_is_stored_as_integers_is_refused_naming_it(smoke_sweep, tmp_path):
    """Cast to floats and scored, unsaid, even with the manifest rewritten to vouch for it."""
    from safetensors.torch import load_file, save_file

    from posenc_cli.core.errors import UsageError
    from posenc_cli.hf.export_loading import load_export

    export = rope_export(smoke_sweep, tmp_path / "export")
    weights = load_file(export / "model.safetensors")
    name = next(n for n, t in weights.items() if t.dim() == 2)
    weights[name] = weights[name].to(torch.int64)
    save_file(weights, export / "model.safetensors")
    vouched(export, "model.safetensors")
    with pytest.raises(UsageError, match=f"stores the weight {name} as I64, not floating point"):
        load_export(export)

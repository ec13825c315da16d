"""posenc lets transformers run no code from a model directory but the modelling code it ships, reached
through the auto_map entries it writes (hf.remote_code): every other code reference, in any JSON
at the directory's top, at any depth, is refused naming the file and the key. The commands that load
such directories, and the planted code that never runs, are in tests/test_export_hf.py."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from posenc_cli.core.errors import UsageError
from posenc_cli.hf.model_files import JSON_CAP
from posenc_cli.hf.remote_code import (
    CONFIG,
    MODELING,
    MODELING_SOURCE,
    OWN_AUTO_MAPS,
    TOKENIZER_CONFIG,
    checked_code,
)


def posencs_code(directory: Path) -> Path:
    """A directory naming code as an export does: posenc's auto_maps and modeling_posenc.py."""
    directory.mkdir(exist_ok=True)
    for name, auto_map in OWN_AUTO_MAPS.items():
        (directory / name).write_text(json.dumps({"auto_map": auto_map}), encoding="utf-8")
    (directory / MODELING).write_text(MODELING_SOURCE, encoding="utf-8")
    return directory


def edit_json(directory: Path, name: str, edit) -> None:
    path = directory / name
    value = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    edit(value)
    path.write_text(json.dumps(value), encoding="utf-8")


CONFIG_MAP, TOKENIZER_MAP = OWN_AUTO_MAPS[CONFIG], OWN_AUTO_MAPS[TOKENIZER_CONFIG]
PLANTED = {  # each way a JSON can name code for transformers: (file, edit, key named in the refusal)
    "config-auto-map": (CONFIG, lambda c: c["auto_map"].update(AutoConfig="evil.C"), "auto_map.AutoConfig"),
    "model-from-the-hub": (
        CONFIG,
        lambda c: c["auto_map"].update(AutoModelForCausalLM="someone/repo--evil.M"),
        "auto_map.AutoModelForCausalLM",
    ),
    "an-extra-key": (
        CONFIG,
        lambda c: c["auto_map"].update(AutoProcessor="evil.P"),
        "auto_map.AutoProcessor",
    ),
    "tokenizer-auto-map": (
        TOKENIZER_CONFIG,
        lambda c: c["auto_map"].update(AutoTokenizer=["evil.Slow", None]),
        "auto_map.AutoTokenizer",
    ),
    "tokenizer-legacy-list": (TOKENIZER_CONFIG, lambda c: c.update(auto_map=[None, "evil.T"]), "auto_map"),
    "processor-config": (
        "preprocessor_config.json",
        lambda c: c.update(auto_map={"AutoImageProcessor": "evil.I"}),
        "auto_map.AutoImageProcessor",
    ),
    "any-json": (
        "anything.json",
        lambda c: c.update(auto_map={"AutoTokenizer": [None, "evil.T"]}),
        "auto_map.AutoTokenizer",
    ),
    "nested": (
        CONFIG,
        lambda c: c.update(text_config={"auto_map": {"AutoConfig": "evil.C"}}),
        "text_config.auto_map.AutoConfig",
    ),
    "custom-pipelines": (
        CONFIG,
        lambda c: c.update(custom_pipelines={"text-generation": {"impl": "evil.Pipe"}}),
        "custom_pipelines.text-generation",
    ),
}


@pytest.mark.parametrize("variant", PLANTED)
def test_a_code_reference_posenc_did_not_write_is_refused_naming_the_file_and_the_key(variant, tmp_path):
    directory = posencs_code(tmp_path / "model")
    assert checked_code(directory, export=True)  # posenc's own: trust_remote_code for it
    name, edit, key = PLANTED[variant]
    edit_json(directory, name, edit)
    with pytest.raises(
        UsageError, match=re.escape(f"{name}: its key '{key}' names code posenc did not write")
    ) as err:
        checked_code(directory, export=True)
    assert "\n" not in str(err.value)


def test_posencs_own_code_is_trusted_only_in_an_export_and_only_byte_for_byte(tmp_path):
    directory = posencs_code(tmp_path / "model")
    with pytest.raises(UsageError, match="config.json: its key 'auto_map' names code for transformers"):
        checked_code(directory, export=False)  # a directory that is not a posenc export: never trusted
    for source in (MODELING_SOURCE + "\n", MODELING_SOURCE.replace("\n", "\r\n"), "import evil\n"):
        (directory / MODELING).write_text(source, encoding="utf-8", newline="")
        with pytest.raises(UsageError, match=f"{MODELING} is not the one posenc writes"):
            checked_code(directory, export=True)
    (directory / MODELING).unlink()
    with pytest.raises(UsageError, match=f"{MODELING} is not the one posenc writes"):
        checked_code(directory, export=True)


def test_a_directory_naming_no_code_needs_no_trust_and_custom_generate_is_refused(tmp_path):
    directory = tmp_path / "model"
    directory.mkdir()
    (directory / CONFIG).write_text(json.dumps({"model_type": "llama"}), encoding="utf-8")
    (directory / "evil.py").write_text("raise SystemExit('ran')\n")  # named by nothing: never imported
    assert not checked_code(directory, export=False)
    (directory / "custom_generate").mkdir()
    (directory / "custom_generate" / "generate.py").write_text("raise SystemExit('ran')\n")
    with pytest.raises(UsageError, match="custom_generate holds code transformers would run"):
        checked_code(directory, export=False)


def test_a_json_that_cannot_be_read_is_refused_and_a_fifo_is_never_opened(tmp_path):
    directory = posencs_code(tmp_path / "model")
    os.mkfifo(directory / "pipe.json")  # opened, it would block for ever
    assert checked_code(directory, export=True)
    (directory / "broken.json").write_bytes(b'{"auto_map": \xff')
    with pytest.raises(UsageError, match="broken.json cannot be read as JSON"):
        checked_code(directory, export=True)
    (directory / "broken.json").write_text("[" * 100_000 + "]" * 100_000)  # deeper than Python recurses
    with pytest.raises(UsageError, match="broken.json cannot be read as JSON"):
        checked_code(directory, export=True)


def test_a_json_larger_than_posenc_reads_is_one_line_naming_it_never_read_whole(tmp_path):
    """A 30 GB sparse *.json beside a model was a MemoryError: its size is read first, and past
    JSON_CAP it is refused in one line naming it (this one is sparse: it takes no disk)."""
    directory = posencs_code(tmp_path / "model")
    with open(directory / "huge.json", "wb") as f:
        f.truncate(JSON_CAP + 1)
    with pytest.raises(UsageError, match=r"huge.json holds 134,217,729 bytes, more than the 128 MiB") as err:
        checked_code(directory, export=True)
    assert "\n" not in str(err.value)

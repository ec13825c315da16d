"""Corpora and tokens: the synthetic corpus's information content, tokenizers (char, byte, bpe), the token
cache, pre-tokenized arrays and Hugging Face datasets."""

from __future__ import annotations

import fcntl
import json
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ROOT, SMOKE, assert_refused, evaluate, invoke, posenc, run_cli, train
from posenc_cli.core.errors import UsageError
from posenc_cli.data import (
    check_tokenizer,
    data_config,
    load_corpus,
    passkey,
    require_same_corpus,
    stream,
    token_cache,
)
from posenc_cli.data.synthetic import copy_length_nats, generate, log_uniform_int_nats
from posenc_cli.data.synthetic_spec import SyntheticSpec
from posenc_cli.data.tokenizers import BpeTokenizer, ByteTokenizer, from_payload, run_tokenizer, text_pieces
from posenc_cli.data.vocab import Vocab
from posenc_cli.evaluation.probe import make_trials

TEXT = (
    "the quick brown fox jumps over the lazy dog. naïve café, 東京 — ünïcödé 🙂 0123456789\n" * 40
    + passkey.key_sentence("40913")
    + passkey.QUESTION
    + passkey.answer("40913")
    + "\n"
) * 5
BPE = BpeTokenizer.train(text_pieces(TEXT), 400)
ANY_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=200)


@settings(max_examples=60, deadline=None)
@given(ANY_TEXT)
def test_byte_and_bpe_round_trip_any_text_and_count_its_bytes_and_characters(text):
    for tokenizer in (ByteTokenizer(), BPE):
        ids = tokenizer.encode(text).numpy()
        assert tokenizer.decode(ids) == text
        assert tokenizer.byte_counts[ids].sum() == len(text.encode("utf-8"))
        assert tokenizer.char_counts[ids].sum() == len(text)


@settings(max_examples=60, deadline=None)
@given(ANY_TEXT, ANY_TEXT)
def test_char_round_trips_its_own_characters_and_maps_others_to_unk(seen, other):
    vocab = Vocab.from_text(seen + "a", with_unk=True)
    assert vocab.decode(vocab.encode(seen)) == seen
    decoded = vocab.decode(vocab.encode(other, strict=False))
    assert len(decoded) == len(other)
    assert all(d == o if o in vocab.chars else d == "\ufffd" for d, o in zip(decoded, other))


def test_bpe_training_is_deterministic_and_survives_a_checkpoint():
    again = BpeTokenizer.train(text_pieces(TEXT), 400)
    assert again.to_json() == BPE.to_json() and again.fingerprint == BPE.fingerprint
    assert from_payload(json.loads(json.dumps(BPE.payload())), "test").fingerprint == BPE.fingerprint
    assert len(BPE.encode(TEXT)) < len(TEXT) / 2  # it learned merges: well under one token per character


def write_corpus(tmp_path, text: str):
    path = tmp_path / "corpus.txt"
    path.write_text(text, encoding="utf-8")
    return {
        "name": "text",
        "path": str(path),
        "val_fraction": 0.1,
        "tokenizer": "bpe",
        "vocab_size": 300,
        "cache_dir": str(tmp_path / "cache"),
    }


@pytest.mark.parametrize("kind", ["char", "byte", "bpe"])
def test_cached_tokens_are_memory_mapped_and_decode_to_the_split_text(tmp_path, kind):
    data = {**write_corpus(tmp_path, TEXT), "tokenizer": kind}
    corpus = load_corpus(data_config(data))
    cut = int(len(TEXT) * 0.9)
    assert isinstance(corpus.train, np.memmap) and corpus.train.dtype == np.uint16
    assert corpus.tokenizer.decode(corpus.train) == TEXT[:cut]
    assert corpus.tokenizer.decode(corpus.val) == TEXT[cut:]
    assert corpus.stats["chars"] == len(TEXT) and corpus.stats["train_tokens"] == len(corpus.train)


def test_the_cache_is_reused_for_the_same_text_and_never_stale_when_it_changes(tmp_path, monkeypatch):
    data = write_corpus(tmp_path, TEXT)
    first = load_corpus(data_config(data))
    built = []
    encode = stream.encode_splits
    monkeypatch.setattr(stream, "encode_splits", lambda *a, **k: built.append(1) or encode(*a, **k))
    again = load_corpus(data_config(data))
    assert built == [] and again.train.filename == first.train.filename  # read back, not rebuilt
    changed = TEXT.replace("lazy dog", "lazy cat")  # same length, other content
    (tmp_path / "corpus.txt").write_text(changed, encoding="utf-8")
    edited = load_corpus(data_config(data))
    assert built == [1] and edited.train.filename != first.train.filename
    assert edited.stats["sha256"] != first.stats["sha256"]
    assert edited.tokenizer.decode(np.concatenate([edited.train, edited.val])) == changed
    # the run's own tokenizer on the edited text: tokens of the new text, not the cached old ones
    old_tokenizer = load_corpus(data_config(data), first.tokenizer)
    assert old_tokenizer.tokenizer.decode(np.concatenate([old_tokenizer.train, old_tokenizer.val])) == changed


def test_pre_tokenized_arrays_with_a_meta_json(tmp_path):
    ids = ByteTokenizer().encode(TEXT).numpy().astype(np.uint16)
    ids[:-100].tofile(tmp_path / "train.bin")
    ids[-100:].tofile(tmp_path / "val.bin")
    (tmp_path / "meta.json").write_text(
        json.dumps({"dtype": "uint16", "vocab_size": 256, "tokenizer": {"kind": "byte"}})
    )
    corpus = load_corpus(
        data_config({"name": "bin", "train": str(tmp_path / "train.bin"), "val": str(tmp_path / "val.bin")})
    )
    assert np.array_equal(corpus.val, ids[-100:]) and corpus.tokenizer.kind == "byte"
    (tmp_path / "meta.json").write_text(json.dumps({"dtype": "uint16", "vocab_size": 200}))
    with pytest.raises(UsageError, match="holds id .* outside vocab_size 200"):
        load_corpus(
            data_config(
                {"name": "bin", "train": str(tmp_path / "train.bin"), "val": str(tmp_path / "val.bin")}
            )
        )


@pytest.mark.parametrize("kind", ["byte", "bpe"])
def test_passkey_trials_score_the_tokens_that_cover_the_key(kind):
    tokenizer = ByteTokenizer() if kind == "byte" else BPE
    trials, key_tokens, episodes = make_trials(
        tokenizer.encode(TEXT.replace("40913", "")), tokenizer, 160, depth=0.5, trials=6, seed=1
    )
    assert trials.shape == (6, 160)
    for trial, n, key in zip(trials, key_tokens.tolist(), (e.needles[0].key for e in episodes)):
        prompt, answer = tokenizer.decode(trial[:-n]), tokenizer.decode(trial[-n:])
        assert answer.strip() == key and (prompt + answer).endswith(passkey.QUESTION + key)
        assert prompt.count(passkey.key_sentence(key)) == 1


def saved_dataset(tmp_path):
    from datasets import Dataset

    rows = [line for line in TEXT.splitlines() if line] * 3
    Dataset.from_dict({"text": rows, "id": list(range(len(rows)))}).save_to_disk(str(tmp_path / "dataset"))
    return tmp_path / "dataset", "".join(f"{row}\n" for row in rows)


def test_a_saved_hugging_face_dataset_is_its_text_column(tmp_path):
    directory, text = saved_dataset(tmp_path)
    corpus = load_corpus(
        data_config(
            {
                "kind": "hf",
                "name": str(directory),
                "split": "train",
                "text_field": "text",
                "tokenizer": "byte",
                "cache_dir": str(tmp_path / "cache"),
            }
        )
    )
    assert corpus.tokenizer.decode(np.concatenate([corpus.train, corpus.val])) == text
    with pytest.raises(UsageError, match="data.text_field=body is not a column.*text, id"):
        load_corpus(data_config({"kind": "hf", "name": str(directory), "text_field": "body"}))


def saved_splits(tmp_path, names=("train", "validation", "test")):
    """A DatasetDict on disk whose splits' rows say which split they are."""
    from datasets import Dataset, DatasetDict

    splits = {n: [f"{n} row {i}: {line}" for i, line in enumerate(TEXT.splitlines()[:20])] for n in names}
    DatasetDict({n: Dataset.from_dict({"text": rows}) for n, rows in splits.items()}).save_to_disk(
        str(tmp_path / "splits")
    )
    return tmp_path / "splits", {n: "".join(f"{row}\n" for row in rows) for n, rows in splits.items()}


@pytest.mark.parametrize(
    ("val_split", "validated_on"), [("auto", "validation"), ("test", "test"), (None, None)]
)
def test_a_dataset_with_its_own_splits_trains_on_train_and_validates_on_its_validation_split(
    tmp_path, val_split, validated_on
):
    """auto: the dataset's validation split (else test); null: the last val_fraction of the training split."""
    directory, texts = saved_splits(tmp_path)
    corpus = load_corpus(
        data_config(
            {
                "kind": "hf",
                "name": str(directory),
                "split": "train",
                "val_split": val_split,
                "tokenizer": "byte",
            }
            | {"val_fraction": 0.25, "cache_dir": str(tmp_path / "cache")}
        )
    )
    train, val = corpus.tokenizer.decode(corpus.train), corpus.tokenizer.decode(corpus.val)
    if validated_on is None:
        assert train + val == texts["train"] and len(val) == len(texts["train"]) - int(
            len(texts["train"]) * 0.75
        )
    else:
        assert (train, val) == (texts["train"], texts[validated_on])
    assert corpus.stats["val_split"] == validated_on


def test_auto_validates_on_the_test_split_when_there_is_no_validation_split_and_a_bad_split_is_one_line(
    tmp_path,
):
    directory, texts = saved_splits(tmp_path, names=("train", "test"))
    cfg = {"kind": "hf", "name": str(directory), "val_split": "auto", "tokenizer": "byte"} | {
        "cache_dir": str(tmp_path / "cache")
    }
    assert load_corpus(data_config(cfg)).tokenizer.decode(load_corpus(data_config(cfg)).val) == texts["test"]
    with pytest.raises(
        UsageError, match="data.val_split=validation is not a split .* its other splits are: test"
    ):
        load_corpus(data_config(cfg | {"val_split": "validation"}))
    with pytest.raises(UsageError, match="data.val_split=train is not a split"):
        load_corpus(data_config(cfg | {"val_split": "train"}))
    single, _ = saved_dataset(tmp_path)
    with pytest.raises(UsageError, match="one dataset without splits"):
        load_corpus(data_config({"kind": "hf", "name": str(single), "val_split": "test"}))


@pytest.mark.slow  # trains runs or starts processes
def test_every_tokenizer_and_the_new_corpora_train_evaluate_and_probe_through_the_cli(tmp_path, monkeypatch):
    directory, _ = saved_dataset(tmp_path)
    trained = run_cli(
        "train",
        "-m",
        "data=hf",
        f"data.name={directory}",
        "data.tokenizer=char,byte,bpe",
        "data.vocab_size=300",
        *SMOKE,
        "train.block_size=96",
        "train.threads=1",
        "hydra.sweep.dir=hf",
        cwd=tmp_path,
    )
    assert trained.returncode == 0, trained.stderr
    bpe_run = next(p for p in (tmp_path / "hf").iterdir() if (p / "tokenizer.json").is_file())
    (tmp_path / "tokenizer.json").write_text((bpe_run / "tokenizer.json").read_text())
    tokenizer = BpeTokenizer.from_json((bpe_run / "tokenizer.json").read_text(), "run")
    ids = tokenizer.encode(TEXT * 2).numpy().astype(np.uint16)
    ids[:-1000].tofile(tmp_path / "train.bin")
    ids[-1000:].tofile(tmp_path / "val.bin")
    meta = {"dtype": "uint16", "vocab_size": len(tokenizer), "tokenizer": "tokenizer.json"}
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    train(
        tmp_path, "data=bin", "data.train=train.bin", "data.val=val.bin", "train.block_size=96", run="bin_run"
    )
    out = tmp_path / "report"
    ppl = evaluate(tmp_path, "hf", "bin_run", "--lengths", "96", out="report")
    monkeypatch.chdir(tmp_path)
    probed = invoke("probe", "hf", "bin_run", "--lengths", "96", "--trials", "2", "--out", str(out))
    assert probed.code == 0, probed.stderr
    assert sorted(ppl["tokenizer"].unique()) == ["bpe", "byte", "char"]
    assert (ppl["bpb"] > 0).all() and (ppl["bytes"] >= ppl["chars"]).all()
    byte_rows = ppl[ppl.tokenizer == "byte"]
    assert (byte_rows["bytes"] == byte_rows["tokens"]).all()
    assert "| bpb @ 96 |" in (out / "comparison.md").read_text()
    probe = pd.read_csv(out / "probe.csv")
    assert {"rope [byte]", "rope [char]"} <= set(probe["scheme"]) and (probe["key_nll"] > 0).all()
    assert set(probe["scheme"]) == set(ppl["scheme"]) and len(set(ppl["scheme"])) == 4  # two bpe corpora
    summary = json.loads((bpe_run / "summary.json").read_text())
    assert summary["tokenizer"] == "bpe" and summary["corpus_chars_per_token"] > 1.5
    (bpe_run / "tokenizer.json").write_text(BPE.to_json())  # another tokenizer than the run's
    assert_refused(*posenc("eval", str(bpe_run), "--out", "x"), "tokenizer.json", "fingerprint")


def test_bad_tokenizer_options_are_refused():
    """The command line's refusal of data.tokenizer=word is in test_bad_inputs.py."""
    with pytest.raises(UsageError, match="data.vocab_size must be at least 257"):
        check_tokenizer("bpe", 100)
    with pytest.raises(UsageError, match="data=bin needs data.train=FILE"):
        load_corpus(data_config({"name": "bin", "train": None, "val": None}))


# ---- The synthetic corpus: the event probabilities its entropy floor counts ----


def test_copy_distance_probabilities_sum_to_one():
    spec = SyntheticSpec()
    total = sum(
        math.exp(-log_uniform_int_nats(d, spec.copy_min_distance, spec.copy_max_distance))
        for d in range(spec.copy_min_distance, spec.copy_max_distance)
    )
    assert total == pytest.approx(1.0)


@pytest.mark.parametrize("distance", [32, 50, 96, 97, 2000])
def test_copy_length_probabilities_sum_to_one_for_every_distance(distance):
    """A copy from closer than its span is cut to the distance: those spans share one length."""
    spec = SyntheticSpec()
    lengths = {min(span, distance) for span in range(spec.copy_min_len, spec.copy_max_len + 1)}
    assert sum(math.exp(-copy_length_nats(n, distance, spec)) for n in lengths) == pytest.approx(1.0)


def test_the_floor_adds_the_copy_events_to_the_fresh_text():
    made = generate(SyntheticSpec(n_chars=60_000))
    fresh_part = made.fresh_entropy * (1 - made.copied_fraction)
    assert 0 < made.event_entropy < 0.2 and made.entropy_floor == pytest.approx(
        fresh_part + made.event_entropy
    )


def cache_entry(corpus) -> Path:
    return Path(corpus.val.filename).parent


def test_a_truncated_cached_val_bin_is_rebuilt_and_said_so_and_gives_the_clean_tokens(tmp_path, caplog):
    data = {**write_corpus(tmp_path, TEXT), "tokenizer": "char"}
    clean = np.array(load_corpus(data_config(data)).val)
    val = cache_entry(load_corpus(data_config(data))) / "val.bin"
    val.write_bytes(val.read_bytes()[:-10])
    again = load_corpus(data_config(data))
    assert np.array_equal(again.val, clean)  # so its perplexity is the clean one's
    assert f"{val} is not what was written" in caplog.text and "rebuilding" in caplog.text
    meta = val.parent / "meta.json"
    meta.write_text(meta.read_text().replace('"uint16"', '"uint32"'))  # the same bytes read as other ids
    assert np.array_equal(load_corpus(data_config(data)).val, clean) and "dtype 'uint32'" in caplog.text


def test_a_same_size_overwrite_of_a_cached_array_is_found_by_its_hash_once_its_mtime_changes(
    tmp_path, caplog, monkeypatch
):
    data = {**write_corpus(tmp_path, TEXT), "tokenizer": "char"}
    first = load_corpus(data_config(data))
    clean, val = np.array(first.val), cache_entry(first) / "val.bin"
    stat = val.stat()
    os.utime(val, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # touched, content the same
    built = []
    encode = stream.encode_splits
    monkeypatch.setattr(stream, "encode_splits", lambda *a, **k: built.append(1) or encode(*a, **k))
    load_corpus(data_config(data))
    assert built == [] and "not what was written" not in caplog.text  # re-hashed, equal: kept
    recorded = json.loads((val.parent / "meta.json").read_text())["files"]["val"]["mtime_ns"]
    assert recorded == val.stat().st_mtime_ns  # and its new mtime recorded: not hashed again next time
    val.write_bytes(bytes(reversed(val.read_bytes())))  # same size, other ids
    again = load_corpus(data_config(data))
    assert built == [1] and np.array_equal(again.val, clean) and "sha256 differs" in caplog.text


def test_an_edited_cached_tokenizer_is_not_used_but_trained_again_and_said_so(tmp_path, caplog):
    data = {**write_corpus(tmp_path, TEXT), "tokenizer": "char"}
    first = load_corpus(data_config(data))
    (cached,) = (tmp_path / "cache").glob("*/tokenizer-char-*.json")
    stored = json.loads(cached.read_text())
    stored["tokenizer"]["chars"] = list(reversed(stored["tokenizer"]["chars"]))  # ids mean other characters
    cached.write_text(json.dumps(stored))
    again = load_corpus(data_config(data))
    assert again.tokenizer.fingerprint == first.tokenizer.fingerprint
    assert again.tokenizer.decode(again.val) == first.tokenizer.decode(first.val)
    assert f"cached tokenizer {cached} is not what was written" in caplog.text
    cached.write_bytes(b"\xff\xfe not json")  # unreadable: trained again too, never a traceback
    assert load_corpus(data_config(data)).tokenizer.fingerprint == first.tokenizer.fingerprint


def test_a_bin_meta_whose_dtype_or_vocabulary_changed_is_another_corpus_for_a_run_trained_on_it(tmp_path):
    ids = np.zeros(400, dtype=np.uint16)
    ids[::2] = (
        np.arange(200) % 50
    )  # read as uint32, the same bytes are valid ids too: only the fingerprint tells
    ids.tofile(tmp_path / "train.bin")
    ids.tofile(tmp_path / "val.bin")
    data = {"name": "bin", "train": str(tmp_path / "train.bin"), "val": str(tmp_path / "val.bin")}
    (tmp_path / "meta.json").write_text(json.dumps({"dtype": "uint16", "vocab_size": 256}))
    trained_on = load_corpus(data_config(data)).sha256
    for meta in ({"dtype": "uint32", "vocab_size": 256}, {"dtype": "uint16", "vocab_size": 300}):
        (tmp_path / "meta.json").write_text(json.dumps(meta))
        with pytest.raises(UsageError, match="run was trained on another text than data=bin"):
            require_same_corpus(data_config(data), trained_on, "run")


@pytest.mark.parametrize(
    "payload, needle",
    [
        ({"kind": "char"}, "chars must be a non-empty list of characters, got None"),
        ({"kind": "char", "chars": 5}, "chars must be a non-empty list of characters, got 5"),
        ({"kind": "char", "chars": ["ab", "c"]}, "more than one character"),
        ({"kind": "ids", "vocab_size": "x"}, "vocab_size must be a positive integer, got 'x'"),
        ({"kind": "bpe"}, "holds no tokenizer.json text"),
        ({"kind": "bpe", "json": "{not json"}, "is not a byte-level BPE tokenizer.json"),
        (["char"], "names tokenizer kind None"),
    ],
)
def test_a_malformed_tokenizer_payload_is_one_line_naming_where_it_was_read(payload, needle):
    with pytest.raises(UsageError, match="^the-file") as refused:
        from_payload(payload, "the-file")
    assert needle in str(refused.value) and "\n" not in str(refused.value)


def test_a_tokenizer_json_that_is_not_utf8_is_one_line_naming_it(tmp_path):
    (tmp_path / "tokenizer.json").write_bytes(b'{"model": "\xff\xfe"}')
    with pytest.raises(UsageError, match="tokenizer.json is not UTF-8 text"):
        run_tokenizer({"kind": "bpe", "fingerprint": "0"}, tmp_path)
    (tmp_path / "meta.json").write_text(
        json.dumps({"dtype": "uint16", "vocab_size": 256, "tokenizer": "tokenizer.json"})
    )
    np.zeros(8, dtype=np.uint16).tofile(tmp_path / "ids.bin")
    code, stderr = posenc(
        "train", *SMOKE, "data=bin", f"data.train={tmp_path / 'ids.bin'}", f"data.val={tmp_path / 'ids.bin'}"
    )
    assert_refused(code, stderr, "tokenizer.json is not UTF-8 text")


@pytest.mark.parametrize("values, found", [([1, 2, 3], "int64"), ([["a"], ["b"], ["c"]], "List")])
def test_a_hugging_face_column_that_is_not_text_is_refused_naming_it_and_its_type(tmp_path, values, found):
    from datasets import Dataset

    Dataset.from_dict({"text": values}).save_to_disk(str(tmp_path / "dataset"))
    with pytest.raises(UsageError, match=f"data.text_field=text of data.name=.* holds {found}, not strings"):
        load_corpus(
            data_config(
                {"kind": "hf", "name": str(tmp_path / "dataset"), "cache_dir": str(tmp_path / "cache")}
            )
        )


def test_stale_cache_builds_are_removed_while_one_a_live_process_holds_stays(tmp_path):
    data = {**write_corpus(tmp_path, TEXT), "tokenizer": "char"}
    entry_dir = cache_entry(load_corpus(data_config(data))).parent
    killed, building, unlocked = (entry_dir / f".tokens-abc.{n}" for n in ("killed", "live", "old"))
    for leftover in (killed, building, unlocked):
        leftover.mkdir()
        (leftover / "train.bin").write_bytes(b"\0" * 64)
    (killed / token_cache.BUILD_LOCK).touch()  # its builder died, and its lock with it
    (building / token_cache.BUILD_LOCK).touch()
    os.utime(unlocked, (1, 1))  # no lock file, long ago: killed after its last write
    held = os.open(building / token_cache.BUILD_LOCK, os.O_RDWR)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)  # another open file description: as another process's lock
        load_corpus(data_config(data))
        assert not killed.exists() and not unlocked.exists() and building.is_dir()
    finally:
        os.close(held)
    load_corpus(data_config(data))
    assert not building.exists()


@pytest.mark.slow
def test_a_cache_build_killed_with_sigkill_leaves_nothing_the_next_load_keeps(tmp_path):
    """A real process builds the token cache of a large text and is SIGKILLed mid-build: the next load
    removes its build directory (its lock died with it) and builds a complete, verified entry."""
    import signal
    import subprocess
    import sys
    import time

    data = {**write_corpus(tmp_path, TEXT * 20000), "tokenizer": "char", "cache_dir": str(tmp_path / "c")}
    script = f"from posenc_cli.data import data_config, load_corpus; load_corpus(data_config({data!r}))"
    proc = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 120
    while not list((tmp_path / "c").rglob(".tokens-*/train.bin")):
        assert proc.poll() is None, "the build finished before it could be killed: make the text larger"
        assert time.monotonic() < deadline
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert list((tmp_path / "c").rglob(".tokens-*")), "nothing was left to clean"
    corpus = load_corpus(data_config(data))
    assert not list((tmp_path / "c").rglob(".tokens-*"))
    assert len(corpus.train) + len(corpus.val) == len(TEXT) * 20000


def test_moving_a_bin_corpuss_split_boundary_makes_it_another_corpus(tmp_path):
    """The same bytes split elsewhere put trained-on tokens into validation: another fingerprint."""
    from posenc_cli.data.binary import load_bin

    ids = np.arange(4000, dtype=np.uint16) % 50
    (tmp_path / "meta.json").write_text(json.dumps({"dtype": "uint16", "vocab_size": 50}))
    data = {"name": "bin", "train": str(tmp_path / "train.bin"), "val": str(tmp_path / "val.bin")}
    ids[:3600].tofile(tmp_path / "train.bin")
    ids[3600:].tofile(tmp_path / "val.bin")
    before = load_bin(data_config(data)).sha256
    ids[:2000].tofile(tmp_path / "train.bin")
    ids[2000:].tofile(tmp_path / "val.bin")
    assert load_bin(data_config(data)).sha256 != before


def test_eval_data_names_a_local_dataset_and_split_or_a_hub_one_and_reads_its_rows(tmp_path):
    from posenc_cli.data.hf_datasets import HfText, hf_rows, parse_hf_text

    splits, texts = saved_splits(tmp_path)
    single, text = saved_dataset(tmp_path)
    assert parse_hf_text(f"hf:{splits}:test", "text") == HfText(str(splits), None, "test")
    assert parse_hf_text("hf:pg19:test", "text") == HfText("pg19", None, "test")
    assert parse_hf_text("hf:wikitext:wikitext-2-raw-v1:test", "text") == HfText(
        "wikitext", "wikitext-2-raw-v1", "test"
    )
    assert "".join(f"{row}\n" for row in hf_rows(parse_hf_text(f"hf:{splits}:test", "text"))) == texts["test"]
    assert "".join(f"{row}\n" for row in hf_rows(parse_hf_text(f"hf:{single}", "text"))) == text
    for spec, needle in (
        ("hf:pg19", "give hf:DIR or hf:DIR:SPLIT"),
        ("hf:a:b:c:d", "give hf:DIR"),
        (f"hf:{splits}", "holds splits; name one"),
        (f"hf:{splits}:dev", "has no split dev; it has: train, validation, test"),
        (f"hf:{single}:test", "one dataset without splits"),
    ):
        with pytest.raises(UsageError, match=needle):
            hf_rows(parse_hf_text(spec, "text"))
    with pytest.raises(UsageError, match="--text-field=body is not a column of --data"):
        hf_rows(parse_hf_text(f"hf:{splits}:test", "body"))

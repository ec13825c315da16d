"""posenc probe: passkey prompts, scoring, the corpus episodes that teach it, and the command end to end."""

from __future__ import annotations

import hashlib
import math
import re

import pandas as pd
import pytest
import torch

from conftest import SMOKE, column, evaluate, invoke, run_cli
from posenc_cli.core.errors import UsageError
from posenc_cli.data import passkey
from posenc_cli.data.needles import LOWER, Episode, Needle, NeedleTask
from posenc_cli.data.synthetic import generate
from posenc_cli.data.synthetic_spec import SyntheticSpec
from posenc_cli.data.vocab import Vocab
from posenc_cli.evaluation.perplexity import LogitsScorer
from posenc_cli.evaluation.probe import (
    build_trial,
    check_vocab,
    filler_length,
    make_trials,
    score,
    without_episodes,
)
from posenc_cli.report.passkey_tables import passkey_by_depth

WORDS = "ba bode kalimu so tefa ri gunazo pe".split()
VOCAB = Vocab.from_text("".join(sorted(passkey.needed_chars())) + "abcdefghijklmnopqrstuvwxyz")
FILLER = VOCAB.encode(" ".join(WORDS[(i * 7 + i // 3) % len(WORDS)] for i in range(2000)))


def passkey_episode(key: str, depth: float) -> Episode:
    return Episode(NeedleTask(), (Needle(depth, "", key),), (0,))


OVERHEAD = len(passkey.key_sentence("00000")) + len(passkey.QUESTION) + passkey.KEY_DIGITS


@pytest.mark.parametrize("length", [OVERHEAD + 1, 128, 300, 1024])
@pytest.mark.parametrize("depth", [0.0, 0.1, 0.5, 0.9, 1.0])
def test_prompt_has_exact_length_key_at_depth_and_question_last(length, depth):
    key = "40913"
    trial, n_key = build_trial(FILLER[5:], passkey_episode(key, depth), length=length, tokenizer=VOCAB)
    assert len(trial) == length and n_key == passkey.KEY_DIGITS
    text = VOCAB.decode(trial[:-n_key])
    assert text.endswith(" " + passkey.QUESTION) and VOCAB.decode(trial[-n_key:]) == key
    sentence = passkey.key_sentence(key)
    assert text.count(sentence) == 1
    at = text.index(sentence)
    target = round(depth * filler_length(length, VOCAB))
    # the key moved forward from its depth only to the next word start: no space skipped on the way
    assert at >= target and " " not in text[target : max(target, at - 1)]
    assert at == 0 or text[at - 1] == " "


def test_trials_are_reproducible_and_keys_vary():
    a_trials, a_lengths, a_episodes = make_trials(FILLER, VOCAB, 200, depth=0.5, trials=8, seed=3)
    b_trials, b_lengths, b_episodes = make_trials(FILLER, VOCAB, 200, depth=0.5, trials=8, seed=3)
    a_keys, b_keys = ([LOWER.answer(e) for e in episodes] for episodes in (a_episodes, b_episodes))
    assert torch.equal(a_trials, b_trials) and torch.equal(a_lengths, b_lengths) and a_keys == b_keys
    assert a_trials.shape == (8, 200) and (a_lengths == passkey.KEY_DIGITS).all()
    assert [VOCAB.decode(t[-passkey.KEY_DIGITS :]) for t in a_trials] == a_keys and len(set(a_keys)) > 1


class SpellsKey(torch.nn.Module):
    """A fake model whose next-token logits always spell `key`: after j consecutive digits it puts
    `margin` on key[j] and 0 elsewhere, whatever the prompt says."""

    def __init__(self, key: str, vocab: Vocab, margin: float = 4.0):
        super().__init__()
        self.ids = vocab.encode(key)
        self.digits = vocab.encode(passkey.DIGITS)
        self.size, self.margin = len(vocab), margin

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        logits = torch.zeros(*idx.shape, self.size)
        for b in range(idx.size(0)):
            run = 0
            for t in range(idx.size(1)):
                run = run + 1 if idx[b, t] in self.digits else 0
                logits[b, t, self.ids[min(run, len(self.ids) - 1)]] = self.margin
        return logits


def greedy_key(model, prompt: torch.Tensor) -> torch.Tensor:
    """The plain decoding loop that `score` replaces with one teacher-forced pass."""
    sequence = prompt[None]
    for _ in range(passkey.KEY_DIGITS):
        sequence = torch.cat([sequence, model(sequence)[:, -1].argmax(-1, keepdim=True)], dim=1)
    return sequence[0, -passkey.KEY_DIGITS :]


def test_score_matches_greedy_decoding_and_the_nll_by_hand():
    model = SpellsKey("12345", VOCAB)
    keys = ["12345", "12399", "54321", "12345"]
    trials = torch.stack(
        [build_trial(FILLER, passkey_episode(k, 0.5), length=128, tokenizer=VOCAB)[0] for k in keys]
    )
    hits, nll = score(LogitsScorer(model), trials, torch.full((len(keys),), passkey.KEY_DIGITS))
    assert hits.tolist() == [True, False, False, True]
    n = passkey.KEY_DIGITS
    assert hits.tolist() == [torch.equal(greedy_key(model, t[:-n]), t[-n:]) for t in trials]
    log_z = math.log(math.exp(4.0) + len(VOCAB) - 1)  # per digit: -log p = log Z - logit
    right, wrong = log_z - 4.0, log_z
    for k, value in zip(keys, nll.tolist()):
        n_right = sum(a == b for a, b in zip(k, "12345"))
        assert value == pytest.approx((n_right * right + (5 - n_right) * wrong) / 5, rel=1e-5)


def test_vocab_without_digits_is_refused_naming_what_is_missing():
    with pytest.raises(UsageError, match=re.escape("lacks the characters '0123456789?'")):
        check_vocab(Vocab.from_text("abcdefghijklmnopqrstuvwxyz ."), "run")
    check_vocab(VOCAB, "run")


def test_default_corpus_is_unchanged_when_passkey_rate_is_zero():
    text = generate(SyntheticSpec(n_chars=20_000)).text
    assert (
        hashlib.sha256(text.encode()).hexdigest()
        == "f9ff8441b3485ec356dc94ea5d68d5be3111b583debc94afdbef3cac09cfe1d3"
    )


def test_corpus_episodes_answer_their_own_key_at_distances_in_range():
    spec = SyntheticSpec(n_chars=30_000, passkey_rate=0.2, passkey_min_distance=10, passkey_max_distance=50)
    text = generate(spec).text
    sentence = re.escape(passkey.key_sentence("KEY")).replace("KEY", r"(\d{5})", 1).replace("KEY", r"\1")
    episode = re.compile(sentence + r"([a-z .]*?)" + re.escape(passkey.QUESTION) + r"(\d{5})\. ")
    found = episode.findall(text)
    assert len(found) > 20
    for key, filler, answer in found:
        assert answer == key
        assert spec.passkey_min_distance <= len(filler) <= spec.passkey_max_distance
    assert passkey.needed_chars() <= set(text[: int(len(text) * 0.9)])  # the training split has them all


@pytest.mark.slow  # trains runs or starts processes
@pytest.mark.tiny_run  # make test keeps it: one of its few tiny CLI runs
def test_probe_end_to_end_writes_files_and_passkey_rows(tmp_path, monkeypatch):
    train = run_cli(
        "train",
        "-m",
        "scheme=rope,learned",
        *SMOKE,
        "train.block_size=96",
        "data.passkey_rate=0.3",
        "data.passkey_max_distance=20",
        cwd=tmp_path,
    )
    assert train.returncode == 0, train.stderr
    out = tmp_path / "report"
    evaluate(tmp_path, "--lengths", "96", "--max-tokens", "384", out="report")
    monkeypatch.chdir(tmp_path)
    probed = invoke("probe", "--lengths", "128", "--depths", "0.2,0.8", "--trials", "3", "--out", str(out))
    assert probed.code == 0, probed.stderr
    wrote = re.search(r"wrote (.*) to ", " ".join(probed.stderr.split()))
    named = {re.sub(r"^probe_(?!summary)\w+\.", "probe_<scheme>.", n) for n in wrote[1].split(", ")}
    helped = " ".join(invoke("probe", "--help").stdout.split())
    assert {"passkey.md", "results.json"} <= named and [n for n in named if n not in helped] == []
    df = pd.read_csv(out / "probe.csv")
    assert list(df.columns) == [
        "run",
        "model_id",
        "scheme",
        "rope_scaling",
        "task",
        "seed",
        "train_len",
        "length",
        "depth",
        "trials",
        "accuracy",
        "key_nll",
        "recall",
        "effective_len_retrieval",
        "effective_len_retrieval_at_least",
    ]
    assert len(df) == 2 * 2 * 2  # runs x lengths (96 added) x depths
    beyond = df[(df.scheme == "learned") & (df.length == 128)]
    assert beyond["accuracy"].isna().all() and (beyond["trials"] == 0).all()
    inside = df.dropna(subset=["accuracy"])
    assert inside["accuracy"].between(0, 1).all() and (inside["key_nll"] > 0).all()
    assert df["recall"].isna().all()  # RULER's recall is vt's and cwe's (test_ruler_tasks)
    for name in ("probe_rope.png", "probe_learned.png", "probe_summary.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG"
    assert "| seeds retrieving ≥ 50 % |" in (out / "passkey.md").read_text()
    comparison = (out / "comparison.md").read_text()
    row = next(line for line in comparison.splitlines() if line.startswith("| passkey @ 128"))
    assert "—" in row
    evaluate(tmp_path, "--lengths", "96", "--max-tokens", "384", out="report")
    assert "passkey @ 96" in (out / "comparison.md").read_text()


def passkey_cells(scheme: str, accuracy: dict[tuple[int, int, float], float]) -> pd.DataFrame:
    """probe.csv rows for one scheme trained at 128: {(seed, length, depth): accuracy}."""
    return pd.DataFrame(
        [
            {"run": f"{scheme}-{seed}", "scheme": column(scheme), "seed": seed, "train_len": 128}
            | {"length": length, "depth": depth}
            | {"trials": 0 if math.isnan(acc) else 50, "accuracy": acc, "key_nll": 1.0}
            for (seed, length, depth), acc in accuracy.items()
        ]
    )


def table_rows(markdown: str, scheme: str) -> dict[str, list[str]]:
    """{first cell: other cells} of one scheme's table in passkey.md."""
    section = markdown.split(f"## {scheme} ")[1].split("\n## ")[0]
    rows = [line.strip("|").split("|") for line in section.splitlines() if line.startswith("| ")]
    return {cells[0].strip(): [c.strip() for c in cells[1:]] for cells in rows}


def test_passkey_md_shows_the_split_between_seeds_that_a_mean_hides():
    # seed 0 retrieves every key at 128, seed 1 none; at 256 seed 0 keeps only the near depth
    rope = passkey_cells(
        "rope",
        {
            (0, 128, 0.1): 1.0, (0, 128, 0.9): 1.0, (1, 128, 0.1): 0.0, (1, 128, 0.9): 0.0,
            (0, 256, 0.1): 0.0, (0, 256, 0.9): 0.8, (1, 256, 0.1): 0.0, (1, 256, 0.9): 0.0,
        },
    )  # fmt: skip
    learned = passkey_cells(
        "learned", {(0, 128, 0.1): 0.5, (0, 128, 0.9): 0.7, (0, 256, 0.1): math.nan, (0, 256, 0.9): math.nan}
    )
    text = passkey_by_depth(pd.concat([rope, learned]))
    rows = table_rows(text, "rope")
    assert rows["depth"] == ["128 (training length)", "256 (2×)"]
    assert rows["0.1"] == ["50 ± 71 [0–100]", "0 ± 0 [0–0]"]
    assert rows["0.9"] == ["50 ± 71 [0–100]", "40 ± 57 [0–80]"]
    assert rows["all depths"] == ["50 ± 71 [0–100]", "20 ± 28 [0–40]"]  # per seed: mean over depths
    assert rows["seeds retrieving ≥ 50 %"] == ["1 of 2", "0 of 2"]
    one_seed = table_rows(text, "learned")  # one seed: its number, no spread; past the table: —
    assert one_seed["0.1"] == ["50", "—"] and one_seed["all depths"] == ["60", "—"]
    assert one_seed["seeds retrieving ≥ 50 %"] == ["1 of 1", "—"]
    assert text.index("## learned") < text.index("## rope")  # the chapters' order


def test_filler_loses_the_corpus_own_episodes_and_keeps_unk_tokens():
    vocab = Vocab(VOCAB.chars + ("<unk>",))
    text = (
        "ba so. "
        + passkey.key_sentence("11111")
        + "ri pe. "
        + passkey.QUESTION
        + passkey.answer("11111")
        + "gu 42 na"
    )
    tokens = torch.cat([vocab.encode(text), torch.tensor([len(vocab) - 1])])
    kept = without_episodes(tokens, vocab)
    assert vocab.decode(kept[:-1]) == "ba so. ri pe. gu  na"
    assert kept[-1] == len(vocab) - 1


def test_probe_preset_episodes_fit_its_training_window():
    """experiment=probe must give whole episodes inside one training window, with the init that lets
    digits stay apart: if the phrasing grows, this fails before a 6-minute run learns nothing."""
    from hydra import compose, initialize_config_dir

    from posenc_cli.config.location import config_dir

    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        cfg = compose("config", overrides=["experiment=probe"])
    episode = len(
        passkey.key_sentence("0" * passkey.KEY_DIGITS)
        + passkey.QUESTION
        + passkey.answer("0" * passkey.KEY_DIGITS)
    )
    assert episode + cfg.data.passkey_max_distance <= cfg.train.block_size
    assert cfg.data.passkey_rate > 0 and cfg.model.embed_std > 0.02


def test_a_column_that_took_no_asked_scaling_says_so_even_when_no_column_was_scaled():
    """`posenc probe ALIBI_RUN --rope-scaling yarn`: every row is unscaled, and passkey.md still says why
    (found by a hostile pass: the note appeared only beside a scaled column)."""
    alibi = passkey_cells("alibi", {(0, 128, 0.5): 1.0})
    assert "alibi takes no RoPE scaling" in passkey_by_depth(alibi, scaling_asked=True)
    assert "takes no RoPE scaling" not in passkey_by_depth(alibi)


def test_an_hf_model_probed_only_past_its_learned_table_gets_dashes_not_a_traceback(tmp_path):
    """`posenc probe hf:GPT2-LIKE` at lengths all past its n_positions raised `max() arg is an empty
    sequence`; as for a posenc learned run, each cell past the table is "—" (no trials)."""
    pytest.importorskip("transformers")
    from test_hf_files import passkey_tokenizer, tiny_model

    from posenc_cli.hf.loading_options import hf_options
    from posenc_cli.model.extension.method import ContextMethod
    from posenc_cli.report.run_probe import ProbeSpec, run_probe

    model = tiny_model(tmp_path / "gpt2", passkey_tokenizer(), kind="gpt2", n_positions=16)
    cpu = torch.device("cpu")
    spec = ProbeSpec(
        NeedleTask(), depths=[0.5], trials=2, seed=0, rope_scaling=[ContextMethod()], rope_factor=None
    )
    probed = run_probe([f"hf:{model}"], spec, lengths=[256], device=cpu, hf=hf_options(None, cpu, "fp32"))
    assert list(probed.rows.length) == [256] and (probed.rows.trials == 0).all()
    assert probed.rows.accuracy.isna().all()

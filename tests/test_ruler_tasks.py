"""RULER's variable tracking (vt) and common-words extraction (cwe) in `posenc probe`: each prompt holds
exactly the answers RULER's rule defines, recall is the fraction of them found, exact match implies
recall 1, a length too short is refused, the corpus teaches the probe's form, and the command runs end
to end."""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pandas as pd
import pytest
import torch
from test_probe import FILLER as PASSKEY_FILLER
from test_probe import VOCAB as PASSKEY_VOCAB

from conftest import SMOKE, assert_refused, invoke, posenc, run_cli
from posenc_cli.core.errors import UsageError
from posenc_cli.data import common_words
from posenc_cli.data.common_words import COUNTS_OWN, COUNTS_RULER, ENGLISH_LIST, LOWER_LIST, WordsEpisode
from posenc_cli.data.needles import ENGLISH, HOPS, NeedleTask, draw_episode, natural_prompt
from posenc_cli.data.synthetic import generate
from posenc_cli.data.synthetic_spec import SyntheticSpec
from posenc_cli.data.vocab import Vocab
from posenc_cli.evaluation.perplexity import LogitsScorer
from posenc_cli.evaluation.probe import (
    answer_words,
    greedy_answers,
    make_trials,
    overhead,
    recall,
    score,
    string_match_all,
)

VT, CWE = NeedleTask("vt"), NeedleTask("cwe")
VOCAB = Vocab.from_text("".join(PASSKEY_VOCAB.chars) + "=")  # vt's assignments need "="
FILLER = VOCAB.encode(PASSKEY_VOCAB.decode(PASSKEY_FILLER.tolist()))
ASSIGNMENT = re.compile(r"var ([a-z]+) = (var [a-z]+|\d{5})\. ")


def bound_to(text: str, value: str) -> list[str]:
    """RULER's vt answer read off a text: every variable assigned `value`, directly or through a chain."""
    bound, names = {value}, []
    for name, key in ASSIGNMENT.findall(text):
        if key.removeprefix("var ") in bound:
            bound.add(name)
            names.append(name)
    return names


def most_common(listed: list[str], n: int) -> list[str]:
    """The n most frequent words of a list, refused unless each is strictly more frequent than any other."""
    counts = Counter(listed).most_common()
    assert len(counts) == n or counts[n - 1][1] > counts[n][1]
    return sorted(w for w, _ in counts[:n])


@pytest.mark.parametrize("seed", range(12))
def test_a_vt_trial_binds_exactly_its_answer_to_the_value_through_one_chain_in_order(seed):
    rng = np.random.default_rng(seed)
    depth = float(rng.random())
    length = overhead(VOCAB, VT) + int(rng.integers(1, 300))
    trials, n_answer, (episode,) = make_trials(
        FILLER, VOCAB, length, depth=depth, trials=1, seed=seed, task=VT
    )
    text, answer = VOCAB.decode(trials[0, : -int(n_answer)]), VOCAB.decode(trials[0, -int(n_answer) :])
    value = episode.needles[0].key
    assert trials.shape == (1, length) and text.endswith(f"which variables are assigned {value}? they are ")
    assert answer.split(" ") == bound_to(text, value) and len(answer.split(" ")) == HOPS + 1
    assert [n.depth for n in episode.in_text_order] == sorted(n.depth for n in episode.needles)
    assert episode.in_text_order[0] == episode.needles[0] and episode.needles[0].depth == depth
    assert len(re.sub(r"[^a-z]", "", answer)) == VT.answer_digits


@pytest.mark.parametrize("seed", range(12))
def test_a_cwe_trial_asks_the_words_more_frequent_than_any_other_in_first_appearance_order(seed):
    rng = np.random.default_rng(seed)
    length = overhead(VOCAB, CWE) + int(rng.integers(1, 400))
    trials, n_answer, (episode,) = make_trials(
        FILLER, VOCAB, length, depth=0.0, trials=1, seed=seed, task=CWE
    )
    text, answer = VOCAB.decode(trials[0, : -int(n_answer)]), VOCAB.decode(trials[0, -int(n_answer) :])
    listed = re.findall(r"\d+\. ([a-z]+)", text.split("a numbered list of words. ")[-1])
    asked = answer.split(" ")
    assert trials.shape == (1, length) and most_common(listed, COUNTS_OWN.common) == sorted(asked)
    assert asked == sorted(asked, key=listed.index)  # in the order the list first states them
    assert Counter(listed)[asked[0]] == COUNTS_OWN.common_repeats
    assert text.endswith(f"what are the {COUNTS_OWN.common} most common words in the list? they are ")


@pytest.mark.parametrize("count", [0, 1, 7, 60, 500])
def test_cwe_s_common_words_and_their_order_are_the_same_at_every_list_length(count):
    episode = WordsEpisode.draw(np.random.default_rng(count))
    for counts in (COUNTS_OWN, COUNTS_RULER):
        listed = episode.entries(counts, count)
        assert len(listed) == counts.common * counts.common_repeats + count * counts.other_repeats
        assert most_common(listed, counts.common) == sorted(episode.common(counts))
        assert episode.common(counts) == sorted(episode.common(counts), key=listed.index)
    with pytest.raises(UsageError, match="a cwe list holds at most 5615 other words"):
        episode.entries(COUNTS_RULER, len(common_words.words()))


def test_hf_prompts_are_ruler_s_english_templates_with_the_answer_after_them():
    vt = draw_episode(VT, np.random.default_rng(0), 0.25)
    prompt, answer = natural_prompt(vt, 8), ENGLISH.answer(vt)
    assert prompt.startswith(
        "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n"
    )
    value = vt.needles[0].key
    assert prompt.endswith(f"{HOPS + 1} variables are assigned the value {value}, they are:")
    assert (
        prompt.count(
            "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
        )
        == 8
    )
    lowered = re.sub(r"VAR ([A-Z]+) = (VAR [A-Z]+|\d{5}) ?\n", lambda m: m[0].lower().strip() + ". ", prompt)
    assert answer == " ".join(bound_to(lowered, value)).upper()
    cwe = WordsEpisode.draw(np.random.default_rng(0))
    prompt = natural_prompt(cwe, 30)
    assert prompt.startswith("Below is a numbered list of words. In these words, some appear more often")
    assert prompt.endswith("The top 10 words that appear most often in the list are:")
    listed = re.findall(r"\d+\. ([a-z]+)", prompt)
    assert answer_words(ENGLISH.answer(cwe)) == cwe.common(COUNTS_RULER) and len(listed) == 60 + 30
    assert ENGLISH.answer(cwe).startswith("1. ") and ENGLISH_LIST.counts == COUNTS_RULER
    assert (COUNTS_RULER.common, COUNTS_RULER.common_repeats, COUNTS_RULER.other_repeats) == (10, 6, 1)
    assert LOWER_LIST.counts == COUNTS_OWN


@pytest.mark.parametrize(
    ("prediction", "references", "found"),
    [
        ("BAZO kimu lapo", ["bazo", "kimu", "lapo", "dufe"], 0.75),  # any case, any order
        ("1. lapo 2. bazo", ["bazo", "lapo"], 1.0),
        ("parties", ["art"], 1.0),  # a substring counts, as in RULER
        ("\x00bazo\n", ["bazo", "kimu"], 0.5),
        ("", ["bazo"], 0.0),
    ],
)
def test_recall_is_the_fraction_of_reference_answers_found_as_substrings(prediction, references, found):
    assert string_match_all(prediction, references) == found


class Continues(torch.nn.Module):
    """A model whose next token is fixed per position: `script` (a token per position of the trial)."""

    def __init__(self, script: torch.Tensor, vocab: int):
        super().__init__()
        self.script, self.vocab = script, vocab

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        nxt = self.script[: idx.size(1)]
        return torch.nn.functional.one_hot(nxt, self.vocab).float().expand(idx.size(0), -1, -1) * 9


@pytest.mark.parametrize("task", [VT, CWE], ids=lambda t: t.name)
@pytest.mark.parametrize("wrong", [(), (0,), (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13)])
def test_exact_match_implies_recall_one_and_recall_counts_the_words_the_continuation_holds(task, wrong):
    trials, n_answer, _ = make_trials(FILLER, VOCAB, 260, depth=0.5, trials=1, seed=1, task=task)
    script = torch.cat([trials[0, 1:], trials[0, :1]])  # predicts the trial itself
    script[[len(script) - int(n_answer) - 1 + i for i in wrong]] = VOCAB.encode("q")[0]
    scorer = LogitsScorer(Continues(script, len(VOCAB)))
    hit, _ = score(scorer, trials, n_answer, digits=task.answer_digits)
    found = recall(scorer, trials, n_answer, decode=VOCAB.decode)
    (continued,) = greedy_answers(scorer, trials, n_answer)
    words = answer_words(VOCAB.decode(trials[0, -int(n_answer) :].tolist()))
    assert bool(hit) == (wrong == ()) and (float(found) == 1.0) == (wrong == ())
    kept = VOCAB.decode(continued)
    assert float(found) == sum(w in kept for w in words) / len(words)


def test_the_greedy_continuation_is_the_plain_decoding_loop_s_for_answers_of_every_length():
    from posenc_cli.model import GPT, ModelConfig, ModelSize

    torch.manual_seed(0)
    model = GPT(
        ModelConfig(vocab_size=len(VOCAB), block_size=64, size=ModelSize(n_layer=1, n_head=2, n_embd=16))
    )
    trials = FILLER[: 3 * 40].view(3, 40)
    n_answer = torch.tensor([1, 6, 3])
    continued = greedy_answers(LogitsScorer(model.eval()), trials, n_answer)
    for trial, n, got in zip(trials, n_answer.tolist(), continued):
        sequence = trial[None, : len(trial) - n]
        with torch.no_grad():
            for _ in range(n):
                sequence = torch.cat([sequence, model(sequence)[:, -1].argmax(-1, keepdim=True)], dim=1)
        assert got == sequence[0, -n:].tolist()


def test_a_length_too_short_for_vt_or_cwe_is_refused_in_one_line(tmp_path, monkeypatch):
    from posenc_cli.evaluation.probe import filler_length

    for task in (VT, CWE):
        with pytest.raises(
            UsageError, match=f"a {task.name} trial needs more than {overhead(VOCAB, task)} tokens"
        ):
            filler_length(overhead(VOCAB, task), VOCAB, task)
    monkeypatch.chdir(tmp_path)
    assert_refused(*posenc("probe", "--task", "cwe", "--depths", "0.5"), "--depths 0.5", "--task cwe")


@pytest.mark.parametrize("name", ["vt", "cwe"])
def test_training_episodes_are_the_probe_s_form_and_fit_a_window(name):
    spec = SyntheticSpec(
        n_chars=40_000, copy_rate=0.0, passkey_rate=0.3, passkey_max_distance=160, probe_task=name
    )
    text = generate(spec).text
    if name == "vt":
        found = re.findall(r"which variables are assigned (\d{5})\? they are ([a-z ]+)\. ", text)
        for value, answer in found:
            episode = text[: text.index(f"which variables are assigned {value}?")].split("? they are ")[-1]
            assert answer.split(" ") == bound_to(episode, value)
    else:
        found = re.findall(
            r"a numbered list of words\. ([^?]*)\. what are the 3 most common words in the list\? they are ([a-z ]+)\. ",
            text,
        )
        for listed, answer in found:
            words = re.findall(r"\d+\. ([a-z]+)", listed)
            assert most_common(words, 3) == sorted(answer.split(" ")) and len(listed) <= 256
    assert len(found) > 10


@pytest.mark.slow  # trains a run
@pytest.mark.tiny_run  # make test keeps it: one of its few tiny CLI runs
def test_probe_vt_and_cwe_end_to_end_write_recall_beside_exact_match(tmp_path, monkeypatch):
    train = run_cli(
        "train", *SMOKE, "train.block_size=256", "data.passkey_rate=0.5", "data.probe_task=vt", cwd=tmp_path
    )
    assert train.returncode == 0, train.stderr
    monkeypatch.chdir(tmp_path)
    for task in ("vt", "cwe"):
        probed = invoke("probe", "--task", task, "--lengths", "256", "--trials", "2", "--out", task)
        assert probed.code == 0, probed.stderr
        df = pd.read_csv(tmp_path / task / "probe.csv")
        assert (df.task == task).all() and df.recall.between(0, 1).all() and (df.recall >= df.accuracy).all()
        assert f"| {task} recall @ 256 (training length) |" in probed.stdout
        assert "RULER recall, all depths" in (tmp_path / task / "passkey.md").read_text()
    assert set(pd.read_csv(tmp_path / "cwe" / "probe.csv").depth) == {0.0}

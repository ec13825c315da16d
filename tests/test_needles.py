"""The needle tasks beyond one passkey (RULER's multikey, multivalue, multiquery): where the needles go,
what is asked and scored, the corpus episodes that teach them, the passkey left as it was, and the probe
under RoPE scaling through eval's own variants."""

from __future__ import annotations

import hashlib
import math
import re

import numpy as np
import pandas as pd
import pytest
import torch
from test_probe import FILLER, VOCAB

from conftest import assert_refused, invoke, posenc, train
from posenc_cli.data import passkey
from posenc_cli.data.needles import (
    LOWER,
    Episode,
    Needle,
    NeedleTask,
    draw_episode,
    natural_prompt,
    needed_chars,
    placeholder,
)
from posenc_cli.data.synthetic import generate
from posenc_cli.data.synthetic_spec import SyntheticSpec
from posenc_cli.evaluation.perplexity import LogitsScorer
from posenc_cli.evaluation.probe import build_trial, filler_length, make_trials, overhead, score

TASKS = [NeedleTask("passkey"), NeedleTask("multikey"), NeedleTask("multikey", 7)]
TASKS += [NeedleTask("multivalue"), NeedleTask("multiquery")]


def sentence_of(episode: Episode, i: int) -> str:
    return LOWER.sentence(episode, episode.needles[i])


@pytest.mark.parametrize("task", TASKS, ids=lambda t: f"{t.name}-{t.needles}")
@pytest.mark.parametrize("seed", range(20))
def test_needle_zero_sits_at_the_depth_and_names_and_keys_are_distinct(task, seed):
    rng = np.random.default_rng(seed)
    depth = float(rng.random())
    episode = draw_episode(task, rng, depth)
    assert len(episode.needles) == task.needles and episode.needles[0].depth == depth
    assert all(0 <= n.depth <= 1 for n in episode.needles)
    keys = [n.key for n in episode.needles]
    assert len(set(keys)) == len(keys) and all(re.fullmatch(r"\d{5}", k) for k in keys)
    names = {n.name for n in episode.needles}
    assert len(names) == {"passkey": 1, "multivalue": 1}.get(task.name, task.needles)
    if task.name == "multikey":  # one asked, and no distractor shares its name or its key
        assert episode.asked == (0,)
        asked = episode.needles[0]
        assert all(n.name != asked.name and n.key != asked.key for n in episode.needles[1:])
    elif task.name == "multivalue":  # every key, in the order the text states them
        assert [episode.needles[i] for i in episode.asked] == episode.in_text_order
    elif task.name == "multiquery":  # every key, in the question's (random) order
        assert sorted(episode.asked) == list(range(task.needles))
    assert LOWER.answer(episode).split(" ") == [episode.needles[i].key for i in episode.asked]
    assert len(re.sub(r"\D", "", LOWER.answer(episode))) == task.answer_digits


@pytest.mark.parametrize("task", TASKS, ids=lambda t: f"{t.name}-{t.needles}")
@pytest.mark.parametrize("seed", range(8))
def test_a_trial_holds_each_needle_once_at_its_depth_and_ends_with_the_answer(task, seed):
    rng = np.random.default_rng(seed)
    episode = draw_episode(task, rng, float(rng.random()))
    length = overhead(VOCAB, task) + int(rng.integers(1, 400))
    trial, n_answer = build_trial(FILLER[7:], episode, length=length, tokenizer=VOCAB)
    assert len(trial) == length and VOCAB.decode(trial[-n_answer:]) == LOWER.answer(episode)
    text = VOCAB.decode(trial[:-n_answer])
    assert text.endswith(" " + LOWER.ask(episode))
    n_filler, inserted = filler_length(length, VOCAB, task), 0
    for needle in episode.in_text_order:  # each needle at its depth of the filler, moved to a word start
        sentence = LOWER.sentence(episode, needle)
        assert text.count(sentence) == 1
        at = text.index(sentence)
        assert at == 0 or text[at - 1] == " "
        assert at - inserted >= round(needle.depth * n_filler)
        inserted += len(sentence)
    if task.name == "multikey":  # the question names the asked needle's name, no other
        asked = episode.needles[0].name
        assert sum(f" of {asked} is " in LOWER.sentence(episode, n) for n in episode.needles) == 1


@pytest.mark.parametrize("kind", ["byte", "bpe"])
@pytest.mark.parametrize("name", ["multikey", "multivalue", "multiquery"])
def test_a_subword_trial_scores_the_tokens_that_cover_every_asked_key(kind, name):
    from test_data import BPE, TEXT

    from posenc_cli.data.tokenizers import ByteTokenizer

    tokenizer = ByteTokenizer() if kind == "byte" else BPE
    task = NeedleTask(name)
    filler = tokenizer.encode(re.sub(r"\d", "", TEXT) * 4)
    length = overhead(tokenizer, task) + 120
    trials, n_answer, episodes = make_trials(
        filler, tokenizer, length, depth=0.5, trials=4, seed=2, task=task
    )
    assert trials.shape == (4, length)
    for trial, n, episode in zip(trials, n_answer.tolist(), episodes):
        prompt, answer = tokenizer.decode(trial[:-n]), tokenizer.decode(trial[-n:])
        assert answer.strip() == LOWER.answer(episode)
        assert (prompt + answer).endswith(LOWER.ask(episode) + LOWER.answer(episode))
        assert all(prompt.count(LOWER.sentence(episode, needle)) == 1 for needle in episode.needles)


HAND = {  # depths 0.5, 0.0, 1.0, 0.25 for needles 0..3; checked by reading them
    "passkey": "ba pe gunazo the pass key is 11110. remember 11110. gunazo what is the pass key? "
    "the pass key is 11110",
    "multikey": "the pass key of kimu is 11111. remember 11111. ba pe gunazo the pass key of bazo is "
    "11110. remember 11110. gunazo the pass key of lete is 11112. remember 11112. what is the pass key "
    "of bazo? the pass key of bazo is 11110",
    "multivalue": "a pass key of bazo is 11111. remember 11111. ba pe a pass key of bazo is 11113. "
    "remember 11113. gunazo a pass key of bazo is 11110. remember 11110. gunazo a pass key of bazo is "
    "11112. remember 11112. what are the pass keys of bazo? the pass keys of bazo are 11111 11113 11110 "
    "11112",
    "multiquery": "the pass key of kimu is 11111. remember 11111. ba pe the pass key of sofa is 11113. "
    "remember 11113. gunazo the pass key of bazo is 11110. remember 11110. gunazo the pass key of lete is "
    "11112. remember 11112. what are the pass keys of lete and bazo and sofa and kimu? the pass keys of "
    "lete and bazo and sofa and kimu are 11112 11110 11113 11111",
}


@pytest.mark.parametrize("name", list(HAND))
def test_each_task_writes_the_trial_read_by_hand(name):
    task = NeedleTask(name, 2)
    names = {"passkey": [""], "multivalue": ["bazo"] * 4}.get(name, ["bazo", "kimu", "lete", "sofa"])
    needles = tuple(
        Needle(d, names[i % len(names)], f"1111{i}")
        for i, d in enumerate([0.5, 0.0, 1.0, 0.25][: task.needles])
    )
    asked = {"multivalue": (1, 3, 0, 2), "multiquery": (2, 0, 3, 1)}.get(name, (0,))
    episode = Episode(task, needles, asked)
    trial, n_answer = build_trial(FILLER, episode, length=overhead(VOCAB, task) + 20, tokenizer=VOCAB)
    assert VOCAB.decode(trial) == HAND[name]
    assert (
        VOCAB.decode(trial[-n_answer:]) == HAND[name].rsplit(" are " if " are " in HAND[name] else " is ")[-1]
    )


class Oracle(torch.nn.Module):
    """A fake model that predicts every next token of `sequences` (margin 4), but gets the token at the
    positions in `wrong` (position -> token) wrong."""

    def __init__(self, sequences: torch.Tensor, size: int, wrong: dict[int, int]):
        super().__init__()
        self.sequences, self.size, self.wrong = sequences, size, wrong

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        logits = torch.zeros(*idx.shape, self.size)
        for b in range(idx.size(0)):
            row = self.sequences[b]
            for t in range(idx.size(1) - 1):
                logits[b, t, self.wrong.get(t + 1, int(row[t + 1])) if b == 0 else int(row[t + 1])] = 4.0
        return logits


def test_a_trial_counts_only_when_every_asked_key_is_reproduced():
    task = NeedleTask("multivalue")
    trials, n_answer, episodes = make_trials(FILLER, VOCAB, 400, depth=0.5, trials=2, seed=0, task=task)
    assert (n_answer == len(LOWER.answer(episodes[0]))).all()
    last_key_digit = trials.size(1) - 1  # trial 0 gets the last digit of its last key wrong
    wrong_token = (int(trials[0, -1]) + 1) % len(VOCAB)
    model = Oracle(trials, len(VOCAB), {last_key_digit: wrong_token})
    hits, nll = score(LogitsScorer(model), trials, n_answer, digits=task.answer_digits)
    assert hits.tolist() == [False, True]
    log_z = math.log(math.exp(4.0) + len(VOCAB) - 1)
    tokens = int(n_answer[1])  # the answer's tokens (keys and spaces), per answer digit
    assert nll[1].item() == pytest.approx(tokens * (log_z - 4.0) / task.answer_digits, rel=1e-5)
    assert nll[0].item() == pytest.approx(
        ((tokens - 1) * (log_z - 4.0) + log_z) / task.answer_digits, rel=1e-5
    )


def test_passkey_trials_prompts_and_corpus_are_as_before_the_needle_tasks():
    trials, n_key, episodes = make_trials(FILLER, VOCAB, 200, depth=0.3, trials=4, seed=7)
    assert hashlib.sha256(trials.numpy().tobytes()).hexdigest()[:16] == "a196ba1028dca789"
    assert n_key.tolist() == [5] * 4 and [e.needles[0].key for e in episodes] == [
        "77585",
        "64324",
        "71887",
        "98269",
    ]
    english = natural_prompt(Episode(NeedleTask(), (Needle(0.5, "", "40913"),), (0,)), 12)
    assert hashlib.sha256(english.encode()).hexdigest()[:16] == "f43849d967fb83fe"
    made = generate(
        SyntheticSpec(n_chars=30_000, passkey_rate=0.2, passkey_min_distance=10, passkey_max_distance=50)
    )
    assert hashlib.sha256(made.text.encode()).hexdigest()[:16] == "0dca0098f1cc28ef"


@pytest.mark.parametrize(
    "scheme", ["none", "sinusoidal", "learned", "rope", "alibi", "t5", "xpos", "kerple", "fire"]
)
def test_reading_the_whole_trial_scores_as_reading_it_without_its_last_token(scheme):
    """The probe now reads all L tokens of a trial (so a scaled rotation is eval's at L); a causal model's
    predictions of the answer are those it made from the prompt and the answer's earlier tokens alone."""
    from posenc_cli.model import GPT, ModelConfig, ModelSize, token_nll

    torch.manual_seed(0)
    model = GPT(
        ModelConfig(
            vocab_size=len(VOCAB),
            block_size=160,
            size=ModelSize(n_layer=2, n_head=2, n_embd=32),
            scheme=scheme,
        )
    )
    trials, n_key, _ = make_trials(FILLER, VOCAB, 160, depth=0.5, trials=3, seed=0)
    hits, nll = score(LogitsScorer(model.eval()), trials, n_key)
    with torch.no_grad():  # the probe's reading before: the prompt and the key's first four digits
        logits = model(trials[:, :-1])[:, -passkey.KEY_DIGITS :].float()
    target = trials[:, -passkey.KEY_DIGITS :]
    assert hits.tolist() == (logits.argmax(-1) == target).all(-1).tolist()
    assert torch.allclose(nll, token_nll(logits, target).sum(-1) / passkey.KEY_DIGITS, rtol=1e-5, atol=1e-6)


def episode_chars(task: NeedleTask) -> int:
    """An episode's characters but its filler: needles, question, answer and its full stop."""
    episode = placeholder(task)
    needles = "".join(LOWER.sentence(episode, n) for n in episode.needles)
    return len(needles + LOWER.ask(episode) + passkey.answer(LOWER.answer(episode)))


@pytest.mark.parametrize("name", ["multikey", "multivalue", "multiquery"])
def test_training_episodes_are_the_probe_s_form_and_fit_a_window(name):
    task = NeedleTask(name)
    spec = (
        SyntheticSpec(  # scripts/reproduce_needles.sh's recipe, without copies (they repeat episodes' parts)
            n_chars=60_000,
            copy_rate=0.0,
            passkey_rate=0.3,
            passkey_min_distance=16,
            passkey_max_distance=160,
            probe_task=name,
        )
    )
    text = generate(spec).text
    question = re.escape(LOWER.ask(placeholder(task))).replace("baba", "[a-z]{4}")
    found = [(m.start(), m.end()) for m in re.finditer(question + r"[\d ]+\. ", text)]
    assert len(found) > 20
    first = "the pass key of " if name != "multivalue" else "a pass key of "
    for asked, end in found:
        start = text.rindex(first, 0, asked)
        for _ in range(task.needles - 1):  # back to the episode's first needle
            start = text.rindex(first, 0, start)
        episode = text[start:end]
        assert episode.count(" remember ") == task.needles
        assert len(episode) <= episode_chars(task) + spec.passkey_max_distance <= 512
    assert set(text) <= needed_chars(task) | set(" .")


@pytest.mark.slow  # trains runs
def test_a_length_too_short_for_the_task_is_left_out_and_said_or_refused_when_all_are(
    needle_runs, monkeypatch
):
    cwd, _ = needle_runs
    monkeypatch.chdir(cwd)
    args = ["probe", "rope", "--task", "multikey", "--depths", "0.5", "--trials", "1"]
    probed = invoke(*args, "--lengths", "200,300", "--out", "short")
    assert (
        probed.code == 0
        and "not probing rope at 200: a multikey trial needs at least 248 tokens" in probed.stderr
    )
    assert set(pd.read_csv(cwd / "short" / "probe.csv").length) == {300}
    assert_refused(*posenc(*args, "--lengths", "100,200"), "--lengths 100,200", "needs at least 248 tokens")


def test_data_probe_task_reaches_the_corpus_through_the_typed_config():
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from posenc_cli.config.location import config_dir
    from posenc_cli.config.schema import check_keys
    from posenc_cli.data import text_source

    overrides = ["experiment=probe", "data.probe_task=multiquery", "data.n_chars=20000"]
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    source, _ = text_source(check_keys(OmegaConf.to_container(cfg, resolve=True)).data)
    text = "".join(source.blocks())
    assert "what are the pass keys of " in text and "what is the pass key?" not in text


def test_a_vocabulary_that_cannot_write_the_task_is_refused_naming_what_is_missing():
    from posenc_cli.core.errors import UsageError
    from posenc_cli.data.vocab import Vocab
    from posenc_cli.evaluation.probe import check_vocab

    passkey_only = Vocab.from_text("".join(sorted(passkey.needed_chars())))
    check_vocab(passkey_only, "run")
    with pytest.raises(UsageError, match="lacks the characters 'dfglnouvz', which the multikey prompt needs"):
        check_vocab(passkey_only, "run", NeedleTask("multikey"))


def test_bad_task_values_are_refused_in_one_line(tmp_path):
    assert_refused(*posenc("probe", "--task", "niah"), "niah")
    assert_refused(*posenc("probe", "--task", "multikey", "--distractors", "0"), "--distractors", "0")
    assert_refused(*posenc("probe", "--task", "multikey", "--distractors", "17"), "between 1 and 16")
    assert_refused(
        *posenc("probe", "--task", "multivalue", "--distractors", "2"), "only with --task multikey"
    )
    assert_refused(*posenc("probe", "--rope-scaling", "yarn,cubic"), "cubic")
    assert_refused(*posenc("probe", "--rope-factor", "0.5", "--rope-scaling", "yarn"), "--rope-factor")
    code, stderr = posenc(
        "train", "experiment=smoke", "data.probe_task=niah", f"hydra.run.dir={tmp_path / 'x'}"
    )
    assert_refused(code, stderr, "data.probe_task='niah'", "multiquery")
    assert not (tmp_path / "x").exists()


@pytest.fixture(scope="module")
def needle_runs(tmp_path_factory):
    """A rope and an alibi run that have the passkey's characters (trained in seconds)."""
    cwd = tmp_path_factory.mktemp("needles")
    options = ["train.block_size=96", "data.passkey_rate=0.3", "data.passkey_max_distance=20"]
    return cwd, [train(cwd, f"scheme={s}", *options, run=s) for s in ("rope", "alibi", "xpos")]


@pytest.mark.slow  # trains runs
@pytest.mark.parametrize(
    "scaling, factor",
    [("none,linear,ntk,yarn", None), ("linear,dynamic,yarn", "2")],
    ids=["length", "factor"],
)
def test_a_scaled_probe_uses_the_frequencies_of_the_scaled_eval(needle_runs, monkeypatch, scaling, factor):
    """The cos/sin tables every rotary module builds at length L: eval's scaled model and the probe's are
    the same, method by method (the probe reads the whole trial, as eval a window of L)."""
    from posenc_cli.model.positional.rope import RoPE

    cwd, runs = needle_runs
    seen: dict[str, dict] = {"eval": {}, "probe": {}}
    doing = ["eval"]
    original = RoPE.cos_sin

    def recording(self, positions):
        cos, sin = original(self, positions)
        seen[doing[0]].setdefault((self.label, positions.size(-1)), (cos.clone(), sin.clone()))
        return cos, sin

    monkeypatch.setattr(RoPE, "cos_sin", recording)
    monkeypatch.chdir(cwd)
    given = ["--rope-scaling", scaling] + (["--rope-factor", factor] if factor else [])
    for rotary in ("rope", "xpos"):
        assert (
            invoke("eval", rotary, "--lengths", "192", "--max-tokens", "384", *given, "--out", "e").code == 0
        )
    doing[0] = "probe"
    probed = invoke(
        "probe", "rope", "xpos", "--lengths", "192", "--depths", "0.5", "--trials", "2", *given, "--out", "p"
    )
    assert probed.code == 0, probed.stderr
    at_192 = {key: value for key, value in seen["probe"].items() if key[1] == 192}
    labels = {f"{s}+{m}" if m != "none" else s for s in ("rope", "xpos") for m in scaling.split(",")}
    assert {label for label, _ in at_192} == labels
    for key, (cos, sin) in at_192.items():
        assert torch.equal(cos, seen["eval"][key][0]) and torch.equal(sin, seen["eval"][key][1]), key


@pytest.mark.slow  # trains runs
def test_probe_rows_per_method_in_the_order_asked_and_alibi_once_as_trained(needle_runs, monkeypatch):
    cwd, _ = needle_runs
    monkeypatch.chdir(cwd)
    for task in ("passkey", "multikey", "multivalue", "multiquery"):
        args = [
            "probe",
            "rope",
            "alibi",
            "--task",
            task,
            "--lengths",
            "400",
            "--depths",
            "0.5",
            "--trials",
            "2",
        ]
        probed = invoke(*args, "--rope-scaling", "yarn,none,ntk", "--out", task)
        assert probed.code == 0, probed.stderr
        df = pd.read_csv(cwd / task / "probe.csv")
        assert (df.task == task).all() and set(df.length) == ({96, 400} if task == "passkey" else {400})
        assert list(dict.fromkeys(df.scheme)) == ["rope+yarn", "rope", "rope+ntk", "alibi"]
        assert df.set_index("scheme").rope_scaling.to_dict() == {
            "rope+yarn": "yarn",
            "rope": "none",
            "rope+ntk": "ntk",
            "alibi": "none",
        }
        markdown = (cwd / task / "passkey.md").read_text()
        headings = re.findall(r"^## (.+) \(" + task, markdown, flags=re.M)
        assert headings == ["rope+yarn", "rope", "rope+ntk", "alibi"]
        assert "alibi takes no RoPE scaling: scored once, as trained" in markdown
        assert (cwd / task / "probe_summary.png").read_bytes()[:4] == b"\x89PNG"
        if task != "passkey":  # 96, the training length, cannot hold 4 needles: left out without a word
            assert "96" not in probed.stderr


@pytest.mark.slow  # trains runs
def test_probe_with_rerope_names_its_rows_by_the_method_and_refuses_xpos_in_one_line(
    needle_runs, monkeypatch
):
    """--rope-scaling rerope: a column named with its window, its rows' rope_scaling the method's text,
    alibi probed once as trained and said so; xPos (a scalable scheme with no plain rotation to remap)
    refused in one line naming the run and the method, before any trial and with nothing written."""
    cwd, _ = needle_runs
    monkeypatch.chdir(cwd)
    args = ["probe", "rope", "alibi", "--lengths", "96", "--depths", "0.5", "--trials", "2"]
    probed = invoke(*args, "--rope-scaling", "none,rerope", "--rerope-window", "16", "--out", "rerope")
    assert probed.code == 0, probed.stderr
    df = pd.read_csv(cwd / "rerope" / "probe.csv")
    assert df.set_index("scheme").rope_scaling.to_dict() == {
        "rope": "none",
        "rope+rerope (w=16)": "rerope",
        "alibi": "none",
    }
    assert "alibi takes no RoPE scaling" in (cwd / "rerope" / "passkey.md").read_text()
    # xpos computes no extension: probed as trained, its self_extend column shown unscored, with why
    code, said = posenc("probe", "xpos", "--lengths", "96", "--rope-scaling", "self_extend", "--out", "xp")
    rows = pd.read_csv(cwd / "xp" / "probe.csv")
    refused = rows[rows["scheme"].str.endswith("self_extend")]
    assert (
        code == 0 and (refused["trials"] == 0).all() and len(refused) and "no RoPE rotation to extend" in said
    )

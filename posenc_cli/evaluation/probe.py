"""Passkey retrieval (Mohtashami & Jaggi 2023) and RULER's needle tasks: does a model use context far
back in its window?

Perplexity can stay flat while a model ignores everything beyond its training window, so we ask
directly. Each trial is L tokens: filler from the run's own validation text (minus its own
passkey episodes) with the task's needles at their relative depths (needle 0 at δ), the question at
the end, then the answer's keys (phrasing in data/needles.py and data/passkey.py), scored through the
tokens that cover them whatever the tokenizer. A trial counts when greedy decoding reproduces the
answer's tokens exactly; key_nll is their NLL given the prompt per answer digit, a continuous measure
that needs no decoding. RULER's vt and cwe (data/needles.py, data/common_words.py) are scored the same
way, and also by RULER's recall (string_match_all): each trial's greedy continuation of its prompt, as
many tokens as its answer, and the fraction of the answer's words found in it (case-insensitive
substrings, any order).
"""

from __future__ import annotations

import math
import re

import numpy as np
import torch

from posenc_cli.core.errors import UsageError, require_int
from posenc_cli.data import needles, passkey
from posenc_cli.data.common_words import WordsEpisode
from posenc_cli.data.needles import LOWER, Episode, NeedleTask
from posenc_cli.model import token_nll

MAX_TRIALS = 10_000  # per run, length and depth: the percentages are exact to 0.01 % long before this
COLUMNS = [
    "run",
    "model_id",
    "scheme",
    "rope_scaling",  # the method it was probed with (none: as trained)
    "task",  # passkey, multikey, multivalue or multiquery
    "seed",
    "train_len",
    "length",
    "depth",
    "trials",
    "accuracy",
    "key_nll",
    "recall",  # RULER's string_match_all, vt and cwe only (empty for the needle tasks)
]


FILLER_POOL = 2_000_000  # validation tokens the filler is drawn from
MARGIN = 64  # extra filler tokens before a trial, for tokenizers whose re-encoded text changes length
PASSKEY = NeedleTask()


def check_vocab(tokenizer, where: str, task: NeedleTask = PASSKEY) -> None:
    """The run's tokenizer must be able to write every character of the task's prompt."""
    if tokenizer.kind == "ids":
        raise UsageError(
            f"{where} cannot be probed: it was trained on ids without a tokenizer, so no prompt "
            "can be written"
        )
    missing = tokenizer.missing("".join(sorted(needles.needed_chars(task))))
    if missing:
        raise UsageError(
            f"{where} cannot be probed: its vocabulary lacks the characters {''.join(sorted(missing))!r}, which the {task.name} "
            "prompt needs; train it with data.passkey_rate>0 (e.g. experiment=probe) or on a text that has them"
        )


def without_episodes(val, tokenizer) -> torch.Tensor:
    """Validation tokens (the first FILLER_POOL) minus the corpus's own passkey sentences and digits:
    filler must not hold a second key. <unk> decodes to one character and encodes back to <unk>."""
    text = tokenizer.decode(np.asarray(val[:FILLER_POOL]).tolist())
    return tokenizer.encode(passkey.EPISODE_PARTS.sub("", text), strict=False)


def overhead(tokenizer, task: NeedleTask = PASSKEY) -> int:
    """Tokens of a trial that are not filler: the needles, question and answer (cwe: the shortest list,
    its common words alone, the question and answer)."""
    episode = needles.placeholder(task)
    if isinstance(episode, WordsEpisode):
        return len(tokenizer.encode(LOWER.words.prompt(episode, 0) + LOWER.answer(episode)))
    sentences = [LOWER.sentence(episode, needle) for needle in episode.needles]
    question = LOWER.ask(episode) + LOWER.answer(episode)
    return sum(len(tokenizer.encode(s)) for s in sentences) + len(tokenizer.encode(question))


def filler_length(length: int, tokenizer, task: NeedleTask = PASSKEY) -> int:
    """Filler tokens in a trial of `length`: what the needles, question and answer leave over."""
    needed = overhead(tokenizer, task)
    if length <= needed:
        raise UsageError(
            f"a {task.name} trial needs more than {needed} tokens; length {length} (asked for, or a "
            "run's training length) is too short"
        )
    return length - needed


def word_start(text: str, at: int, low: int = 0) -> int:
    """The first index >= at that starts a word (follows a space, or is `low`): the key splits no word."""
    while low < at < len(text) and text[at - 1] != " ":
        at += 1
    return at


def build_trial(
    filler: torch.Tensor, episode: Episode, *, length: int, tokenizer, margin: int = 0
) -> tuple[torch.Tensor, int]:
    """(`length` tokens, how many of them are the answer's). The text is filler (ending in a space) with
    each needle at its relative depth, then the question and the answer, encoded whole; the answer is
    scored through the tokens that cover its characters (for BPE, " 40913" may be "Ġ409" "13"), and the
    trial is the `length` tokens ending with them. `filler` holds `margin` tokens more on the left than
    the trial needs, so tokenizers whose re-encoded text is shorter still fill it (char needs none)."""
    n_filler = filler_length(length, tokenizer, episode.task)
    ids = filler[: margin + n_filler].tolist()
    body = tokenizer.decode(ids)[:-1] + " "
    low = len(tokenizer.decode(ids[:margin]))
    prompt, last = "", 0
    for needle in episode.in_text_order:  # depths ascend, so do their word starts
        at = word_start(body, len(tokenizer.decode(ids[: margin + round(needle.depth * n_filler)])), low)
        prompt, last = prompt + body[last:at] + LOWER.sentence(episode, needle), at
    prompt += body[last:] + LOWER.ask(episode)
    tokens, ends = tokenizer.token_ends(prompt + LOWER.answer(episode))
    n_key = len(tokens) - int(np.searchsorted(ends, len(prompt), side="right"))
    if len(tokens) < length:
        raise UsageError(
            f"filler too short for a {length}-token {episode.task.name} trial with this tokenizer"
        )
    return torch.from_numpy(tokens[-length:]), n_key


def make_trials(
    val: torch.Tensor,
    tokenizer,
    length: int,
    *,
    depth: float,
    trials: int,
    seed: int,
    task: NeedleTask = PASSKEY,
):
    """(trials x `length` tokens, answer tokens per trial, episodes); the same seed gives the same
    episodes and filler for every run of a tokenizer (the passkey's: the same as before other tasks)."""
    n_filler = filler_length(length, tokenizer, task)
    margin = 0 if tokenizer.context_free else MARGIN
    if margin + n_filler >= len(val):
        raise UsageError(
            f"--lengths {length} needs {n_filler} filler tokens; the validation text has {len(val)}"
        )
    rng = np.random.default_rng([seed, length, round(depth * 1_000_000)])
    episodes = [needles.draw_episode(task, rng, depth) for _ in range(trials)]
    starts = rng.integers(margin, len(val) - n_filler, size=trials)
    build = build_list_trial if task.name == "cwe" else build_trial
    built = [
        build(val[s - margin : s + n_filler], e, length=length, tokenizer=tokenizer, margin=margin)
        for s, e in zip(starts, episodes)
    ]
    return torch.stack([t for t, _ in built]), torch.tensor([n for _, n in built]), episodes


def build_list_trial(
    filler: torch.Tensor, episode: WordsEpisode, *, length: int, tokenizer, margin: int = 0
) -> tuple[torch.Tensor, int]:
    """(`length` tokens, how many of them are the answer's) for cwe: the longest list whose prompt and
    answer leave at least one of `length` tokens, after filler (ending in a space) that fills the rest."""
    words = LOWER.words

    def tokens(count: int) -> int:
        return len(tokenizer.encode(words.prompt(episode, count) + words.answer(episode)))

    low, high = 0, 1  # tokens(low) < length (overhead), the longest such count found by bisection
    while tokens(high) < length:
        low, high = high, high * 2
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if tokens(middle) < length else (low, middle)
    prompt = tokenizer.decode(filler.tolist())[:-1] + " " + words.prompt(episode, low)
    trial, ends = tokenizer.token_ends(prompt + words.answer(episode))
    n_key = len(trial) - int(np.searchsorted(ends, len(prompt), side="right"))
    if len(trial) < length:
        raise UsageError(f"filler too short for a {length}-token cwe trial with this tokenizer")
    return torch.from_numpy(trial[-length:]), n_key


def score(
    scorer, trials: torch.Tensor, key_tokens: torch.Tensor, *, digits: int = passkey.KEY_DIGITS
) -> tuple[torch.Tensor, torch.Tensor]:
    """(exact match, answer NLL per answer digit) per trial, from one teacher-forced pass over each trial,
    whose last `key_tokens[i]` tokens are its answer's; `scorer` is a LogitsScorer or an HFModel.

    Greedy decoding yields the answer exactly when, at every answer token, the most likely next token given
    the prompt and the answer's earlier tokens is that token: the teacher-forced argmaxes decide it exactly.
    The model reads the whole trial, as eval reads a window of its length (a scaled RoPE's rotation
    depends on it); the last token's prediction is not used."""
    batch = scorer.batch_size(trials.size(1))
    hits, nlls = [], []
    for i in range(0, len(trials), batch):
        chunk, n_key = trials[i : i + batch], key_tokens[i : i + batch]
        last = int(n_key.max())  # only the positions that predict answer tokens
        logits = scorer.last_logits(chunk, last + 1)[:, :-1]  # full precision, as eval
        target = chunk[:, -last:].to(logits.device)
        is_key = (torch.arange(last)[None] >= (last - n_key)[:, None]).to(logits.device)
        right = (logits.argmax(-1) == target) | ~is_key
        hits.append(right.all(-1).cpu())
        nlls.append(((token_nll(logits, target) * is_key).sum(-1) / digits).cpu())
    return torch.cat(hits), torch.cat(nlls)


def check_trials(trials: int) -> None:
    require_int("--trials", trials, at_least=1, at_most=MAX_TRIALS)


def parse_depths(text: str) -> list[float]:
    """'0.1,0.5,0.9' -> [0.1, 0.5, 0.9]; each a relative depth in [0, 1]."""
    depths = []
    for part in str(text).split(","):
        try:
            value = float(part)
        except ValueError:
            value = math.nan
        if not 0 <= value <= 1:
            raise UsageError(
                f"--depths {text!r}: {part.strip()!r} is not a number between 0 and 1; give e.g. 0.1,0.5,0.9"
            )
        depths.append(value)
    return sorted(set(depths))


def greedy_answers(scorer, trials: torch.Tensor, key_tokens: torch.Tensor) -> list[list[int]]:
    """Each trial's greedy continuation of its prompt, as many tokens as its answer has. Every step reads
    the whole trial with the tokens chosen so far in place of the answer's (a causal model never sees
    the later ones), so each window has the trial's length, as in score: where score counts a hit, the
    continuation is the answer."""
    batch, out = scorer.batch_size(trials.size(1)), []
    for i in range(0, len(trials), batch):
        chunk, n_key = trials[i : i + batch].clone(), key_tokens[i : i + batch]
        last, rows = int(n_key.max()), torch.arange(len(chunk))
        for step in range(last):
            live = rows[n_key > step]
            logits = scorer.last_logits(chunk[live], last + 1)[:, :-1]
            at = (last - n_key[live] + step).to(logits.device)
            chosen = logits[torch.arange(len(live), device=logits.device), at].argmax(-1).cpu()
            chunk[live, chunk.size(1) - n_key[live] + step] = chosen
        out += [chunk[r, chunk.size(1) - int(n) :].tolist() for r, n in enumerate(n_key)]
    return out


def answer_words(text: str) -> list[str]:
    """The reference answers in an answer's text: its words of letters (vt's names, cwe's words; not
    cwe's English numbering)."""
    return re.findall(r"[^\W\d_]+", text)


def string_match_all(prediction: str, references: list[str]) -> float:
    """RULER's recall of one prediction: the fraction of references found in it, case-insensitive
    substrings (after RULER's postprocess_pred: control characters as newlines, stripped)."""
    prediction = re.sub(r"[\x00-\x1f]", "\n", prediction).strip().lower()
    return sum(r.lower() in prediction for r in references) / len(references)


def recall(scorer, trials: torch.Tensor, key_tokens: torch.Tensor, *, decode) -> torch.Tensor:
    """RULER's recall per trial: string_match_all of its greedy continuation (greedy_answers) against
    the words of its answer; `decode` writes token ids as text."""
    continued = greedy_answers(scorer, trials, key_tokens)
    answers = [decode(t[len(t) - int(n) :].tolist()) for t, n in zip(trials, key_tokens)]
    found = [string_match_all(decode(c), answer_words(a)) for c, a in zip(continued, answers)]
    return torch.tensor(found, dtype=torch.float64)

"""Passkey retrieval (Mohtashami & Jaggi 2023): does a model use context far back in its window?

Perplexity can stay flat while a model ignores everything beyond its training window, so we ask
directly. Each trial is L tokens: filler from the run's own validation text (minus its own
passkey episodes) with the key sentence at relative depth δ, the question at the end, then the key's
digits (phrasing in data/passkey.py), scored through the tokens that cover them whatever the tokenizer.
A trial counts when greedy decoding reproduces the key's tokens exactly; key_nll is their NLL given
the prompt per key digit, a continuous measure that needs no decoding.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import torch

from posenc_cli.core import ui
from posenc_cli.core.errors import UsageError, require_int
from posenc_cli.data import passkey
from posenc_cli.evaluation.labels import distinctions, mixes_own_tokenizers, pretended_context, with_tokenizer
from posenc_cli.evaluation.target import EvalTarget
from posenc_cli.model import token_nll
from posenc_cli.model.positional import past_max_len

MAX_TRIALS = 10_000  # per run, length and depth: the percentages are exact to 0.01 % long before this
COLUMNS = [
    "run",
    "model_id",
    "scheme",
    "seed",
    "train_len",
    "length",
    "depth",
    "trials",
    "accuracy",
    "key_nll",
]


FILLER_POOL = 2_000_000  # validation tokens the filler is drawn from
MARGIN = 64  # extra filler tokens before a trial, for tokenizers whose re-encoded text changes length


def check_vocab(tokenizer, where: str) -> None:
    """The run's tokenizer must be able to write every character of the passkey prompt."""
    if tokenizer.kind == "ids":
        raise UsageError(
            f"{where} cannot be probed: it was trained on ids without a tokenizer, so no prompt "
            "can be written"
        )
    missing = tokenizer.missing("".join(sorted(passkey.needed_chars())))
    if missing:
        raise UsageError(
            f"{where} cannot be probed: its vocabulary lacks the characters {''.join(sorted(missing))!r}, which the passkey "
            "prompt needs; train it with data.passkey_rate>0 (e.g. experiment=probe) or on a text that has them"
        )


def without_episodes(val, tokenizer) -> torch.Tensor:
    """Validation tokens (the first FILLER_POOL) minus the corpus's own passkey sentences and digits:
    filler must not hold a second key. <unk> decodes to one character and encodes back to <unk>."""
    text = tokenizer.decode(np.asarray(val[:FILLER_POOL]).tolist())
    return tokenizer.encode(passkey.EPISODE_PARTS.sub("", text), strict=False)


def filler_length(length: int, tokenizer) -> int:
    """Filler tokens in a trial of `length`: what the key sentence, question and key leave over."""
    zeros = "0" * passkey.KEY_DIGITS
    sentence, question = passkey.key_sentence(zeros), passkey.QUESTION + zeros
    overhead = len(tokenizer.encode(sentence)) + len(tokenizer.encode(question))
    if length <= overhead:
        raise UsageError(
            f"a passkey trial needs more than {overhead} tokens; length {length} (asked for, or a "
            "run's training length) is too short"
        )
    return length - overhead


def word_start(text: str, at: int, low: int = 0) -> int:
    """The first index >= at that starts a word (follows a space, or is `low`): the key splits no word."""
    while low < at < len(text) and text[at - 1] != " ":
        at += 1
    return at


def build_trial(
    filler: torch.Tensor, key: str, depth: float, *, length: int, tokenizer, margin: int = 0
) -> tuple[torch.Tensor, int]:
    """(`length` tokens, how many of them are the key's). The text is filler (ending in a space) with the
    key sentence at relative depth `depth`, then the question and the key, encoded whole; the key is
    scored through the tokens that cover its characters (for BPE, " 40913" may be "Ġ409" "13"), and the
    trial is the `length` tokens ending with them. `filler` holds `margin` tokens more on the left than
    the trial needs, so tokenizers whose re-encoded text is shorter still fill it (char needs none)."""
    n_filler = filler_length(length, tokenizer)
    ids = filler[: margin + n_filler].tolist()
    body = tokenizer.decode(ids)[:-1] + " "
    low = len(tokenizer.decode(ids[:margin]))
    at = word_start(body, len(tokenizer.decode(ids[: margin + round(depth * n_filler)])), low)
    prompt = body[:at] + passkey.key_sentence(key) + body[at:] + passkey.QUESTION
    tokens, ends = tokenizer.token_ends(prompt + key)
    n_key = len(tokens) - int(np.searchsorted(ends, len(prompt), side="right"))
    if len(tokens) < length:
        raise UsageError(f"filler too short for a {length}-token passkey trial with this tokenizer")
    return torch.from_numpy(tokens[-length:]), n_key


def make_trials(val: torch.Tensor, tokenizer, length: int, *, depth: float, trials: int, seed: int):
    """(trials x `length` tokens, key tokens per trial, keys); the same seed gives the same keys and
    filler for every run of a tokenizer."""
    n_filler = filler_length(length, tokenizer)
    margin = 0 if tokenizer.context_free else MARGIN
    if margin + n_filler >= len(val):
        raise UsageError(
            f"--lengths {length} needs {n_filler} filler tokens; the validation text has {len(val)}"
        )
    rng = np.random.default_rng([seed, length, round(depth * 1_000_000)])
    keys = [passkey.random_key(rng) for _ in range(trials)]
    starts = rng.integers(margin, len(val) - n_filler, size=trials)
    built = [
        build_trial(
            val[s - margin : s + n_filler], k, depth, length=length, tokenizer=tokenizer, margin=margin
        )
        for s, k in zip(starts, keys)
    ]
    return torch.stack([t for t, _ in built]), torch.tensor([n for _, n in built]), keys


def score(scorer, trials: torch.Tensor, key_tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(exact match, key NLL per key digit) per trial, from one teacher-forced pass over each trial,
    whose last `key_tokens[i]` tokens are its key's; `scorer` is a LogitsScorer or an HFModel.

    Greedy decoding yields the key exactly when, at every key token, the most likely next token given
    the prompt and the key's earlier tokens is that token: the teacher-forced argmaxes decide it exactly."""
    batch = scorer.batch_size(trials.size(1))
    hits, nlls = [], []
    for i in range(0, len(trials), batch):
        chunk, n_key = trials[i : i + batch], key_tokens[i : i + batch]
        last = int(n_key.max())  # only the positions that predict key tokens
        logits = scorer.last_logits(chunk[:, :-1], last)  # full precision, as eval
        target = chunk[:, -last:].to(logits.device)
        is_key = (torch.arange(last)[None] >= (last - n_key)[:, None]).to(logits.device)
        right = (logits.argmax(-1) == target) | ~is_key
        hits.append(right.all(-1).cpu())
        nlls.append(((token_nll(logits, target) * is_key).sum(-1) / passkey.KEY_DIGITS).cpu())
    return torch.cat(hits), torch.cat(nlls)


def probe_runs(
    runs: list[EvalTarget],
    *,
    lengths: dict[int, list[int]],
    depths: list[float],
    trials: int,
    seed: int,
    device,
):
    """Every run at each of its lengths (`lengths`, by id: perplexity.target_lengths) and depth: one tidy
    row per cell. A run is a posenc run or a Hugging Face model; each builds its own trials (see their
    probe_trials)."""
    import pandas as pd

    fillers: dict[str, torch.Tensor] = {}
    mixed = mixes_own_tokenizers(runs)  # label columns as eval does: "rope [bpe]"
    apart = distinctions(runs, mixed)  # seeds of one model share a column, other trainings never do
    rows = []
    with ui.progress() as bar:
        task = bar.add_task("probe", total=sum(len(lengths[id(r)]) for r in runs) * len(depths), status="")
        for run in runs:
            scorer = run.scorer(device)
            label = replace(run.label, distinct=apart[id(run)].within + pretended_context(run))
            scheme = with_tokenizer(label, run.tokenizer_name, mixed)
            for length in lengths[id(run)]:
                for depth in depths:
                    bar.update(task, status=f"{scheme} seed {run.seed} @ {length}, depth {depth:g}")
                    row = {
                        "run": str(run.path),
                        "model_id": run.model_id,
                        "scheme": scheme,
                        "seed": run.seed,
                        "train_len": run.train_len,
                        "length": length,
                        "depth": depth,
                        "trials": 0,
                        "accuracy": math.nan,
                        "key_nll": math.nan,
                    }
                    if not past_max_len(run.max_len, length):
                        scored = [
                            score(scorer, sequences, key_tokens)
                            for sequences, key_tokens in run.probe_trials(
                                length, depth, trials, seed=seed, cache=fillers
                            )
                        ]
                        hit, nll = (torch.cat(parts) for parts in zip(*scored))
                        row.update(
                            trials=trials, accuracy=float(hit.float().mean()), key_nll=float(nll.mean())
                        )
                    rows.append(row)
                    bar.advance(task)
    return pd.DataFrame(rows, columns=COLUMNS)


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

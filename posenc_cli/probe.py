"""Passkey retrieval (Mohtashami & Jaggi 2023): does a model use context far back in its window?

Perplexity can stay flat while a model ignores everything beyond its training window, so we ask
directly. Each trial is L characters: filler from the run's own validation text (minus its own
passkey episodes) with the key sentence at relative depth δ, the question at the end, then the key's
digits (phrasing in data/passkey.py).
A trial counts when greedy decoding reproduces the key exactly; key_nll is the mean NLL of its
digits given the prompt, a continuous measure that needs no decoding.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from posenc_cli.data import passkey
from posenc_cli.data.vocab import UNK, Vocab
from posenc_cli.errors import UsageError
from posenc_cli.evaluate import TOKENS_PER_FORWARD
from posenc_cli.model import token_nll

COLUMNS = ["run", "scheme", "seed", "train_len", "length", "depth", "trials", "accuracy", "key_nll"]


def check_vocab(vocab: Vocab, where: str) -> None:
    missing = passkey.needed_chars() - set(vocab.chars)
    if missing:
        raise UsageError(
            f"{where} cannot be probed: its vocabulary lacks the characters {''.join(sorted(missing))!r}, which the passkey "
            "prompt needs; train it with data.passkey_rate>0 (e.g. experiment=probe) or on a text that has them"
        )


def without_episodes(val: torch.Tensor, vocab: Vocab) -> torch.Tensor:
    """Validation tokens minus the corpus's own passkey sentences and digits: filler must not hold a
    second key. Works on one character per token, so <unk> tokens stay single tokens."""
    text = "".join("\0" if c == UNK else c for c in (vocab.chars[i] for i in val.tolist()))
    ids = {c: i for i, c in enumerate(vocab.chars)}
    return torch.tensor([ids.get(c, len(vocab) - 1) for c in passkey.EPISODE_PARTS.sub("", text)], dtype=torch.long)


def filler_length(length: int) -> int:
    """Filler tokens in a trial of `length`: what the key sentence, question and key leave over."""
    overhead = len(passkey.key_sentence("0" * passkey.KEY_DIGITS)) + len(passkey.QUESTION) + passkey.KEY_DIGITS
    if length <= overhead:
        raise UsageError(f"a passkey trial needs more than {overhead} tokens; length {length} (asked for, or a "
                         "run's training length) is too short")
    return length - overhead


def word_start(filler: torch.Tensor, at: int, space: int) -> int:
    """The first index >= at that starts a word (follows a space); the key never splits a word."""
    while at < len(filler) and at > 0 and filler[at - 1] != space:
        at += 1
    return at


def build_prompt(filler: torch.Tensor, key: str, depth: float, length: int, vocab: Vocab) -> torch.Tensor:
    """`length - KEY_DIGITS` tokens: filler (ending in a space) with the key sentence at relative depth
    `depth`, then the question; the key's digits complete the trial to exactly `length`."""
    n_filler = filler_length(length)
    space = vocab.chars.index(" ")
    body = filler[:n_filler].clone()
    body[-1] = space
    at = word_start(body, round(depth * n_filler), space)
    sentence, question = vocab.encode(passkey.key_sentence(key)), vocab.encode(passkey.QUESTION)
    return torch.cat([body[:at], sentence, body[at:], question])


def make_trials(val: torch.Tensor, vocab: Vocab, length: int, depth: float, trials: int, seed: int):
    """(prompts, keys) token tensors; the same seed gives the same keys and filler for every run."""
    n_filler = filler_length(length)
    if n_filler >= len(val):
        raise UsageError(f"--lengths {length} needs {n_filler} filler characters; the validation text has {len(val)}")
    rng = np.random.default_rng([seed, length, round(depth * 1_000_000)])
    keys = [passkey.random_key(rng) for _ in range(trials)]
    starts = rng.integers(0, len(val) - n_filler, size=trials)
    prompts = torch.stack([build_prompt(val[s : s + n_filler], k, depth, length, vocab) for s, k in zip(starts, keys)])
    return prompts, torch.stack([vocab.encode(k) for k in keys])


@torch.no_grad()
def score(model, prompts: torch.Tensor, keys: torch.Tensor, device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """(exact match, mean key-digit NLL) per trial, from one teacher-forced pass over prompt + key.

    Greedy decoding yields the key exactly when, at every digit, the most likely next token given the
    prompt and the key's earlier digits is that digit: the teacher-forced argmaxes decide it exactly."""
    n_key = keys.size(1)
    sequences = torch.cat([prompts, keys[:, :-1]], dim=1)
    batch = max(1, TOKENS_PER_FORWARD // sequences.size(1))
    hits, nlls = [], []
    for i in range(0, len(sequences), batch):
        target = keys[i : i + batch].to(device)
        logits = model(sequences[i : i + batch].to(device))[:, -n_key:].float()  # full precision, as eval
        hits.append((logits.argmax(-1) == target).all(-1).cpu())
        nlls.append(token_nll(logits, target).mean(-1).cpu())
    return torch.cat(hits), torch.cat(nlls)


def probe_runs(runs, *, lengths: list[int], depths: list[float], trials: int, seed: int, device):
    """Every run at every length (its training length included) and depth: one tidy row per cell."""
    import pandas as pd

    from posenc_cli import ui
    from posenc_cli.runs import run_corpus

    fillers: dict[str, torch.Tensor] = {}
    rows = []
    with ui.progress() as bar:
        task = bar.add_task("probe", total=sum(len(set(lengths) | {r.train_len}) for r in runs) * len(depths), status="")
        for run in runs:
            key = run.checkpoint.get("corpus_sha256") or str(run.path)
            if key not in fillers:
                fillers[key] = without_episodes(run_corpus(run).val, run.vocab)
            model = run.model.to(device)
            for length in sorted(set(lengths) | {run.train_len}):
                for depth in depths:
                    bar.update(task, status=f"{run.label} seed {run.seed} @ {length}, depth {depth:g}")
                    row = {"run": str(run.path), "scheme": run.label, "seed": run.seed, "train_len": run.train_len,
                           "length": length, "depth": depth, "trials": 0, "accuracy": math.nan, "key_nll": math.nan}
                    limit = model.scheme.max_len
                    if limit is None or length <= limit:
                        prompts, keys = make_trials(fillers[key], run.vocab, length, depth, trials, seed)
                        hit, nll = score(model, prompts, keys, device)
                        row.update(trials=trials, accuracy=float(hit.float().mean()), key_nll=float(nll.mean()))
                    rows.append(row)
                    bar.advance(task)
    return pd.DataFrame(rows, columns=COLUMNS)


def parse_depths(text: str) -> list[float]:
    """'0.1,0.5,0.9' -> [0.1, 0.5, 0.9]; each a relative depth in [0, 1]."""
    depths = []
    for part in str(text).split(","):
        try:
            value = float(part)
        except ValueError:
            value = math.nan
        if not 0 <= value <= 1:
            raise UsageError(f"--depths {text!r}: {part.strip()!r} is not a number between 0 and 1; give e.g. 0.1,0.5,0.9")
        depths.append(value)
    return sorted(set(depths))

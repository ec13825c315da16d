"""Perplexity past the training length, as in Press et al. 2022 ("Train Short, Test Long").

nonoverlap: the span is cut into consecutive windows of L tokens and every token is scored, so a
token's context is its position inside its window. sliding: windows of L advance by a stride S and
only their last S tokens are scored (all of the first window's), so every scored token after the
first window sees at least L - S tokens of context. Every length scores the same span of tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from posenc_cli.device import autocast
from posenc_cli.errors import UsageError
from posenc_cli.model import GPT, token_nll

if TYPE_CHECKING:
    import pandas as pd  # imported where it is used: `posenc eval` only

MODES = ("nonoverlap", "sliding")
TOKENS_PER_FORWARD = 16384  # windows are batched up to this many tokens per forward pass


@dataclass(frozen=True)
class Window:
    start: int  # first input token of the window
    scored: int  # how many of the window's last targets count


def plan_windows(span: int, length: int, mode: str = "nonoverlap", stride: int | None = None) -> list[Window]:
    """Windows over targets [0, span): each target is scored exactly once."""
    if mode == "nonoverlap":
        return [Window(start, length) for start in range(0, span - length + 1, length)]
    if mode != "sliding":
        raise UsageError(f"--mode {mode} is not known; choose one of: {', '.join(MODES)}")
    stride = stride or max(1, length // 2)
    if not 0 < stride <= length:
        raise UsageError(f"--stride {stride} must be between 1 and the window length {length}")
    windows = [Window(0, length)]
    end = length
    while end < span:
        step = min(stride, span - end)
        end += step
        windows.append(Window(end - length, step))
    return windows


def scored_span(n_tokens: int, lengths: list[int], max_tokens: int) -> int:
    """The number of targets scored at every length: a multiple of the longest length."""
    longest = max(lengths)
    available = n_tokens - 1  # the last token is only ever a target
    if longest > available:
        raise UsageError(
            f"length {longest} is longer than the evaluation text allows: it has {n_tokens} tokens, "
            f"so lengths up to {available} fit"
        )
    return max(longest, (min(max_tokens, available) // longest) * longest)


@dataclass
class LengthResult:
    tokens: int
    nll: float
    position_nll: torch.Tensor  # (length,) mean NLL at each position inside the window
    position_count: torch.Tensor  # (length,) how many scored tokens each mean is over

    @property
    def ppl(self) -> float:
        return math.exp(self.nll)


@torch.no_grad()
def evaluate_length(model: GPT, tokens: torch.Tensor, *, span: int, length: int, mode: str = "nonoverlap",
                    stride: int | None = None, device: torch.device | str = "cpu") -> LengthResult:
    windows = plan_windows(span, length, mode, stride)
    batch = max(1, TOKENS_PER_FORWARD // length)
    nll_sum = torch.zeros(length, dtype=torch.float64)
    counts = torch.zeros(length, dtype=torch.float64)
    model.eval()
    for i in range(0, len(windows), batch):
        group = windows[i : i + batch]
        chunk = torch.stack([tokens[w.start : w.start + length + 1] for w in group]).to(device)
        with autocast(torch.device(device), "fp32"):  # perplexities in full precision, like for like
            nll = token_nll(model(chunk[:, :-1]), chunk[:, 1:]).double().cpu()
        scored = torch.zeros_like(nll, dtype=torch.bool)
        for row, w in enumerate(group):
            scored[row, length - w.scored :] = True
        nll_sum += (nll * scored).sum(0)
        counts += scored.sum(0)
    total = int(counts.sum())
    return LengthResult(total, float(nll_sum.sum() / total), nll_sum / counts.clamp(min=1), counts)


def parse_lengths(text: str) -> list[int]:
    """'512,1024,2048' -> [512, 1024, 2048]; anything else is one clear error."""
    parts = [p.strip() for p in str(text).split(",")]
    lengths = []
    for part in parts:
        if not part.isdigit() or int(part) <= 0:
            raise UsageError(f"--lengths {text!r}: {part!r} is not a positive integer; give a comma list such as 512,1024,2048")
        lengths.append(int(part))
    return sorted(set(lengths))


def position_buckets(result: LengthResult, n_buckets: int = 128) -> list[tuple[int, float, int]]:
    """(first position, mean NLL, tokens) per bucket of positions inside the window."""
    length = len(result.position_nll)
    width = max(1, math.ceil(length / n_buckets))
    sums = result.position_nll * result.position_count
    rows = []
    for start in range(0, length, width):
        count = result.position_count[start : start + width].sum()
        if count > 0:
            rows.append((start, float(sums[start : start + width].sum() / count), int(count)))
    return rows


def scaling_variants(run, methods: list[str], factor: float | None) -> list[dict]:
    """The scheme options to evaluate `run` with: for a scheme that takes RoPE scaling, one set per
    method ('none': the run as trained); any other run once, as it is. A run trained with a scaling
    has it built in, and a second one on top is refused rather than composed."""
    scheme = run.model.scheme
    if not scheme.scalable or methods == ["none"]:
        return [{}]
    if scheme.scaling is not None:
        raise UsageError(
            f"--rope-scaling {','.join(methods)}: {run.path} was trained with scheme.scaling={scheme.scaling.method}, "
            "which its evaluation always applies; evaluate it without --rope-scaling (scalings do not compose)"
        )
    return [{"scaling": m, "scaling_factor": factor, "scaling_len": run.train_len} for m in methods]


def evaluate_runs(runs, *, lengths: list[int], mode: str, stride: int | None, max_tokens: int,
                  data_path: str | None, device, rope_scaling: tuple[str, ...] | list[str] = ("none",),
                  rope_factor: float | None = None, why: str = "") -> tuple[pd.DataFrame, pd.DataFrame, dict[str, dict]]:
    """Every run at every length (its training length included), rotary runs once per RoPE scaling
    method: tidy ppl rows, per-position rows, and per-scheme facts (positional parameters,
    relative-position kind) for the report."""
    import pandas as pd

    from posenc_cli import ui
    from posenc_cli.data.text import read_text_file
    from posenc_cli.report import scheme_facts
    from posenc_cli.runs import announce, run_corpus

    eval_text = read_text_file(data_path, what="--data") if data_path else None
    plans = {}  # run path -> (tokens, lengths, span); bad input is found here, before any work starts
    for run in runs:
        if eval_text is not None:
            tokens = run.vocab.encode(eval_text)
        else:
            tokens = run_corpus(run).val
        run_lengths = sorted(set(lengths) | {run.train_len})
        span = scored_span(len(tokens), run_lengths, max_tokens)
        for length in run_lengths:
            plan_windows(span, length, mode, stride)  # validates mode and stride
        plans[run.path] = (tokens, run_lengths, span)
    jobs = [(run, options) for run in runs for options in scaling_variants(run, list(rope_scaling), rope_factor)]
    announce([run.path for run in runs], why, "evaluating")
    rows, position_rows, info = [], [], {}
    with ui.progress() as bar:
        task = bar.add_task("eval", total=sum(len(plans[run.path][1]) for run, _ in jobs), status="")
        for run, options in jobs:
            tokens, run_lengths, span = plans[run.path]
            model = run.model_with(**options).to(device)
            scheme = model.scheme.label
            info[scheme] = scheme_facts(model)
            for length in run_lengths:
                bar.update(task, status=f"{scheme} seed {run.seed} @ {length}")
                row = {"run": str(run.path), "scheme": scheme, "seed": run.seed, "train_len": run.train_len,
                       "eval_len": length, "mode": mode, "tokens": 0, "nll": math.nan, "ppl": math.nan, "note": ""}
                limit = model.scheme.max_len
                if limit is not None and length > limit:
                    row["note"] = f"{scheme} cannot represent positions ≥ max_len={limit}"
                else:
                    result = evaluate_length(model, tokens, span=span, length=length, mode=mode, stride=stride, device=device)
                    row.update(tokens=result.tokens, nll=result.nll, ppl=result.ppl)
                    position_rows += [
                        {"run": str(run.path), "scheme": scheme, "seed": run.seed, "eval_len": length,
                         "position": p, "nll": nll, "tokens": n} for p, nll, n in position_buckets(result)
                    ]
                rows.append(row)
                bar.advance(task)
    return pd.DataFrame(rows), pd.DataFrame(position_rows), info

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

from posenc_cli.choices import EVAL_MODES as MODES
from posenc_cli.device import autocast
from posenc_cli.errors import UsageError
from posenc_cli.model import token_nll

if TYPE_CHECKING:
    import pandas as pd  # imported where it is used: `posenc eval` only

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
    bytes: int = 0  # UTF-8 bytes of text the scored tokens cover (when the caller gave bytes per token)

    @property
    def bpb(self) -> float:
        return bits_per_byte(self.nll * self.tokens, self.bytes) if self.bytes else math.nan

    @property
    def ppl(self) -> float:
        return math.exp(self.nll)


@dataclass
class LogitsScorer:
    """What evaluation and the probe ask of a model, for one that maps token ids to logits (posenc's
    GPT): token NLLs for a batch of windows, and the logits of the last positions. Full precision,
    windows batched up to TOKENS_PER_FORWARD tokens. `hf.HFModel` answers the same three questions."""

    model: torch.nn.Module
    device: torch.device | str = "cpu"

    def batch_size(self, length: int) -> int:
        return max(1, TOKENS_PER_FORWARD // length)

    @torch.no_grad()
    def token_nll(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        self.model.eval()
        with autocast(torch.device(self.device), "fp32"):  # perplexities in full precision, like for like
            return token_nll(self.model(inputs.to(self.device)), targets.to(self.device))

    @torch.no_grad()
    def last_logits(self, inputs: torch.Tensor, n: int) -> torch.Tensor:
        self.model.eval()
        return self.model(inputs.to(self.device))[:, -n:].float()


@dataclass(frozen=True)
class Piece:
    """One input the model runs: tokens from `start`, whose targets from `first_scored` on are scored;
    its first token sits at `offset` inside the window of `length` it belongs to."""

    start: int
    first_scored: int
    offset: int


def plan_pieces(windows: list[Window], length: int, context: int) -> list[Piece]:
    """Each window run whole, or, when the model takes at most `context` tokens (a learned table's
    max_len), through sliding sub-windows of `context` tokens inside it (stride context/2): every
    target of the window is still scored once, with at most `context` tokens of context."""
    if context >= length:
        return [Piece(w.start, length - w.scored, 0) for w in windows]
    inside = plan_windows(length, context, "sliding")
    pieces = []
    for w in windows:
        for sub in inside:
            first = max(length - w.scored, sub.start + context - sub.scored)  # first target both score
            if first < sub.start + context:
                pieces.append(Piece(w.start + sub.start, first - sub.start, sub.start))
    return pieces


def evaluate_length(scorer, tokens: torch.Tensor, *, span: int, length: int, mode: str = "nonoverlap",
                    stride: int | None = None, token_bytes: torch.Tensor | None = None,
                    context: int | None = None) -> LengthResult:
    """NLL over targets [1, span] in windows of `length`; `scorer` is a LogitsScorer or an HFModel.
    `token_bytes[i]`: the UTF-8 bytes token i covers, summed over the scored targets into `bytes`.
    `context` caps the tokens the model sees at once (--learned-overflow window)."""
    windows = plan_windows(span, length, mode, stride)
    width = min(length, context or length)
    pieces = plan_pieces(windows, length, width)
    batch = scorer.batch_size(width)
    nll_sum = torch.zeros(length, dtype=torch.float64)
    counts = torch.zeros(length, dtype=torch.float64)
    index = torch.arange(width)
    for i in range(0, len(pieces), batch):
        group = pieces[i : i + batch]
        chunk = torch.stack([tokens[p.start : p.start + width + 1] for p in group])
        nll = scorer.token_nll(chunk[:, :-1], chunk[:, 1:]).double().cpu()
        scored = index[None, :] >= torch.tensor([p.first_scored for p in group])[:, None]
        where = (torch.tensor([p.offset for p in group])[:, None] + index[None, :]).flatten()
        nll_sum.index_add_(0, where, (nll * scored).flatten())
        counts.index_add_(0, where, scored.flatten().double())
    total = int(counts.sum())
    n_bytes = 0 if token_bytes is None else sum(
        int(token_bytes[w.start + 1 + length - w.scored : w.start + 1 + length].sum()) for w in windows)
    return LengthResult(total, float(nll_sum.sum() / total), nll_sum / counts.clamp(min=1), counts, n_bytes)


def bits_per_byte(nll_sum_nats: float, n_bytes: int) -> float:
    """Bits per UTF-8 byte: total NLL in nats / ln 2 / bytes scored. Unlike perplexity per token it
    compares models whose tokenizers differ."""
    return nll_sum_nats / math.log(2) / n_bytes


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


OVERFLOWS = ("dash", "window")


def parse_overflow(text: str) -> list[str]:
    """'dash,window' -> ['dash', 'window']: how a run with a position table is shown past its table."""
    choices = list(dict.fromkeys(p.strip() for p in str(text).split(",")))
    for choice in choices:
        if choice not in OVERFLOWS:
            raise UsageError(f"--learned-overflow {choice} is not known; choose from: {', '.join(OVERFLOWS)}")
    return choices


def overflow_variants(run, overflows: list[str]) -> list[tuple[str, int | None]]:
    """(label suffix, context cap) pairs: a run with a position table once per choice, `+window` for the
    one scored past its table through windows of max_len tokens; any other run once, as it is."""
    limit = run.max_len
    if limit is None:
        return [("", None)]
    return [("+window", limit) if choice == "window" else ("", None) for choice in overflows]


def evaluate_runs(runs, *, lengths: list[int], mode: str, stride: int | None, max_tokens: int,
                  data_path: str | None, device, rope_scaling: tuple[str, ...] | list[str] = ("none",),
                  rope_factor: float | None = None, why: str = "",
                  learned_overflow: tuple[str, ...] | list[str] = ("dash",)) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, dict]]:
    """Every run at every length (its training length included), rotary runs once per RoPE scaling
    method, runs with a position table once per --learned-overflow choice: tidy ppl rows, per-position rows, and per-scheme facts (positional parameters,
    relative-position kind, used by) for the report. A run is a posenc run (`runs.LoadedRun`) or a
    Hugging Face model (`hf.HFModel`): both tokenize, score windows and name their variants."""
    import pandas as pd

    from posenc_cli import ui
    from posenc_cli.data.text import read_text_file
    from posenc_cli.runs import announce

    eval_text = read_text_file(data_path, what="--data") if data_path else None
    corpora: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    plans = {}  # run -> (tokens, bytes per token, lengths, span, variants): bad input is found before any work
    for run in runs:
        tokens, token_bytes = run.eval_tokens(eval_text, corpora)
        run_lengths = sorted(set(lengths) | {run.train_len})
        span = scored_span(len(tokens), run_lengths, max_tokens)
        for length in run_lengths:
            plan_windows(span, length, mode, stride)  # validates mode and stride
        variants = run.variants(list(rope_scaling), rope_factor)  # validates the methods for this run
        run.check_fits([L for L in run_lengths if run.max_len is None or L <= run.max_len])
        plans[id(run)] = (tokens, token_bytes, run_lengths, span, variants)
    announce([run.path for run in runs], why, "evaluating")
    rows, position_rows, info = [], [], {}
    jobs = [(run, variant, suffix, context) for run in runs for variant in plans[id(run)][4]
            for suffix, context in overflow_variants(run, learned_overflow)]
    with ui.progress() as bar:
        task = bar.add_task("eval", total=sum(len(plans[id(job[0])][2]) for job in jobs), status="")
        for run, variant, suffix, context in jobs:
            tokens, token_bytes, run_lengths, span, _ = plans[id(run)]
            scheme = run.use_variant(variant) + suffix  # evaluation time only: the checkpoint is untouched
            scorer = run.scorer(device)
            info[scheme] = run.facts()
            for length in run_lengths:
                bar.update(task, status=f"{scheme} seed {run.seed} @ {length}")
                row = {"run": str(run.path), "scheme": scheme, "seed": run.seed, "train_len": run.train_len,
                       "eval_len": length, "mode": mode, "tokens": 0, "nll": math.nan, "ppl": math.nan,
                       "bytes": 0, "bpb": math.nan, "tokenizer": run.tokenizer_name, "note": ""}
                limit = run.max_len
                if limit is not None and length > limit and context is None:
                    row["note"] = f"{scheme} cannot represent positions ≥ max_len={limit}"
                else:
                    result = evaluate_length(scorer, tokens, span=span, length=length, mode=mode, stride=stride,
                                             token_bytes=token_bytes, context=context)
                    if context is not None and length > context:
                        row["note"] = (f"{scheme} past max_len={context}: sliding windows of {context} tokens "
                                       f"(stride {context // 2}), so a token sees at most {context} tokens.")
                    row.update(tokens=result.tokens, nll=result.nll, ppl=result.ppl,
                               bytes=result.bytes, bpb=result.bpb)
                    position_rows += [
                        {"run": str(run.path), "scheme": scheme, "seed": run.seed, "eval_len": length,
                         "position": p, "nll": nll, "tokens": n} for p, nll, n in position_buckets(result)
                    ]
                rows.append(row)
                bar.advance(task)
    return pd.DataFrame(rows), pd.DataFrame(position_rows), info

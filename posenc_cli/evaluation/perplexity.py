"""Perplexity past the training length, as in Press et al. 2022 ("Train Short, Test Long").

nonoverlap: the span is cut into consecutive windows of L tokens and every token is scored, so a
token's context is its position inside its window; where L does not divide the span, one tail window
(the span's last L tokens) scores the targets the others left. sliding: windows of L advance by a
stride S and only their last S tokens are scored (all of the first window's), so every scored token
after the first window sees at least L - S tokens of context. Either way every length scores exactly
the same targets, the whole span, so perplexities at different lengths are over the same tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from posenc_cli.core.choices import EVAL_MODES as MODES
from posenc_cli.core.choices import LEARNED_OVERFLOWS as OVERFLOWS
from posenc_cli.core.device import autocast
from posenc_cli.core.errors import UsageError, require_positive_int
from posenc_cli.data import token_window
from posenc_cli.model import token_nll

TOKENS_PER_FORWARD = 16384  # windows are batched up to this many tokens per forward pass


@dataclass(frozen=True)
class Window:
    start: int  # first input token of the window
    scored: int  # how many of the window's last targets count


def plan_windows(
    span: int, length: int, mode: str = "nonoverlap", *, stride: int | None = None
) -> list[Window]:
    """Windows over targets [0, span): each target is scored exactly once, at every length."""
    if mode == "nonoverlap":
        windows = [Window(start, length) for start in range(0, span - length + 1, length)]
        left = span % length
        return windows + [Window(span - length, left)] if left else windows
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


def require_tokens_for(longest: int, max_tokens: int) -> None:
    """--max-tokens is a bound, never raised: a window of the longest length needs that many targets."""
    if max_tokens < longest:
        raise UsageError(
            f"--max-tokens {max_tokens} is fewer than the longest length {longest}, whose one window scores "
            f"{longest} tokens; give --max-tokens >= {longest} or shorter --lengths"
        )


def require_text_for(longest: int, n_tokens: int) -> None:
    """One window of the longest length needs that many targets of the text (checked before
    --max-tokens: a length no text can give is the message, not a --max-tokens to raise)."""
    available = n_tokens - 1  # the last token is only ever a target
    if longest > available:
        raise UsageError(
            f"length {longest} is longer than the evaluation text allows: it has {n_tokens} tokens, "
            f"so lengths up to {available} fit"
        )


def scored_span(n_tokens: int, lengths: list[int], max_tokens: int) -> int:
    """The number of targets scored at every length: a multiple of the longest length, at most
    --max-tokens (shorter lengths that do not divide it end with a tail window, see plan_windows)."""
    longest = max(lengths)
    require_text_for(longest, n_tokens)
    require_tokens_for(longest, max_tokens)
    return (min(max_tokens, n_tokens - 1) // longest) * longest


@dataclass(frozen=True)
class TargetLengths:
    """The lengths one target is evaluated at, and the one its longer lengths are read against."""

    lengths: list[int]
    reference: int  # its training length, or the longest length asked when all are inside its context
    added: int | None  # a length nobody asked for (its training length), announced before any work


def target_lengths(train_len: int, asked: list[int], *, add_context: bool) -> TargetLengths:
    """The lengths asked, plus the target's training length when it is shorter than the longest asked
    (cheap, and the reference of stability) or when --add-context asks for it. A context longer than
    every length asked is not added: the longest length asked is the reference instead."""
    add = train_len not in asked and (add_context or train_len < max(asked))
    lengths = sorted({*asked, train_len}) if add else sorted(asked)
    reference = max(L for L in lengths if L <= train_len)  # the context itself, or all asked are inside it
    return TargetLengths(lengths, reference, train_len if add else None)


def bits_per_byte(total_nll_nats: float, n_bytes: float) -> float:
    """Bits per UTF-8 byte of text: total NLL in nats / ln 2 / bytes scored. Unlike token perplexity it
    compares models whatever their tokenizer; NaN when the bytes are unknown (ids without a tokenizer)."""
    return total_nll_nats / math.log(2) / n_bytes if n_bytes and math.isfinite(n_bytes) else math.nan


@dataclass
class LengthResult:
    tokens: int
    nll: float
    position_nll: torch.Tensor  # (length,) mean NLL at each position inside the window
    position_count: torch.Tensor  # (length,) how many scored tokens each mean is over
    bytes: float = math.nan  # UTF-8 bytes and characters the scored tokens stand for
    chars: float = math.nan

    @property
    def ppl(self) -> float:
        return math.exp(self.nll)

    @property
    def bpb(self) -> float:
        return bits_per_byte(self.nll * self.tokens, self.bytes)


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
        with autocast(torch.device(self.device), "fp32"):
            return self.model(inputs.to(self.device))[:, -n:].float()


def evaluate_length(
    scorer,
    tokens,
    *,
    span: int,
    length: int,
    mode: str = "nonoverlap",
    stride: int | None = None,
    context: int | None = None,
    weights=None,
) -> LengthResult:
    """Mean NLL over the span's windows of `length`; `scorer` is a LogitsScorer or an HFModel; `context`
    caps the tokens the model sees at once; weights(start, n), a (2, n) tensor of the UTF-8 bytes and
    characters of tokens start..start+n-1, adds what the scored targets stand for."""
    width = min(length, context or length)
    pieces = plan_pieces(plan_windows(span, length, mode, stride=stride), length, width)
    covered = torch.zeros(2, dtype=torch.float64)
    batch = scorer.batch_size(width)
    nll_sum = torch.zeros(length, dtype=torch.float64)
    counts = torch.zeros(length, dtype=torch.float64)
    for i in range(0, len(pieces), batch):
        group = pieces[i : i + batch]
        chunk = torch.stack([token_window(tokens, p.start, width + 1) for p in group])
        nll = scorer.token_nll(chunk[:, :-1], chunk[:, 1:]).double().cpu()
        index = torch.arange(width)
        scored = index[None, :] >= torch.tensor([p.first_scored for p in group])[:, None]
        where = (torch.tensor([p.offset for p in group])[:, None] + index[None, :]).flatten()
        nll_sum.index_add_(0, where, (nll * scored).flatten())
        counts.index_add_(0, where, scored.flatten().double())
        if weights is not None:
            covered += torch.stack([weights(p.start + 1, width) for p in group], dim=1)[:, scored].sum(1)
    total = int(counts.sum())
    bytes_, chars = (float(c) for c in covered) if weights is not None else (math.nan, math.nan)
    return LengthResult(
        total, float(nll_sum.sum() / total), nll_sum / counts.clamp(min=1), counts, bytes_, chars
    )


def unigram_perplexity(tokens) -> float:
    """exp of the entropy of the tokens' own frequencies: what a model that ignores context scores, in
    the same units (per token of the same tokenizer) as the model it is compared with."""
    counts = np.bincount(np.asarray(tokens, dtype=np.int64))
    p = counts[counts > 0] / counts.sum()
    return float(np.exp(-(p * np.log(p)).sum()))


def check_windows(mode: str, stride: int | None, max_tokens: int) -> None:
    """--mode, --stride and --max-tokens, checked together before any model is loaded."""
    if stride is not None:
        if mode != "sliding":
            raise UsageError(
                f"--stride {stride} is only used with --mode sliding; drop it or add --mode sliding"
            )
        require_positive_int("--stride", stride)
    require_positive_int("--max-tokens", max_tokens)


def parse_lengths(text: str) -> list[int]:
    """'512,1024,2048' -> [512, 1024, 2048]; anything else is one clear error."""
    parts = [p.strip() for p in str(text).split(",")]
    lengths = []
    for part in parts:
        if not (part.isascii() and part.isdigit()) or int(part) <= 0:  # '²' isdigit(), int() refuses it
            raise UsageError(
                f"--lengths {text!r}: {part!r} is not a positive integer; give a comma list such as 512,1024,2048"
            )
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


def parse_overflow(text: str) -> list[str]:
    """'dash,window' -> ['dash', 'window']: how a run with a position table is shown past its table."""
    choices = list(dict.fromkeys(p.strip() for p in str(text).split(",")))
    for choice in choices:
        if choice not in OVERFLOWS:
            raise UsageError(f"--learned-overflow {choice} is not known; choose from: {', '.join(OVERFLOWS)}")
    return choices

"""Each scheme's cost beside rope's at the default config: `posenc train`'s own step (session.train_step,
on the model and optimizer the loop builds) and an evaluation forward (evaluate_length, one window of
EVAL_MULTIPLE × the training length), each timed and its peak tensor memory measured. Every scheme is
alternated call by call with rope at the same depth, so a busy moment falls on both and the ratios hold;
a scheme that needs more layers than the default model (a preset whose pattern repeats every k layers)
is measured, and its rope with it, at the least depth it builds at. Beside rope: its sinks and window
rows, and the training-free extensions' evaluation against the same model evaluated plain
(cost_cases.py, which holds each row's budget too)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from itertools import accumulate

import pandas as pd
import torch
from torch.profiler import ProfilerActivity, profile

from posenc_cli.bench.cost_cases import EVAL_BUDGET, STEP_BUDGET, CostCase, budget_note, cost_cases
from posenc_cli.bench.train_speed import at_depth, compose
from posenc_cli.config.schema import PosencConfig, check_keys
from posenc_cli.core import ui
from posenc_cli.data import load_corpus
from posenc_cli.evaluation.perplexity import LogitsScorer, evaluate_length
from posenc_cli.model import GPT
from posenc_cli.model.extension.method import ExtensionSettings, parse_method
from posenc_cli.model.positional import past_max_len
from posenc_cli.report.cells import markdown_table
from posenc_cli.training.precision_timing import throwaway_step
from posenc_cli.training.session import train_step

EVAL_MULTIPLE = 8  # the evaluation forward's length, in multiples of the training length
REFERENCE = "rope"
CPU = torch.device("cpu")
MIB = 2**20


@dataclass
class Contender:
    """One configuration as the cost table runs it: its training step on a throwaway model, optimizer
    and random batch (fp32, as the step profile), and its evaluation of one long window."""

    cfg: PosencConfig
    model: GPT
    optimizer: torch.optim.Optimizer
    batch: tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]
    tokens: torch.Tensor  # eval_length + 1 random tokens

    @classmethod
    def build(cls, cfg: PosencConfig, vocab_size: int) -> Contender:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.seed)
            model, optimizer, batch = throwaway_step(cfg, CPU, vocab_size)
        length = EVAL_MULTIPLE * cfg.train.block_size
        tokens = torch.randint(vocab_size, (length + 1,), generator=torch.Generator().manual_seed(0))
        return cls(cfg, model, optimizer, batch, tokens)

    @property
    def eval_length(self) -> int:
        return len(self.tokens) - 1

    @property
    def unread(self) -> str | None:
        """Why the model cannot read the evaluation's length (learned past its table), or None."""
        return past_max_len(self.model.scheme.max_len, self.eval_length)

    def step(self) -> None:
        grad_clip = self.cfg.train.grad_clip
        train_step(self.model, self.optimizer, self.batch, device=CPU, precision="fp32", grad_clip=grad_clip)

    def measured_step(self) -> None:
        """A step that allocates its gradients anew, so their memory is the step's, as at its first."""
        self.optimizer.zero_grad(set_to_none=True)
        self.step()

    def forward(self) -> None:
        evaluate_length(LogitsScorer(self.model), self.tokens, span=self.eval_length, length=self.eval_length)

    def extended(self, method: str) -> Contender:
        """This contender's model, its weights shared, with `method` (--rope-scaling) at its paper's
        defaults for the training length, as `posenc eval` extends it (GPT.with_extension)."""
        extension = parse_method(method, ExtensionSettings()).extension(self.cfg.train.block_size)
        return replace(self, model=self.model.with_extension(extension))


def seconds(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def alternated(ours: Callable[[], object], theirs: Callable[[], object], *, pairs: int, warm_up: int):
    """Median ms of each call and the median over pairs of ours' time over theirs', the order flipped
    pair by pair after `warm_up` calls of each."""
    for _ in range(warm_up):
        ours()
        theirs()
    times = []
    for pair in range(pairs):
        if pair % 2:
            theirs_s, ours_s = seconds(theirs), seconds(ours)
        else:
            ours_s, theirs_s = seconds(ours), seconds(theirs)
        times.append((ours_s, theirs_s))
    return (
        1000 * statistics.median(t for t, _ in times),
        1000 * statistics.median(t for _, t in times),
        statistics.median(a / b for a, b in times),
    )


def peak_tensor_mib(call: Callable[[], object]) -> float:
    """The most tensor memory alive at once during `call`, beyond what was alive before it: the running
    sum of torch.profiler's allocation records in time order (its kineto results hold every record; the
    events it sums by op do not). Exact and the same on every try, where a process's peak RSS is not."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        call()
    records = sorted(
        (event.start_ns(), event.nbytes())
        for event in prof.profiler.kineto_results.events()
        if event.name() == "[memory]"
    )
    return max(0, max(accumulate(nbytes for _, nbytes in records), default=0)) / MIB


def measure(ours: Contender, theirs: Contender, effort, *, step: bool = True) -> dict[str, float]:
    """Training step (unless not `step`), then evaluation (where the scheme reads that far): ours and
    theirs alternated."""
    found: dict[str, float] = {}
    if step:
        timed = alternated(ours.step, theirs.step, pairs=effort.cost_pairs, warm_up=2)
        found["ms_per_step"], found["rope_ms_per_step"], found["step_vs_rope"] = timed
        found |= peaks("train", peak_tensor_mib(ours.measured_step), peak_tensor_mib(theirs.measured_step))
    if ours.unread is None:
        forward = alternated(ours.forward, theirs.forward, pairs=effort.cost_pairs, warm_up=1)
        found["eval_ms"], found["rope_eval_ms"], found["eval_vs_rope"] = forward
        found |= peaks("eval", peak_tensor_mib(ours.forward), peak_tensor_mib(theirs.forward))
    return found


MEASURED = (
    *("ms_per_step", "rope_ms_per_step", "step_vs_rope", "eval_ms", "rope_eval_ms", "eval_vs_rope"),
    *(f"{who}{phase}_peak_mib" for phase in ("train", "eval") for who in ("", "rope_")),
    *("train_peak_vs_rope", "eval_peak_vs_rope"),
)  # a row's measured columns


def peaks(phase: str, ours: float, theirs: float) -> dict[str, float]:
    return {
        f"{phase}_peak_mib": ours,
        f"rope_{phase}_peak_mib": theirs,
        f"{phase}_peak_vs_rope": ours / theirs,
    }


def bench_costs(schemes: list[str], effort) -> list[dict]:
    """One row per scheme (and beside rope, its sinks, window and extension rows): its costs and rope's at
    the same depth, measured alternated."""
    configured = check_keys(compose([f"scheme={REFERENCE}", *effort.overrides]))
    vocab_size = len(load_corpus(configured.data).tokenizer)
    cases = cost_cases(schemes, configured.train.block_size)
    return [
        cost_row(case, effort, vocab_size=vocab_size, default_depth=configured.model.n_layer)
        for case in cases
    ]


def cost_row(case: CostCase, effort, *, vocab_size: int, default_depth: int) -> dict:
    """One case measured against rope at its depth; an extension's against rope's own model, plain."""
    cfg = check_keys(compose(at_depth([*case.overrides, *effort.overrides])))
    depth = f"model.n_layer={cfg.model.n_layer}"
    reference = check_keys(compose([f"scheme={REFERENCE}", *effort.overrides, depth]))
    ui.err.print(f"cost against {REFERENCE}: {case.scheme} {case.variant} ({depth})".replace("  ", " "))
    theirs = Contender.build(reference, vocab_size)
    ours = theirs.extended(case.method) if case.method else Contender.build(cfg, vocab_size)
    row = {
        "section": "cost",
        "config": "default",
        "scheme": case.scheme,
        "variant": case.variant,
        "n_layer": cfg.model.n_layer,
        "deeper": cfg.model.n_layer != default_depth,
        "length": cfg.train.block_size,
        "batch": cfg.train.batch_size,
        "eval_length": ours.eval_length,
        "steps": effort.cost_pairs,
    }
    found = measure(ours, theirs, effort, step=case.method is None)
    notes = [f"eval: {ours.unread}" if ours.unread else "", budget_note(case, found)]
    return row | found | {"note": "; ".join(n for n in notes if n)}


def ratio(value: float) -> str:
    return "—" if pd.isna(value) else f"{value:.2f}×"


def amount(value: float, fmt: str) -> str:
    return "—" if pd.isna(value) else format(value, fmt)


def costs_section(df: pd.DataFrame) -> list[str]:
    found = df[df["section"] == "cost"]
    if not len(found):
        return []
    # none read past 8×; a row without a variant (a scheme as registered) reads one back from the csv as NaN
    found = found.reindex(columns=list(dict.fromkeys([*found.columns, *MEASURED, "variant"])))
    first = found.iloc[0]
    columns = [
        "scheme",
        "step ms",
        "vs rope",
        "train peak MiB",
        "vs rope",
        f"eval @ {int(first.eval_length)} ms",
    ]
    columns += ["vs rope", "eval peak MiB", "vs rope", "note"]
    rows = [
        [
            row_name(r),
            amount(r.ms_per_step, ".1f"),
            ratio(r.step_vs_rope),
            amount(r.train_peak_mib, ".1f"),
            ratio(r.train_peak_vs_rope),
            amount(r.eval_ms, ".1f"),
            ratio(r.eval_vs_rope),
            amount(r.eval_peak_mib, ".1f"),
            ratio(r.eval_peak_vs_rope),
            "" if pd.isna(r.note) else r.note,
        ]
        for r in found.itertuples()
    ]
    return [
        "## Each scheme against rope: time and peak memory",
        "",
        f"The default config (T {int(first.length)}, batch {int(first.batch)}, fp32): `posenc train`'s own "
        f"step (session.train_step) and an evaluation forward of one window of {EVAL_MULTIPLE}× the training "
        f"length (evaluate_length), untrained weights, random tokens. Each scheme alternated call by call with "
        f"rope's model at the same depth, {int(first.steps)} pairs after a warm-up: ms the median call, vs rope "
        "the median pair's ratio. A scheme that needs more layers than the default model is measured, with "
        "its rope, at the depth it builds at (its n_layer named). Peak MiB: the most tensor memory alive at "
        "once during one call beyond what was alive before it (a step's activations, gradients and attention; "
        "torch.profiler's allocation records), exact where a process's peak RSS is not. rope's own row is rope "
        "against a second rope model: the ratios' noise. With rope asked for, rows with its options follow "
        "it: attention sinks (`scheme.sinks=true`) on full attention and on a window of a quarter of the "
        "training length, beside the window alone; and the training-free extensions (`--rope-scaling`, each "
        "at its defaults for the training length) evaluated only, against the same model evaluated plain, "
        "as `posenc eval` extends it. The budget: a step within "
        f"{STEP_BUDGET:g}× rope's, an evaluation within {EVAL_BUDGET:g}× rope's plain attention's; a row past "
        "it says by how much and why in its note.",
        "",
        markdown_table(columns, rows),
        "",
    ]


def row_name(r) -> str:
    """The scheme, its options or extension (`rope scheme.sinks=true`), and a depth other than the
    default's (`irope (n_layer=4)`)."""
    name = r.scheme if pd.isna(r.variant) or not r.variant else f"{r.scheme} {r.variant}"
    return f"{name} (n_layer={int(r.n_layer)})" if r.deeper else name

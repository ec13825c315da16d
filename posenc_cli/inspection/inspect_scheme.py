"""`posenc inspect`: pick a fresh or trained scheme, run its checks, draw its figures, print the report."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import torch

from posenc_cli.core import ui
from posenc_cli.core.errors import UsageError
from posenc_cli.core.paths import OUTPUTS
from posenc_cli.inspection.checks import SEED, Check, bias_by_distance, rotary_demo, run_checks
from posenc_cli.inspection.figures import attends, figure_attention, write_figures
from posenc_cli.model.positional import SCHEMES, PositionalScheme, build_scheme, scheme_options
from posenc_cli.model.positional.alibi import SLOPE_RULES
from posenc_cli.model.positional.rope import RoPE
from posenc_cli.rundir.claim import warn_if_training
from posenc_cli.rundir.loading import load_run


@dataclass
class Inspection:
    scheme: PositionalScheme
    label: str
    length: int
    checks: list[Check]
    figures: list[Path] = field(default_factory=list)


def validated_length(length: int) -> int:
    """The --length the user gave, refused below 4 (too few positions to measure a claim on)."""
    if length < 4:
        raise UsageError(f"--length must be at least 4, got {length}")
    return length


def fresh_scheme(
    name: str, dim: int, heads: int, *, length: int, options: dict[str, str | float]
) -> PositionalScheme:
    if dim < 1 or heads < 1 or dim % heads:
        raise UsageError(
            f"--dim {dim} and --heads {heads}: both must be positive and dim a multiple of heads"
        )
    known = scheme_options(name) if name in SCHEMES else list(options)  # build_scheme names the rest
    unknown = {key: value for key, value in options.items() if key not in known}
    if unknown:
        given = " ".join(f"--{key.replace('_', '-')} {value}" for key, value in unknown.items())
        raise UsageError(
            f"{given}: scheme {name} has no such option; --layout is for rope, xpos and p_rope, "
            "--rotary-fraction for rope, --keep-fraction for p_rope, --slopes for alibi"
        )
    torch.manual_seed(SEED)  # a learned table's initial vectors, so the report repeats exactly
    return build_scheme(name, dim, heads, block_size=validated_length(length), **options)


def schedule_layer(schedule: PositionalScheme, layer: int, label: str) -> tuple[PositionalScheme, str]:
    """A fresh layer schedule's `layer`-th scheme, at the least depth that holds its whole pattern."""
    layers = schedule.for_layers(schedule.least_depth)
    if not 0 <= layer < len(layers):
        raise UsageError(f"--layer {layer}: {label} has layers 0..{len(layers) - 1} at its least depth")
    chosen = layers[layer]
    return chosen, f"{label}, layer {layer} of {len(layers)}: {chosen.label}"


def inspect_scheme(
    *,
    name: str | None = None,
    dim: int | None = None,
    length: int | None = None,
    heads: int | None = None,
    out: Path | None = None,
    run_dir: Path | None = None,
    layer: int = 0,
    head: int = 0,
    options: dict[str, str | float] | None = None,
) -> Inspection:
    """Checks and figures for a fresh scheme (built with `options`, e.g. layout=interleaved), or for
    the trained scheme of `run_dir`."""
    options = options or {}
    if run_dir is None:
        if name is None:
            raise UsageError("name a scheme (posenc inspect SCHEME) or a run (--run RUN_DIR)")
        length = length or 128
        scheme = fresh_scheme(name, dim or 128, heads or 4, length=length, options=options)
        label = name + "".join(f" ({key}={value})" for key, value in options.items())
        if scheme.kind == "schedule":  # its layers hold the hooks: --layer's is inspected
            scheme, label = schedule_layer(scheme, layer, label)
    elif options:
        raise UsageError(
            f"--{next(iter(options)).replace('_', '-')} applies to a fresh scheme; --run's scheme keeps its "
            "trained options"
        )
    else:
        run = load_run(run_dir)
        if name is not None and name != run.scheme:
            raise UsageError(
                f"--run {run_dir} was trained with scheme {run.scheme}, not {name}; drop SCHEME or match it"
            )
        cfg = run.model.cfg.size
        for option, given, actual in (("--dim", dim, cfg.n_embd), ("--heads", heads, cfg.n_head)):
            if given is not None and given != actual:
                raise UsageError(
                    f"{option} {given} does not match --run's model ({option[2:]} = {actual}); drop {option}"
                )
        if not 0 <= layer < cfg.n_layer or not 0 <= head < cfg.n_head:
            raise UsageError(
                f"--layer {layer} --head {head}: the run has layers 0..{cfg.n_layer - 1} and heads 0..{cfg.n_head - 1}"
            )
        length = validated_length(length or run.train_len)
        warn_if_training(run.path, f"inspecting its checkpoint of step {run.checkpoint.step}")
        scheme, label = run.model.layer_schemes[layer], f"{run.scheme} (trained, step {run.checkpoint.step})"
        if len({id(s) for s in run.model.layer_schemes}) > 1:  # one per layer (FIRE per_layer): --layer's
            label += f", layer {layer}"
        label += attends(run.model, layer)  # the window and temperature the drawn attention has
    out = out or OUTPUTS / "inspect" / (run.path.name if run_dir else name)
    length = min(length, scheme.max_len or length)  # a learned table has no rows past max_len
    result = Inspection(scheme, label, length, run_checks(scheme, length))
    result.figures = write_figures(scheme, length, out=out, label=label)
    if run_dir is not None:
        result.figures.append(figure_attention(run, layer, head, length=length, out=out))
    return result


def print_report(result: Inspection) -> None:
    from rich import box
    from rich.table import Table

    s = result.scheme
    params = f"{s.positional_params:,}" + (
        f" = {s.param_formula}" if s.param_formula != str(s.positional_params) else ""
    )
    ui.out.print(
        f"[bold]{result.label}[/]: kind {s.kind}, relative position {s.relative}, "
        f"positional parameters {params} (d={s.n_embd}, heads={s.n_head}, length={result.length})",
        highlight=False,
    )
    if isinstance(s, RoPE) and s.unrotated:
        ui.out.print(f"Partial rotation: {s.unrotated}", markup=False, highlight=False)
    table = Table(title="The chapters' claims, measured", box=box.SIMPLE_HEAD)
    for column in ("", "claim", "measured", "needs"):
        table.add_column(column, overflow="fold")
    for check in result.checks:
        table.add_row(
            "[green]PASS[/]" if check.passed else "[red]FAIL[/]", check.claim, check.measured, check.needs
        )
    ui.out.print(table)
    for check in result.checks:
        if check.note:
            ui.out.print(f"  {check.claim.split(':')[0]}: {check.note}", markup=False, highlight=False)
    if s.kind == "rotary":
        print_rotary_demo(s)
    if s.adds_bias:
        print_bias_by_distance(s, result.length)
    if any(c.claim.startswith("linear bias") for c in result.checks):
        print_slope_rules(s.n_head)
    failed = sum(not c.passed for c in result.checks)
    ui.out.print(
        f"{len(result.checks)} checks: {len(result.checks) - failed} PASS, {failed} FAIL", highlight=False
    )
    for path in result.figures:
        ui.err.print(f"wrote {path}", highlight=False)
    if not result.figures:
        ui.err.print(
            f"no figures: {s.name} adds no positions to draw (--run RUN_DIR draws a trained model's attention)"
        )


def print_bias_by_distance(scheme: PositionalScheme, length: int) -> None:
    from rich import box
    from rich.table import Table

    curve = bias_by_distance(scheme, length)
    distances = sorted(
        {0, 1, 2, length - 1} | {4**i for i in range(1, int(math.log(length, 4)) + 1) if 4**i < length}
    )
    table = Table(title="Bias as a function of distance i − j", box=box.SIMPLE_HEAD)
    for column in ["head"] + [str(d) for d in distances]:
        table.add_column(column, justify="right")
    for h in range(min(scheme.n_head, 8)):
        table.add_row(str(h), *(f"{float(curve[h, d]) + 0.0:.3g}" for d in distances))
    ui.out.print(table)


def print_rotary_demo(scheme: PositionalScheme) -> None:

    numbers = ", ".join(f"{name} = {value:.4f}" for name, value in rotary_demo(scheme).items())
    ui.out.print(
        f"The chapter's demo, one vector x (seed {SEED}, d = {scheme.head_dim}): {numbers}",
        markup=False,
        highlight=False,
    )


def print_slope_rules(n_head: int, size: int = 5) -> None:
    """Both ALiBi slope rules side by side, and the bias matrix each gives the first and last head."""
    from rich import box
    from rich.table import Table

    rules = {rule: rule_slopes(n_head) for rule, (rule_slopes, _) in SLOPE_RULES.items()}
    table = Table(title=f"ALiBi slopes, H = {n_head} (scheme.slopes)", box=box.SIMPLE_HEAD)
    table.add_column("head h", justify="right")
    for rule, (_, formula) in SLOPE_RULES.items():
        table.add_column(f"{rule} {formula}", justify="right")
    for h in range(n_head):
        table.add_row(str(h + 1), *(f"{rules[rule][h]:.6g}" for rule in rules))
    ui.out.print(table)
    distance = (torch.arange(size)[:, None] - torch.arange(size)[None, :]).clamp(min=0)  # i − j, keys j ≤ i
    for rule, slopes in rules.items():
        for h in sorted({0, n_head - 1}):
            rows = (-slopes[h] * distance).masked_fill(distance.T > 0, math.nan).tolist()
            text = "\n".join(
                "  " + " ".join("        ·" if math.isnan(v) else f"{v + 0.0:9.4g}" for v in row)
                for row in rows
            )
            ui.out.print(
                f"{rule} bias, head {h + 1} (slope {slopes[h]:.6g}), query i down, key j across:\n{text}",
                markup=False,
                highlight=False,
            )

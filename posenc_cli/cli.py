"""The `posenc` command line. Each command is a thin door into one module; errors a user can fix
become one line on stderr and exit code 2."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer
from rich.markup import escape
from rich.table import Table
from typer.core import TyperCommand

from posenc_cli import ui
from posenc_cli.errors import UsageError, require_int, require_number, require_positive_int

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
    help="Train small GPTs with different positional encodings and measure how far past their training "
    "length each one holds up.\n\nQuick start: [bold]posenc train -m scheme=none,sinusoidal,learned,rope,alibi[/bold] "
    "then [bold]posenc eval --lengths 512,1024,2048[/bold].",
)

TRAIN_HELP = """Train one model (or a sweep with -m) with Hydra overrides.

Config groups (pick with group=option):\n
  scheme: {schemes}   (default rope)\n
  model:  tiny | small | medium                        (default tiny)\n
  data:   synthetic | text                             (default synthetic; text needs data.path=FILE)\n
  experiment: smoke | probe | extend                   (presets that set several groups)\n
Common keys: model.n_layer model.n_head model.n_embd data.path train.max_steps train.batch_size
train.block_size (the training length, default 256) train.lr train.eval_interval seed device (auto|cpu|cuda|mps).\n
Examples:\n
  posenc train scheme=rope\n
  posenc train scheme=alibi model.n_layer=2 train.max_steps=50\n
  posenc train -m scheme=none,sinusoidal,learned,rope,alibi seed=0,1,2\n
  posenc train data=text data.path=input.txt train.block_size=128\n
  posenc train --cfg job      (print the composed config and exit)\n
  posenc train train.resume=outputs/runs/RUN   (continue an interrupted run; true: the newest run)\n
  posenc train experiment=extend train.init_from=RUN scheme.scaling=yarn scheme.scaling_factor=4
      (a new run from RUN's weights at 1,024; scheme.scaling: none|linear|ntk|dynamic|yarn)\n
  posenc train scheme=learned train.positions=randomized train.max_position=2048
      (randomized positions: sorted random positions from [0, 2048) per sequence; eval uses 0..L-1)\n
  posenc train -m seed=0,1,2 hydra/launcher=joblib hydra.launcher.n_jobs=2   (parallel jobs; pip install 'posenc\\[cluster]')\n
  torchrun --standalone --nproc_per_node=2 -m posenc_cli train   (DDP; train.batch_size is the global batch)\n
Each run writes outputs/runs/<time>_<scheme>_seed<N>/ (sweeps: outputs/sweeps/<time>/<n>_<scheme>_seed<N>/)
with .hydra/, metrics.csv, checkpoint.pt, summary.json and train.log. Hydra flags (-m, --cfg, --info,
hydra/launcher=..., hydra.run.dir=...) pass through unchanged."""


class TrainCommand(TyperCommand):
    """`posenc train`'s help lists the schemes from their classes, imported (with torch) only when the
    help is shown; the command list of `posenc --help` shows its short help."""

    @property
    def help(self) -> str:
        from posenc_cli.model.positional import SCHEMES

        return TRAIN_HELP.format(schemes=" | ".join(SCHEMES))

    @help.setter
    def help(self, _: str | None) -> None:
        pass


def fail(err: Exception) -> None:
    ui.err.print(f"[bold red]posenc: error:[/] {escape(str(err))}", soft_wrap=True, highlight=False)
    raise SystemExit(2)


@app.command(
    cls=TrainCommand,
    short_help=TRAIN_HELP.split("\n", 1)[0],
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def train(ctx: typer.Context) -> None:
    from posenc_cli import distributed
    from posenc_cli.config import preflight
    from posenc_cli.ownership import claim, resume_args

    args = resume_args(list(ctx.args))
    preflight(args)
    if not distributed.under_torchrun():  # under torchrun rank 0 claims, in process_group
        args = claim(args)
    with distributed.process_group(args) as args:
        sys.argv = ["posenc train", *args]
        run_hydra_train()


def run_hydra_train() -> None:
    import hydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import DictConfig, OmegaConf

    from posenc_cli.config import config_dir, validate
    from posenc_cli.distributed import threads_per_job
    from posenc_cli.ownership import resumed_config

    def job(cfg: DictConfig) -> float | None:
        from posenc_cli.train import train as train_run

        hydra_cfg = HydraConfig.get()
        config = OmegaConf.to_container(cfg, resolve=True)
        if config["train"]["resume"]:
            config = resumed_config(config, list(hydra_cfg.overrides.task))
        config["train"]["threads"] = config["train"]["threads"] or threads_per_job(hydra_cfg.launcher)
        try:
            validate(config)  # a large sweep's pre-flight checked every value, not every combination
            summary = train_run(config, hydra_cfg.runtime.output_dir)
        except UsageError as err:
            fail(err)
        if summary["status"] == "failed" and hydra_cfg.mode == RunMode.RUN:
            raise SystemExit(1)  # in a sweep the other jobs go on; eval skips this one
        return summary["final_val_loss"]

    hydra.main(config_path=str(config_dir()), config_name="config", version_base="1.3")(job)()


@app.command("eval")
def eval_command(
    runs: List[str] = typer.Argument(None, help="Run directories, sweep directories or globs (default: the latest runs)."),
    lengths: str = typer.Option("512,1024,2048", "--lengths", "-l", help="Comma list of evaluation lengths; each run's training length is always added."),
    mode: str = typer.Option("nonoverlap", help="nonoverlap: consecutive windows, every token scored. sliding: windows advance by --stride, only their last stride tokens scored."),
    stride: Optional[int] = typer.Option(None, help="Stride for --mode sliding (default: half the length)."),
    max_tokens: int = typer.Option(32768, "--max-tokens", help="Validation tokens scored at every length (rounded down to a multiple of the longest length)."),
    out: Optional[str] = typer.Option(None, help="Output directory (default: outputs/eval/<time>)."),
    data: Optional[Path] = typer.Option(None, help="Evaluate on this UTF-8 text file instead of each run's validation split."),
    device: str = typer.Option("auto", help="auto | cpu | cuda | mps"),
    lang: str = typer.Option("en", help="en, or zh to add the chapters' own words to comparison.md."),
    rope_scaling: str = typer.Option("none", "--rope-scaling", help="Comma list of none, linear, ntk, dynamic, yarn: each RoPE-based run is evaluated once per method (labelled rope+yarn etc.), no retraining."),
    rope_factor: Optional[float] = typer.Option(None, "--rope-factor", help="Scale factor s for --rope-scaling (default: eval length / training length; dynamic: 1, it scales with the length itself)."),
) -> None:
    """Perplexity at lengths past the training length, and the chapters' comparison table, measured.

    Writes ppl.csv, ppl.md, comparison.md, loss_by_position.csv, ppl_vs_length.png and
    loss_by_position.png. With no RUNS it takes the newest sweep under outputs/sweeps if it is newer
    than every single run, otherwise the newest single run of each scheme under outputs/runs.
    """
    from posenc_cli.device import resolve_device
    from posenc_cli.evaluate import MODES, evaluate_runs, parse_lengths
    from posenc_cli.model.positional.rope_scaling import parse_rope_scaling
    from posenc_cli.report import ppl_pivot, write_eval_outputs
    from posenc_cli.runs import checked_out, default_out, load_finished_runs

    out_dir = checked_out(out)
    wanted = parse_lengths(lengths)
    if rope_factor is not None:
        require_number("--rope-factor", rope_factor, above=0)
    methods = parse_rope_scaling(rope_scaling, rope_factor)
    if mode not in MODES:
        raise UsageError(f"--mode {mode} is not known; choose one of: {', '.join(MODES)}")
    if stride is not None:
        if mode != "sliding":
            raise UsageError(f"--stride {stride} is only used with --mode sliding; drop it or add --mode sliding")
        require_positive_int("--stride", stride)
    require_positive_int("--max-tokens", max_tokens)
    check_lang(lang)
    target = resolve_device(device)
    loaded, why = load_finished_runs(list(runs or []), "evaluate")
    df, positions, info = evaluate_runs(loaded, lengths=wanted, mode=mode, stride=stride, max_tokens=max_tokens,
                                        data_path=str(data) if data else None, device=target,
                                        rope_scaling=methods, rope_factor=rope_factor, why=why)
    out = out_dir or default_out("eval")
    written = write_eval_outputs(df, positions, info, out, lang=lang)
    header, rows = ppl_pivot(df)
    table = Table(title=f"Perplexity ({mode}, {int(df['tokens'].max()):,} tokens per length)")
    for column in header:
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(*row)
    ui.out.print(table)
    ui.out.print((out / "comparison.md").read_text(encoding="utf-8"), markup=False, highlight=False, soft_wrap=True)
    ui.err.print(f"wrote {', '.join(p.name for p in written if p.exists())} to {out}")


@app.command()
def probe(
    runs: List[str] = typer.Argument(None, help="Run directories, sweep directories or globs (default: the latest runs)."),
    lengths: str = typer.Option("256,512,1024,2048", "--lengths", "-l", help="Comma list of trial lengths; each run's training length is always added."),
    depths: str = typer.Option("0.1,0.5,0.9", help="Comma list of relative depths of the key sentence in the filler (0 = start, 1 = end)."),
    trials: int = typer.Option(50, help="Trials per run, length and depth (a fresh key and filler each)."),
    seed: int = typer.Option(0, help="Seed for keys and filler: the same trials for every run."),
    out: Optional[str] = typer.Option(None, help="Output directory (default: outputs/probe/<time>). Use eval's --out to get passkey rows in its comparison.md."),
    device: str = typer.Option("auto", help="auto | cpu | cuda | mps"),
    lang: str = typer.Option("en", help="en, or zh: as eval's --lang, for the comparison.md it rewrites."),
) -> None:
    """Passkey retrieval: can a model find a 5-digit key at depth δ in a prompt of L characters?

    Filler comes from each run's own validation text; the key's phrasing is the one the synthetic
    corpus teaches with data.passkey_rate>0 (see experiment=probe). Writes probe.csv, a heatmap per
    scheme (probe_<scheme>.png), probe_summary.png, and rewrites comparison.md with "passkey @ L" rows
    when the output directory also holds eval's ppl.csv. Runs are chosen as in eval.
    """
    from posenc_cli.device import resolve_device
    from posenc_cli.evaluate import parse_lengths
    from posenc_cli.probe import check_vocab, parse_depths, probe_runs
    from posenc_cli.report import markdown_table, passkey_rows, scheme_facts, scheme_order, write_probe_outputs
    from posenc_cli.runs import announce, checked_out, default_out, load_finished_runs, run_corpus

    out_dir = checked_out(out)
    wanted, at_depths = parse_lengths(lengths), parse_depths(depths)
    require_positive_int("--trials", trials)
    require_int("--seed", seed)
    check_lang(lang)
    target = resolve_device(device)
    loaded, why = load_finished_runs(list(runs or []), "probe")
    for run in loaded:
        check_vocab(run.vocab, str(run.path))
        run_corpus(run)  # the text each run was trained on, unchanged: checked before any work
    announce([r.path for r in loaded], why, "probing")
    df = probe_runs(loaded, lengths=wanted, depths=at_depths, trials=trials, seed=seed, device=target)
    info = {r.label: scheme_facts(r.model) for r in loaded}
    out = out_dir or default_out("probe")
    written = write_probe_outputs(df, info, out, lang=lang)
    schemes = scheme_order(df["scheme"])
    ui.out.print(markdown_table(["% retrieved"] + schemes, passkey_rows(df, schemes)), markup=False, highlight=False)
    ui.err.print(f"wrote {', '.join(p.name for p in written)} to {out}")


def check_lang(lang: str) -> None:
    if lang not in ("en", "zh"):
        raise UsageError(f"--lang {lang} is not known; choose en or zh")


@app.command()
def schemes() -> None:
    """List every positional scheme: how it plugs in, what it costs, and what the chapters claim."""
    from rich import box

    from posenc_cli.model.positional import SCHEMES

    table = Table(title="Positional schemes", box=box.SIMPLE_HEAD)
    for column in ("scheme", "kind", "positional\nparameters", "relative\nposition", "extrapolation\n(claimed)", "used by"):
        table.add_column(column, overflow="fold")
    for name, cls in SCHEMES.items():
        table.add_row(name, cls.kind, cls.param_formula, cls.relative, cls.claim.extrapolation, cls.claim.used_by)
    ui.out.print(table)
    ui.out.print("Check a scheme's claims and draw it: posenc inspect SCHEME", highlight=False)


@app.command("inspect")
def inspect_command(
    scheme: Optional[str] = typer.Argument(None, help="Scheme to inspect (see `posenc schemes`); optional with --run."),
    dim: Optional[int] = typer.Option(None, help="Model width d (default 128; with --run, the run's)."),
    length: Optional[int] = typer.Option(None, help="Positions to check and draw (default 128; with --run, its training length)."),
    heads: Optional[int] = typer.Option(None, help="Attention heads (default 4; with --run, the run's)."),
    run: Optional[Path] = typer.Option(None, "--run", help="A trained run directory: inspect its trained scheme and draw its attention."),
    layer: int = typer.Option(0, help="With --run: the layer whose attention is drawn."),
    head: int = typer.Option(0, help="With --run: the head whose attention is drawn."),
    out: Optional[str] = typer.Option(None, help="Figure directory (default outputs/inspect/<scheme or run>)."),
) -> None:
    """Check the chapters' claims about one scheme (PASS/FAIL with the measured number) and draw it.

    Checks follow the scheme's kind:\n
      every scheme: attention is permutation-equivariant only without positions\n
      additive: same vector across the batch, unique per position; bounded and shift-linear if computed, refused past max_len if a table\n
      rotary: norms kept, q·k depends on m − n only\n
      bias: depends on distance only; linear biases follow ALiBi's geometric slopes\n
    Examples:\n
      posenc inspect rope --dim 64 --heads 2\n
      posenc inspect --run outputs/runs/RUN --layer 1 --head 2
    """
    from posenc_cli.inspection.command import inspect_scheme, print_report
    from posenc_cli.runs import checked_out

    for option, value, most in (("--dim", dim, 8192), ("--heads", heads, 256), ("--length", length, 8192)):
        if value is not None:  # the checks build length x length matrices: bounded so they fit
            require_int(option, value, at_least=2 if option != "--heads" else 1, at_most=most)
    if dim is not None and dim % 2:
        raise UsageError(f"--dim {dim} must be even (positions are encoded in pairs of dimensions)")
    print_report(inspect_scheme(name=scheme, dim=dim, length=length, heads=heads, out=checked_out(out), run_dir=run,
                                layer=layer, head=head))


@app.command()
def bench(
    quick: bool = typer.Option(False, "--quick", help="A smoke version on a tiny model that runs in seconds; its numbers mean nothing."),
    main_job: bool = typer.Option(False, "--main-job", help="Also time the README's main job (train all five schemes, then eval): minutes."),
    levers: bool = typer.Option(False, "--levers", help="Also measure levers against the default settings: 1 thread, fp32 instead of train.precision=auto, torch.compile."),
    out: Optional[str] = typer.Option(None, help="Output directory for bench.csv and bench.md (default: outputs/bench/<time>)."),
    scheme: Optional[List[str]] = typer.Option(None, "--scheme", help="Benchmark only this scheme (repeatable; default: all)."),
) -> None:
    """Speed against this machine's limits: training MFU, evaluation speed and memory, per scheme.

    Training tokens/s and MFU against the measured fp32 GEMM peak, evaluation tokens/s and peak memory
    at 1x/8x/32x the training length, and optionally levers and the main job's wall time. Writes bench.csv and bench.md. The numbers are this machine's, now: on a busy machine compare the
    ratios (MFU, vs rope) rather than the absolute tokens/s."""
    from posenc_cli.bench import run_bench, write_outputs
    from posenc_cli.model.positional import SCHEMES
    from posenc_cli.runs import checked_out, default_out

    out_dir = checked_out(out)
    unknown = [s for s in scheme or [] if s not in SCHEMES]
    if unknown:
        raise UsageError(f"--scheme {unknown[0]} is not known; choose from: {', '.join(SCHEMES)}")
    df, info = run_bench(quick=quick, main_job=main_job, levers=levers, schemes=scheme)
    out = out_dir or default_out("bench")
    ui.out.print(write_outputs(df, info, out), markup=False, highlight=False, soft_wrap=True)
    ui.err.print(f"wrote bench.csv, bench.md to {out}")


def main() -> None:
    try:
        app()
    except UsageError as err:
        fail(err)
    except KeyboardInterrupt:
        ui.err.print("posenc: interrupted")
        raise SystemExit(130) from None

"""The `posenc` command line. Each command is a thin door into one module; errors a user can fix
become one line on stderr and exit code 2."""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path
from typing import Any, List, Optional

import typer
from rich.markup import escape
from rich.table import Table
from typer.core import TyperCommand

from posenc_cli import ui
from posenc_cli.choices import DEVICES, EVAL_MODES, HF_DTYPES, HF_ROPE_SCALING, LANGS, ROPE_SCALING
from posenc_cli.errors import UsageError, require_int, require_number, require_positive_int, require_seed

HELP_OPTION_NAMES = ["-h", "--help"]
app = typer.Typer(
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
    context_settings={"help_option_names": HELP_OPTION_NAMES},
    help="Train small GPTs with different positional encodings and measure how far past their training "
    "length each one holds up.\n\nQuick start: [bold]posenc train -m scheme=none,sinusoidal,learned,rope,alibi[/bold] "
    "then [bold]posenc eval --lengths 512,1024,2048[/bold].\n\n"
    "Shell completion (commands, options and train's config groups and keys): [bold]posenc --install-completion[/bold].",
)

TRAIN_HELP = """Train one model (or a sweep with -m) with Hydra overrides.

Config groups (pick with group=option):
  scheme: {schemes}   (default rope)
  model:  {models}   (default tiny)
  data:   {corpora}   (default synthetic; text needs data.path=FILE)
  data.tokenizer: {tokenizers}   (default char; bpe: data.vocab_size, default 4096)
  logger: {loggers}, or a list: logger=\\[csv,tensorboard]   (default csv; pip install 'posenc\\[track]')
  experiment: {experiments}   (presets that set several groups)

Common keys: model.n_layer model.n_head model.n_embd data.path train.max_steps train.batch_size
train.block_size (the training length, default 256) train.init_from train.positions train.max_position
scheme.scaling scheme.scaling_factor train.lr train.log_interval train.eval_interval seed
device (auto|cpu|cuda|mps) logger.wandb.project logger.wandb.entity logger.wandb.mode (online|offline|disabled).

Examples:
  posenc train scheme=rope
  posenc train scheme=alibi model.n_layer=2 train.max_steps=50
  posenc train -m scheme=none,sinusoidal,learned,rope,alibi seed=0,1,2
  posenc train data=text data.path=input.txt train.block_size=128
  posenc train data=text data.path=input.txt data.tokenizer=bpe data.vocab_size=2048
  posenc train data=bin data.train=train.bin data.val=val.bin   (meta.json beside them: dtype, vocab_size)
  posenc train data=hf data.name=wikitext data.config=wikitext-103-raw-v1   (pip install 'posenc\\[data]')
  posenc train logger=\\[csv,tensorboard]      (then: tensorboard --logdir outputs)
  posenc train logger=wandb logger.wandb.mode=offline   (no network; wandb sync later)
  posenc train --cfg job      (print the composed config and exit)
  posenc train train.resume=outputs/runs/RUN   (continue an interrupted run; true: the newest run)
  posenc train experiment=extend train.init_from=RUN scheme.scaling=yarn scheme.scaling_factor=4
      (a new run from RUN's weights at 1,024; scheme.scaling: none|linear|ntk|dynamic|yarn)
  posenc train scheme=learned train.positions=randomized train.max_position=2048
      (randomized positions: sorted random positions from [0, 2048) per sequence; eval uses 0..L-1)
  torchrun --standalone --nproc_per_node=2 -m posenc_cli train   (DDP; train.batch_size is the global batch)

Launchers for -m sweeps (hydra/launcher=...; all but basic need pip install 'posenc\\[cluster]'):
  basic           one job after another in this process (the default): posenc train -m seed=0,1,2
  joblib          jobs side by side on this machine: posenc train -m seed=0,1,2 hydra/launcher=joblib hydra.launcher.n_jobs=2
  submitit_local  each job in its own process through submitit: posenc train -m seed=0,1 hydra/launcher=submitit_local
  submitit_slurm  each job as a SLURM job: posenc train -m seed=0,1 hydra/launcher=submitit_slurm hydra.launcher.partition=PART

Each run writes outputs/runs/<time>_<scheme>_seed<N>/ (sweeps: outputs/sweeps/<time>/<n>_<scheme>_seed<N>/)
with .hydra/, metrics.csv, checkpoint.pt, summary.json and train.log. Hydra flags (-m, --cfg, --info,
hydra/launcher=..., hydra.run.dir=...) pass through unchanged; -sc install=bash prints the completion script."""


def choice(
    default: str, choices: tuple[str, ...], help: str, *names: str, comma_list: bool = False, also: str = ""
) -> Any:
    """An option whose values are fixed names: --help lists them, shells complete them, and a typo is
    refused while parsing. comma_list: a comma list of those names. also: a regex of further values."""

    def check(value: str | None) -> str | None:
        for part in (value.split(",") if comma_list else [value]) if value is not None else []:
            if part.strip() not in choices and not (also and re.fullmatch(also, part.strip())):
                raise typer.BadParameter(f"{part!r} is not one of {', '.join(choices)}")
        return value

    def complete(incomplete: str) -> list[str]:
        done, _, last = incomplete.rpartition(",") if comma_list else ("", "", incomplete)
        return [f"{done},{c}" if done else c for c in choices if c.startswith(last)]

    metavar = "[" + "|".join(choices) + "]" + (",..." if comma_list else "")
    return typer.Option(default, *names, help=help, metavar=metavar, callback=check, autocompletion=complete)


def flag(help: str, *names: str) -> Any:
    """A boolean that is on when given: shown in --help as a bare flag."""
    return typer.Option(False, *names, help=help, metavar="")


def version_callback(value: bool) -> None:
    if value:
        from posenc_cli import __version__
        from posenc_cli.version import code_version

        version = code_version()
        ui.out.print(
            f"posenc {__version__}" + (f" ({version})" if version.startswith("git:") else ""), highlight=False
        )
        raise typer.Exit()


@app.callback()
def posenc(
    version: bool = typer.Option(
        False,
        "--version",
        "-V",
        help="Print the version (and the git commit in a checkout) and exit.",
        callback=version_callback,
        is_eager=True,
        metavar="",
    ),
) -> None:
    """Train small GPTs with different positional encodings and measure how far past their training length each one holds up."""


DEVICE_HELP = "Where the model runs (auto: cuda, then mps, then cpu; cuda:N also works)."


class TrainCommand(TyperCommand):
    """`posenc train`'s help lists each group's options from their homes (schemes from their classes,
    typed groups from config.OPTIONS, yaml groups from configs/), imported only when the help is shown; the command list of `posenc --help` shows its short help. Its arguments are Hydra
    overrides, so the shell completes them through Hydra's completion: config groups, their options
    and config keys, as `python app.py <TAB>` does for a Hydra app."""

    @property
    def help(self) -> str:
        from posenc_cli.config import DATA, OPTIONS, config_dir
        from posenc_cli.data.tokenizers import TOKENIZERS
        from posenc_cli.model.positional import SCHEMES

        def yaml_options(group: str) -> str:
            return " | ".join(sorted(p.stem for p in (config_dir() / group).glob("*.yaml")))

        return reflow(
            TRAIN_HELP.format(
                schemes=" | ".join(SCHEMES),
                models=" | ".join(OPTIONS["model"]),
                corpora=" | ".join(DATA),
                tokenizers=" | ".join(TOKENIZERS),
                loggers=yaml_options("logger"),
                experiments=yaml_options("experiment"),
            )
        )

    @help.setter
    def help(self, _: str | None) -> None:
        pass

    def shell_complete(self, ctx, incomplete: str) -> list:
        from posenc_cli.completion import CompletionItem, hydra_completions

        if incomplete.startswith("-"):
            return super().shell_complete(ctx, incomplete)
        return [CompletionItem(c) for c in hydra_completions(list(ctx.args), incomplete)]


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
    from posenc_cli.completion import hydra_shell_completion
    from posenc_cli.config import first_sweep_point, parse_hydra_args, preflight, print_sweep
    from posenc_cli.ownership import claim, resume_args

    if hydra_shell_completion(list(ctx.args)):
        return
    args = resume_args(list(ctx.args))
    directory = preflight(args)
    parsed = parse_hydra_args(args)
    if parsed.multirun and parsed.cfg:  # Hydra refuses -m with --cfg/--info; posenc answers both
        return print_sweep(args)
    if parsed.multirun and parsed.info:  # --info describes the app: the first job's composition
        flags = [a for a in args if a not in ("-m", "--multirun") and a not in parsed.overrides]
        args = [*first_sweep_point(args), *flags]
    if not distributed.under_torchrun():  # under torchrun rank 0 claims, in process_group
        args = claim(args, directory)
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
    from posenc_cli.tracking import run_name

    def job(cfg: DictConfig) -> float | None:
        from posenc_cli.train import train as train_run

        hydra_cfg = HydraConfig.get()
        config = OmegaConf.to_container(cfg, resolve=True)
        if config["train"]["resume"]:
            config = resumed_config(config, list(hydra_cfg.overrides.task))
        config["train"]["threads"] = config["train"]["threads"] or threads_per_job(hydra_cfg.launcher)
        output_dir = Path(hydra_cfg.runtime.output_dir)
        name = run_name(list(hydra_cfg.overrides.task), output_dir, hydra_cfg.mode == RunMode.MULTIRUN)
        try:
            validate(config)  # a large sweep's pre-flight checked every value, not every combination
            summary = train_run(config, output_dir, name)
        except UsageError as err:
            fail(err)
        if summary["status"] == "failed" and hydra_cfg.mode == RunMode.RUN:
            raise SystemExit(1)  # in a sweep the other jobs go on; eval skips this one
        return summary["final_val_loss"]

    hydra.main(config_path=str(config_dir()), config_name="config", version_base="1.3")(job)()


@app.command("eval")
def eval_command(
    runs: List[str] = typer.Argument(
        None,
        help="Run directories, sweep directories, globs, or hf:ID_OR_PATH (a Hugging Face causal LM: hub id or local directory; needs --data) (default: the latest runs).",
    ),
    lengths: str = typer.Option(
        "512,1024,2048",
        "--lengths",
        "-l",
        help="Comma list of evaluation lengths; each run's training length is always added.",
    ),
    mode: str = choice(
        "nonoverlap",
        EVAL_MODES,
        "nonoverlap: consecutive windows, every token scored. sliding: windows advance by --stride, only their last stride tokens scored.",
        "--mode",
    ),
    stride: Optional[int] = typer.Option(None, help="Stride for --mode sliding (default: half the length)."),
    max_tokens: int = typer.Option(
        32768,
        "--max-tokens",
        help="Validation tokens scored at every length (rounded down to a multiple of the longest length).",
    ),
    out: Optional[str] = typer.Option(None, help="Output directory (default: outputs/eval/<time>)."),
    data: Optional[Path] = typer.Option(
        None,
        help="Evaluate on this UTF-8 text file instead of each run's validation split (required for hf: models, tokenized by each model's own tokenizer).",
    ),
    device: str = choice("auto", DEVICES, DEVICE_HELP, "--device", also=r"cuda:\d+"),
    lang: str = choice("en", LANGS, "en, or zh to add the chapters' own words to comparison.md.", "--lang"),
    rope_scaling: str = choice(
        "none",
        ROPE_SCALING + HF_ROPE_SCALING,
        "Comma list of RoPE context-extension methods: each RoPE-based run is evaluated once per method (labelled rope+yarn etc.), no retraining; llama3 is for hf: models only, which go through transformers' own rope_parameters.",
        "--rope-scaling",
        comma_list=True,
    ),
    rope_factor: Optional[float] = typer.Option(
        None,
        "--rope-factor",
        help="Scale factor s for --rope-scaling (default: eval length / training length; dynamic: 1, it scales with the length itself).",
    ),
    learned_overflow: str = typer.Option(
        "dash",
        "--learned-overflow",
        help="Past a position table's max_len (learned): dash shows —; window scores with sliding windows of max_len tokens, labelled learned+window. A comma list shows both.",
    ),
    hf_context: Optional[int] = typer.Option(
        None,
        "--hf-context",
        help="Training length of hf: models, when their config is silent or misleading (default: n_positions / max_position_embeddings / the like).",
    ),
    dtype: str = choice(
        "fp32", HF_DTYPES, "The weights of hf: models (posenc runs always score in fp32).", "--dtype"
    ),
) -> None:
    """Perplexity at lengths past the training length, and the chapters' comparison table, measured.

    Writes ppl.csv, ppl.md, comparison.md, loss_by_position.csv, ppl_vs_length.png and
    loss_by_position.png. With no RUNS it takes the newest sweep under outputs/sweeps if it is newer
    than every single run, otherwise the newest single run of each scheme under outputs/runs.
    """
    from posenc_cli.device import resolve_device
    from posenc_cli.evaluate import evaluate_runs, parse_lengths, parse_overflow
    from posenc_cli.hf import is_hf
    from posenc_cli.model.positional.rope_scaling import parse_rope_scaling
    from posenc_cli.report import ppl_pivot, write_eval_outputs
    from posenc_cli.runs import checked_out, default_out, load_targets

    out_dir = checked_out(out)
    wanted = parse_lengths(lengths)
    if rope_factor is not None:
        require_number("--rope-factor", rope_factor, above=0)
    methods = parse_rope_scaling(rope_scaling, rope_factor)
    overflows = parse_overflow(learned_overflow)
    if stride is not None:
        if mode != "sliding":
            raise UsageError(
                f"--stride {stride} is only used with --mode sliding; drop it or add --mode sliding"
            )
        require_positive_int("--stride", stride)
    require_positive_int("--max-tokens", max_tokens)
    target = resolve_device(device)
    named = list(runs or [])
    hf_named = [r for r in named if is_hf(r)]
    if hf_named and data is None:
        raise UsageError(
            f"{hf_named[0]} needs --data FILE: the text to evaluate it on (its own tokenizer is used)"
        )
    loaded, why = load_targets(named, "evaluate", hf_options(hf_context, target, dtype))
    df, positions, info = evaluate_runs(
        loaded,
        lengths=wanted,
        mode=mode,
        stride=stride,
        max_tokens=max_tokens,
        data_path=str(data) if data else None,
        device=target,
        rope_scaling=methods,
        rope_factor=rope_factor,
        why=why,
        learned_overflow=overflows,
    )
    out = out_dir or default_out("eval")
    written = write_eval_outputs(df, positions, info, out, lang=lang)
    header, rows = ppl_pivot(df)
    table = Table(title=f"Perplexity ({mode}, {int(df['tokens'].max()):,} tokens per length)")
    for column in header:
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(*row)
    ui.out.print(table)
    ui.out.print(
        (out / "comparison.md").read_text(encoding="utf-8"), markup=False, highlight=False, soft_wrap=True
    )
    ui.err.print(f"wrote {', '.join(p.name for p in written if p.exists())} to {out}")


@app.command()
def probe(
    runs: List[str] = typer.Argument(
        None,
        help="Run directories, sweep directories, globs, or hf:ID_OR_PATH (a Hugging Face causal LM) (default: the latest runs).",
    ),
    lengths: str = typer.Option(
        "256,512,1024,2048",
        "--lengths",
        "-l",
        help="Comma list of trial lengths; each run's training length is always added.",
    ),
    depths: str = typer.Option(
        "0.1,0.5,0.9",
        help="Comma list of relative depths of the key sentence in the filler (0 = start, 1 = end).",
    ),
    trials: int = typer.Option(50, help="Trials per run, length and depth (a fresh key and filler each)."),
    seed: int = typer.Option(0, help="Seed for keys and filler: the same trials for every run."),
    out: Optional[str] = typer.Option(
        None,
        help="Output directory (default: outputs/probe/<time>). Use eval's --out to get passkey rows in its comparison.md.",
    ),
    device: str = choice("auto", DEVICES, DEVICE_HELP, "--device", also=r"cuda:\d+"),
    lang: str = choice(
        "en", LANGS, "en, or zh: as eval's --lang, for the comparison.md it rewrites.", "--lang"
    ),
    hf_context: Optional[int] = typer.Option(
        None, "--hf-context", help="Training length of hf: models, when their config is silent or misleading."
    ),
    dtype: str = choice("fp32", HF_DTYPES, "The weights of hf: models.", "--dtype"),
) -> None:
    """Passkey retrieval: can a model find a 5-digit key at depth δ in a prompt of L tokens?

    Filler comes from each run's own validation text; the key's phrasing is the one the synthetic
    corpus teaches with data.passkey_rate>0 (see experiment=probe). hf: models get Mohtashami & Jaggi's
    English prompt ("The grass is green. …") in their own tokenizer, whole sentences up to L tokens. Writes probe.csv, a heatmap per
    scheme (probe_<scheme>.png), probe_summary.png, and rewrites comparison.md with "passkey @ L" rows
    when the output directory also holds eval's ppl.csv. Runs are chosen as in eval.
    """
    from posenc_cli.device import resolve_device
    from posenc_cli.evaluate import parse_lengths
    from posenc_cli.probe import parse_depths, probe_runs
    from posenc_cli.report import markdown_table, passkey_rows, scheme_order, write_probe_outputs
    from posenc_cli.runs import announce, checked_out, default_out, load_targets

    out_dir = checked_out(out)
    wanted, at_depths = parse_lengths(lengths), parse_depths(depths)
    require_positive_int("--trials", trials)
    require_seed("--seed", seed)
    target = resolve_device(device)
    loaded, why = load_targets(list(runs or []), "probe", hf_options(hf_context, target, dtype))
    for run in loaded:
        run.check_probe()  # a posenc run: its vocabulary, and its corpus unchanged since training
        run.check_fits([L for L in {*wanted, run.train_len} if run.max_len is None or L <= run.max_len])
    announce([r.path for r in loaded], why, "probing")
    df = probe_runs(loaded, lengths=wanted, depths=at_depths, trials=trials, seed=seed, device=target)
    labels = df.groupby("run")["scheme"].first()  # "rope", or "rope [bpe]" when tokenizers mix
    info = {labels[str(r.path)]: r.facts() for r in loaded}
    out = out_dir or default_out("probe")
    written = write_probe_outputs(df, info, out, lang=lang)
    schemes = scheme_order(df["scheme"])
    ui.out.print(
        markdown_table(["% retrieved"] + schemes, passkey_rows(df, schemes)), markup=False, highlight=False
    )
    ui.err.print(f"wrote {', '.join(p.name for p in written)} to {out}")


@app.command()
def sample(
    run: Path = typer.Argument(..., help="A trained run directory."),
    prompt: str = typer.Option(
        ..., "--prompt", "-p", help="Text to continue; every character must be in the run's vocabulary."
    ),
    tokens: int = typer.Option(200, "--tokens", "-n", help="How many tokens to generate."),
    temperature: float = typer.Option(0.8, "--temperature", "-t", help="Softmax temperature; 0 is greedy."),
    top_k: Optional[int] = typer.Option(
        None, "--top-k", "-k", help="Sample only from the k most likely tokens (default: all)."
    ),
    seed: int = typer.Option(0, "--seed", help="Sampling seed: the same seed gives the same text."),
    window: Optional[int] = typer.Option(
        None,
        "--window",
        "-w",
        help="Slide the context: the model sees only the last W tokens (default: the whole text, so positions grow past the training length).",
    ),
    out: Optional[str] = typer.Option(
        None, "--out", "-o", help="Also write the prompt and the generated text to this file."
    ),
    device: str = choice("auto", DEVICES, DEVICE_HELP, "--device", also=r"cuda:\d+"),
) -> None:
    """Generate text from a trained run, streamed to the terminal, past its training length if asked.

    Without --window the context grows with the text, so positions pass the training length: the
    quickest way to see a scheme's extrapolation fail by eye. A scheme with a position table (learned)
    stops at its table's end with a message unless --window keeps the context inside it.

    Example:
      posenc sample outputs/runs/RUN --prompt "the pass key is" --tokens 1000 --temperature 0.8 --top-k 40 --seed 0
    """
    from posenc_cli.atomic import write_text
    from posenc_cli.device import resolve_device
    from posenc_cli.runs import checked_out_file, load_run
    from posenc_cli.sample import check_memory, check_sampling, generate, plan, stream_text

    out = checked_out_file(out)
    check_sampling(temperature, top_k, seed)
    loaded = load_run(run)
    if not prompt:
        raise UsageError("--prompt is empty; give at least one character of the run's vocabulary")
    try:
        prompt_ids = loaded.tokenizer.encode(prompt)
    except UsageError as err:
        raise UsageError(f"--prompt: {err}") from None
    steps = plan(loaded, len(prompt_ids), tokens, window)
    target = resolve_device(device)
    check_memory(loaded, window or len(prompt_ids) + steps.tokens, target)
    ui.out.file.write(prompt)
    pieces = [prompt]
    for piece in stream_text(
        loaded, generate(loaded, prompt_ids, steps.tokens, temperature, top_k, seed, window, target)
    ):
        ui.out.file.write(piece)
        ui.out.file.flush()
        pieces.append(piece)
    ui.out.file.write("\n")
    if out:
        write_text(out, "".join(pieces))
    if steps.stopped_early:
        ui.err.print(steps.stopped_early, highlight=False, soft_wrap=True)
    if out:
        ui.err.print(f"wrote {out}", highlight=False)


@app.command("export")
def export_command(
    run: Path = typer.Argument(..., help="A trained run directory."),
    out: Optional[str] = typer.Option(
        None, help="Directory for model.safetensors and config.json (default: the run directory)."
    ),
) -> None:
    """Write a run's model as model.safetensors + config.json: shareable, and loaded without pickle
    (posenc_cli.export.load_export gives the same logits). Needs safetensors: pip install 'posenc[hf]'."""
    from posenc_cli.export import CONFIG, WEIGHTS, export_run

    written = export_run(run, out)
    ui.err.print(f"wrote {WEIGHTS}, {CONFIG} to {written}")


def hf_options(context: int | None, device, dtype: str) -> dict:
    """How hf: models are loaded (checked here, before any model is)."""
    if context is not None and context <= 0:
        raise UsageError(f"--hf-context must be a positive integer, got {context}")
    return {"context": context, "device": device, "dtype": dtype}


@app.command()
def schemes() -> None:
    """List every positional scheme: how it plugs in, what it costs, and what the chapters claim."""
    from rich import box

    from posenc_cli.model.positional import SCHEMES

    table = Table(title="Positional schemes", box=box.SIMPLE_HEAD)
    for column in (
        "scheme",
        "kind",
        "positional\nparameters",
        "relative\nposition",
        "×√d",
        "extrapolation\n(claimed)",
        "used by",
    ):
        table.add_column(column, overflow="fold", no_wrap=column in ("scheme", "kind", "×√d"))
    scaling = {None: "—", True: "yes", False: "no"}
    for name, cls in SCHEMES.items():
        table.add_row(
            name,
            cls.kind,
            cls.param_formula,
            cls.relative,
            scaling[cls.scales_embeddings],
            cls.claim.extrapolation,
            cls.claim.used_by,
        )
    ui.out.print(table)
    ui.out.print(
        "×√d: the default of scheme.scale_embeddings=true|false, an option of every additive "
        "scheme (token embeddings × √d before the position vectors are added, Vaswani et al. 2017 §3.4).",
        highlight=False,
    )
    ui.out.print("Check a scheme's claims and draw it: posenc inspect SCHEME", highlight=False)


@app.command("inspect")
def inspect_command(
    scheme: Optional[str] = typer.Argument(
        None, help="Scheme to inspect (see `posenc schemes`); optional with --run."
    ),
    dim: Optional[int] = typer.Option(None, help="Model width d (default 128; with --run, the run's)."),
    length: Optional[int] = typer.Option(
        None, help="Positions to check and draw (default 128; with --run, its training length)."
    ),
    heads: Optional[int] = typer.Option(None, help="Attention heads (default 4; with --run, the run's)."),
    run: Optional[Path] = typer.Option(
        None, "--run", help="A trained run directory: inspect its trained scheme and draw its attention."
    ),
    layer: Optional[int] = typer.Option(
        None, help="With --run: the layer whose attention is drawn (default 0)."
    ),
    head: Optional[int] = typer.Option(
        None, help="With --run: the head whose attention is drawn (default 0)."
    ),
    out: Optional[str] = typer.Option(
        None, help="Figure directory (default outputs/inspect/<scheme or run>)."
    ),
    layout: Optional[str] = typer.Option(
        None, help="rope, xpos: half (default) or interleaved, the chapter's pairs (2i, 2i+1)."
    ),
    slopes: Optional[str] = typer.Option(None, help="alibi: paper (default, 2^(-8h/H)) or chapter (1/2^h)."),
) -> None:
    """Check the chapters' claims about one scheme (PASS/FAIL with the measured number) and draw it.

    Checks follow the scheme's kind:
      every scheme: attention is permutation-equivariant only without positions
      additive: same vector across the batch, unique per position; bounded and shift-linear if computed, refused past max_len if a table
      rotary: norms kept, q·k depends on m − n only
      bias: depends on distance only; linear biases follow ALiBi's geometric slopes

    Examples:
      posenc inspect rope --dim 64 --heads 2
      posenc inspect --run outputs/runs/RUN --layer 1 --head 2
    """
    from posenc_cli.inspection.command import inspect_scheme, print_report
    from posenc_cli.runs import checked_out

    options = {key: value for key, value in (("layout", layout), ("slopes", slopes)) if value is not None}
    for option, value, most in (("--dim", dim, 8192), ("--heads", heads, 256), ("--length", length, 8192)):
        if value is not None:  # the checks build length x length matrices: bounded so they fit
            require_int(option, value, at_least=2 if option != "--heads" else 1, at_most=most)
    for option, value in (("--layer", layer), ("--head", head)):
        if value is not None and run is None:
            raise UsageError(f"{option} {value} applies only with --run RUN_DIR; add --run or drop {option}")
    if dim is not None and dim % 2:
        raise UsageError(f"--dim {dim} must be even (positions are encoded in pairs of dimensions)")
    print_report(
        inspect_scheme(
            name=scheme,
            dim=dim,
            length=length,
            heads=heads,
            out=checked_out(out),
            run_dir=run,
            layer=layer or 0,
            head=head or 0,
            options=options,
        )
    )


@app.command()
def bench(
    quick: bool = flag(
        "A smoke version on a tiny model that runs in seconds; its numbers mean nothing.", "--quick"
    ),
    main_job: bool = flag(
        "Also time the README's main job (train all five schemes, then eval): minutes.", "--main-job"
    ),
    levers: bool = flag(
        "Also measure settings that are off by default through the same training path: 1 thread, fp32.",
        "--levers",
    ),
    nanogpt: str = typer.Option(
        "../shared/peers/nanogpt",
        "--nanogpt",
        help="nanoGPT's peer directory (with run.sh) for the side-by-side; 'none' skips it. "
        "Absent: the report says so.",
    ),
    peer_steps: Optional[int] = typer.Option(
        None,
        "--peer-steps",
        help="Training steps of each run in the nanoGPT side-by-side (default: 400; nanoGPT's README CPU run is 2000).",
    ),
    out: Optional[str] = typer.Option(
        None, help="Output directory for bench.csv and bench.md (default: outputs/bench/<time>)."
    ),
    scheme: Optional[List[str]] = typer.Option(
        None, "--scheme", help="Benchmark only this scheme (repeatable; default: all)."
    ),
) -> None:
    """Speed on the paths users run, against this machine's limits: training, nanoGPT side by side, evaluation.

    Training: `posenc train`'s own training function per scheme (median eval interval), MFU against
    the GEMM peak of the precision it computes in; `posenc train` beside nanoGPT's CPU recipe as whole
    processes, alternated; evaluation tokens/s and peak memory at 1x/8x/32x the training length; with
    --main-job the README's main job. Writes bench.csv and bench.md. The numbers are this machine's,
    now: on a busy machine compare the ratios (MFU, vs rope, vs nanoGPT) rather than the absolute tokens/s."""
    from posenc_cli.bench import run_bench, write_outputs
    from posenc_cli.model.positional import SCHEMES
    from posenc_cli.runs import checked_out, default_out

    out_dir = checked_out(out)
    if peer_steps is not None:
        require_positive_int("--peer-steps", peer_steps)
    unknown = [s for s in scheme or [] if s not in SCHEMES]
    if unknown:
        raise UsageError(f"--scheme {unknown[0]} is not known; choose from: {', '.join(SCHEMES)}")
    peer = None if nanogpt == "none" else Path(nanogpt)
    df, info = run_bench(
        quick=quick, main_job=main_job, levers=levers, schemes=scheme, peer=peer, peer_steps=peer_steps
    )
    out = out_dir or default_out("bench")
    ui.out.print(write_outputs(df, info, out), markup=False, highlight=False, soft_wrap=True)
    ui.err.print(f"wrote bench.csv, bench.md to {out}")


def command():
    """The click command behind `app`, with help texts reflowed and flags (--help too) shown bare."""
    from posenc_cli.completion import click_core

    group = typer.main.get_command(app)
    for cmd in [group, *group.commands.values()]:
        if not isinstance(cmd, TrainCommand):  # its help reflows itself, importing torch only when shown
            cmd.help = reflow(cmd.help or "")
        for param in [
            *cmd.params,
            cmd.get_help_option(click_core.Context(cmd, help_option_names=HELP_OPTION_NAMES)),
        ]:
            if getattr(param, "is_flag", False):
                param.metavar = ""
    return group


def reflow(text: str) -> str:
    """Help as written in the source -> as shown: a paragraph's lines joined into one, lines that start
    with spaces (examples, lists) kept as they are."""
    return re.sub(r"(?<=\S)\n(?=\S)", " ", inspect.cleandoc(text))


def main() -> None:
    """The `posenc` entry point: parser errors, like every error a user can fix, are one line and exit 2."""
    from posenc_cli.completion import click_exceptions

    try:
        code = command().main(prog_name="posenc", standalone_mode=False)
    except click_exceptions.NoArgsIsHelpError as err:
        ui.out.print(err.format_message(), highlight=False, markup=False, end="")
        raise SystemExit(0) from None
    except click_exceptions.ClickException as err:
        fail(err.format_message() if isinstance(err, click_exceptions.UsageError) else err)
    except typer.Abort:
        ui.err.print("posenc: aborted")
        raise SystemExit(1) from None
    except UsageError as err:
        fail(err)
    except KeyboardInterrupt:
        ui.err.print("posenc: interrupted")
        raise SystemExit(130) from None
    raise SystemExit(code if isinstance(code, int) else 0)

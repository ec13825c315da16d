"""`posenc train`: Hydra overrides in, its first job composed before torch is imported, then the work
(training/launch.py)."""

from __future__ import annotations

import typer
from rich.markup import escape
from typer.core import TyperCommand

from posenc_cli.cli.app import app, reflow
from posenc_cli.core.choices import CHAPTER_SCHEMES, TOKENIZERS
from posenc_cli.core.install import both_hints

TRAIN_HELP = """Train one model (or a sweep with -m) with Hydra overrides.

Config groups (pick with group=option):
  scheme: {schemes}   (default rope)
  model:  {models}   (default tiny)
  data:   {corpora}   (default synthetic; text needs data.path=FILE)
  data.tokenizer: {tokenizers}   (default char; bpe: data.vocab_size, default 4096)
  logger: {loggers}, or a list: logger=\\[csv,tensorboard]   (default csv; {install_track})
  experiment: {experiments}   (presets that set several groups)

Common keys: model.n_layer model.n_head model.n_embd data.path train.max_steps train.batch_size
train.block_size (the training length, default 256) train.init_from train.positions train.max_position
scheme.scaling scheme.scaling_factor train.lr train.log_interval train.eval_interval seed
device (auto|cpu|cuda|mps) logger.wandb.project logger.wandb.entity logger.wandb.mode (online|offline|disabled).

Examples:
  posenc train scheme=rope
  posenc train scheme=alibi model.n_layer=2 train.max_steps=50
  posenc train -m scheme={chapter_schemes} seed=0,1,2
  posenc train data=text data.path=input.txt train.block_size=128
  posenc train data=text data.path=input.txt data.tokenizer=bpe data.vocab_size=2048
  posenc train data=bin data.train=train.bin data.val=val.bin   (meta.json beside them: dtype, vocab_size)
  posenc train data=hf data.name=wikitext data.config=wikitext-103-raw-v1   ({install_data})
  posenc train logger=\\[csv,tensorboard]      (then: tensorboard --logdir outputs)
  posenc train logger=wandb logger.wandb.mode=offline   (no network; wandb sync later)
  posenc train --cfg job      (print the composed config and exit)
  posenc train train.resume=outputs/runs/RUN   (continue an interrupted run; true: the newest run)
  posenc train experiment=extend train.init_from=RUN scheme.scaling=yarn scheme.scaling_factor=4
      (a new run from RUN's weights at 1,024; scheme.scaling: none|linear|ntk|dynamic|yarn)
  posenc train scheme=learned train.positions=randomized train.max_position=2048
      (randomized positions: sorted random positions from [0, 2048) per sequence; eval uses 0..L-1)
  torchrun --standalone --nproc_per_node=2 -m posenc_cli train   (DDP; train.batch_size is the global batch)

Launchers for -m sweeps (hydra/launcher=...; all but basic need {install_cluster}):
  basic           one job after another in this process (the default): posenc train -m seed=0,1,2
  joblib          jobs side by side on this machine: posenc train -m seed=0,1,2 hydra/launcher=joblib hydra.launcher.n_jobs=2
  submitit_local  each job in its own process through submitit: posenc train -m seed=0,1 hydra/launcher=submitit_local
  submitit_slurm  each job as a SLURM job: posenc train -m seed=0,1 hydra/launcher=submitit_slurm hydra.launcher.partition=PART

Each run writes outputs/runs/<time>_<scheme>_seed<N>/ (sweeps: outputs/sweeps/<time>/<n>_<scheme>_seed<N>/)
with .hydra/, metrics.csv, checkpoint.pt, summary.json and train.log. Hydra flags (-m, --cfg, --info,
hydra/launcher=..., hydra.run.dir=...) pass through unchanged; -sc install=bash prints the completion script."""


class TrainCommand(TyperCommand):
    """`posenc train`'s help lists each group's options from their homes (schemes from their classes,
    typed groups from config.OPTIONS, yaml groups from configs/), imported only when the help is shown; the command list of `posenc --help` shows its short help. Its arguments are Hydra
    overrides, so the shell completes them through Hydra's completion: config groups, their options
    and config keys, as `python app.py <TAB>` does for a Hydra app."""

    @property
    def help(self) -> str:
        # imported when the command runs, so that --help leaves torch unimported
        from posenc_cli.config.location import config_dir
        from posenc_cli.config.schema import DATA, OPTIONS

        def yaml_options(group: str) -> str:
            return " | ".join(sorted(p.stem for p in (config_dir() / group).glob("*.yaml")))

        # the scheme group's options as Hydra takes them (configs/scheme/), the chapters' first: no torch
        schemes = {p.stem for p in (config_dir() / "scheme").glob("*.yaml")}
        listed = [s for s in CHAPTER_SCHEMES if s in schemes] + sorted(schemes - set(CHAPTER_SCHEMES))
        return reflow(
            TRAIN_HELP.format(
                schemes=" | ".join(listed),
                models=" | ".join(OPTIONS["model"]),
                corpora=" | ".join(DATA),
                tokenizers=" | ".join(TOKENIZERS),
                loggers=yaml_options("logger"),
                experiments=yaml_options("experiment"),
                chapter_schemes=",".join(CHAPTER_SCHEMES),
                **{f"install_{extra}": escape(both_hints(extra)) for extra in ("track", "data", "cluster")},
            )
        )

    @help.setter
    def help(self, _: str | None) -> None:
        pass

    def shell_complete(self, ctx, incomplete: str) -> list:
        # imported when the command runs, so that --help leaves torch unimported
        from posenc_cli.cli.completion import CompletionItem, hydra_completions

        if incomplete.startswith("-"):
            return super().shell_complete(ctx, incomplete)
        return [CompletionItem(c) for c in hydra_completions(list(ctx.args), incomplete)]


@app.command(
    cls=TrainCommand,
    short_help=TRAIN_HELP.split("\n", 1)[0],
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def train(ctx: typer.Context) -> None:
    # imported when the command runs, so that --help leaves torch unimported
    from posenc_cli.cli.completion import hydra_shell_completion
    from posenc_cli.config.hydra_args import check_first_point, with_layer_options
    from posenc_cli.rundir.claim import resuming

    args = with_layer_options(list(ctx.args))
    if hydra_shell_completion(args):
        return
    # the first job composed before torch is imported, so that a typo answers in a second (a resume's
    # arguments are the run's own, rewritten by the work first)
    first = None if resuming(args) else check_first_point(args)
    from posenc_cli.training.launch import train_with  # torch

    train_with(args, first=first)

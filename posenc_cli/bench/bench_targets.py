"""bench.md's targets: this run's numbers against configs/bench_targets.yaml, one check per target."""

from __future__ import annotations

import pandas as pd

from posenc_cli.bench.eval_memory import EVAL_MULTIPLES
from posenc_cli.bench.peer import speedup
from posenc_cli.config.location import config_dir
from posenc_cli.model.positional import SCHEMES
from posenc_cli.model.positional.base import overrides
from posenc_cli.report.cells import markdown_table

TARGETS_FILE = "bench_targets.yaml"


def load_targets() -> dict[str, float]:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(config_dir() / TARGETS_FILE))


def mfu_text(mfu: float) -> str:
    """MFU as a percentage; above 100 % the peak was measured at a busier moment than the run, so no
    percentage is printed."""
    return f"{mfu:.1%}" if mfu <= 1 else "n/a (above the measured peak: rerun on a quiet machine)"


def targets(df: pd.DataFrame) -> list[list[str]]:
    """This run's numbers against configs/bench_targets.yaml: [target, measured, met], for each target
    whose section was run."""
    goal = load_targets()
    checks = (
        train_mfu,
        bias_vs_rope,
        precision_auto,
        nanogpt_speedup,
        eval_rss,
        eval_slowdown,
        sample_speedup,
    )
    checks += (main_job,)
    rows = [row for check in checks if (row := check(df, goal)) is not None] + startup_times(df, goal)
    return [[target, measured, "yes" if met else "**no**"] for target, measured, met in rows]


def targets_section(df: pd.DataFrame) -> list[str]:
    """bench.md's last section: each target this run measured, met or not."""
    checked = targets(df)
    if not checked:  # --costs: no section with a target
        return []
    return [
        "## Targets",
        "",
        f"From configs/{TARGETS_FILE}.",
        "",
        markdown_table(["target", "measured", "met"], checked),
    ]


def train_mfu(df: pd.DataFrame, goal: dict[str, float]) -> list | None:
    train = df[df["section"] == "train"]
    if not len(train):
        return None
    worst = train.loc[train["mfu"].idxmin()]
    return [
        f"training MFU ≥ {goal['train_mfu']:.0%} for every scheme (default config, against the "
        "peak of its precision)",
        f"lowest {mfu_text(worst['mfu'])} ({worst['scheme']}, {worst['precision']})",
        worst["mfu"] >= goal["train_mfu"],
    ]


def bias_vs_rope(df: pd.DataFrame, goal: dict[str, float]) -> list | None:
    train = df[df["section"] == "train"]
    biased = train[train["scheme"].map(lambda s: overrides(SCHEMES[s], "bias"))]
    if not (len(biased) and train["vs_rope"].notna().any()):
        return None
    worst = biased.loc[biased["vs_rope"].idxmin()]
    return [
        f"bias schemes within {1 - goal['bias_vs_rope']:.0%} of rope's training tokens/s",
        f"lowest {worst['vs_rope']:.2f}× rope ({worst['scheme']})",
        worst["vs_rope"] >= goal["bias_vs_rope"],
    ]


def precision_auto(df: pd.DataFrame, goal: dict[str, float]) -> list | None:
    found = df[df["section"] == "precision"]
    if not len(found):
        return None
    auto = found[found["asked"] == "auto"]
    pinned = found[found["asked"] != "auto"]
    fastest = pinned.loc[pinned.groupby("config")["tokens_per_s"].idxmax()].set_index("config")["effective"]
    # auto computing in the fastest pinned run's precision is the right choice, whatever the two runs'
    # spread (the same arithmetic twice differs by the machine's noise alone)
    chose_fastest = auto["effective"].to_numpy() == fastest.reindex(auto["config"]).to_numpy()
    worst = auto.loc[auto["vs_best"].idxmin()]
    return [
        f"train.precision=auto within {goal['precision_auto_slack']:.0%} of the fastest pinned precision, "
        "or computing in it (default config and nanoGPT's recipe)",
        f"lowest {worst['vs_best']:.2f}× the fastest ({worst['config']}: auto computed in {worst['effective']}, "
        f"the fastest pinned was {fastest[worst['config']]})",
        bool(((auto["vs_best"] >= 1 - goal["precision_auto_slack"]).to_numpy() | chose_fastest).all()),
    ]


def nanogpt_speedup(df: pd.DataFrame, goal: dict[str, float]) -> list | None:
    ratio = speedup(df)
    if ratio is None:
        return None
    return [
        f"posenc train ≥ {goal['nanogpt_speedup']}× nanoGPT's speed at its CPU recipe (whole process)",
        f"{ratio:.2f}× (median of pairs)",
        ratio >= goal["nanogpt_speedup"],
    ]


def eval_rss(df: pd.DataFrame, goal: dict[str, float]) -> list | None:
    longest = df[
        (df["section"] == "eval") & (df["multiple"] == max(EVAL_MULTIPLES)) & df["peak_rss_mib"].notna()
    ]
    if not len(longest):
        return None
    worst = longest.loc[longest["peak_rss_mib"].idxmax()]
    gib = worst["peak_rss_mib"] / 1024
    return [
        f"eval peak RSS at {max(EVAL_MULTIPLES)}× the training length < {goal['eval_rss_gib']} GiB",
        f"highest {gib:.2f} GiB ({worst['scheme']})",
        gib < goal["eval_rss_gib"],
    ]


def eval_slowdown(df: pd.DataFrame, goal: dict[str, float]) -> list | None:
    evals = df[(df["section"] == "eval") & df["vs_rope"].notna()]
    if not len(evals):
        return None
    worst = evals.loc[evals["vs_rope"].idxmin()]
    slowdown = 1 / worst["vs_rope"]
    return [
        f"eval: no scheme > {goal['eval_slowdown']:.0f}× slower per token than rope",
        f"slowest {slowdown:.2f}× ({worst['scheme']} @ {int(worst['length'])})",
        slowdown <= goal["eval_slowdown"],
    ]


def sample_speedup(df: pd.DataFrame, goal: dict[str, float]) -> list | None:
    cached = df[(df["section"] == "sample") & (df["config"] == "kv cache")]
    if not len(cached):
        return None
    slowest = cached["vs_baseline"].min()
    return [
        f"sampling with the KV cache ≥ {goal['sample_speedup']:g}× without",
        f"{slowest:.1f}×",
        slowest >= goal["sample_speedup"],
    ]


def main_job(df: pd.DataFrame, goal: dict[str, float]) -> list | None:
    total = df[(df["section"] == "main_job") & (df["config"] == "total")]
    if not len(total):
        return None
    seconds = total["seconds"].iloc[0]
    return [
        f"README main job ≤ {goal['main_job_s'] / 60:g} min",
        f"{seconds / 60:.1f} min",
        seconds <= goal["main_job_s"],
    ]


STARTUP_TARGETS = {  # case -> its key in configs/bench_targets.yaml
    "refused override (train scheme=roep)": "startup_refused_s",
    "train --help": "startup_help_s",
    "completion (train scheme=al<TAB>)": "startup_completion_s",
    "tiny run of 1 step, whole process": "startup_first_step_s",
}


def startup_times(df: pd.DataFrame, goal: dict[str, float]) -> list[list]:
    startup = df[df["section"] == "startup"]
    return [
        [
            f"{r.config} ≤ {goal[STARTUP_TARGETS[r.config]]:g} s",
            f"{r.seconds:.2f} s",
            r.seconds <= goal[STARTUP_TARGETS[r.config]],
        ]
        for r in startup.itertuples()
    ]

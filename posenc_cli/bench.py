"""`posenc bench`: training and evaluation speed, measured against this machine's own fp32 matmul peak.

Everything is measured in one run so the ratios (MFU, each scheme against rope) stay meaningful on a
busy machine: the GEMM peak is the best of several large square matmuls, training rounds visit the
schemes in turn and keep each scheme's best round, and every evaluation case runs in a fresh Python
process so its peak RSS is its own.

MFU follows nanoGPT and PaLM (appendix B): FLOPs per token = 6·N + 12·n_layer·d_model·T, where N is
the model's non-positional parameters with the tied input/output embedding counted once and T the
sequence length, divided by the measured GEMM peak.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from posenc_cli import ui
from posenc_cli.atomic import write_text, write_with
from posenc_cli.device import autocast
from posenc_cli.report import markdown_table

TRAIN_CONFIGS = {  # name -> Hydra overrides on top of the defaults
    "default": [],
    "nanogpt-cpu": ["model=small", "train.block_size=64", "train.batch_size=12"],
}
EVAL_MULTIPLES = (1, 8, 32)  # evaluation lengths, in multiples of the training length
MAIN_JOB = (["train", "-m", "scheme=none,sinusoidal,learned,rope,alibi"], ["eval", "--lengths", "512,1024,2048"])
COLUMNS = ("note", "multiple", "peak_rss_mib", "eval_rss_mib", "vs_baseline", "seconds")  # optional sections' columns
LEVERS = ("baseline", "threads=1", "fp32", "compile")  # --levers: each against the baseline (train.precision=auto)
TARGETS = {"train_mfu": 0.65, "bias_vs_rope": 0.85, "nanogpt_tokens_per_s": 1.2 * 19_000,
           "eval_rss_gib": 1.5, "eval_slowdown": 2.0, "main_job_s": 600}


@dataclass(frozen=True)
class Effort:
    """How long to measure: the full benchmark, or --quick's smoke version."""
    gemm_size: int = 2048
    gemm_repeats: int = 10
    train_rounds: int = 3
    train_steps: int = 5  # timed steps per round, after one untimed warm-up step
    eval_tokens: int = 16384  # tokens scored per evaluation case (at least one window)
    overrides: tuple[str, ...] = ()


FULL = Effort()
QUICK = Effort(gemm_size=256, gemm_repeats=2, train_rounds=1, train_steps=2, eval_tokens=64,
               overrides=("model.n_layer=1", "model.n_embd=32", "model.n_head=2", "train.block_size=16",
                          "train.batch_size=2", "data.n_chars=5000"))


class Peak:
    """The machine's fp32 GEMM peak: the best FLOP/s of a square matmul over every try in the run."""

    def __init__(self, size: int, repeats: int):
        self.size, self.repeats, self.flops = size, repeats, 0.0
        self.a, self.b, self.c = torch.randn(size, size), torch.randn(size, size), torch.empty(size, size)

    def measure(self) -> None:
        for _ in range(self.repeats):
            start = time.perf_counter()
            torch.mm(self.a, self.b, out=self.c)
            self.flops = max(self.flops, 2 * self.size**3 / (time.perf_counter() - start))


def compose(overrides: list[str]) -> dict[str, Any]:
    """The training config `posenc train OVERRIDES` would run."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from posenc_cli.config import config_dir

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
            return OmegaConf.to_container(hydra_compose("config", overrides=overrides), resolve=True)
    finally:
        GlobalHydra.instance().clear()


def flops_per_token(model, seq_len: int) -> float:
    cfg = model.cfg
    n = model.n_params - model.n_positional_params  # parameters() yields the tied weight once
    return 6 * n + 12 * cfg.n_layer * cfg.n_embd * seq_len


class Trainer:
    """One scheme's model and optimizer, stepped exactly as train.py steps them, under one lever setting."""

    def __init__(self, cfg: dict[str, Any], tokens: torch.Tensor, vocab_size: int, lever: str = "baseline"):
        from posenc_cli.model import GPT
        from posenc_cli.train import make_optimizer, model_config

        torch.manual_seed(cfg["seed"])
        self.tc, self.tokens, self.lever = cfg["train"], tokens, lever
        self.model = GPT(model_config(cfg, vocab_size))
        self.optimizer = make_optimizer(self.model, self.tc)
        self.generator = torch.Generator().manual_seed(cfg["seed"])
        self.forward = torch.compile(self.model) if lever == "compile" else self.model
        self.threads = 1 if lever == "threads=1" else torch.get_num_threads()

    def step(self) -> None:
        from posenc_cli.data import random_batch
        from posenc_cli.model import token_nll

        x, y = random_batch(self.tokens, self.tc["batch_size"], self.tc["block_size"], self.generator)
        with autocast(torch.device("cpu"), "fp32" if self.lever == "fp32" else self.tc["precision"]):
            loss = token_nll(self.forward(x), y).mean()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.tc["grad_clip"])
        self.optimizer.step()

    def tokens_per_s(self, steps: int) -> float:
        start = time.perf_counter()
        for _ in range(steps):
            self.step()
        return steps * self.tc["batch_size"] * self.tc["block_size"] / (time.perf_counter() - start)


def interleaved_best(trainers: dict[Any, Trainer], effort: Effort, peak: Peak, title: str) -> dict[Any, dict[str, float]]:
    """Each trainer's best tokens/s over rounds that visit all of them in turn (fair under changing load),
    with the seconds its first step took (torch.compile's compile time shows up there)."""
    best = {key: {"tokens_per_s": 0.0, "first_step_s": 0.0} for key in trainers}
    default_threads = torch.get_num_threads()
    with ui.progress() as bar:
        task = bar.add_task(title, total=effort.train_rounds * len(trainers), status="")
        for round_ in range(effort.train_rounds):
            peak.measure()
            for key, trainer in trainers.items():
                bar.update(task, status=str(key))
                torch.set_num_threads(trainer.threads)
                start = time.perf_counter()
                trainer.step()  # warm-up: allocator and kernel caches (and compilation, the first time)
                if round_ == 0:
                    best[key]["first_step_s"] = time.perf_counter() - start
                best[key]["tokens_per_s"] = max(best[key]["tokens_per_s"], trainer.tokens_per_s(effort.train_steps))
                torch.set_num_threads(default_threads)
                bar.advance(task)
    return best


def bench_training(schemes: list[str], effort: Effort, peak: Peak) -> list[dict]:
    """Tokens/s of every scheme at every training config (MFU is added once the peak is final)."""
    from posenc_cli.data import load_corpus

    rows = []
    for config_name, overrides in TRAIN_CONFIGS.items():
        cfgs = {s: compose([f"scheme={s}", *overrides, *effort.overrides]) for s in schemes}
        corpus = load_corpus(cfgs[schemes[0]]["data"])
        trainers = {s: Trainer(cfg, corpus.train, len(corpus.vocab)) for s, cfg in cfgs.items()}
        best = interleaved_best(trainers, effort, peak, f"train {config_name}")
        rows += [training_row("train", config_name, scheme, "baseline", cfgs[scheme], trainer.model, best[scheme])
                 for scheme, trainer in trainers.items()]
    return rows


def bench_levers(effort: Effort, peak: Peak, scheme: str = "rope") -> list[dict]:
    """Levers not on by default, each against the baseline in the same interleaved rounds."""
    from posenc_cli.data import load_corpus

    cfg = compose([f"scheme={scheme}", *effort.overrides])
    corpus = load_corpus(cfg["data"])
    trainers = {lever: Trainer(cfg, corpus.train, len(corpus.vocab), lever) for lever in LEVERS}
    best = interleaved_best(trainers, effort, peak, f"levers ({scheme})")
    baseline = best["baseline"]["tokens_per_s"]
    return [{**training_row("lever", "default", scheme, lever, cfg, trainer.model, best[lever]),
             "vs_baseline": best[lever]["tokens_per_s"] / baseline} for lever, trainer in trainers.items()]


def training_row(section: str, config_name: str, scheme: str, lever: str, cfg: dict, model, measured: dict[str, float]) -> dict:
    T = cfg["train"]["block_size"]
    return {"section": section, "config": config_name, "scheme": scheme,
            "lever": lever, "length": T, "batch": cfg["train"]["batch_size"], "n_layer": cfg["model"]["n_layer"],
            "n_embd": cfg["model"]["n_embd"], "flops_per_token": flops_per_token(model, T), **measured}


def eval_case(cfg: dict[str, Any], vocab_size: int, length: int, n_tokens: int) -> dict[str, float]:
    """Score `n_tokens` random tokens in windows of `length`; run in a fresh process (see eval_in_subprocess)."""
    from posenc_cli.evaluate import evaluate_length
    from posenc_cli.model import GPT
    from posenc_cli.train import model_config

    torch.manual_seed(cfg["seed"])
    model = GPT(model_config(cfg, vocab_size)).eval()
    span = max(length, n_tokens // length * length)
    tokens = torch.randint(vocab_size, (span + 1,), generator=torch.Generator().manual_seed(0))
    idle_kib = peak_rss_kib()
    evaluate_length(model, tokens[: length + 1], span=length, length=length)  # warm-up: one window
    start = time.perf_counter()
    evaluate_length(model, tokens, span=span, length=length)
    seconds = time.perf_counter() - start
    peak_kib = peak_rss_kib()
    return {"tokens_per_s": span / seconds, "peak_rss_mib": peak_kib / 1024, "eval_rss_mib": (peak_kib - idle_kib) / 1024}


def peak_rss_kib() -> int:
    """This process's peak resident memory: VmHWM on Linux (ru_maxrss there starts from the parent's
    RSS at fork), ru_maxrss elsewhere (KiB on Linux, bytes on macOS)."""
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return maxrss // 1024 if sys.platform == "darwin" else maxrss


def child_env() -> dict[str, str]:
    """The environment for a child Python that imports this very package."""
    package_root = str(Path(__file__).resolve().parents[1])
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}


def eval_in_subprocess(cfg: dict[str, Any], vocab_size: int, length: int, n_tokens: int) -> dict[str, float]:
    """eval_case in a new interpreter, so the peak RSS is this case's and no other's."""
    code = ("import json, sys; from posenc_cli.bench import eval_case; "
            "print(json.dumps(eval_case(*json.loads(sys.argv[1]))))")
    done = subprocess.run([sys.executable, "-c", code, json.dumps([cfg, vocab_size, length, n_tokens])],
                          capture_output=True, text=True, env=child_env(), check=False)
    if done.returncode:
        raise RuntimeError(f"evaluation case {cfg['scheme']['name']} @ {length} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def bench_eval(schemes: list[str], effort: Effort) -> list[dict]:
    """Evaluation tokens/s and peak RSS per scheme at 1x, 8x, 32x the default training length."""
    from posenc_cli.data import load_corpus
    from posenc_cli.model.positional import build_scheme

    rows = []
    cfgs = {s: compose([f"scheme={s}", *effort.overrides]) for s in schemes}
    vocab_size = len(load_corpus(cfgs[schemes[0]]["data"]).vocab)
    with ui.progress() as bar:
        task = bar.add_task("eval", total=len(schemes) * len(EVAL_MULTIPLES), status="")
        for multiple in EVAL_MULTIPLES:
            for scheme, cfg in cfgs.items():
                train_len = cfg["train"]["block_size"]
                length = multiple * train_len
                bar.update(task, status=f"{scheme} @ {length}")
                options = {k: v for k, v in cfg["scheme"].items() if k != "name"}
                limit = build_scheme(scheme, cfg["model"]["n_embd"], cfg["model"]["n_head"], train_len, **options).max_len
                row = {"section": "eval", "config": "default", "scheme": scheme, "length": length, "multiple": multiple}
                if limit is not None and length > limit:
                    row["note"] = f"positions past max_len={limit}"
                else:
                    row.update(eval_in_subprocess(cfg, vocab_size, length, effort.eval_tokens))
                rows.append(row)
                bar.advance(task)
    return rows


def bench_main_job(quick: bool) -> list[dict]:
    """Wall time of the README's main job (--quick: the same commands on experiment=smoke)."""
    rows, work = [], Path(tempfile.mkdtemp(prefix="posenc-main-job-"))
    try:
        for args in MAIN_JOB:
            args = [*args, "experiment=smoke"] if quick and args[0] == "train" else list(args)
            ui.err.print(f"main job: posenc {' '.join(args)}")
            start = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "posenc_cli", *args], cwd=work, env=child_env(),
                                  capture_output=True, text=True, check=False)
            if done.returncode:
                raise RuntimeError(f"posenc {' '.join(args)} failed:\n{done.stderr[-2000:]}")
            rows.append({"section": "main_job", "config": " ".join(args), "seconds": time.perf_counter() - start})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows.append({"section": "main_job", "config": "total", "seconds": sum(r["seconds"] for r in rows)})
    return rows


def machine() -> dict[str, Any]:
    model = platform.processor() or platform.machine()
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
        model = next(line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": model, "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__, "isa": torch.backends.cpu.get_cpu_capability(),
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "unset"),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "load_avg_1min_at_start": round(os.getloadavg()[0], 2)}


def run_bench(quick: bool = False, main_job: bool = False, levers: bool = False,
              schemes: list[str] | None = None) -> tuple[pd.DataFrame, dict]:
    from posenc_cli.model.positional import SCHEMES

    effort = QUICK if quick else FULL
    schemes = schemes or list(SCHEMES)
    info = machine()
    peak = Peak(effort.gemm_size, effort.gemm_repeats)
    peak.measure()
    rows = bench_training(schemes, effort, peak)
    if levers:
        rows += bench_levers(effort, peak)
    for row in rows:
        row.update(gflops=row["tokens_per_s"] * row["flops_per_token"] / 1e9, mfu=row["tokens_per_s"] * row["flops_per_token"] / peak.flops)
    rows.insert(0, {"section": "gemm", "config": f"{peak.size}x{peak.size} fp32", "gflops": peak.flops / 1e9})
    rows += bench_eval(schemes, effort)
    if main_job:
        rows += bench_main_job(quick)
    info["load_avg_1min_at_end"] = round(os.getloadavg()[0], 2)
    return add_ratios(pd.DataFrame(rows)), info


def add_ratios(df: pd.DataFrame) -> pd.DataFrame:
    """tokens/s of each scheme over rope's at the same config and length."""
    df = df.copy()
    df["vs_rope"] = float("nan")
    compared = df[df["section"].isin(["train", "eval"]) & df["tokens_per_s"].notna()]
    for _, group in compared.groupby(["section", "config", "length"]):
        rope = group[group["scheme"] == "rope"]["tokens_per_s"]
        if len(rope):
            df.loc[group.index, "vs_rope"] = group["tokens_per_s"] / rope.iloc[0]
    return df


def targets(df: pd.DataFrame) -> list[list[str]]:
    """The issue's targets against this run's numbers: [target, measured, met]."""
    from posenc_cli.model.positional import SCHEMES

    def bias(scheme) -> bool:
        return SCHEMES[scheme].adds_bias

    train = df[(df["section"] == "train") & (df["config"] == "default")]
    rows = []
    plain = train[~train["scheme"].map(bias)]
    if len(plain):
        worst = plain.loc[plain["mfu"].idxmin()]
        rows.append([f"training MFU ≥ {TARGETS['train_mfu']:.0%} (default config, non-bias schemes)",
                     f"lowest {worst['mfu']:.1%} ({worst['scheme']})", worst["mfu"] >= TARGETS["train_mfu"]])
    biased = train[train["scheme"].map(bias)]
    if len(biased) and train["vs_rope"].notna().any():
        worst = biased.loc[biased["vs_rope"].idxmin()]
        rows.append([f"bias schemes within {1 - TARGETS['bias_vs_rope']:.0%} of rope's training tokens/s",
                     f"lowest {worst['vs_rope']:.2f}× rope ({worst['scheme']})", worst["vs_rope"] >= TARGETS["bias_vs_rope"]])
    nano = df[(df["section"] == "train") & (df["config"] == "nanogpt-cpu")]
    if len(nano):
        worst = nano.loc[nano["tokens_per_s"].idxmin()]
        rows.append([f"nanoGPT CPU config ≥ {TARGETS['nanogpt_tokens_per_s']:,.0f} tokens/s (1.2 × nanoGPT's 19k on CI's CPU)",
                     f"lowest {worst['tokens_per_s']:,.0f} ({worst['scheme']})", worst["tokens_per_s"] >= TARGETS["nanogpt_tokens_per_s"]])
    longest = df[(df["section"] == "eval") & (df["multiple"] == max(EVAL_MULTIPLES)) & df["peak_rss_mib"].notna()]
    if len(longest):
        worst = longest.loc[longest["peak_rss_mib"].idxmax()]
        gib = worst["peak_rss_mib"] / 1024
        rows.append([f"eval peak RSS at {max(EVAL_MULTIPLES)}× the training length < {TARGETS['eval_rss_gib']} GiB",
                     f"highest {gib:.2f} GiB ({worst['scheme']})", gib < TARGETS["eval_rss_gib"]])
    evals = df[(df["section"] == "eval") & df["vs_rope"].notna()]
    if len(evals):
        worst = evals.loc[evals["vs_rope"].idxmin()]
        slowdown = 1 / worst["vs_rope"]
        rows.append([f"eval: no scheme > {TARGETS['eval_slowdown']:.0f}× slower per token than rope",
                     f"slowest {slowdown:.2f}× ({worst['scheme']} @ {int(worst['length'])})", slowdown <= TARGETS["eval_slowdown"]])
    total = df[(df["section"] == "main_job") & (df["config"] == "total")]
    if len(total):
        seconds = total["seconds"].iloc[0]
        rows.append([f"README main job ≤ {TARGETS['main_job_s'] // 60} min", f"{seconds / 60:.1f} min", seconds <= TARGETS["main_job_s"]])
    return [[target, measured, "yes" if met else "**no**"] for target, measured, met in rows]


def render(df: pd.DataFrame, info: dict[str, Any]) -> str:
    def num(value, fmt: str) -> str:
        return "—" if pd.isna(value) else format(value, fmt)

    gemm = df[df["section"] == "gemm"].iloc[0]
    lines = [f"# posenc bench, {info['date']}", "",
             f"Machine: {info['cpu']}, {info['cores']} cores, torch {info['torch']} ({info['isa']}), "
             f"{info['torch_threads']} threads, OMP_WAIT_POLICY {info['omp_wait_policy']}; 1-min load average {info['load_avg_1min_at_start']} at start, "
             f"{info['load_avg_1min_at_end']} at end.", "",
             f"fp32 GEMM peak: **{gemm['gflops']:.1f} GFLOP/s** (best {gemm['config']} matmul of the run).", "",
             "## Training", "",
             "MFU = tokens/s × (6·N + 12·n_layer·d_model·T) / GEMM peak; N = non-positional parameters, tied "
             "embedding counted once. Each scheme's best of several interleaved rounds.", ""]
    train = df[df["section"] == "train"]
    lines.append(markdown_table(
        ["config", "scheme", "n_layer × d_model", "T", "batch", "tokens/s", "GFLOP/s", "MFU", "vs rope"],
        [[r.config, r.scheme, f"{int(r.n_layer)} × {int(r.n_embd)}", int(r.length), int(r.batch),
          f"{r.tokens_per_s:,.0f}", f"{r.gflops:.1f}", f"{r.mfu:.1%}", num(r.vs_rope, ".2f")] for r in train.itertuples()]))
    levers = df[df["section"] == "lever"]
    if len(levers):
        lines += ["## Levers (default config, not on by default)", "",
                  "Each lever against the baseline in the same interleaved rounds; first step = warm-up step "
                  "(includes torch.compile's compile time).", ""]
        lines.append(markdown_table(
            ["scheme", "lever", "tokens/s", "vs baseline", "MFU", "first step (s)"],
            [[r.scheme, r.lever, f"{r.tokens_per_s:,.0f}", f"{r.vs_baseline:.2f}", f"{r.mfu:.1%}", f"{r.first_step_s:.1f}"]
             for r in levers.itertuples()]))
    lines += ["## Evaluation", "", "Default model, untrained weights, every case in a fresh process. "
              "RSS growth = peak RSS minus the process's peak before evaluating.", ""]
    evals = df[df["section"] == "eval"]
    lines.append(markdown_table(
        ["scheme", "length", "× train", "tokens/s", "vs rope", "peak RSS (MiB)", "RSS growth (MiB)", "note"],
        [[r.scheme, int(r.length), int(r.multiple), num(r.tokens_per_s, ",.0f"), num(r.vs_rope, ".2f"),
          num(r.peak_rss_mib, ",.0f"), num(r.eval_rss_mib, ",.0f"), "" if pd.isna(r.note) else r.note]
         for r in evals.itertuples()]))
    main = df[df["section"] == "main_job"]
    if len(main):
        lines += ["## README main job", ""]
        lines.append(markdown_table(["command", "seconds"], [[f"posenc {r.config}" if r.config != "total" else "total",
                                                             f"{r.seconds:.0f}"] for r in main.itertuples()]))
    lines += ["## Targets", "", markdown_table(["target", "measured", "met"], targets(df))]
    return "\n".join(lines)


def write_outputs(df: pd.DataFrame, info: dict[str, Any], out: Path) -> str:
    markdown = render(df.reindex(columns=list(dict.fromkeys([*df.columns, *COLUMNS]))), info)
    write_with(out / "bench.csv", lambda p: df.to_csv(p, index=False))
    write_text(out / "bench.md", markdown)
    return markdown

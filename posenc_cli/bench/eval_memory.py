"""Evaluation speed and peak memory per scheme and length, each case in a fresh process so its
peak resident memory is its own."""

from __future__ import annotations

import json
import resource
import sys
import time
from typing import Any

import torch

from posenc_cli.bench.processes import child_env, timed
from posenc_cli.bench.train_speed import at_depth, compose
from posenc_cli.config.schema import check_keys
from posenc_cli.core import ui
from posenc_cli.data import load_corpus
from posenc_cli.evaluation.perplexity import LogitsScorer, evaluate_length
from posenc_cli.model import GPT
from posenc_cli.model.positional import build_scheme, past_max_len
from posenc_cli.training.session import model_config

EVAL_MULTIPLES = (1, 8, 32)  # evaluation lengths, in multiples of the training length


def eval_case(cfg: dict[str, Any], vocab_size: int, length: int, *, n_tokens: int) -> dict[str, float]:
    """Score `n_tokens` random tokens in windows of `length` with the model of `cfg` (a composed config,
    typed here); run in a fresh process (see eval_in_subprocess)."""

    typed = check_keys(cfg)
    torch.manual_seed(typed.seed)
    model = LogitsScorer(GPT(model_config(typed, vocab_size)).eval())
    span = max(length, n_tokens // length * length)
    tokens = torch.randint(vocab_size, (span + 1,), generator=torch.Generator().manual_seed(0))
    idle_kib = peak_rss_kib()
    evaluate_length(model, tokens[: length + 1], span=length, length=length)  # warm-up: one window
    start = time.perf_counter()
    evaluate_length(model, tokens, span=span, length=length)
    seconds = time.perf_counter() - start
    peak_kib = peak_rss_kib()
    return {
        "tokens_per_s": span / seconds,
        "peak_rss_mib": peak_kib / 1024,
        "eval_rss_mib": (peak_kib - idle_kib) / 1024,
    }


def peak_rss_kib() -> int:
    """This process's peak resident memory: VmHWM on Linux (ru_maxrss there starts from the parent's
    RSS at fork), ru_maxrss elsewhere (KiB on Linux, bytes on macOS)."""
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return maxrss // 1024 if sys.platform == "darwin" else maxrss


def eval_in_subprocess(
    cfg: dict[str, Any], vocab_size: int, length: int, *, n_tokens: int, scheme: str
) -> dict[str, float]:
    """eval_case in a new interpreter, so the peak RSS is this case's and no other's."""
    code = (
        "import json, sys; from posenc_cli.bench.eval_memory import eval_case; "
        "print(json.dumps(eval_case(**json.loads(sys.argv[1]))))"
    )
    _, stdout = timed(
        [
            sys.executable,
            "-c",
            code,
            json.dumps({"cfg": cfg, "vocab_size": vocab_size, "length": length, "n_tokens": n_tokens}),
        ],
        cwd=None,
        what=f"evaluation case {scheme} @ {length}",
        env=child_env(),
    )
    return json.loads(stdout.strip().splitlines()[-1])


def bench_eval(schemes: list[str], effort) -> list[dict]:
    """Evaluation tokens/s and peak RSS per scheme at 1x, 8x, 32x the default training length."""

    rows = []
    # for the cases' processes; a preset deeper than the default model, at the depth it builds at
    cfgs = {s: compose(at_depth([f"scheme={s}", *effort.overrides])) for s in schemes}
    typed = {s: check_keys(cfg) for s, cfg in cfgs.items()}
    vocab_size = len(load_corpus(typed[schemes[0]].data).tokenizer)
    with ui.progress() as bar:
        task = bar.add_task("eval", total=len(schemes) * len(EVAL_MULTIPLES), status="")
        for multiple in EVAL_MULTIPLES:
            for scheme, cfg in cfgs.items():
                train_len, size = typed[scheme].train.block_size, typed[scheme].model
                length = multiple * train_len
                bar.update(task, status=f"{scheme} @ {length}")
                options = typed[scheme].scheme_options
                limit = build_scheme(
                    scheme, size.n_embd, size.n_head, block_size=train_len, **options
                ).max_len
                row = {
                    "section": "eval",
                    "config": "default",
                    "scheme": scheme,
                    "n_layer": size.n_layer,
                    "length": length,
                    "multiple": multiple,
                }
                if unreadable := past_max_len(limit, length):
                    row["note"] = unreadable
                else:
                    row.update(
                        eval_in_subprocess(
                            cfg, vocab_size, length, n_tokens=effort.eval_tokens, scheme=scheme
                        )
                    )
                rows.append(row)
                bar.advance(task)
    return rows

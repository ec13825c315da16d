"""Time and peak memory of each training-free context extension's attention against plain attention,
one attention layer of SmolLM2-135M's shape (9 query heads over 3 key-value heads, 64 dims) at
--length tokens, each method in a fresh process so its peak resident memory is its own.

    python scripts/extension_cost.py --length 16384 [--repeats 2]

Prints a markdown table: seconds per layer (best of --repeats), peak memory beyond the inputs measured,
and what the memory models predict for it: plain attention's measured peak plus the extension's
ContextExtension.extra_bytes."""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from datetime import date

METHODS = ("plain", "logn", "self_extend", "rerope", "leaky_rerope", "dca")
HEADS, KV_HEADS, HEAD_DIM, TRAIN_LEN = 9, 3, 64, 8192  # SmolLM2-135M


def one_case(method: str, length: int, repeats: int) -> dict:
    """In this process: the inputs, then the attention `repeats` times; seconds and peak RSS growth."""
    import torch
    import torch.nn.functional as F

    from posenc_cli.bench.eval_memory import peak_rss_kib
    from posenc_cli.model.attention import attend
    from posenc_cli.model.extension.method import ExtensionSettings, parse_method
    from posenc_cli.model.layer_attention import LayerAttention
    from posenc_cli.model.positional.rope import RoPE

    torch.manual_seed(0)
    q = torch.randn(1, HEADS, length, HEAD_DIM)
    k, v = (torch.randn(1, KV_HEADS, length, HEAD_DIM).repeat_interleave(HEADS // KV_HEADS, 1) for _ in "kv")
    rotation = RoPE(HEADS * HEAD_DIM, HEADS, TRAIN_LEN).rotation(length)
    extension = None if method == "plain" else parse_method(method, ExtensionSettings()).extension(TRAIN_LEN)
    idle = peak_rss_kib()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        if extension is None:
            F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            attend(q, k, v, layer=LayerAttention.of_extension(extension), rotation=rotation)
        best = min(best, time.perf_counter() - start)
    extra = extension.extra_bytes(batch=1, heads=HEADS, length=length, head_dim=HEAD_DIM) if extension else 0
    return {"seconds": best, "peak_mib": (peak_rss_kib() - idle) / 1024, "extra_mib": extra / 2**20}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=16384)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--case", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        print(json.dumps(one_case(args.case, args.length, args.repeats)))
        return
    print(
        f"`python scripts/extension_cost.py --length {args.length} --repeats {args.repeats}`, "
        f"{platform.processor() or platform.machine()}, {date.today()}\n"
    )
    print("| method | s per layer | × plain | peak MiB beyond inputs | predicted MiB |")
    print("|---|---|---|---|---|")
    plain = plain_peak = None
    for method in METHODS:
        command = [
            sys.executable,
            __file__,
            "--case",
            method,
            "--length",
            str(args.length),
            "--repeats",
            str(args.repeats),
        ]
        result = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
        plain = plain or result["seconds"]
        plain_peak = plain_peak if plain_peak is not None else result["peak_mib"]
        print(
            f"| {method} | {result['seconds']:.2f} | {result['seconds'] / plain:.2f} | "
            f"{result['peak_mib']:.0f} | {plain_peak + result['extra_mib']:.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()

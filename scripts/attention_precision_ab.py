"""The lever of docs/performance.md's AVX-512-BF16 section: a bf16-autocast training step with SDPA in
bf16 (what autocast does) against the same step with SDPA's inputs cast to fp32, alternated in one
process (6 rounds of 10 steps, medians), at the default config. Not a posenc setting: a measurement.

    python scripts/attention_precision_ab.py [rope,alibi,none]
"""

from __future__ import annotations

import statistics
import sys
import time

import torch
import torch.nn.functional as F

from posenc_cli.bench.train_speed import compose
from posenc_cli.config.schema import check_keys
from posenc_cli.model import GPT
from posenc_cli.training.session import make_optimizer, model_config, train_step

AUTOCAST_SDPA = F.scaled_dot_product_attention
ROUNDS, STEPS, VOCAB = 6, 10, 65


def fp32_sdpa(q, k, v, attn_mask=None, **options):
    """SDPA in fp32 inside bf16 autocast: the inputs cast up, the output cast back."""
    if q.dtype == torch.float32:
        return AUTOCAST_SDPA(q, k, v, attn_mask=attn_mask, **options)
    if attn_mask is not None and attn_mask.dtype != torch.bool:
        attn_mask = attn_mask.float()
    with torch.autocast("cpu", enabled=False):
        return AUTOCAST_SDPA(q.float(), k.float(), v.float(), attn_mask=attn_mask, **options).to(q.dtype)


def step_ms(scheme: str) -> dict[str, float]:
    cfg = check_keys(compose([f"scheme={scheme}"]))  # the config `posenc train scheme=S` runs, typed
    model = GPT(model_config(cfg, VOCAB))
    optimizer = make_optimizer(model, cfg.train)
    x = torch.randint(0, VOCAB, (cfg.train.batch_size, cfg.train.block_size + 1))
    batch, cpu = (x[:, :-1], x[:, 1:], None), torch.device("cpu")

    def timed(sdpa, steps: int) -> float:
        F.scaled_dot_product_attention = sdpa
        start = time.perf_counter()
        for _ in range(steps):
            train_step(model, optimizer, batch, device=cpu, precision="bf16-autocast", grad_clip=1.0)
        return (time.perf_counter() - start) / steps * 1000

    paths = {"bf16 SDPA": AUTOCAST_SDPA, "fp32 SDPA": fp32_sdpa}
    for sdpa in paths.values():
        timed(sdpa, 3)  # warm-up
    times = {name: [] for name in paths}
    for round_ in range(ROUNDS):
        for name in list(paths)[:: 1 if round_ % 2 == 0 else -1]:
            times[name].append(timed(paths[name], STEPS))
    F.scaled_dot_product_attention = AUTOCAST_SDPA
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    print(f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, {torch.get_num_threads()} threads")
    for scheme in (sys.argv[1] if len(sys.argv) > 1 else "rope,alibi,none").split(","):
        ms = step_ms(scheme)
        print(f"{scheme}: " + ", ".join(f"{name} {value:.1f} ms a step" for name, value in ms.items()))


if __name__ == "__main__":
    main()

"""posenc bench's precision section alone (docs/performance.md): auto and every pinned train.precision at the
default config and at nanoGPT's CPU recipe, through the training path, auto measuring afresh in a new cache
file.

    python scripts/bench_precision.py
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from posenc_cli.bench import FULL
from posenc_cli.bench.train_speed import bench_precision


def main() -> None:
    print(f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, 1-min load {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as cache:
        rows = bench_precision(FULL, Path(cache) / "precision.json")
    print("| config | asked | computed in | tokens/s | vs the fastest | why |\n|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['config']} | {r['asked']} | {r['effective']} | {r['tokens_per_s']:,.0f} | {r['vs_best']:.2f} | {r['reason']} |"
        )


if __name__ == "__main__":
    main()

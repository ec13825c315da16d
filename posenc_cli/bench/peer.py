"""posenc beside nanoGPT: whole `posenc train` processes against nanoGPT's README CPU recipe (its own
files, run by the peer directory's run.sh), the same steps, alternated pair by pair so load changes
hit both. Users without the peer directory get a note saying the side-by-side was skipped."""

from __future__ import annotations

import os
import re
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from posenc_cli.bench.processes import child_env, posenc, timed
from posenc_cli.core import ui
from posenc_cli.rundir.summary import read_summary

# nanoGPT's recipe in posenc's terms: 4 layers, 4 heads, 128 dims (model=small), block 64, batch 12
RECIPE = ("scheme=learned", "model=small", "train.block_size=64", "train.batch_size=12", "data=text")
BATCH, BLOCK = 12, 64
NANOGPT_LOSS = re.compile(r"^iter (\d+): loss ([\d.]+)", re.M)


def peer_files(peer: Path) -> tuple[Path, Path] | None:
    """run.sh and the Tiny Shakespeare text it trains on (../../data/ from the peer), or None."""
    peer = peer.resolve()  # both run from a directory of their own
    run_sh, text = peer / "run.sh", peer.parent.parent / "data" / "tinyshakespeare.txt"
    return (run_sh, text) if run_sh.is_file() and text.is_file() else None


def side_by_side(peer: Path | None, effort, info: dict) -> list[dict]:
    """effort.peer_pairs alternated pairs of whole-process runs; rows per run (section "peer")."""
    if peer is None:
        return []
    found = peer_files(peer)
    if found is None:
        info["peer"] = (
            f"nanoGPT side-by-side skipped: no peer at {peer} (it needs run.sh there and "
            "../../data/tinyshakespeare.txt beside it; pass --nanogpt DIR)"
        )
        ui.err.print(info["peer"])
        return []
    run_sh, text = found
    info["peer"] = f"nanoGPT: {peer.resolve()}"
    rows, work = [], Path(tempfile.mkdtemp(prefix="posenc-peer-"))
    try:
        for pair in range(effort.peer_pairs):
            order = (run_nanogpt, run_posenc) if pair % 2 == 0 else (run_posenc, run_nanogpt)
            for run in order:
                ui.err.print(
                    f"side by side, pair {pair + 1}/{effort.peer_pairs}: {run.__name__[4:]} "
                    f"{effort.peer_steps} steps"
                )
                rows.append(
                    {
                        "section": "peer",
                        "pair": pair,
                        "steps": effort.peer_steps,
                        **run(effort.peer_steps, run_sh=run_sh, text=text, work=work / f"{pair}"),
                    }
                )
    # a run that fails (or leaves no summary to read) costs this section, not the benchmark's others
    except (RuntimeError, OSError, KeyError, ValueError) as err:
        lines = str(err).strip().splitlines() or [type(err).__name__]
        said = lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"
        kept = f"{pair} whole pair{'s' * (pair > 1)} before it kept" if pair else "no whole pair"
        info["peer_stopped"] = f"The side-by-side stopped in pair {pair + 1}: {said} ({kept})."
        ui.err.print(info["peer_stopped"], markup=False, highlight=False)
        rows = [row for row in rows if row["pair"] < pair]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rows


def run_nanogpt(steps: int, *, run_sh: Path, text: Path, work: Path) -> dict:
    """run.sh uses `python` from PATH: this interpreter's, which has torch and numpy."""
    env = child_env(PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    work.mkdir(parents=True, exist_ok=True)
    seconds, stdout = timed(["bash", str(run_sh), str(steps)], cwd=work, what="nanoGPT's run.sh", env=env)
    losses = NANOGPT_LOSS.findall(stdout)
    last_iter, loss = losses[-1] if losses else (None, "nan")
    return {
        "config": "nanogpt",
        "seconds": seconds,
        "tokens_per_s": steps * BATCH * BLOCK / seconds,
        "train_loss": float(loss),
        "note": f"last logged train loss: iter {last_iter}",
    }


def run_posenc(steps: int, *, run_sh: Path, text: Path, work: Path) -> dict:
    """`posenc train` at nanoGPT's recipe, with posenc's default logging, validation and checkpoints."""
    run_dir = work / "posenc"
    seconds, _ = timed(
        posenc("train", *RECIPE, f"data.path={text}", f"train.max_steps={steps}", f"hydra.run.dir={run_dir}"),
        cwd=work.parent,
        what="posenc train (nanoGPT's recipe)",
    )
    outcome = read_summary(run_dir).outcome
    if outcome is None:
        raise RuntimeError(
            f"posenc train (nanoGPT's recipe) left {run_dir} without an outcome in its summary"
        )
    return {
        "config": "posenc",
        "seconds": seconds,
        "tokens_per_s": steps * BATCH * BLOCK / seconds,
        "train_loss": outcome.final_train_loss,
        "val_loss": outcome.final_val_loss,
        "note": "final train loss: mean of the last log interval",
    }


def speedup(df) -> float | None:
    """posenc's speed over nanoGPT's: the median over pairs of nanoGPT's wall time / posenc's."""
    peer = df[df["section"] == "peer"] if "section" in df else df.iloc[0:0]
    if peer.empty:
        return None
    walls = peer.pivot_table(index="pair", columns="config", values="seconds")
    return statistics.median((walls["nanogpt"] / walls["posenc"]).tolist())

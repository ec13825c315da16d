"""Tables and figures from evaluation results: ppl.csv, ppl.md, comparison.md, probe.csv and PNG plots.

Everything here is derived from a tidy DataFrame, so an eval directory can be deleted and rebuilt.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd

from posenc_cli.atomic import write_text, write_with
from posenc_cli.data.passkey import KEY_DIGITS as PASSKEY_DIGITS
from posenc_cli.model.positional import SCHEMES, claim_for

# Extrapolation verdicts from ppl(longest) / ppl(training length); the upper bound of each band.
VERDICTS = [(1.10, "very strong"), (1.50, "strong"), (3.0, "medium"), (10.0, "weak"), (math.inf, "none")]
BEYOND_TABLE = "—"


def verdict(ratio: float) -> str:
    if not math.isfinite(ratio):
        return "none"
    return next(word for bound, word in VERDICTS if ratio <= bound)


def scheme_of(label: str) -> str:
    """The scheme in a column label: 'rope+yarn' itself; a Hugging Face model's 'pythia-160m (rope+yarn)'
    -> 'rope+yarn'."""
    return label[label.rindex(" (") + 2 : -1] if label.endswith(")") and " (" in label else label


def scheme_order(schemes: Iterable[str]) -> list[str]:
    """SCHEMES' order, unknown schemes after, and each `rope+yarn`-style variant after its base;
    Hugging Face models ('gpt2 (learned)') after posenc's runs, by name."""
    order = list(SCHEMES)

    def key(label: str):
        scheme = scheme_of(label)
        model = label[: -len(scheme) - 3] if scheme != label else ""
        base, _, variant = scheme.partition("+")
        rank = order.index(base) if base in order else len(order)
        return model != "", model, rank, base, variant

    return sorted(dict.fromkeys(schemes), key=key)


def mean_std(values: pd.Series, digits: int = 2) -> str:
    values = values.dropna()
    if values.empty:
        return BEYOND_TABLE
    if len(values) == 1:
        return f"{values.iloc[0]:.{digits}f}"
    return f"{values.mean():.{digits}f} ± {values.std(ddof=1):.{digits}f}"


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def ppl_pivot(df: pd.DataFrame, value: str = "ppl", digits: int = 2) -> tuple[list[str], list[list[str]]]:
    """Scheme rows, eval-length columns, 'mean ± std' cells of `value` (ppl or bpb) over seeds."""
    lengths = sorted(df["eval_len"].unique())
    header = ["scheme", "seeds"] + [f"L={L}" + (" (train)" if L in set(df["train_len"]) else "") for L in lengths]
    rows = []
    for scheme in scheme_order(df["scheme"]):
        sub = df[df["scheme"] == scheme]
        rows.append([scheme, str(sub["seed"].nunique())]
                    + [mean_std(sub[sub["eval_len"] == L][value], digits) for L in lengths])
    return header, rows


def mixes_tokenizers(df: pd.DataFrame) -> bool:
    """Whether token perplexities in `df` are incomparable, so bits per byte must be shown beside them."""
    return "tokenizer" in df and df["tokenizer"].nunique() > 1


def scheme_facts(model) -> dict:
    """What comparison.md's "positional parameters" and "relative position" rows show for a model."""
    return {"positional_params": model.n_positional_params, "relative": model.scheme.relative}


def comparison(df: pd.DataFrame, info: dict[str, dict], *, lang: str = "en", passkey: pd.DataFrame | None = None) -> str:
    """The chapters' table, with measured numbers beside the claims (and passkey rows from a probe)."""
    schemes = scheme_order(df["scheme"])
    lengths = sorted(df["eval_len"].unique())
    train_len = int(df["train_len"].min())
    longest = max(lengths)
    rows: list[list[str]] = []
    for L in lengths:
        label = f"ppl @ {L}" + (" (training length)" if L == train_len else f" ({L / train_len:g}×)")
        rows.append([label] + [mean_std(df[(df.scheme == s) & (df.eval_len == L)]["ppl"]) for s in schemes])
    if mixes_tokenizers(df):
        rows += [[f"bits per byte @ {L}"]
                 + [mean_std(df[(df.scheme == s) & (df.eval_len == L)]["bpb"], digits=3) for s in schemes]
                 for L in lengths]
    ratios, words = [], []
    for s in schemes:
        sub = df[df.scheme == s].groupby("eval_len")["ppl"].mean()
        own = int(df[df.scheme == s]["train_len"].min())  # models from the hub have their own context
        ratio = sub.get(longest, math.nan) / sub.get(own, math.nan)
        ratios.append(f"{ratio:.2f}×" if math.isfinite(ratio) else BEYOND_TABLE)
        words.append(verdict(ratio))
    one_length = df["train_len"].nunique() == 1
    rows.append([f"ppl({longest}) / ppl({train_len if one_length else 'own training length'})"] + ratios)
    if passkey is not None:
        rows += passkey_rows(passkey, schemes)
    rows.append(["extrapolation, measured"] + words)
    claims = [claim_for(scheme_of(s)) for s in schemes]
    rows.append(["extrapolation, chapters' claim"] + [claim.extrapolation for claim in claims])
    if lang == "zh":
        rows.append(["外推能力（章节原话）"] + [claim.extrapolation_zh for claim in claims])
    rows.append(["positional parameters"] + [f"{info.get(s, {}).get('positional_params', 0):,}" for s in schemes])
    rows.append(["relative position"] + [info.get(s, {}).get("relative", relative_kind(s)) for s in schemes])
    rows.append(["used by"] + [info.get(s, {}).get("used_by", claim.used_by) for s, claim in zip(schemes, claims)])
    seeds = {s: df[df.scheme == s]["seed"].nunique() for s in schemes}
    mode = ", ".join(sorted(df["mode"].unique()))
    tokens = int(df["tokens"].max())
    notes = [
        f"Perplexity on {tokens:,} validation tokens at every length ({mode} windows); "
        + ("mean ± std over seeds: " + ", ".join(f"{s} n={n}" for s, n in seeds.items()) if max(seeds.values()) > 1 else "one seed each") + ".",
        "Verdict from ppl(longest)/ppl(training length): " + ", ".join(
            f"≤ {b:g}× {w}" if math.isfinite(b) else f"above: {w}" for b, w in VERDICTS) + ".",
    ]
    if passkey is not None:
        notes.append(passkey_note(passkey))
    notes += sorted(set(df[df["ppl"].notna()]["note"].dropna()) - {""})  # how a number was measured
    beyond = set(df[df["ppl"].isna()]["note"].dropna()) - {""}  # why there is no number
    if beyond:
        notes.append(f"{BEYOND_TABLE}: " + "; ".join(sorted(beyond)) + ".")
    return ("# Positional schemes: the chapters' table, measured\n\n"
            + markdown_table([""] + schemes, rows) + "\n" + "\n".join(f"- {n}" for n in notes) + "\n")


def relative_kind(label: str) -> str:
    """A scheme's relative-position kind from its class, for a label with no run facts at hand."""
    return SCHEMES[label].relative if label in SCHEMES else BEYOND_TABLE


def retrieval_by_length(passkey: pd.DataFrame) -> pd.DataFrame:
    """Percent retrieved per scheme, seed and length, averaged over depths (NaN past a learned table)."""
    return (passkey.groupby(["scheme", "seed", "length"])["accuracy"].mean() * 100).reset_index()


def passkey_rows(passkey: pd.DataFrame, schemes: list[str]) -> list[list[str]]:
    """Rows "passkey @ L": % of trials retrieved exactly, mean ± std over seeds."""
    by_length = retrieval_by_length(passkey)
    train_len = int(passkey["train_len"].min())
    rows = []
    for L in sorted(by_length["length"].unique()):
        label = f"passkey @ {L}" + (" (training length)" if L == train_len else f" ({L / train_len:.3g}×)")
        cells = by_length[by_length.length == L]
        rows.append([label] + [mean_std(cells[cells.scheme == s]["accuracy"], digits=0) for s in schemes])
    return rows


def passkey_note(passkey: pd.DataFrame) -> str:
    depths = ", ".join(f"{d:g}" for d in sorted(passkey["depth"].unique()))
    return (f"passkey: % of {int(passkey['trials'].max())} trials per depth (depths {depths}) whose "
            f"{PASSKEY_DIGITS}-digit key greedy decoding reproduced exactly (`posenc probe`).")


def plot_probe_heatmap(passkey: pd.DataFrame, scheme: str, path: Path) -> None:
    """Length x depth accuracy for one scheme, like the needle-in-a-haystack figures."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = passkey[passkey.scheme == scheme].pivot_table(index="depth", columns="length", values="accuracy",
                                                         aggfunc="mean", dropna=False) * 100
    fig, ax = plt.subplots(figsize=(1.1 * len(grid.columns) + 2, 0.55 * len(grid.index) + 1.6))
    ax.imshow(grid.to_numpy(dtype=float), cmap="RdYlGn", vmin=0, vmax=100, aspect="auto")
    ax.set_facecolor("lightgrey")
    for (i, j), value in np.ndenumerate(grid.to_numpy(dtype=float)):
        ax.text(j, i, BEYOND_TABLE if math.isnan(value) else f"{value:.0f}", ha="center", va="center", fontsize=9,
                color="white" if value < 20 or value > 85 else "black")
    ax.set_xticks(range(len(grid.columns)), [str(c) for c in grid.columns])
    ax.set_yticks(range(len(grid.index)), [f"{d:g}" for d in grid.index])
    ax.set_xlabel("prompt length (tokens)")
    ax.set_ylabel("key depth")
    ax.set_title(f"{scheme}: passkey retrieved (%), trained at {int(passkey['train_len'].min())}")
    fig.tight_layout()
    write_with(path, lambda p: fig.savefig(p, format="png", dpi=120))
    plt.close(fig)


def plot_probe_summary(passkey: pd.DataFrame, path: Path) -> None:
    """Accuracy vs length, one line per scheme, mean ± std over seeds (depths averaged)."""
    plot_by_length(retrieval_by_length(passkey), x="length", y="accuracy", train_len=int(passkey["train_len"].min()),
                   path=path, xlabel="prompt length (tokens)", ylabel="passkey retrieved (%)",
                   title="Passkey retrieval past the training length")


def write_probe_outputs(passkey: pd.DataFrame, info: dict[str, dict], out: Path, *, lang: str = "en") -> list[Path]:
    """probe.csv, one heatmap per scheme, the summary plot; comparison.md again if eval's ppl.csv is here."""
    out.mkdir(parents=True, exist_ok=True)
    write_with(out / "probe.csv", lambda p: passkey.to_csv(p, index=False))
    written = [out / "probe.csv"]
    for scheme in scheme_order(passkey["scheme"]):
        written.append(out / f"probe_{file_safe(scheme)}.png")
        plot_probe_heatmap(passkey, scheme, written[-1])
    written.append(out / "probe_summary.png")
    plot_probe_summary(passkey, written[-1])
    if (out / "ppl.csv").is_file():
        write_text(out / "comparison.md", comparison(pd.read_csv(out / "ppl.csv"), info, lang=lang, passkey=passkey))
        written.append(out / "comparison.md")
    return written


def file_safe(label: str) -> str:
    """A column label as part of a file name: 'rope+yarn' stays, 'EleutherAI/pythia-160m (rope)' ->
    'EleutherAI_pythia-160m_rope'."""
    return re.sub(r"[^A-Za-z0-9+._-]+", "_", label).strip("_")


def plot_ppl_vs_length(df: pd.DataFrame, path: Path) -> None:
    plot_by_length(df, x="eval_len", y="ppl", train_len=int(df["train_len"].min()), path=path,
                   xlabel="evaluation length (tokens)", ylabel="perplexity",
                   title="Perplexity past the training length", log_y=True)


def scheme_axes(n_schemes: int):
    """A figure whose colour cycle has a distinct colour per scheme (tab10, or tab20 past ten)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    ax.set_prop_cycle(color=plt.get_cmap("tab10" if n_schemes <= 10 else "tab20").colors)
    return fig, ax


def finish_figure(fig, ax, *, train_len: int, xlabel: str, ylabel: str, title: str, path: Path) -> None:
    """Mark the training length, label, and write the PNG atomically."""
    import matplotlib.pyplot as plt

    ax.axvline(train_len, color="grey", linestyle="--", linewidth=1, label="training length")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    write_with(path, lambda p: fig.savefig(p, format="png", dpi=120))
    plt.close(fig)


def plot_by_length(df: pd.DataFrame, *, x: str, y: str, train_len: int, path: Path, xlabel: str, ylabel: str,
                   title: str, log_y: bool = False) -> None:
    """One line per scheme of y against length x (log 2 axis), mean ± std over seeds."""
    schemes = scheme_order(df["scheme"])
    fig, ax = scheme_axes(len(schemes))
    for scheme in schemes:
        stats = df[df.scheme == scheme].groupby(x)[y].agg(["mean", "std"]).dropna(subset=["mean"])
        ax.errorbar(stats.index, stats["mean"], yerr=stats["std"].fillna(0), marker="o", capsize=3, label=scheme)
    ax.set_xscale("log", base=2)
    if log_y:
        ax.set_yscale("log")
    finish_figure(fig, ax, train_len=train_len, xlabel=xlabel, ylabel=ylabel, title=title, path=path)


def plot_loss_by_position(positions: pd.DataFrame, train_len: int, path: Path) -> None:
    """Mean NLL by position inside the longest window, seeds averaged: where a scheme breaks."""
    longest = positions["eval_len"].max()
    sub = positions[positions.eval_len == longest]
    schemes = scheme_order(sub["scheme"])
    fig, ax = scheme_axes(len(schemes))
    for scheme in schemes:
        curve = sub[sub.scheme == scheme].groupby("position")["nll"].mean()
        ax.plot(curve.index, curve.values, label=scheme)
    finish_figure(fig, ax, train_len=train_len, xlabel=f"position inside a window of {longest} tokens",
                  ylabel="mean NLL (nats)", title="Loss by position: where a scheme breaks", path=path)


def write_eval_outputs(df: pd.DataFrame, positions: pd.DataFrame, info: dict[str, dict], out: Path, *, lang: str = "en") -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    write_with(out / "ppl.csv", lambda p: df.to_csv(p, index=False))
    write_with(out / "loss_by_position.csv", lambda p: positions.to_csv(p, index=False))
    header, rows = ppl_pivot(df)
    text = "# Perplexity by evaluation length\n\n" + markdown_table(header, rows)
    if mixes_tokenizers(df):  # per-token perplexities of different tokenizers do not compare
        header, rows = ppl_pivot(df, "bpb", digits=3)
        text += "\n# Bits per byte by evaluation length\n\n" + markdown_table(header, rows)
    write_text(out / "ppl.md", text)
    passkey = pd.read_csv(out / "probe.csv") if (out / "probe.csv").is_file() else None
    write_text(out / "comparison.md", comparison(df, info, lang=lang, passkey=passkey))
    plot_ppl_vs_length(df, out / "ppl_vs_length.png")
    if not positions.empty:
        plot_loss_by_position(positions, int(df["train_len"].min()), out / "loss_by_position.png")
    return [out / n for n in ("ppl.csv", "ppl.md", "comparison.md", "loss_by_position.csv", "ppl_vs_length.png", "loss_by_position.png")]

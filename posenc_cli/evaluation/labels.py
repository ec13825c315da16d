"""What names a column of a result: a structured `Label`, made where the model is known (a posenc run or
an `hf:` model), so that tables and figures read its parts instead of parsing a string; and which runs
are one column: seeds of one setting (`run_setting`, `distinctions`), never different trainings."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Iterable

from posenc_cli.config.resumable import leaves
from posenc_cli.core.errors import UsageError
from posenc_cli.data.tokenizers import TOKENIZERS
from posenc_cli.model.positional import SCHEMES
from posenc_cli.rundir.loading import LoadedRun


@dataclass(frozen=True)
class Variant:
    """What a column computes beyond its scheme as named, for posenc's runs and `hf:` models alike: the
    scheme's options off their defaults, a RoPE scaling and the --rope-factor it was asked with,
    randomized positions, a position table read past its end through windows."""

    options: tuple[str, ...] = ()  # the scheme's label_options: interleaved, unscaled, per-layer
    scaling: str = ""  # the RoPE scaling it computes with (rope_scaling.py's methods); "" none
    factor: float | None = None  # --rope-factor, where it applies to `scaling`: the column's `(s=4)`
    extension: tuple[str, ...] = ()  # its training-free context extension: (self_extend,), (dca, logn)
    settings: tuple[tuple[str, str], ...] = ()  # the extension's parameters: (("G", "8"), ("W", "1024"))
    randomized: bool = False  # trained with train.positions=randomized (task runs)
    overflow: str = ""  # window: a position table scored past its end through windows of its size

    @property
    def parts(self) -> tuple[str, ...]:
        """What the column's name adds after its scheme, in order: `interleaved`, `yarn`, `window`."""
        flags = (self.scaling, *self.extension, "randomized" if self.randomized else "", self.overflow)
        return self.options + tuple(flag for flag in flags if flag)


@dataclass(frozen=True)
class Label:
    """A column: `rope`, `rope+yarn`, `learned+window`, `rope [bpe]`, `smollm2 (rope+yarn)`.

    Built once, where the model is known (RunTarget, HFModel), and compared, hashed and grouped by its
    fields; its text is what tables show, never read back (results.json keeps the fields)."""

    scheme: tuple[str, ...]  # the positional scheme as built, by its parts: (rope,), (sinusoidal, learned)
    variant: Variant = Variant()
    model: str = ""  # a pretrained model's short name (hf:); "" for posenc's own runs
    tokenizer: str = ""  # set where a table mixes posenc's tokenizers
    distinct: tuple[tuple[str, str], ...] = ()  # (key, value) that set this column's runs apart from
    # other runs of its scheme in the table (run_setting): `rope (train.block_size=128)`
    context: int | None = None  # --hf-context: the training length pretended, where not its config's

    def __post_init__(self) -> None:
        if isinstance(self.scheme, str) or not isinstance(self.variant, Variant):
            raise TypeError(f"a Label is built of names and a Variant, never of text: {self.scheme!r}")

    @property
    def positional(self) -> str:
        """The scheme with its variant, as the chapters' claims are keyed: `rope+yarn`."""
        return "+".join(self.scheme + self.variant.parts)

    @property
    def family(self) -> str:
        """The scheme a figure colours the column by: a composite takes its first part's colour."""
        return self.scheme[0]

    @property
    def beyond_family(self) -> tuple[str, ...]:
        """What the column adds to its family: (yarn,) for rope+yarn, (learned,) for sinusoidal+learned;
        tables order and figures style the columns of one family by it."""
        return self.scheme[1:] + self.variant.parts

    @property
    def marks(self) -> tuple[tuple[str, str], ...]:
        """The (key, value) pairs the column's name shows in parentheses: its distinctions, the factor
        of its scaling, the context --hf-context pretends."""
        factor = (("s", f"{self.variant.factor:g}"),) if self.variant.factor is not None else ()
        context = (("hf-context", str(self.context)),) if self.context is not None else ()
        return self.distinct + factor + self.variant.settings + context

    def __str__(self) -> str:
        text = f"{self.model} ({self.positional})" if self.model else self.positional
        if self.marks:
            text += " (" + ", ".join(f"{key}={value}" for key, value in self.marks) + ")"
        return f"{text} [{self.tokenizer}]" if self.tokenizer else text

    def __lt__(self, other: Label) -> bool:  # pandas sorts group keys: by the text shown, as tables do
        return str(self) < str(other)


def mixes_own_tokenizers(targets) -> bool:
    """Whether posenc's own runs among `targets` use more than one tokenizer (Hugging Face models are
    named by their model, so they never need the tokenizer in their label)."""
    return len({t.tokenizer_name for t in targets if t.tokenizer_name in TOKENIZERS}) > 1


def with_tokenizer(label: Label, tokenizer: str, mixed: bool) -> Label:
    """The label a column shows: with its tokenizer (`rope [bpe]`) where the table mixes posenc's own."""
    return replace(label, tokenizer=tokenizer) if mixed and tokenizer in TOKENIZERS else label


def pretended_context(target) -> int | None:
    """A column's pretended context: the training length --hf-context gives a model where it is not its
    own config's, which every multiple and grade of the column is read against (`(hf-context=256)`)."""
    return target.train_len if target.train_len != target.real_context else None


def scheme_order(columns: Iterable[Label]) -> list[Label]:
    """SCHEMES' order, unknown schemes after; within a scheme, what sets a column apart from its base
    (`rope+ntk`, `learned+window`, `sinusoidal+learned`) in the order `columns` first shows it, which is
    the order it was asked for and scored in (`--rope-scaling none,linear,ntk`: rope, rope+linear,
    rope+ntk); each scheme's tokenizers side by side; Hugging Face models ('gpt2 (learned)') after
    posenc's runs, by name."""
    order = list(SCHEMES)
    columns = list(dict.fromkeys(columns))
    asked: dict[tuple[str, tuple[str, ...]], int] = {}  # (family, what the column adds) -> when first shown
    for label in columns:
        asked.setdefault((label.family, label.beyond_family), len(asked))

    def key(label: Label):
        rank = order.index(label.family) if label.family in order else len(order)
        marks = tuple((k, natural(v)) for k, v in label.marks)
        return (
            label.model != "",
            label.model,
            rank,
            label.family,
            asked[label.family, label.beyond_family],
            label.tokenizer,
            marks,
        )

    return sorted(columns, key=key)


def natural(value: str) -> tuple:
    """A setting's value as it sorts: numbers by size (64 before 128), then text."""
    try:
        return (0, float(value), "")
    except ValueError:
        return (1, 0.0, value)


def differing(settings: Iterable[dict[str, str]], *, skip: str | None = None) -> list[str]:
    """The keys whose values differ among `settings` (a key some settings lack is compared among those
    that have it: a run recorded before a key existed), but those starting with `skip`."""
    values: dict[str, set[str]] = {}
    for setting in settings:
        for key, value in setting.items():
            values.setdefault(key, set()).add(value)
    return sorted(k for k, v in values.items() if len(v) > 1 and not (skip and k.startswith(skip)))


# Recorded config keys that do not change what a run learns, left out when runs are compared (a seed is
# the one key that makes runs seeds of one model; precision is footnoted by the report instead).
NOT_LEARNED = (
    "seed",
    "device",
    "logger",
    "train.threads",
    "train.log_interval",
    "train.eval_interval",
    "train.eval_batches",
    "train.checkpoint_interval",
    "train.resume",
    "train.precision",
    "data.cache_dir",
)
NOT_LEARNED_PREFIXES = tuple(f"{key}." for key in NOT_LEARNED)  # logger.csv, logger.wandb.project


def flat(config: dict) -> dict[str, str]:
    """A nested config as `train.block_size` -> its value as text (json for all but strings)."""
    return {
        key: value if isinstance(value, str) else json.dumps(same_number(value), sort_keys=True)
        for key, value in leaves(config)
    }


def same_number(value):
    """10000.0 as 10000: a value given as a float or an int is one setting (scheme.base=10000)."""
    return int(value) if isinstance(value, float) and value.is_integer() and abs(value) < 2**53 else value


def run_setting(run: LoadedRun) -> dict[str, str]:
    """What a run was trained as, but its seed: its recorded config without NOT_LEARNED, its corpus and
    its tokenizer. Runs with equal settings are seeds of one model; a run from before posenc recorded
    its config is described by what its record has (model, scheme, training length, data)."""
    record = run.record
    config = record.config
    if config is None:
        model = dict(record.model_config)
        scheme = {"name": model.pop("scheme", None), **(model.pop("scheme_options", None) or {})}
        model.pop("vocab_size", None), model.pop("block_size", None)  # the tokenizer's; the training length
        config = {
            "scheme": scheme,
            "model": model,
            "train": {"block_size": record.train_len},
            "data": record.data,
        }
    setting = {
        k: v
        for k, v in flat(config).items()
        if not k.startswith(NOT_LEARNED_PREFIXES) and k not in NOT_LEARNED
    }
    setting["corpus"] = (record.corpus_sha256 or "generated")[:12]
    setting["tokenizer"] = run.tokenizer.fingerprint[:12]
    return setting


@dataclass(frozen=True)
class Distinction:
    """What sets one run apart in a table: `within`, the (key, value) pairs that part it from other
    runs of its scheme (its column's Label.distinct; no pairs: it pools with them as seeds), and
    `differs`, json of every key in which it differs from any other run of the table (ppl.csv's column,
    which comparison.md's note reads)."""

    within: tuple[tuple[str, str], ...] = ()
    differs: str = ""


def distinctions(runs: list, mixed: bool) -> dict[int, Distinction]:
    """Per run (by id): runs are seeds of one column only when their settings are equal but the seed
    (run_setting); scheme options are compared within a scheme only. Models posenc did not
    train have no setting and are set apart by their names."""
    settings = {id(run): run_setting(run) for run in runs if isinstance(run, LoadedRun)}
    refuse_repeats([run for run in runs if id(run) in settings], settings)
    groups: dict[Label, list[dict[str, str]]] = {}
    for run in runs:
        if id(run) in settings:
            groups.setdefault(with_tokenizer(run.label, run.tokenizer_name, mixed), []).append(
                settings[id(run)]
            )
    across = differing(settings.values(), skip="scheme.")
    found = {}
    for run in runs:
        setting = settings.get(id(run))
        if setting is None:
            found[id(run)] = Distinction()
            continue
        within = differing(groups[with_tokenizer(run.label, run.tokenizer_name, mixed)])
        keys = [k for k in sorted(set(across) | set(within)) if k in setting]
        found[id(run)] = Distinction(
            tuple((k, setting[k]) for k in within if k in setting),
            json.dumps({k: setting[k] for k in keys}) if keys else "",
        )
    return found


def refuse_repeats(runs: list[LoadedRun], settings: dict[int, dict[str, str]]) -> None:
    """A run counted twice is no second seed: a copied run directory (the same run id) or two runs of
    one setting and one seed (the same training twice) are refused, naming both."""
    seen: dict[object, LoadedRun] = {}
    for run in runs:
        keys = [("run id", run.record.run_id)] if run.record.run_id else []
        keys.append(("seed", json.dumps([settings[id(run)], run.seed], sort_keys=True)))
        for kind, key in keys:
            other = seen.setdefault((kind, key), run)
            if other is not run:
                why = (
                    f"are the same run (run id {run.record.run_id}): a copied run directory counts once"
                    if kind == "run id"
                    else f"are both seed {run.seed} of one training setting, which would count twice"
                )
                raise UsageError(f"{other.path} and {run.path} {why}; name one of them")

"""`train.precision=auto` on a CPU with native bf16, chosen by measurement: which precision is faster
depends on the run's shapes as much as on the CPU (on a 2-core AMX Xeon, issue #33: bf16 autocast
trained 77k tokens/s against fp32's 56k at the default config, and took 57.4 s against 45.9 s for
nanoGPT's CPU recipe; on an AVX-512-BF16 EPYC, bf16 autocast with attention kept in fp32 was faster than
either). So before a run starts, the same training step it will run (session.train_step) is timed in
every effective precision on a throwaway model of its shapes, alternated, and the fastest is used. The
answer is cached per machine and shape class (the file below), so a sweep measures each shape once.
A cache is a hint, not a record: any program can write a file of the right format and fingerprint, so
a cached choice is used only once its precision, re-timed at the run's shapes (a quarter of a full
measurement), takes within CACHE_TOLERANCE of the time its entry says; otherwise every precision is
measured again, said in a warning and in the summary's reason. A machine busy with other work (as many
threads of other processes ready to run as it has cores) is not timed: such timings say more about the
other work than the precisions, so auto then keeps the static rule (bf16 autocast where native), uses no
cached choice (it could not be re-timed) and caches nothing.

Never bf16 where the CPU emulates it (AVX2: ~100x slower); CUDA keeps the static rule (bf16 where the GPU
has it). A resume keeps its run's own precision and measures nothing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from posenc_cli.config.schema import PosencConfig
from posenc_cli.core.atomic import write_text
from posenc_cli.core.device import (
    EFFECTIVE_PRECISIONS,
    cpu_bf16,
    cpu_model,
    cpuinfo_field,
    effective_precision,
)
from posenc_cli.core.errors import UsageError
from posenc_cli.training.precision_timing import machine_busy, time_steps

CACHE_ENV = "POSENC_PRECISION_CACHE"  # the cache file's path; default under XDG_CACHE_HOME or ~/.cache
CACHE_FORMAT = "posenc-precision-choices-3"  # 3: entries time three precisions
OLDER_CACHE_FORMATS = ("posenc-precision-choices",)  # fp32 and bf16-autocast timed: measured again
MAX_CACHE_BYTES = 1 << 20  # 1 MiB: ~2,000 shapes' entries; a larger file is not posenc's, and is not read
# A cached choice is re-timed in its precision alone: WARM_UP steps, then RETIME_ROUNDS rounds (a quarter of
# the steps of a full measurement). It stands when the two timings agree within CACHE_TOLERANCE either way:
# one precision's median step on one machine moves by tens of percent between runs (turbo, caches, light
# load: 4.2 and 5.1 ms on a shared 2-core box), so 1.5x leaves room for that and still catches an entry
# that another machine, another load or a hand wrote (a forged "1 ms" is 40x off).
RETIME_ROUNDS, CACHE_TOLERANCE = 2, 1.5
log = logging.getLogger("posenc.train")


@dataclass(frozen=True)
class PrecisionChoice:
    """What a run computes in and why: the facts its summary records under `precision`."""

    effective: str  # one of core.device.EFFECTIVE_PRECISIONS
    reason: str
    step_ms: dict[str, float] = field(default_factory=dict)  # measured ms a step, per precision

    def facts(self) -> dict[str, Any]:
        return {"reason": self.reason, **({"step_ms": self.step_ms} if self.step_ms else {})}


def cache_path() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "posenc" / "precision-choices-3.json"  # CACHE_FORMAT's: an older posenc keeps its own file


def shape_key(cfg: PosencConfig, vocab_size: int) -> str:
    """Everything a step's speed depends on: the machine, torch, threads, and the run's shapes."""
    tc, mc = cfg.train, cfg.model
    facts = {
        "cpu": cpu_model(),
        "cpu_flags": cpu_flags(),  # one model name can cover several kinds ("AMD EPYC": AVX2 only, AVX-512-BF16)
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "model": [mc.n_layer, mc.n_head, mc.n_embd, vocab_size],
        "scheme": dict(cfg.scheme),
        "batch": [tc.batch_size, tc.block_size, tc.positions, tc.max_position],
    }
    return json.dumps(facts, sort_keys=True, default=str)


def entries_sha256(entries: dict) -> str:
    return hashlib.sha256(json.dumps(entries, sort_keys=True).encode()).hexdigest()


class NotACacheFile(ValueError):
    """The cache's path names something posenc never reads as one (a FIFO, a device, a huge file)."""


def cache_text(path: Path) -> str:
    """The text of the cache file, read only from a regular file of at most MAX_CACHE_BYTES: a FIFO
    would block the run forever, /dev/zero fill its memory. Opened without waiting (a FIFO's open waits
    for a writer) and checked on the open file, so what is read is what was checked."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            raise NotACacheFile(f"{path} is not a regular file (a FIFO, a device or a directory)")
        data = file.read(MAX_CACHE_BYTES + 1)
    if len(data) > MAX_CACHE_BYTES:
        raise NotACacheFile(f"{path} is larger than a precision cache ({MAX_CACHE_BYTES >> 20} MiB)")
    return data.decode("utf-8")


def read_cache(path: Path) -> dict[str, dict] | None:
    """The cached choices, verified (format, fingerprint, every entry's fields); {} where there is no
    file yet. None for a file that is not this posenc's cache (another program's, an older posenc's, one
    changed since, not a regular file): it is said in one line naming it, measured again, and never
    overwritten."""
    keep = f"leaving {path} as it is (delete it to let posenc cache its choices there)"
    try:
        stored = json.loads(cache_text(path))
        if stored.get("format") in OLDER_CACHE_FORMATS:
            log.info(f"an earlier posenc's precision choices (two precisions timed); measuring again, {keep}")
            return None
        entries = stored["choices"]
        ok = stored.get("format") == CACHE_FORMAT and stored.get("sha256") == entries_sha256(entries)
        ok = ok and all(valid_entry(e) for e in entries.values())
    except FileNotFoundError:
        return {}
    except NotACacheFile as err:  # never written over either
        log.warning(
            f"{err}: not read as a precision cache; measuring (give {CACHE_ENV} a file's path to cache)"
        )
        return None
    # RecursionError: JSON nested past the parser's depth
    except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError):
        ok, entries = False, {}
    if not ok:
        log.warning(f"not a precision cache posenc wrote (or changed since); measuring again, {keep}")
        return None
    return entries


def valid_entry(entry: Any) -> bool:
    """An entry as choose_precision writes it: a timing of every precision, and the fastest chosen."""
    if (
        not isinstance(entry, dict)
        or set(entry) != {"effective", "step_ms"}
        or not valid_timings(entry["step_ms"])
    ):
        return False
    return entry["effective"] == min(EFFECTIVE_PRECISIONS, key=entry["step_ms"].get)


def valid_timings(ms: Any) -> bool:
    """Milliseconds a step of every effective precision, each a positive finite number."""
    return (
        isinstance(ms, dict)
        and set(ms) == set(EFFECTIVE_PRECISIONS)
        and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
            for v in ms.values()
        )
    )


def write_cache(path: Path, key: str, choice: PrecisionChoice) -> None:
    """The new entry beside those on disk now, read again just before the write: a run measuring at
    the same time keeps its entry unless the two writes meet within milliseconds."""
    cached = read_cache(path)
    if cached is None:
        return
    entries = {**cached, key: {"effective": choice.effective, "step_ms": choice.step_ms}}
    payload = {"format": CACHE_FORMAT, "sha256": entries_sha256(entries), "choices": entries}
    # a read-only home, or a directory or symbolic link where the file goes: the choice holds for this
    # run, and is measured next time; a cache never stops a run
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, json.dumps(payload, indent=1, sort_keys=True) + "\n")
    except OSError as err:
        log.warning(f"could not cache the precision choice in {path} ({err.strerror}); it is measured again")
    except UsageError as err:
        log.warning(f"could not cache the precision choice: {err}")


@dataclass(frozen=True)
class Retiming:
    """A cached choice's precision timed again now at the run's shapes, against its entry's time."""

    precision: str
    cached_ms: float
    now_ms: float

    @property
    def holds(self) -> bool:
        return 1 / CACHE_TOLERANCE <= self.now_ms / self.cached_ms <= CACHE_TOLERANCE

    def __str__(self) -> str:
        return f"{self.precision} took {self.now_ms:g} ms a step now, {self.cached_ms:g} ms in the cache"


def retimed(cached: dict, measure) -> tuple[list[Retiming], str | None]:
    """A cached entry's choice and fp32 (the precision every other must beat) timed again now, and why the
    entry does not hold (None: it does): a timing off its entry by more than CACHE_TOLERANCE, or fp32 now
    faster than the choice. A forged entry can no longer steer a run by its choice alone nor by fp32's."""
    precisions = tuple(dict.fromkeys((cached["effective"], "fp32")))
    now = measure(precisions)
    checks = [Retiming(p, cached["step_ms"][p], now[p]) for p in precisions]
    off = [str(check) for check in checks if not check.holds]
    if off:
        return checks, f"{'; '.join(off)}, more than {CACHE_TOLERANCE:g}x apart"
    if now[cached["effective"]] > now["fp32"]:
        return checks, f"fp32 took {now['fp32']:g} ms a step now, faster than the cached {checks[0]}"
    return checks, None


def cached_reason(cached: dict, checks: list[Retiming]) -> str:
    """A confirmed cached choice's reason: what was re-timed now, and that the rest is the cache's word."""
    rest = "; the other precisions' timings are the cache's" if len(cached["step_ms"]) > len(checks) else ""
    return f"measured before on this machine at these shapes (cached; re-timed: {'; '.join(map(str, checks))}{rest})"


def choose_precision(
    cfg: PosencConfig, device: torch.device, *, vocab_size: int, ranks: int = 1, measure=time_steps
) -> PrecisionChoice:
    """train.precision's answer for this run (see the module docstring); `measure` is time_steps.
    Several ranks (torchrun) keep the static rule, so that every rank computes alike."""
    requested = cfg.train.precision
    static = effective_precision(device, requested)
    if requested != "auto":
        if static != "fp32" and device.type == "cpu" and cpu_bf16() == "emulated":
            log.warning(f"train.precision={requested}: this CPU emulates bf16 (~100x slower than fp32)")
        return PrecisionChoice(static, f"train.precision={requested}")
    if ranks > 1:
        return PrecisionChoice(static, "several ranks: bf16 autocast where the device computes bf16 natively")
    if device.type != "cpu":
        return PrecisionChoice(
            static, f"{device.type}: bf16 autocast where the device computes bf16 natively"
        )
    if cpu_bf16() == "emulated":
        return PrecisionChoice("fp32", "this CPU emulates bf16 (no AVX-512-BF16 or AMX)")
    return measured_choice(cfg, device, vocab_size=vocab_size, measure=measure)


def measured_choice(cfg: PosencConfig, device: torch.device, *, vocab_size: int, measure) -> PrecisionChoice:
    """auto on a native-bf16 CPU: a cached choice that its re-timing confirms, else the fastest measured."""
    path, key = cache_path(), shape_key(cfg, vocab_size)
    entries = read_cache(path)
    cached = (entries or {}).get(key)
    busy = machine_busy()
    if busy:  # timings now would say as much about the other work as about the precisions
        unused = "; a cached choice is used only once re-timed" if cached else ""
        return PrecisionChoice(
            effective_precision(device, "auto"),
            f"the machine is busy ({busy}): bf16 autocast, as it is native, unmeasured{unused}",
        )
    remeasured = ""
    if cached is not None:
        checks, why = retimed(
            cached, lambda ps: measure(cfg, device, vocab_size, precisions=ps, rounds=RETIME_ROUNDS)
        )
        if why is None:
            return PrecisionChoice(cached["effective"], cached_reason(cached, checks), cached["step_ms"])
        log.warning(
            f"the precision choice cached in {path} for these shapes does not hold: {why}; measuring every "
            "precision again"
        )
        remeasured = f" (re-measured: the cached choice did not hold, {why})"
    step_ms = measure(cfg, device, vocab_size)
    faster = min(EFFECTIVE_PRECISIONS, key=lambda p: step_ms[p])
    choice = PrecisionChoice(
        faster, f"measured: the fastest precision at this run's shapes{remeasured}", step_ms
    )
    if entries is not None:
        write_cache(path, key, choice)
    return choice


def cpu_flags() -> list[str]:
    """The CPU features that decide its bf16 and its fp32 kernels, from /proc/cpuinfo (empty elsewhere)."""
    flags = (cpuinfo_field("flags") or "").split()
    return sorted(set(flags) & {"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"})

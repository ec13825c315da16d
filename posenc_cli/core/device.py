"""Device and precision. `auto` device means cuda, then mps, then cpu. `auto` precision's static rule
is bf16 autocast where the hardware computes bf16 natively (CUDA with bf16, CPUs with AVX-512 BF16 or
AMX), fp32 elsewhere; on a native-bf16 CPU a new run measures instead (training.precision_choice). The
loss is always computed in fp32. A run records the precision it computed in (its
*effective* precision, never the word `auto`), so the same config on two machine kinds says so."""

from __future__ import annotations

import contextlib
import contextvars
import os
import platform
from pathlib import Path

import torch

from posenc_cli.core.choices import DEVICES
from posenc_cli.core.errors import UsageError

# What a run computes in, by what train.precision asks for. The third keeps attention (SDPA) in fp32
# inside bf16 autocast: on an AVX-512-BF16 EPYC without AMX the CPU flash kernel is slower in bf16 than
# in fp32, while the matmuls gain from bf16 (docs/performance.md).
AUTOCAST_PRECISIONS = {"bf16": "bf16-autocast", "bf16-fp32-attention": "bf16-autocast-fp32-attention"}
EFFECTIVE_PRECISIONS = ("fp32", *AUTOCAST_PRECISIONS.values())
# set while a forward pass runs at bf16-autocast-fp32-attention; the model's attention reads it
ATTENTION_IN_FP32: contextvars.ContextVar[bool] = contextvars.ContextVar("attention_in_fp32", default=False)
# What a CPU's bf16 detection answers, overriding the hardware: `native` or `emulated`. The test suite
# sets it so that no test depends on the machine kind; a user can try the other kind's `auto` path.
CPU_BF16_ENV = "POSENC_CPU_BF16"
CPU_BF16 = ("native", "emulated")


def resolve_device(name: str) -> torch.device:
    kind, _, index = str(name).partition(":")
    if kind not in DEVICES or (index and (kind == "auto" or not (index.isascii() and index.isdigit()))):
        raise UsageError(
            f"device={name} is not known; choose one of: {', '.join(DEVICES)} (cuda:N also works)"
        )
    if kind == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if kind == "cuda" and not torch.cuda.is_available():
        raise UsageError(
            f"device={name} was asked for, but this torch sees no CUDA GPU; use device=auto or cpu"
        )
    if kind == "cuda" and index and int(index) >= torch.cuda.device_count():
        raise UsageError(
            f"device={name}: this machine has {torch.cuda.device_count()} CUDA GPU(s), numbered from 0"
        )
    if kind == "cpu" and index not in ("", "0"):
        raise UsageError(f"device={name}: there is one CPU device; use device=cpu")
    if kind == "mps" and not torch.backends.mps.is_available():
        raise UsageError(
            f"device={name} was asked for, but MPS is not available here; use device=auto or cpu"
        )
    return torch.device(name)


def cpu_bf16() -> str:
    """`native` where this CPU computes bf16 in hardware (AVX-512 BF16, AMX), `emulated` elsewhere
    (AVX2: ~100x slower than fp32); POSENC_CPU_BF16 overrides the answer."""
    forced = os.environ.get(CPU_BF16_ENV) or None  # unset or empty: ask the hardware
    if forced is not None:
        if forced not in CPU_BF16:
            raise UsageError(f"{CPU_BF16_ENV}={forced} is not known; choose one of: {', '.join(CPU_BF16)}")
        return forced
    return "native" if torch.ops.mkldnn._is_mkldnn_bf16_supported() else "emulated"


def cpu_model() -> str:
    """The CPU's model name as /proc/cpuinfo gives it, else what the platform says."""
    model = cpuinfo_field("model name")
    return platform.processor() or platform.machine() if model is None else model


def cpuinfo_field(name: str) -> str | None:
    """The value of /proc/cpuinfo's first line starting with `name`; None without one (not Linux)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return None
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith(name)), None)


def native_bf16(device: torch.device) -> bool:
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        return cpu_bf16() == "native"
    return False


def effective_precision(device: torch.device, requested: str) -> str:
    """What training at `requested` computes in on `device`: bf16 autocast when asked for (bf16,
    bf16-fp32-attention) or by auto's static rule (native-bf16 hardware), fp32 otherwise; autocast exists
    on CUDA and CPU only."""
    if requested == "auto":
        requested = "bf16" if native_bf16(device) else "fp32"
    return AUTOCAST_PRECISIONS.get(requested, "fp32") if device.type in ("cuda", "cpu") else "fp32"


def precision_record(device: torch.device, requested: str, effective: str) -> dict[str, str]:
    """The precision facts a run records: what was asked, what it computed in, and on a CPU whether
    its bf16 is native or emulated (the two machine kinds give `auto` different answers)."""
    record = {"requested": requested, "effective": effective}
    return {**record, "cpu_bf16": cpu_bf16()} if device.type == "cpu" else record


@contextlib.contextmanager
def autocast(device: torch.device, effective: str):
    """The context a forward pass at an effective precision runs in."""
    if effective == "fp32":
        yield
        return
    token = ATTENTION_IN_FP32.set(effective == "bf16-autocast-fp32-attention")
    try:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            yield
    finally:
        ATTENTION_IN_FP32.reset(token)


def resumed_precision(device: torch.device, requested: str, saved: str, *, run: str) -> str:
    """The effective precision a resume of `run` continues in: its own (`saved`), whatever `auto` answers
    on this machine, since an exact resume needs the same arithmetic. A train.precision that asks for
    another one is refused, and so is a device that cannot compute in it."""
    if saved not in EFFECTIVE_PRECISIONS:
        raise UsageError(
            f"{run} is damaged: its precision {saved!r} is not one of {', '.join(EFFECTIVE_PRECISIONS)}"
        )
    if requested != "auto" and effective_precision(device, requested) != saved:
        raise UsageError(
            f"train.precision={requested}: {run} computes in {saved}, and a resume continues in the run's "
            "own precision (the weights an uninterrupted run would have); drop train.precision"
        )
    if saved != "fp32" and device.type not in ("cuda", "cpu"):
        raise UsageError(
            f"{run} computes in {saved}, which device={device.type} cannot run; resume on cpu or cuda"
        )
    return saved


def free_memory(device: torch.device) -> int | None:
    """Bytes free now on the device (CUDA) or in RAM (Linux); None where it cannot be read."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            fields = dict(line.split(":", 1) for line in f)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return None

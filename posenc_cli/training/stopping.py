"""Stopping training on a signal, at a step boundary, so the checkpoint it saves holds whole steps."""

from __future__ import annotations

import contextlib
import signal

import torch

from posenc_cli.training import distributed


class Stopped(Exception):
    """The loop saved a checkpoint and stopped because a signal asked it to."""


@contextlib.contextmanager
def terminate_as_interrupt():
    """SIGTERM raises KeyboardInterrupt while a run starts (its corpus, the precision calibration), as
    Ctrl-C does: the run's summary then says interrupted instead of staying "running" under a process
    the default SIGTERM ended without a word. Outside the main thread the signal is left alone."""

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class StopSignals:
    """Ctrl-C (SIGINT) or SIGTERM (SLURM, torchrun) ask the loop to stop at the next step boundary, so
    a resume continues exactly. A second Ctrl-C stops at once without saving (the last checkpoint is
    kept). Use as `with StopSignals() as stop:`; outside the main thread (a thread-based launcher) the
    signals are left alone."""

    def __init__(self) -> None:
        self.received: str | None = None
        self._previous: dict[signal.Signals, object] = {}

    def __enter__(self) -> StopSignals:
        try:
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        except ValueError:  # not the main thread
            pass
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame) -> None:
        if self.received is not None:
            raise KeyboardInterrupt
        self.received = signal.Signals(signum).name

    def agreed(self, step: int, interval: int, device: torch.device, *, ctx: distributed.Context) -> bool:
        """Whether to stop before `step`. Under torchrun all ranks must stop at the same step: they
        agree once every `interval` steps."""
        if not ctx.enabled:
            return self.received is not None
        return step % interval == 0 and distributed.any_rank(self.received is not None, device, ctx)

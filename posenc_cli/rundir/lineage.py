"""`train.init_from=RUN`: a new run that starts from RUN's weights (fine-tuning at a longer length).

Not a resume: the new run has its own directory, optimizer, schedule and step count. What must match
RUN: the scheme, the model's shape (layers, heads, width) and the vocabulary. What may change: the
training length, the data (if its vocabulary is the same) and scheme options that size no parameter,
RoPE scaling among them. A scheme whose parameters depend on the length (learned's table) fits RUN's
weights to the new size with its `extend_state`.

DroPE (Gelberg et al. 2025) is the one change of scheme: `scheme=none` drops RUN's positional scheme
(its weights, a learned table or FIRE's MLP, are left behind), and `model.qk_norm=true` adds QK-norm,
whose weights RUN does not have and which start at 1; the recalibration then trains at RUN's length.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from posenc_cli.core.errors import UsageError
from posenc_cli.data.tokenizers import run_tokenizer
from posenc_cli.model import GPT
from posenc_cli.model.gpt import rename_legacy_scheme_keys
from posenc_cli.rundir.claim import is_locked
from posenc_cli.rundir.layout import CHECKPOINT, SUMMARY
from posenc_cli.rundir.record import Checkpoint, check_own_checkpoint, load_checkpoint
from posenc_cli.rundir.summary import read_summary

KEPT = {"scheme": "scheme", "n_layer": "model.n_layer", "n_head": "model.n_head", "n_embd": "model.n_embd"}
DROPPED = "none"  # the scheme a run may start from any other's weights with: positions dropped (DroPE)
NEW_NORMS = (
    "q_norm",
    "k_norm",
)  # model.qk_norm's weights, which a run without QK-norm lacks: they start at 1


def source_checkpoint(value: Any) -> tuple[Path, Checkpoint]:
    """RUN's directory and its own checkpoint; one line if it is not a run with a checkpoint, or its
    checkpoint was copied in from another run."""
    path = Path(str(value))
    if not (path / CHECKPOINT).is_file():
        raise UsageError(
            f"train.init_from={value} is not a run directory with a {CHECKPOINT}; "
            "give the directory of a run that has saved a checkpoint"
        )
    if is_locked(path):
        raise UsageError(
            f"train.init_from={value} is being trained right now, so its checkpoint is still moving on; "
            "wait for it to finish (or stop it) and start from it then"
        )
    checkpoint = load_checkpoint(path / CHECKPOINT)
    if (path / SUMMARY).is_file():
        check_own_checkpoint(path, checkpoint, read_summary(path))
    elif checkpoint.record.run_id is not None:  # a run posenc trained has its summary: it is verified by it
        raise UsageError(
            f"train.init_from={value} has no {SUMMARY}, so its checkpoint cannot be verified; restore it"
        )
    return path, checkpoint


def saved_tokenizer(source: Path, saved: Checkpoint):
    """The tokenizer RUN was trained with."""
    return run_tokenizer(saved.record.tokenizer, source)


def check_same_model(source: Path, saved: Checkpoint, model_cfg: dict[str, Any], *, tokenizer) -> None:
    """The scheme, shape and vocabulary that init_from keeps; one line naming the first difference."""
    check_same_shape(source, saved, model_cfg)
    check_same_vocabulary(source, saved, tokenizer)


def check_same_shape(source: Path, saved: Checkpoint, model_cfg: dict[str, Any]) -> None:
    """The scheme and the model's shape, which init_from keeps (checked before any corpus is read)."""
    old = saved.record.model_config
    for key, override in KEPT.items():
        if key == "scheme" and model_cfg[key] == DROPPED:
            continue  # DroPE: positions dropped after training with them
        if old.get(key) != model_cfg[key]:
            raise UsageError(
                f"train.init_from={source} was trained with {override}={old.get(key)}, this run asks for "
                f"{override}={model_cfg[key]}; init_from keeps the scheme (or drops it: scheme={DROPPED}), "
                f"model shape and vocabulary: use {override}={old.get(key)} or train from scratch"
            )


def check_same_vocabulary(source: Path, saved: Checkpoint, tokenizer) -> None:
    theirs = saved_tokenizer(source, saved)
    if theirs.fingerprint != tokenizer.fingerprint:
        raise UsageError(
            f"train.init_from={source} has a vocabulary ({theirs.describe()}) that differs from this run's "
            f"corpus ({tokenizer.describe()}); use the data config RUN was trained on"
        )


def initial_state(source: Path, saved: Checkpoint, model: GPT) -> dict[str, torch.Tensor]:
    """RUN's weights shaped for `model` (a meta-device model is enough to check that they fit)."""
    state = dict(saved.model)
    rename_legacy_scheme_keys(model, state, "")
    if model.cfg.scheme == DROPPED and saved.record.model_config.get("scheme") != DROPPED:
        state = {key: value for key, value in state.items() if not key.startswith("scheme.")}  # DroPE
    fresh = model.state_dict()
    state |= {key: fresh[key] for key in fresh if key not in state and key.rsplit(".", 2)[-2] in NEW_NORMS}
    scheme_state = {key[len("scheme.") :]: value for key, value in state.items() if key.startswith("scheme.")}
    state.update({"scheme." + key: value for key, value in model.scheme.extend_state(scheme_state).items()})
    expected = model.state_dict()
    for key in sorted(set(expected) | set(state)):
        if key not in state or key not in expected or state[key].shape != expected[key].shape:
            have = tuple(state[key].shape) if key in state else "absent"
            want = tuple(expected[key].shape) if key in expected else "absent"
            raise UsageError(
                f"train.init_from={source}: its weight {key} ({have}) does not fit this run's model "
                f"({want}); keep the scheme options that size parameters as RUN had them"
            )
    return state


def lineage(source: Path) -> list[str]:
    """RUN, then the run RUN was itself initialised from, and so on back to a run trained from scratch."""
    return [str(source), *(read_summary(source).init_chain or ())]

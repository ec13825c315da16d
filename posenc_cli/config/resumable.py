"""A resume's config, on the plain mappings Hydra composes: the run's stored config, with only the
RESUMABLE keys a command may change taken from the new composition (rundir/resume.py checks the run)."""

from __future__ import annotations

import copy
from typing import Any

from posenc_cli.config.hydra_args import override_key
from posenc_cli.core.errors import UsageError

RESUMABLE = (
    "train.max_steps",
    "train.threads",
    "train.log_interval",
    "train.eval_interval",
    "train.checkpoint_interval",
    "train.precision",
    "device",
    "logger",
)  # what a resume may change


def resumed_config(
    composed: dict[str, Any], overrides: list[str], *, stored: dict[str, Any]
) -> dict[str, Any]:
    """The config a resume trains with: the run's `stored` one, plus the RESUMABLE keys given on the
    command line and train.resume itself (rundir.resume.resume_args gives it)."""
    config = copy.deepcopy(stored)
    given = {o.split("=", 1)[0].lstrip("+~") for o in overrides}
    for key in (*RESUMABLE, "train.resume"):
        if key in given:
            group, _, name = key.rpartition(".")
            (config[group] if group else config)[name] = leaf(composed, key)
    return config


def restated_values(
    composed: dict[str, Any],
    defaults: dict[str, Any],
    overrides: list[str],
    *,
    run: str,
    stored: dict[str, Any],
) -> None:
    """A resume may restate the run's own values (`scheme=rope` on a rope run); a change is refused,
    naming the key, the run's value and the given one. What the overrides set: every leaf they make
    differ from the defaults, and every leaf under a key they name."""
    named = {override_key(o) for o in overrides if "=" in o or o.startswith("~")}
    for removed in (o for o in overrides if o.startswith("~")):
        raise UsageError(
            f"train.resume={run} continues the run as it was trained, so {removed} cannot remove a key"
        )
    for key, value in leaves(composed):
        if any(key == k or key.startswith(k + ".") for k in (*RESUMABLE, "train.resume")):
            continue
        set_here = any(key == n or key.startswith(n + ".") for n in named)
        if not set_here and value == leaf(defaults, key):
            continue
        was = leaf(stored, key)
        if was != value:
            raise UsageError(
                f"train.resume={run} continues the run as it was trained: its {key} is {was!r}, this "
                f"command gives {value!r}; drop it (what may change: {', '.join(RESUMABLE)})"
            )


MISSING_LEAF = "(not recorded)"


def leaves(tree: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted key, value) of every value in `tree` that is not a non-empty mapping (an empty one is a
    value: `logger: {}`)."""
    found = []
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            found += leaves(value, f"{prefix}{key}.")
        else:
            found.append((f"{prefix}{key}", value))
    return found


def leaf(tree: dict[str, Any], key: str) -> Any:
    for part in key.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return MISSING_LEAF
        tree = tree[part]
    return tree

"""The embedded corpus's knobs, apart from its generator (data/synthetic.py): the typed config takes its
defaults from here without importing numpy, so a completion or a refused override stays fast."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SyntheticSpec:
    n_chars: int = 2_000_000
    seed: int = 0
    lexicon_size: int = 400
    zipf_exponent: float = 1.1
    successors: int = 4
    successor_prob: float = 0.5
    min_sentence: int = 4
    max_sentence: int = 12
    copy_rate: float = 0.15  # probability that the next segment is a repeat rather than a fresh sentence
    copy_min_len: int = 24
    copy_max_len: int = 96
    copy_min_distance: int = 32
    copy_max_distance: int = 2048
    passkey_rate: float = 0.0  # probability that the next segment is a passkey episode
    passkey_min_distance: int = 16  # characters of filler between the key sentence and the question
    passkey_max_distance: int = 160  # an episode is ~70 characters plus this: fits the default 256
    probe_task: str = "passkey"  # which needle task the episodes teach (data/needles.py)

"""The embedded default corpus: pseudo-English with short- and long-range structure, made from a seed.

Local structure: a lexicon of syllable words, drawn with Zipf frequencies, half the time from the
previous word's few favourite successors (a word bigram a tiny model learns in minutes), in sentences.
Long-range structure: now and then a span of earlier text is repeated verbatim from a distance drawn
log-uniformly between `copy_min_distance` and `copy_max_distance` characters (default 32 to 2048, i.e.
up to 8x the default training length). A model that really uses far context predicts those spans.
Entropy: the generator knows the probability of every fresh word, so `fresh_entropy` (nats per fresh
character) is exact for the fresh text; copies cost almost nothing to a model that finds them.
Passkey episodes (off by default, `passkey_rate`): the key sentence with a random key, fresh filler of a
distance drawn uniformly from `passkey_min_distance`..`passkey_max_distance` characters, then the
question and the answer (phrasing in passkey.py). Keep the distances inside the training length, so
every episode can fit in one training window: that is what `posenc probe` asks about.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from posenc_cli.data import passkey

CONSONANTS = "bdfghklmnprstvz"
VOWELS = "aeiou"


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


@dataclass
class SyntheticText:
    text: str
    fresh_entropy: float  # nats per character of fresh (non-copied) text
    copied_fraction: float

    @property
    def entropy_floor(self) -> float:
        """Approximate nats/char for a model that copies perfectly: fresh entropy on fresh chars only."""
        return self.fresh_entropy * (1 - self.copied_fraction)


def _lexicon(rng: np.random.Generator, size: int) -> list[str]:
    words: set[str] = set()
    while len(words) < size:
        n_syllables = rng.integers(1, 4)
        words.add("".join(rng.choice(list(CONSONANTS)) + rng.choice(list(VOWELS)) for _ in range(n_syllables)))
    return sorted(words)


def generate(spec: SyntheticSpec) -> SyntheticText:
    rng = np.random.default_rng(spec.seed)
    words = _lexicon(rng, spec.lexicon_size)
    zipf = 1.0 / np.arange(1, len(words) + 1) ** spec.zipf_exponent
    zipf /= zipf.sum()
    successors = rng.integers(0, len(words), size=(len(words), spec.successors))
    # p(next | prev) = successor_prob * uniform(successors[prev]) + (1 - successor_prob) * zipf
    next_probs = np.tile((1 - spec.successor_prob) * zipf, (len(words), 1))
    for prev in range(len(words)):
        np.add.at(next_probs[prev], successors[prev], spec.successor_prob / spec.successors)
    next_entropy = -(next_probs * np.log(next_probs)).sum(axis=1)
    sentence_choices = spec.max_sentence - spec.min_sentence + 1

    cdf = np.cumsum(next_probs, axis=1)
    out: list[str] = []
    length = fresh_chars = 0
    fresh_nats = 0.0
    prev = 0

    def sentence() -> tuple[str, float]:
        """A fresh sentence and its exact information content in nats."""
        nonlocal prev
        n_words = int(rng.integers(spec.min_sentence, spec.max_sentence + 1))
        nats, chosen = math.log(sentence_choices), []
        for u in rng.random(n_words):
            nats += next_entropy[prev]
            prev = min(int(np.searchsorted(cdf[prev], u, side="right")), len(words) - 1)
            chosen.append(words[prev])
        return " ".join(chosen) + ". ", nats

    while length < spec.n_chars:
        if length > spec.copy_max_distance and rng.random() < spec.copy_rate:
            log_distance = rng.uniform(math.log(spec.copy_min_distance), math.log(spec.copy_max_distance))
            span = int(rng.integers(spec.copy_min_len, spec.copy_max_len + 1))
            piece = _tail(out, int(math.exp(log_distance)))[:span]
        elif spec.passkey_rate > 0 and rng.random() < spec.passkey_rate:
            key = passkey.random_key(rng)
            distance = int(rng.integers(spec.passkey_min_distance, spec.passkey_max_distance + 1))
            filler, nats = "", 0.0
            while len(filler) < distance:
                text, sentence_nats = sentence()
                filler, nats = filler + text, nats + sentence_nats
            # the filler is cut to the distance, ending in a space (as in the probe's prompts);
            # count its fresh characters and (pro rata) their nats
            fresh_chars += distance
            fresh_nats += nats * distance / max(len(filler), 1) + passkey.KEY_DIGITS * math.log(len(passkey.DIGITS))
            piece = passkey.key_sentence(key) + filler[: distance - 1] + " " + passkey.QUESTION + passkey.answer(key)
        else:
            piece, nats = sentence()
            fresh_nats += nats
            fresh_chars += len(piece)
        out.append(piece)
        length += len(piece)
    text = "".join(out)[: spec.n_chars]
    return SyntheticText(text, fresh_nats / max(fresh_chars, 1), 1 - fresh_chars / max(length, 1))


def _tail(pieces: list[str], n: int) -> str:
    """The last n characters of the text so far."""
    collected, size = [], 0
    for piece in reversed(pieces):
        collected.append(piece)
        size += len(piece)
        if size >= n:
            break
    return "".join(reversed(collected))[-n:]

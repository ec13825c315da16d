"""The embedded default corpus: pseudo-English with short- and long-range structure, made from a seed.

Local structure: a lexicon of syllable words, drawn with Zipf frequencies, half the time from the
previous word's few favourite successors (a word bigram a tiny model learns in minutes), in sentences.
Long-range structure: now and then a span of earlier text is repeated verbatim from a distance drawn
log-uniformly between `copy_min_distance` and `copy_max_distance` characters (default 32 to 2048, i.e.
up to 8x the default training length). A model that really uses far context predicts those spans.
Entropy: the generator knows the probability of every choice it makes. `fresh_entropy` is the expected
conditional entropy of fresh text (nats per fresh character: sentence lengths and each word given the
previous one). A model that finds every copy still pays for the copy events themselves: whether a
segment is a copy, and each copy's distance and length; `entropy_floor` counts those too (see data/README.md).
Passkey episodes (off by default, `passkey_rate`): the key sentence with a random key, fresh filler of a
distance drawn uniformly from `passkey_min_distance`..`passkey_max_distance` characters, then the
question and the answer (phrasing in passkey.py). Keep the distances inside the training length, so
every episode can fit in one training window: that is what `posenc probe` asks about. With
`probe_task` another needle task (data/needles.py), an episode holds that task's needles, each followed
by its share of the distance, then the task's question and answer; vt's needles are its chain, and a
cwe episode is a list (data/common_words.py) of `passkey_min..max_distance` characters, no filler.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from posenc_cli.data import common_words, needles, passkey
from posenc_cli.data.letters import CONSONANTS, VOWELS
from posenc_cli.data.needles import LOWER
from posenc_cli.data.synthetic_spec import SyntheticSpec


@dataclass
class SyntheticText:
    text: str
    fresh_entropy: float  # expected nats per character of fresh (non-copied) text
    copied_fraction: float
    event_entropy: float  # nats per character (of all text) in the segment choices and copy parameters

    @property
    def entropy_floor(self) -> float:
        """Nats/char for a model that finds every copy: the fresh text's entropy spread over all characters,
        plus the information in the copy events (an upper bound where a span also occurs at another distance)."""
        return self.fresh_entropy * (1 - self.copied_fraction) + self.event_entropy


def log_uniform_int_nats(value: int, low: int, high: int) -> float:
    """-ln P(int(exp(U)) = value) for U uniform on [ln low, ln high]: the information in one copy distance."""
    return -math.log(
        (math.log(min(value + 1, high)) - math.log(max(value, low))) / (math.log(high) - math.log(low))
    )


def copy_length_nats(length: int, distance: int, spec: SyntheticSpec) -> float:
    """-ln P(a copy from `distance` back has `length` characters): the span is uniform on
    copy_min_len..copy_max_len, cut to the distance when the distance is shorter."""
    choices = spec.copy_max_len - spec.copy_min_len + 1
    if length < distance or distance > spec.copy_max_len:
        return math.log(choices)
    return -math.log((spec.copy_max_len - max(distance, spec.copy_min_len) + 1) / choices)


def _lexicon(rng: np.random.Generator, size: int) -> list[str]:
    words: set[str] = set()
    while len(words) < size:
        n_syllables = rng.integers(1, 4)
        words.add(
            "".join(rng.choice(list(CONSONANTS)) + rng.choice(list(VOWELS)) for _ in range(n_syllables))
        )
    return sorted(words)


@dataclass
class _Words:
    """The word bigram: p(next | prev) = successor_prob * uniform(successors[prev]) + (1 - successor_prob)
    * zipf, as a cumulative table to draw from and the entropy of each row."""

    words: list[str]
    cdf: np.ndarray
    next_entropy: np.ndarray
    spec: SyntheticSpec
    prev: int = 0  # the last word drawn: sentences continue the bigram across their boundaries

    def sentence(self, rng: np.random.Generator) -> tuple[str, float]:
        """A fresh sentence and its exact information content in nats."""
        n_words = int(rng.integers(self.spec.min_sentence, self.spec.max_sentence + 1))
        nats, chosen = math.log(self.spec.max_sentence - self.spec.min_sentence + 1), []
        for u in rng.random(n_words):
            nats += self.next_entropy[self.prev]
            self.prev = min(int(np.searchsorted(self.cdf[self.prev], u, side="right")), len(self.words) - 1)
            chosen.append(self.words[self.prev])
        return " ".join(chosen) + ". ", nats


def _words(rng: np.random.Generator, spec: SyntheticSpec) -> _Words:
    words = _lexicon(rng, spec.lexicon_size)
    zipf = 1.0 / np.arange(1, len(words) + 1) ** spec.zipf_exponent
    zipf /= zipf.sum()
    successors = rng.integers(0, len(words), size=(len(words), spec.successors))
    next_probs = np.tile((1 - spec.successor_prob) * zipf, (len(words), 1))
    for prev in range(len(words)):
        np.add.at(next_probs[prev], successors[prev], spec.successor_prob / spec.successors)
    next_entropy = -(next_probs * np.log(next_probs)).sum(axis=1)
    return _Words(words, np.cumsum(next_probs, axis=1), next_entropy, spec)


def _choice_nats(taken: bool, rate: float) -> float:
    return -math.log(rate if taken else 1 - rate) if 0 < rate < 1 else 0.0


def _copy(rng: np.random.Generator, spec: SyntheticSpec, out: list[str]) -> tuple[str, float]:
    """A span of earlier text from a log-uniform distance back, and the nats of its distance and length."""
    log_distance = rng.uniform(math.log(spec.copy_min_distance), math.log(spec.copy_max_distance))
    span = int(rng.integers(spec.copy_min_len, spec.copy_max_len + 1))
    distance = int(math.exp(log_distance))
    piece = _tail(out, distance)[:span]
    nats = log_uniform_int_nats(distance, spec.copy_min_distance, spec.copy_max_distance)
    return piece, nats + copy_length_nats(len(piece), distance, spec)


def _episode(rng: np.random.Generator, spec: SyntheticSpec, words: _Words) -> tuple[str, int, float, float]:
    """A needle episode of `probe_task` (the passkey's: as always): each needle then fresh filler, then the
    question and the answer; its text, its fresh characters and their nats, and the nats of its gaps and
    choices. The n gaps are drawn from passkey_min..max_distance // n each, so the filler stays within it."""
    task = needles.NeedleTask(spec.probe_task)
    if task.name == "cwe":
        return _list_episode(rng, spec)
    episode = needles.draw_episode(task, rng, depth=rng.random() if task.needles > 1 else 0.0)
    n = task.needles
    low, high = max(1, spec.passkey_min_distance // n), max(1, spec.passkey_max_distance // n)
    piece, chars, fresh_nats = "", 0, 0.0
    event_nats = n * math.log(high - low + 1)  # the gaps (which needle is asked: episode_nats)
    for needle in episode.in_text_order:
        distance = int(rng.integers(low, high + 1))
        filler, nats = "", 0.0
        while len(filler) < distance:
            text, sentence_nats = words.sentence(rng)
            filler, nats = filler + text, nats + sentence_nats
        # the filler is cut to the distance, ending in a space (as in the probe's prompts);
        # count its fresh characters and (pro rata) their nats
        fresh_nats += nats * distance / max(len(filler), 1)
        piece += LOWER.sentence(episode, needle) + filler[: distance - 1] + " "
        chars += distance
    fresh_nats += needles.episode_nats(task)
    return piece + LOWER.ask(episode) + passkey.answer(LOWER.answer(episode)), chars, fresh_nats, event_nats


def _list_episode(rng: np.random.Generator, spec: SyntheticSpec) -> tuple[str, int, float, float]:
    """A cwe episode: a list of the common words and as many others as fill a length drawn uniformly
    from passkey_min..max_distance characters (one entry each), then the question and answer."""
    episode = common_words.WordsEpisode.draw(rng)
    words = LOWER.words
    entry = len(" 10. ") + needles.NAME_CHARS  # a typical entry's characters
    low, high = (
        max(0, d // entry - words.counts.common * words.counts.common_repeats)
        for d in (spec.passkey_min_distance, spec.passkey_max_distance)
    )
    count = int(rng.integers(low, max(low, high) + 1))
    text = words.prompt(episode, count) + passkey.answer(words.answer(episode))
    nats = common_words.episode_nats(words.counts, count)
    return text, 0, nats, math.log(max(low, high) - low + 1)  # no filler: no fresh characters


def generate(spec: SyntheticSpec) -> SyntheticText:
    rng = np.random.default_rng(spec.seed)
    words = _words(rng, spec)
    out: list[str] = []
    length = fresh_chars = 0
    fresh_nats = event_nats = 0.0
    while length < spec.n_chars:
        copying = length > spec.copy_max_distance and rng.random() < spec.copy_rate
        event_nats += _choice_nats(copying, spec.copy_rate) if length > spec.copy_max_distance else 0.0
        if not copying and spec.passkey_rate > 0:
            episode = rng.random() < spec.passkey_rate
            event_nats += _choice_nats(episode, spec.passkey_rate)
        if copying:
            piece, nats = _copy(rng, spec, out)
            event_nats += nats
        elif spec.passkey_rate > 0 and episode:
            piece, chars, nats, episode_nats = _episode(rng, spec, words)
            fresh_chars, fresh_nats, event_nats = (
                fresh_chars + chars,
                fresh_nats + nats,
                event_nats + episode_nats,
            )
        else:
            piece, nats = words.sentence(rng)
            fresh_nats += nats
            fresh_chars += len(piece)
        out.append(piece)
        length += len(piece)
    text = "".join(out)[: spec.n_chars]
    return SyntheticText(
        text, fresh_nats / max(fresh_chars, 1), 1 - fresh_chars / max(length, 1), event_nats / max(length, 1)
    )


def _tail(pieces: list[str], n: int) -> str:
    """The last n characters of the text so far."""
    collected, size = [], 0
    for piece in reversed(pieces):
        collected.append(piece)
        size += len(piece)
        if size >= n:
            break
    return "".join(reversed(collected))[-n:]

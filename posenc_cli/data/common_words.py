"""RULER's common-words extraction (cwe; Hsieh et al. 2024, NVIDIA/RULER common_words_extraction.py):
a numbered list of words in which a few (the common words) appear more often than every other word, and
the question asks for the common ones.

    a numbered list of words. 1. bazo 2. kimu 3. bazo ... 41. lapo. what are the 3 most common words in
    the list? they are bazo kimu lapo

RULER's rule: the first `common` words of a sample repeat `common_repeats` times, the rest
`other_repeats` times, and the list is shuffled. Below 4,096 tokens RULER repeats 10 common words 6
times and the others once (its freq_cw 30, freq_ucw 3 hold from 4,096 on); `posenc probe hf:…` asks
that, in RULER's English. posenc's own runs (128 to 512 characters) ask 3 common words 4 times each and
the others once (COUNTS_OWN): RULER's 60 common entries alone would take 500 characters. Words are
names of consonant-vowel syllables (every vocabulary that writes the corpus writes them), distinct.

An episode is a seed: its word order and the shuffle's sort keys. How many other words a trial holds
is chosen when the trial is fitted to its length (the count); the common words, and the order they
first appear in (the answer's order), are the same at every count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from itertools import product

import numpy as np

from posenc_cli.core.errors import UsageError
from posenc_cli.data.letters import CONSONANTS, VOWELS

NAME_SYLLABLES = 2  # the needle tasks' names: 5,625 words of 4 characters


@dataclass(frozen=True)
class Counts:
    """How many common words, and how often they and the others appear."""

    common: int
    common_repeats: int
    other_repeats: int


COUNTS_RULER = Counts(10, 6, 1)  # RULER below 4,096 tokens (from 4,096: 10, 30, 3)
COUNTS_OWN = Counts(3, 4, 1)  # posenc's runs: a 512-character window holds the list and ~40 others


@dataclass(frozen=True)
class ListPhrasing:
    """How a list is written: the lowercase form posenc's runs train on, or RULER's English."""

    counts: Counts
    intro: str
    question: str  # {common}
    numbered_answer: bool  # RULER's shots answer "1. w1 2. w2 …"; posenc's runs "w1 w2 …"

    def prompt(self, episode: WordsEpisode, count: int) -> str:
        """The intro, the numbered list of the common words and `count` others, and the question."""
        listed = " ".join(f"{i + 1}. {w}" for i, w in enumerate(episode.entries(self.counts, count)))
        return self.intro + listed + self.question.format(common=self.counts.common)

    def answer(self, episode: WordsEpisode) -> str:
        """The common words in the order the list first states them."""
        words = episode.common(self.counts)
        return " ".join(f"{i + 1}. {w}" if self.numbered_answer else w for i, w in enumerate(words))


LOWER_LIST = ListPhrasing(
    COUNTS_OWN,
    intro="a numbered list of words. ",
    question=". what are the {common} most common words in the list? they are ",
    numbered_answer=False,
)
ENGLISH_LIST = ListPhrasing(  # RULER's template and answer prefix, the answer's leading space excluded
    COUNTS_RULER,
    intro="Below is a numbered list of words. In these words, some appear more often than others. "
    "Memorize the ones that appear most often.\n",
    question="\nQuestion: What are the {common} most common words in the above list? Answer: The top "
    "{common} words that appear most often in the list are:",
    numbered_answer=True,
)


@cache
def words() -> tuple[str, ...]:
    """Every name of NAME_SYLLABLES consonant-vowel syllables, sorted."""
    return tuple("".join(p) for p in product(*[CONSONANTS, VOWELS] * NAME_SYLLABLES))


@dataclass(frozen=True)
class WordsEpisode:
    """One cwe trial's draw: a seed for the word order and the shuffle's sort keys."""

    seed: int

    @classmethod
    def draw(cls, rng) -> WordsEpisode:
        return cls(int(rng.integers(0, 2**63)))

    def order(self) -> np.ndarray:
        return np.random.default_rng([self.seed, 0]).permutation(len(words()))

    def keys(self, counts: Counts) -> np.ndarray:
        """Each word's sort keys (word in order(), repeat): the list is its entries sorted by key."""
        repeats = max(counts.common_repeats, counts.other_repeats)
        return np.random.default_rng([self.seed, 1]).random((len(words()), repeats))

    def common(self, counts: Counts) -> list[str]:
        """The common words, in the order the list first states them (the same at every count)."""
        first = self.keys(counts)[: counts.common, : counts.common_repeats].min(1)
        return [words()[i] for i in self.order()[: counts.common][np.argsort(first, kind="stable")]]

    def entries(self, counts: Counts, count: int) -> list[str]:
        """The shuffled list: the common words `common_repeats` times, `count` others `other_repeats`
        times."""
        available = len(words()) - counts.common
        if not 0 <= count <= available:
            raise UsageError(
                f"a cwe list holds at most {available} other words (posenc's {len(words())} names); "
                f"{count} asked: give shorter --lengths"
            )
        keys = self.keys(counts)
        taken = [
            (keys[i, r], int(w))
            for i, w in enumerate(self.order()[: counts.common + count])
            for r in range(counts.common_repeats if i < counts.common else counts.other_repeats)
        ]
        return [words()[w] for _, w in sorted(taken)]


def episode_nats(counts: Counts, count: int) -> float:
    """About the information in a list's draw: its words (distinctness ignored) and their order."""
    entries = counts.common * counts.common_repeats + count * counts.other_repeats
    shuffle = math.lgamma(entries + 1) - counts.common * math.lgamma(counts.common_repeats + 1)
    shuffle -= count * math.lgamma(counts.other_repeats + 1)
    return (counts.common + count) * math.log(len(words())) + shuffle


def needed_chars() -> set[str]:
    """Every character of a lowercase list episode."""
    text = LOWER_LIST.prompt(WordsEpisode(0), 0) + LOWER_LIST.answer(WordsEpisode(0))
    return set(text) | set(CONSONANTS + VOWELS) | set("0123456789")

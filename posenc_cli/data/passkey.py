"""The passkey phrasing, in one place: the synthetic corpus teaches it and `posenc probe` asks it.

An episode is the key sentence, some filler, then the question and the answer:

    the pass key is 40913. remember 40913. <filler …> what is the pass key? the pass key is 40913.

The question repeats the key sentence's words, so answering is copying what followed them earlier
(the induction pattern copy spans already teach); the key itself is random, so it cannot be guessed.
The key sentence states the key twice, as Mohtashami & Jaggi's prompt does ("The pass key is 12345.
Remember it. 12345 is the pass key."), shortened to fit short windows. That matters for training:
digits that are only ever random push a tied embedding to make them all alike (measured: cosine 0.96
between digit embeddings in a rope model that never learned retrieval), and the copy a few characters
later is the cheap signal that keeps them apart.
"""

from __future__ import annotations

import re
import string

KEY_DIGITS = 5
DIGITS = string.digits
KEY_SENTENCE = "the pass key is {key}. remember {key}. "
QUESTION = "what is the pass key? the pass key is "
ANSWER = "{key}. "


def _with_any_key(template: str) -> str:
    return re.escape(template.format(key="KEY")).replace("KEY", r"\d+")


# what `posenc probe` removes from filler so no other key competes with the one it asks for:
# key sentences, questions with their answers, and stray digits (from copies of parts of episodes)
EPISODE_PARTS = re.compile("|".join([_with_any_key(KEY_SENTENCE), _with_any_key(QUESTION + ANSWER), r"\d+"]))


def key_sentence(key: str) -> str:
    return KEY_SENTENCE.format(key=key)


def answer(key: str) -> str:
    return ANSWER.format(key=key)


def random_key(rng) -> str:
    """KEY_DIGITS uniform digits from a numpy Generator (leading zeros allowed)."""
    return "".join(DIGITS[i] for i in rng.integers(0, len(DIGITS), size=KEY_DIGITS))


def needed_chars() -> set[str]:
    """Every character an episode can contain: a vocabulary lacking one cannot be probed."""
    return set(KEY_SENTENCE.format(key="") + QUESTION + ANSWER.format(key="") + DIGITS)


# Mohtashami & Jaggi's (2023) prompt in their own English, for pretrained models (`posenc probe hf:…`)
NATURAL_INTRO = (
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. "
    "I will quiz you about the important information there."
)
NATURAL_FILLER = (
    "The grass is green.",
    "The sky is blue.",
    "The sun is yellow.",
    "Here we go.",
    "There and back again.",
)
NATURAL_KEY = "The pass key is {key}. Remember it. {key} is the pass key."
NATURAL_QUESTION = "What is the pass key? The pass key is"

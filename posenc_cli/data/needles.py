"""The needle tasks, in one place: the passkey and RULER's needle-in-a-haystack family (Hsieh et al.
2024), as `posenc probe --task` asks them and the synthetic corpus teaches them (`data.probe_task`).

A needle states a key of a name; an episode is its needles, a question and the answer scored:

    passkey     the pass key is 40913. remember 40913.             ... what is the pass key? the pass key is 40913
    multikey    the pass key of bazo is 40913. remember 40913.     (and 3 distractors of other names)
                ... what is the pass key of bazo? the pass key of bazo is 40913
    multivalue  a pass key of bazo is 40913. remember 40913.       (4 needles, one name)
                ... what are the pass keys of bazo? the pass keys of bazo are 40913 22817 55120 90871
    multiquery  the pass key of bazo is 40913. remember 40913.     (4 needles, 4 names, all asked)
                ... what are the pass keys of kimu and bazo and ...? the pass keys of kimu and bazo and ... are 22817 40913 ...

Needle 0 sits at the trial's depth, the others at depths drawn uniformly from [0, 1]. The answer lists
multivalue's keys in the order the text states them and multiquery's in the order the question asks
(a random order). Names are distinct, and so are keys: a distractor never has the asked name or key.
`posenc probe hf:…` asks the same episodes in English (ENGLISH), after Mohtashami & Jaggi's passkey
prompt in data/passkey.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from posenc_cli.core.choices import PROBE_TASKS
from posenc_cli.core.errors import UsageError, require_int
from posenc_cli.data import passkey
from posenc_cli.data.letters import CONSONANTS, VOWELS

DISTRACTORS = 3  # multikey's needles beside the asked one: RULER's niah_multikey_1 (4 keys in all)
MAX_DISTRACTORS = 16
VALUES = 4  # multivalue's keys of the one name: RULER's num_needle_v
QUERIES = 4  # multiquery's names asked at once: RULER's num_needle_q
NAME_SYLLABLES = 2  # a name is consonant-vowel twice: 5,625 names, each 4 characters


@dataclass(frozen=True)
class NeedleTask:
    """Which task, and multikey's distractors (the one count a user sets; the others are RULER's)."""

    name: str = "passkey"
    distractors: int = DISTRACTORS

    def __post_init__(self) -> None:
        if self.name not in PROBE_TASKS:
            raise UsageError(f"task {self.name!r} is not known; choose from: {', '.join(PROBE_TASKS)}")
        require_int("--distractors", self.distractors, at_least=1, at_most=MAX_DISTRACTORS)

    @property
    def needles(self) -> int:
        counts = {"passkey": 1, "multikey": 1 + self.distractors, "multivalue": VALUES, "multiquery": QUERIES}
        return counts[self.name]

    @property
    def asked(self) -> int:
        """How many needles the question asks for: one, or (multivalue, multiquery) all."""
        return 1 if self.name in ("passkey", "multikey") else self.needles

    @property
    def answer_digits(self) -> int:
        """The answer's digits: key_nll is per digit."""
        return passkey.KEY_DIGITS * self.asked


def needle_task(name: str, distractors: int | None) -> NeedleTask:
    """--task and --distractors, checked: --distractors belongs to multikey only."""
    if distractors is not None and name != "multikey":
        raise UsageError(f"--distractors {distractors} applies only with --task multikey, not {name}")
    return NeedleTask(name, DISTRACTORS if distractors is None else distractors)


@dataclass(frozen=True)
class Needle:
    depth: float  # relative depth in the filler
    name: str  # "" for the passkey
    key: str


@dataclass(frozen=True)
class Episode:
    """One trial's needles (needle 0 at the trial's depth) and which of them are asked, in the answer's
    order."""

    task: NeedleTask
    needles: tuple[Needle, ...]
    asked: tuple[int, ...]

    @property
    def in_text_order(self) -> list[Needle]:
        """The needles as the text states them: by depth, ties in needle order."""
        return sorted(self.needles, key=lambda n: (n.depth, self.needles.index(n)))


@dataclass(frozen=True)
class Phrasing:
    """How an episode is written: the lowercase form posenc's runs train on, or English for hf: models."""

    key_sentence: str  # the passkey's: {key}
    key_question: str  # the passkey's
    needle: str  # {name}, {key}
    value_needle: str  # multivalue's: one of several keys of a name
    question: str  # one key asked: {name}
    questions: str  # several keys asked: {names}
    names_joiner: str
    keys_joiner: str

    def sentence(self, episode: Episode, needle: Needle) -> str:
        templates = {"passkey": self.key_sentence, "multivalue": self.value_needle}
        return templates.get(episode.task.name, self.needle).format(name=needle.name, key=needle.key)

    def ask(self, episode: Episode) -> str:
        """The question and the start of its answer; the keys follow."""
        asked = [episode.needles[i] for i in episode.asked]
        if episode.task.name == "passkey":
            return self.key_question
        if episode.task.name == "multikey":
            return self.question.format(name=asked[0].name)
        names = (
            asked[0].name
            if episode.task.name == "multivalue"
            else self.names_joiner.join(n.name for n in asked)
        )
        return self.questions.format(names=names)

    def answer(self, episode: Episode) -> str:
        """What is scored: every asked key, in the answer's order."""
        return self.keys_joiner.join(episode.needles[i].key for i in episode.asked)


LOWER = Phrasing(
    key_sentence=passkey.KEY_SENTENCE,
    key_question=passkey.QUESTION,
    needle="the pass key of {name} is {key}. remember {key}. ",
    value_needle="a pass key of {name} is {key}. remember {key}. ",
    question="what is the pass key of {name}? the pass key of {name} is ",
    questions="what are the pass keys of {names}? the pass keys of {names} are ",
    names_joiner=" and ",
    keys_joiner=" ",
)
ENGLISH = Phrasing(
    key_sentence=passkey.NATURAL_KEY,
    key_question=passkey.NATURAL_QUESTION,
    needle="The pass key of {name} is {key}. Remember it. {key} is the pass key of {name}.",
    value_needle="One of the pass keys of {name} is {key}. Remember it.",
    question="What is the pass key of {name}? The pass key of {name} is",
    questions="What are the pass keys of {names}? The pass keys of {names} are",
    names_joiner=", ",
    keys_joiner=", ",
)


def random_names(rng, n: int) -> list[str]:
    """n distinct names of NAME_SYLLABLES consonant-vowel syllables."""
    names: list[str] = []
    while len(names) < n:
        letters = rng.integers(0, [len(CONSONANTS), len(VOWELS)] * NAME_SYLLABLES)
        name = "".join((CONSONANTS, VOWELS)[i % 2][j] for i, j in enumerate(letters))
        if name not in names:
            names.append(name)
    return names


def random_keys(rng, n: int) -> list[str]:
    """n distinct passkey keys (one key draws as the passkey always has)."""
    keys: list[str] = []
    while len(keys) < n:
        key = passkey.random_key(rng)
        if key not in keys:
            keys.append(key)
    return keys


def draw_episode(task: NeedleTask, rng, depth: float) -> Episode:
    """One episode from a numpy Generator: needle 0 at `depth`, the others uniform over [0, 1]. The
    passkey draws its one key and nothing else, as it always has."""
    n = task.needles
    keys = random_keys(rng, n)
    if task.name == "passkey":
        return Episode(task, (Needle(depth, "", keys[0]),), (0,))
    names = random_names(rng, 1 if task.name == "multivalue" else n)
    depths = [depth, *rng.random(n - 1).tolist()]
    needles = tuple(Needle(d, names[i % len(names)], k) for i, (d, k) in enumerate(zip(depths, keys)))
    episode = Episode(task, needles, (0,))
    if task.name == "multivalue":
        return Episode(task, needles, tuple(needles.index(x) for x in episode.in_text_order))
    if task.name == "multiquery":
        return Episode(task, needles, tuple(int(i) for i in rng.permutation(n)))
    return episode


def placeholder(task: NeedleTask, depth: float = 0.0) -> Episode:
    """An episode of zero keys and one fixed name at `depth`, whose length stands for every episode's (a
    char tokenizer's exactly: names and keys have fixed lengths)."""
    name = "" if task.name == "passkey" else (CONSONANTS[0] + VOWELS[0]) * NAME_SYLLABLES
    needles = tuple(Needle(depth, name, "0" * passkey.KEY_DIGITS) for _ in range(task.needles))
    asked = tuple(range(task.asked))
    return Episode(task, needles, asked)


def episode_nats(task: NeedleTask) -> float:
    """About the information in an episode's draw: its keys and names (distinctness ignored), which
    needle multikey asks and multiquery's order."""
    n = task.needles
    nats = n * passkey.KEY_DIGITS * math.log(len(passkey.DIGITS))
    if task.name == "passkey":
        return nats
    name = NAME_SYLLABLES * math.log(len(CONSONANTS) * len(VOWELS))
    nats += name * (1 if task.name == "multivalue" else n)
    return nats + {"multikey": math.log(n), "multiquery": math.lgamma(n + 1)}.get(task.name, 0.0)


def needed_chars(task: NeedleTask) -> set[str]:
    """Every character a task's episode can contain (lowercase form): a vocabulary lacking one cannot be
    probed on it."""
    episode = placeholder(task)
    text = "".join(LOWER.sentence(episode, n) for n in episode.needles) + LOWER.ask(episode)
    extra = set() if task.name == "passkey" else set(CONSONANTS + VOWELS)
    return passkey.needed_chars() | set(text) | extra


def natural_prompt(episode: Episode, sentences: int) -> str:
    """Mohtashami & Jaggi's intro, `sentences` filler sentences with each needle (in English) after
    round(depth · sentences) of them, and the question; the answer (" " + keys) follows."""
    filler = [passkey.NATURAL_FILLER[i % len(passkey.NATURAL_FILLER)] for i in range(sentences)]
    parts, last = [passkey.NATURAL_INTRO], 0
    for needle in episode.in_text_order:
        at = round(needle.depth * sentences)
        parts += [*filler[last:at], ENGLISH.sentence(episode, needle)]
        last = at
    return " ".join([*parts, *filler[last:], ENGLISH.ask(episode)])

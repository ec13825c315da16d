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
    vt          var bazo = 40913. ... var kimu = var bazo. ...     (RULER's variable tracking: 1 chain, 4 hops)
                ... which variables are assigned 40913? they are bazo kimu lapo dufe giha

RULER's common-words extraction (cwe) is a list, not needles: data/common_words.py, asked through the
same functions here. vt's chain is its needles: needle 0 states the value at the trial's depth, each
hop binds the next name to the one before, at sorted depths drawn uniformly after it; the answer is the
chain's names in chain order.

Needle 0 sits at the trial's depth, the others at depths drawn uniformly from [0, 1]. The answer lists
multivalue's keys in the order the text states them and multiquery's in the order the question asks
(a random order). Names are distinct, and so are keys: a distractor never has the asked name or key.
`posenc probe hf:…` asks the same episodes in English (ENGLISH), after Mohtashami & Jaggi's passkey
prompt in data/passkey.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from posenc_cli.core.choices import PROBE_TASKS
from posenc_cli.core.errors import UsageError, require_int
from posenc_cli.data import common_words, passkey
from posenc_cli.data.common_words import ENGLISH_LIST, LOWER_LIST, ListPhrasing, WordsEpisode
from posenc_cli.data.letters import CONSONANTS, VOWELS

DISTRACTORS = 3  # multikey's needles beside the asked one: RULER's niah_multikey_1 (4 keys in all)
MAX_DISTRACTORS = 16
VALUES = 4  # multivalue's keys of the one name: RULER's num_needle_v
QUERIES = 4  # multiquery's names asked at once: RULER's num_needle_q
HOPS = 4  # vt's hops: RULER's num_hops (num_chains 1)
NAME_SYLLABLES = (
    common_words.NAME_SYLLABLES
)  # a name is consonant-vowel twice: 5,625 names, each 4 characters
NAME_CHARS = 2 * NAME_SYLLABLES
RECALLED = ("vt", "cwe")  # the tasks scored by RULER's recall (string_match_all) beside exact match


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
        return counts.get(self.name, HOPS + 1 if self.name == "vt" else 0)  # cwe: a list, no needles

    @property
    def asked(self) -> int:
        """How many needles the question asks for: one, or (multivalue, multiquery, vt) all."""
        return 1 if self.name in ("passkey", "multikey") else self.needles

    @property
    def answer_digits(self) -> int:
        """The answer's digits (vt and cwe: its names' letters): key_nll is per digit."""
        if self.name == "cwe":
            return LOWER_LIST.counts.common * NAME_CHARS
        return (NAME_CHARS if self.name == "vt" else passkey.KEY_DIGITS) * self.asked

    @property
    def recalled(self) -> bool:
        """Whether RULER's recall is scored beside exact match."""
        return self.name in RECALLED


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
    chain_value: str  # vt's first line: {name}, {key}
    chain_hop: str  # vt's hops: {name}, {key} (the name before)
    chain_question: str  # vt's: {key}, {count}
    capitals: bool  # vt's names in capitals (RULER's)
    words: ListPhrasing  # cwe's

    def name(self, name: str) -> str:
        return name.upper() if self.capitals else name

    def sentence(self, episode: Episode, needle: Needle) -> str:
        if episode.task.name == "vt":
            hop = needle is not episode.needles[0]
            key = self.name(needle.key) if hop else needle.key
            return (self.chain_hop if hop else self.chain_value).format(name=self.name(needle.name), key=key)
        templates = {"passkey": self.key_sentence, "multivalue": self.value_needle}
        return templates.get(episode.task.name, self.needle).format(name=needle.name, key=needle.key)

    def ask(self, episode: Episode) -> str:
        """The question and the start of its answer; the keys follow."""
        asked = [episode.needles[i] for i in episode.asked]
        if episode.task.name == "passkey":
            return self.key_question
        if episode.task.name == "multikey":
            return self.question.format(name=asked[0].name)
        if episode.task.name == "vt":
            return self.chain_question.format(key=asked[0].key, count=len(asked))
        names = (
            asked[0].name
            if episode.task.name == "multivalue"
            else self.names_joiner.join(n.name for n in asked)
        )
        return self.questions.format(names=names)

    def answer(self, episode: Episode | WordsEpisode) -> str:
        """What is scored: every asked key, in the answer's order (vt: the chain's names; cwe: the common
        words)."""
        if isinstance(episode, WordsEpisode):
            return self.words.answer(episode)
        if episode.task.name == "vt":
            return " ".join(self.name(episode.needles[i].name) for i in episode.asked)
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
    chain_value="var {name} = {key}. ",
    chain_hop="var {name} = var {key}. ",
    chain_question="which variables are assigned {key}? they are ",
    capitals=False,
    words=LOWER_LIST,
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
    # RULER's variable_tracking lines (a hop's trailing space as RULER writes it), question and answer prefix
    chain_value="VAR {name} = {key}",
    chain_hop="VAR {name} = VAR {key} ",
    chain_question="Question: Find all variables that are assigned the value {key} in the text above. Answer: "
    "According to the chain(s) of variable assignment in the text above, {count} variables are assigned "
    "the value {key}, they are:",
    capitals=True,
    words=ENGLISH_LIST,
)
# RULER's vt template (before the context) and noise line (type_haystack noise)
VT_INTRO = "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n"
VT_NOISE = " ".join(passkey.NATURAL_FILLER)


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


def draw_episode(task: NeedleTask, rng, depth: float) -> Episode | WordsEpisode:
    """One episode from a numpy Generator: needle 0 at `depth`, the others uniform over [0, 1] (vt's
    hops: sorted, over [depth, 1]). The passkey draws its one key and nothing else, as it always has;
    cwe draws a list's seed (depth has no meaning in a shuffled list)."""
    if task.name == "cwe":
        return WordsEpisode.draw(rng)
    n = task.needles
    if task.name == "vt":
        names, value = random_names(rng, n), random_keys(rng, 1)[0]
        return chain(task, depth, names=names, value=value, uniform=rng.random(n - 1))
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


def chain(task: NeedleTask, depth: float, *, names: list[str], value: str, uniform) -> Episode:
    """vt's chain: names[0] bound to the value at `depth`, each later name to the one before it at the
    sorted depths `uniform` (in [0, 1)) scaled into [depth, 1]; all asked, in chain order."""
    depths = [depth, *sorted(depth + (1 - depth) * float(u) for u in uniform)]
    keys = [value, *names[:-1]]
    needles = tuple(Needle(d, name, key) for d, name, key in zip(depths, names, keys))
    return Episode(task, needles, tuple(range(len(needles))))


def placeholder(task: NeedleTask, depth: float = 0.0) -> Episode | WordsEpisode:
    """An episode of zero keys and one fixed name at `depth`, whose length stands for every episode's (a
    char tokenizer's exactly: names and keys have fixed lengths). vt's chain and cwe's list: seed 0's."""
    if task.name in ("vt", "cwe"):
        return draw_episode(task, np.random.default_rng(0), depth)
    name = "" if task.name == "passkey" else (CONSONANTS[0] + VOWELS[0]) * NAME_SYLLABLES
    needles = tuple(Needle(depth, name, "0" * passkey.KEY_DIGITS) for _ in range(task.needles))
    asked = tuple(range(task.asked))
    return Episode(task, needles, asked)


def episode_nats(task: NeedleTask) -> float:
    """About the information in an episode's draw: its keys and names (distinctness ignored), which
    needle multikey asks and multiquery's order."""
    n = task.needles
    name = NAME_SYLLABLES * math.log(len(CONSONANTS) * len(VOWELS))
    if task.name == "vt":
        return passkey.KEY_DIGITS * math.log(len(passkey.DIGITS)) + n * name
    nats = n * passkey.KEY_DIGITS * math.log(len(passkey.DIGITS))
    if task.name == "passkey":
        return nats
    nats += name * (1 if task.name == "multivalue" else n)
    return nats + {"multikey": math.log(n), "multiquery": math.lgamma(n + 1)}.get(task.name, 0.0)


def needed_chars(task: NeedleTask) -> set[str]:
    """Every character a task's episode can contain (lowercase form): a vocabulary lacking one cannot be
    probed on it."""
    if task.name == "cwe":
        return passkey.needed_chars() | common_words.needed_chars()
    episode = placeholder(task)
    text = "".join(LOWER.sentence(episode, n) for n in episode.needles) + LOWER.ask(episode)
    extra = set() if task.name == "passkey" else set(CONSONANTS + VOWELS)
    return passkey.needed_chars() | set(text) | extra


def natural_prompt(episode: Episode | WordsEpisode, sentences: int) -> str:
    """Mohtashami & Jaggi's intro, `sentences` filler sentences with each needle (in English) after
    round(depth · sentences) of them, and the question; the answer (" " + keys) follows. vt: RULER's
    template, `sentences` noise lines; cwe: RULER's list of its common words and `sentences` others."""
    if isinstance(episode, WordsEpisode):
        return ENGLISH.words.prompt(episode, sentences)
    if episode.task.name == "vt":
        return vt_prompt(episode, sentences)
    filler = [passkey.NATURAL_FILLER[i % len(passkey.NATURAL_FILLER)] for i in range(sentences)]
    parts, last = [passkey.NATURAL_INTRO], 0
    for needle in episode.in_text_order:
        at = round(needle.depth * sentences)
        parts += [*filler[last:at], ENGLISH.sentence(episode, needle)]
        last = at
    return " ".join([*parts, *filler[last:], ENGLISH.ask(episode)])


def vt_prompt(episode: Episode, lines: int) -> str:
    """RULER's vt prompt: its intro, `lines` noise lines with each chain line after round(depth · lines)
    of them, all joined by newlines, then the question and answer prefix."""
    parts, last = [], 0
    for needle in episode.in_text_order:
        at = round(needle.depth * lines)
        parts += [VT_NOISE] * (at - last) + [ENGLISH.sentence(episode, needle)]
        last = at
    context = "\n".join(parts + [VT_NOISE] * (lines - last))
    return VT_INTRO + context + "\n" + ENGLISH.ask(episode)

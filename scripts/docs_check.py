"""The docs name only what exists: every `tests/<file>.py::<test>`, every repo path, every option of a
`posenc CMD ... --option` in code, every config key written `group.key=`, every `[link](doc.md#heading)`'s
heading. And they read as a user's pages: no development-log talk (PROCESS_TALK), and each figure that a
later measurement changes stated in its one home only (ONE_HOME). Run by `make lint`; A stated count of
all schemes must be the registry's (SCHEME_COUNT), and the scripts' comments and docstrings follow the
same rules of paths and process talk (SCRIPTS). Prints one line per problem (FILE:LINE: what) and exits
1 if there is any.

    python scripts/docs_check.py [DOC.md|SCRIPT ...]   # default: README.md, docs/*.md, data/README.md,
                                                       # benchmarks/README.md, scripts/*.py, scripts/*.sh
"""

from __future__ import annotations

import dataclasses
import functools
import html
import re
import shlex
import sys
import tokenize
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parents[1]
DOCS = ("README.md", "docs/*.md", "data/README.md", "benchmarks/README.md")
SCRIPTS = ("scripts/*.py", "scripts/*.sh")
sys.path.insert(0, str(ROOT))  # this checkout's posenc_cli, not whichever one is installed

TEST = re.compile(r"\b(tests/[\w/]+\.py)((?:::\w+)+)")
PATH = re.compile(r"(?<![\w./<-])((?:posenc_cli|scripts|configs|tests|docs|benchmarks)/[\w./-]*)")
KEY = re.compile(r"(?<![\w.+~])(train|data|model|scheme)\.(\w+)=")
SCHEME = re.compile(r"(?<![\w.])scheme=(\w+)(?![\w,+])")  # one scheme named: scheme=rope, not rope,alibi
SPAN = re.compile(r"`([^`]+)`")
FENCE = re.compile(r"^\s*```")
# links to a heading: [text](doc.md#anchor "title"), [text](#anchor), and a reference's [ref]: doc.md#anchor
LINK = re.compile(r"(?<!\\)\]\(\s*<?([^)\s#>]*)#([^)\s>]+)>?(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?([^\s#>]*)#([^\s>]+)", re.M)
CODE_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
ATX_HEADING = re.compile(r"^ {0,3}#{1,6}(?:\s+(.*?))?\s*(?:\s#+)?\s*$")
SETEXT_UNDERLINE = re.compile(r"^ {0,3}(=+|-+)\s*$")
HTML_ID = re.compile(r"<[^>]*\s(?:id|name)=\"([^\"]+)\"")
# Hydra's own flags, which `posenc train` passes through (its other arguments are overrides)
HYDRA_FLAGS = {"--cfg", "--info", "--multirun", "--resolve", "--package", "--hydra-help"}
# The words of a development log, not of a user's page: which issue, sitting of work, person, branch or
# machine of the project made a figure. A reader needs a figure's date, CPU, versions and command.
PROCESS_TALK = {
    "an issue number": re.compile(r"\bissues? #?\d+\b|(?<![\w&/(])#\d+\b", re.I),
    "a work session": re.compile(r"\bsessions?\d*\b", re.I),
    "whose jobs": re.compile(r"\banother engineer|\bother (?:engineers|agents)\b", re.I),
    "a branch": re.compile(r"\b(?:this|of) branch\b|\bbranch `", re.I),
    "this project's machine": re.compile(r"\bthis project(?:'s| runs on)\b", re.I),
}
# Figures a later measurement changes live in one file; a copy elsewhere would go stale, so other pages
# link to the figure's home heading instead (benchmarks/ keeps dated history). NEAR: within one paragraph
# and one sentence. A figure is caught in digits and in words ("about twice three minutes").
FIGURE_HOME = "docs/performance.md"
HOME = f"{FIGURE_HOME}#current-figures"
NEAR = r"(?:[^.\n]|\n(?![ \t]*\n)){0,200}?"
IN_WORDS = (
    r"\b(?:(?:about|roughly|nearly|under|within|over|longer than|near)\s+)?(?:(?:twice|half|three times)\s+)?"
    r"(?:the\s+)?(?:one|two|three|four|five|six|seven|eight|nine|ten|a few)\s+minutes\b"
)
ONE_HOME = {
    "make demo's wall time": (re.compile(rf"make demo(?!`?'s)`?{NEAR}\b\d+ min \d+ s"), HOME),
    "the suite's size": (re.compile(r"\b\d[\d,]* tests\b"), HOME),
    "the suite's time": (re.compile(rf"make test(?:-\w+)?`?{NEAR}\b\d+ min \d+ s"), HOME),
    "the AVX2 demo's projection": (
        re.compile(rf"(?:AVX2|project(?:ed|ion)){NEAR}\b\d+½?\s?[–-]\s?\d+½? min"),
        HOME,
    ),
    "the demo's time in words": (re.compile(rf"(?:\bdemo\b|AVX2|main job){NEAR}{IN_WORDS}", re.I), HOME),
    "a probe-preset run's CPU cost": (
        re.compile(
            rf"(?:experiment=probe|probe preset|128-token|needle){NEAR}\b\d[\d,]* CPU-(?:minutes|seconds)\b"
        ),
        "docs/probe.md#training-models-that-can-be-probed",
    ),
}
# A stated count of every scheme ("all 16 schemes", "17 registered schemes", "the scheme group's 9"):
# it must be len(SCHEMES), or better no count at all. A count of a subset ("the five chapter schemes") is not
# one of these.
NUMBER = r"\d+|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|sixteen|seventeen|eighteen|nineteen|twenty"
NUMBER_WORDS = NUMBER.split("|")[1:]
SCHEME_COUNT = re.compile(
    rf"\b(?P<b>{NUMBER})\s+(?:registered|built-in|built in|available)\s+(?:positional\s+)?schemes\b"
    rf"|\b(?:lists|registers|holds|has)\s+(?P<c>{NUMBER})\s+(?:positional\s+)?schemes\b"
    rf"|\b(?P<d>{NUMBER})\s+schemes\s+(?:in|of)\s+(?:the\s+)?(?:scheme group|registry|`SCHEMES`|all|total|posenc)\b"
    rf"|\bscheme group(?:'s)?\s+(?:has\s+|holds\s+|lists\s+)?(?P<e>{NUMBER})\b",
    re.I,
)


def command_options() -> dict[str, set[str]]:
    """Each `posenc` command's option names, read from the click command the CLI builds ("" = posenc)."""
    from posenc_cli.cli.main import command

    def names(cmd) -> set[str]:
        declared = {name for param in cmd.params for name in (*param.opts, *param.secondary_opts)}
        return declared | {"--help", "-h"}

    group = command()
    options = {"": names(group), **{name: names(cmd) for name, cmd in group.commands.items()}}
    options["train"] |= HYDRA_FLAGS
    return options


def config_keys() -> dict[str, set[str]]:
    """group -> the keys `group.key=` may name, from the schema's dataclasses and the schemes' own
    options; "scheme=NAME" -> the options of that scheme alone."""
    from posenc_cli.config.schema import DATA, TrainConfig
    from posenc_cli.model.positional import SCHEMES, scheme_options
    from posenc_cli.model.shape import ModelSize

    def fields(*classes: type) -> set[str]:
        return {f.name for cls in classes for f in dataclasses.fields(cls)}

    keys = {"train": fields(TrainConfig), "model": fields(ModelSize), "data": fields(*DATA.values())}
    keys["scheme"] = {"parts", *scheme_options()}  # parts: a composite's, scheme=A+B
    return keys | {f"scheme={name}": set(scheme_options(name)) for name in SCHEMES}


def defined_in(path: Path, name: str) -> bool:
    return re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{name}\b", path.read_text(), re.M) is not None


def missing_names(line: str, root: Path) -> list[str]:
    """The tests and repo paths a line of prose or code names that do not exist under root."""
    found = []
    for file, names in TEST.findall(line):
        if not (root / file).is_file() or not defined_in(root / file, names.split("::")[-1]):
            found.append(f"no test {file}{names}")
    for match in PATH.finditer(line):
        path, after = match[1].rstrip(".,:;"), line[match.end() : match.end() + 1]
        if after not in ("<", "{", "*") and not (root / path).exists():  # a pattern, not a path
            found.append(f"no file {path}")
    return found


def unfenced_lines(text: str) -> list[str]:
    """The text's lines with those of fenced code blocks (``` or ~~~, fences included) blanked; a fence
    closes only at a fence of its own character at least as long, as CommonMark reads them."""
    lines, fence = text.splitlines(), None
    for i, line in enumerate(lines):
        opened = CODE_FENCE.match(line)
        if fence is None and opened:
            fence = opened[1]
        elif fence is not None:
            closing = opened is not None and opened[1][0] == fence[0] and len(opened[1]) >= len(fence)
            fence = None if closing and not line.strip().strip(fence[0]) else fence
        else:
            continue
        lines[i] = ""
    return lines


def anchor_of(heading: str) -> str:
    """GitHub's anchor for a heading: its rendered words (a link's or image's text gone to the link's
    words or nothing, no tags, entities decoded, no emphasis marks or backticks), lower-cased, punctuation
    dropped (every dash but '-', and '_' kept), spaces made '-'."""
    words = re.sub(r"!\[[^\]]*\](?:\([^)]*\)|\[[^\]]*\])", "", heading)
    words = re.sub(r"\[([^\]]*)\](?:\([^)]*\)|\[[^\]]*\])", r"\1", words)
    words = html.unescape(re.sub(r"<[^>]+>", "", words))
    words = re.sub(r"(?<!\w)(_{1,2})(?=\S)(.+?)(?<=\S)\1(?!\w)", r"\2", words)
    return re.sub(r"[^\w\- ]", "", words.lower()).replace(" ", "-")


def heading_anchors(text: str) -> set[str]:
    """The anchors of a Markdown file's headings (ATX and setext, outside code; a repeated one gets
    -1, -2, ...) and of its HTML id= and name= attributes."""
    anchors: set[str] = set(HTML_ID.findall(text))
    seen: set[str] = set()
    lines = unfenced_lines(text)
    for i, line in enumerate(lines):
        atx = ATX_HEADING.match(line)
        above = lines[i - 1] if i else ""
        setext = (
            SETEXT_UNDERLINE.match(line)
            and above.strip()
            and not re.match(r"^ {0,3}([#|>*+-]|\d+[.)])", above)
        )
        if not (atx or setext):
            continue
        base = anchor_of((atx[1] or "") if atx else above.strip())
        anchor, n = base, 0
        while anchor in seen:
            n += 1
            anchor = f"{base}-{n}"
        seen.add(anchor)
    return anchors | seen


@functools.cache
def anchors_in(path: Path) -> set[str]:
    """heading_anchors of a file, read and parsed once however many links point into it."""
    return heading_anchors(path.read_text())


def broken_links(text: str, doc: Path, root: Path) -> list[tuple[int, str]]:
    """(line, what) for each link to a heading in doc's prose (not in code) whose local file is missing
    or has no such heading; links to other sites are not followed."""
    prose = "\n".join(unfenced_lines(text))
    span = r"(`+)(?!`)(?:(?!\n[ \t]*\n).)*?(?<!`)\1(?!`)"  # a code span, across lines but not paragraphs
    prose = re.sub(span, lambda m: "\n" * m[0].count("\n"), prose, flags=re.S)
    found = []
    for match in [*LINK.finditer(prose), *REFERENCE.finditer(prose)]:
        file, anchor = match[1].split("?")[0], unquote(match[2])
        if re.match(r"[a-zA-Z][\w+.-]*:", file):
            continue
        target = (root / file.lstrip("/")) if file.startswith("/") else (doc.parent / file) if file else doc
        target = target / "README.md" if target.is_dir() else target
        line = prose.count("\n", 0, match.start()) + 1
        if not target.is_file():
            found.append((line, f"no file {file}"))
        elif target.suffix == ".md" and anchor not in anchors_in(target.resolve()):
            found.append((line, f"no heading #{anchor} in {file or doc.name}"))
    return found


def process_talk(text: str) -> list[tuple[int, str]]:
    """(line, what) for each PROCESS_TALK phrase in text's prose: code blocks and code spans' insides
    are left out (a module named session.py is no dev log), a span's backticks kept."""
    found = []
    for number, line in enumerate(unfenced_lines(text), 1):
        prose = re.sub(r"`[^`]*`", "``", line)
        found += [
            (number, f"process talk ({what}): {m[0]!r}")
            for what, rule in PROCESS_TALK.items()
            for m in rule.finditer(prose)
        ]
    return found


def figures_off_home(text: str, doc: Path | None = None, root: Path = ROOT) -> list[tuple[int, str]]:
    """(line, what) for each ONE_HOME figure text states: only the figure's home page may (and
    benchmarks/, its dated history)."""
    return [
        (text.count("\n", 0, m.start()) + 1, f"states {what}: its one home is {home}, link there")
        for what, (rule, home) in ONE_HOME.items()
        if doc is None or not figures_may_live_in(doc, root, home.split("#")[0])
        for m in rule.finditer(text)
    ]


def figures_may_live_in(doc: Path, root: Path, home: str = FIGURE_HOME) -> bool:
    """The figure's home (FIGURE_HOME unless named), and benchmarks/: dated snapshots, history that says
    when each figure held."""
    return doc.resolve() == (root / home).resolve() or doc.resolve().is_relative_to(root / "benchmarks")


def scheme_counts(text: str, registered: int) -> list[tuple[int, str]]:
    """(line, what) for each count of all schemes (SCHEME_COUNT) that is not the registry's."""
    found = []
    for m in SCHEME_COUNT.finditer(text):
        said = next(group for group in m.groups() if group)
        number = int(said) if said.isdigit() else NUMBER_WORDS.index(said.lower()) + 1
        if number != registered:
            found.append(
                (
                    text.count("\n", 0, m.start()) + 1,
                    f"states {number} schemes, SCHEMES holds {registered}: state no count",
                )
            )
    return found


def script_comments(path: Path) -> list[tuple[int, str]]:
    """(line, text) of a script's comments, and of a Python script's module docstring: what a reader of
    the script reads as prose. A shell script's # comments (its #! line left out)."""
    text = path.read_text()
    if path.suffix != ".py":
        return [
            (n, m[1])
            for n, line in enumerate(text.splitlines(), 1)
            if not line.startswith("#!") and (m := re.search(r"(?:^|\s)#(?![{#])(.*)$", line))
        ]
    found, first = [], True
    for token in tokenize.generate_tokens(iter(text.splitlines(keepends=True)).__next__):
        if token.type == tokenize.COMMENT:
            found.append((token.start[0], token.string[1:]))
        elif first and token.type == tokenize.STRING:
            found += [(token.start[0] + i, line) for i, line in enumerate(token.string.splitlines())]
        first = first and token.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.ENCODING)
    return found


def check_script(script: Path, *, root: Path) -> list[str]:
    """One "SCRIPT:LINE: what" per path its comments name that does not exist, and per process talk."""
    found = []
    for number, comment in script_comments(script):
        prose = re.sub(r"`[^`]*`", "``", comment)
        found += [(number, what) for what in missing_names(comment, root)]
        found += [
            (number, f"process talk ({what}): {m[0]!r}")
            for what, rule in PROCESS_TALK.items()
            if what != "a work session" or not re.search(r"\bsession[._(]", prose)
            for m in rule.finditer(prose)
        ]
    return [f"{script}:{number}: {what}" for number, what in found]


def wrong_options(code: str, options: dict[str, set[str]]) -> list[str]:
    """The options a `posenc CMD ...` in this code names that CMD does not have."""
    found = []
    for command in re.split(r"&&|\|\||[|;]|\$\(", code.split(" #")[0]):
        try:
            words = shlex.split(command)
        except ValueError:
            words = command.split()
        while words and words[0] != "posenc":
            words.pop(0)
        if not words:
            continue
        cmd = words[1] if len(words) > 1 and words[1] in options else ""
        for word in words[1:]:
            option = word.split("=")[0]
            if option.startswith("--") and option not in options[cmd]:
                found.append(f"{f'posenc {cmd}'.strip()} has no option {option}")
    return found


def wrong_keys(line: str, keys: dict[str, set[str]]) -> list[str]:
    """The `group.key=` a line names that its group lacks; a scheme key, against the one scheme named."""
    named = set(SCHEME.findall(line))
    scheme = keys.get(f"scheme={named.pop()}", keys["scheme"]) if len(named) == 1 else keys["scheme"]
    known = keys | {"scheme": scheme}
    return [f"no config key {group}.{key}" for group, key in KEY.findall(line) if key not in known[group]]


def code_pieces(text: str) -> list[tuple[int, str]]:
    """(line, code): each line of a fenced block (continuations joined) and each `span` of the prose,
    which may wrap onto the next line."""
    pieces, prose, in_fence, pending = [], [], False, ""
    for number, line in enumerate(text.splitlines(), 1):
        fence = FENCE.match(line) is not None
        in_fence ^= fence
        prose.append("" if in_fence or fence else line)
        if in_fence and not fence:
            pending += line.rstrip("\\") + " "
            if not line.endswith("\\"):
                pieces.append((number, pending))
                pending = ""
    prose_text = "\n".join(prose)
    for span in SPAN.finditer(prose_text):
        pieces.append((prose_text.count("\n", 0, span.start()) + 1, span[1].replace("\n", " ")))
    return sorted(pieces)


def check(doc: Path, *, root: Path, options: dict[str, set[str]], keys: dict[str, set[str]]) -> list[str]:
    """One "DOC:LINE: what" per name in doc that does not exist."""
    text = doc.read_text()
    found = [(n, what) for n, line in enumerate(text.splitlines(), 1) for what in missing_names(line, root)]
    found += broken_links(text, doc, root) + process_talk(text) + figures_off_home(text, doc, root)
    found += scheme_counts(text, registered_schemes())
    found += [
        (n, what)
        for n, code in code_pieces(text)
        for what in wrong_options(code, options) + wrong_keys(code, keys)
    ]
    return [f"{doc}:{number}: {what}" for number, what in sorted(found, key=lambda item: item[0])]


@functools.cache
def registered_schemes() -> int:
    from posenc_cli.model.positional import SCHEMES

    return len(SCHEMES)


def doc_files() -> list[Path]:
    return sorted(p for pattern in DOCS for p in ROOT.glob(pattern))


def script_files() -> list[Path]:
    return sorted(p for pattern in SCRIPTS for p in ROOT.glob(pattern))


def main(argv: list[str]) -> int:
    given = [Path(a) for a in argv]
    docs = [p for p in given if p.suffix not in (".py", ".sh")] if given else doc_files()
    scripts = [p for p in given if p.suffix in (".py", ".sh")] if given else script_files()
    options, keys = command_options(), config_keys()
    problems = [p for doc in docs for p in check(doc, root=ROOT, options=options, keys=keys)]
    problems += [p for script in scripts for p in check_script(script, root=ROOT)]
    print(
        "\n".join(problems)
        or f"docs_check: {len(docs)} docs and {len(scripts)} scripts' comments, every test, path, option, key"
        " and heading link they name exists; no process talk, each changing figure in its one home, no"
        " wrong count of schemes"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""The docs name only what exists: every `tests/F.py::test`, every repo path, every option of a
`posenc CMD ... --option` in code, every config key written `group.key=`, every `[link](doc.md#heading)`'s
heading. Run by `make lint`; prints one line per name that does not exist (FILE:LINE: what) and exits 1
if there is any.

    python scripts/docs_check.py [DOC.md ...]   # default: README.md, docs/*.md, data/README.md, benchmarks/README.md
"""

from __future__ import annotations

import dataclasses
import re
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ("README.md", "docs/*.md", "data/README.md", "benchmarks/README.md")
sys.path.insert(0, str(ROOT))  # this checkout's posenc_cli, not whichever one is installed

TEST = re.compile(r"\b(tests/[\w/]+\.py)((?:::\w+)+)")
PATH = re.compile(r"(?<![\w./<-])((?:posenc_cli|scripts|configs|tests|docs|benchmarks)/[\w./-]*)")
KEY = re.compile(r"(?<![\w.+~])(train|data|model|scheme)\.(\w+)=")
SCHEME = re.compile(r"(?<![\w.])scheme=(\w+)(?![\w,+])")  # one scheme named: scheme=rope, not rope,alibi
SPAN = re.compile(r"`([^`]+)`")
FENCE = re.compile(r"^\s*```")
LINK = re.compile(r"\]\(([^)\s#]*)#([^)\s]+)\)")  # [text](doc.md#anchor) or [text](#anchor)
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
# Hydra's own flags, which `posenc train` passes through (its other arguments are overrides)
HYDRA_FLAGS = {"--cfg", "--info", "--multirun", "--resolve", "--package", "--hydra-help"}


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
    from posenc_cli.config.schema import DATA, ModelSize, TrainConfig
    from posenc_cli.model.positional import SCHEMES, scheme_options

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


def heading_anchors(text: str) -> set[str]:
    """The anchors GitHub gives a Markdown file's headings: the heading's text as rendered (a link's
    words, no backticks), lower-cased, punctuation dropped (dashes of every kind too, but '-' and '_'),
    spaces made '-'; a repeated heading gets -1, -2, ..."""
    anchors: set[str] = set()
    in_fence = False
    for line in text.splitlines():
        in_fence ^= FENCE.match(line) is not None
        heading = None if in_fence else HEADING.match(line)
        if heading:
            words = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading[1])
            base = re.sub(r"[^\w\- ]", "", words.lower()).replace(" ", "-")
            anchor, n = base, 0
            while anchor in anchors:
                n += 1
                anchor = f"{base}-{n}"
            anchors.add(anchor)
    return anchors


def broken_links(line: str, doc: Path) -> list[str]:
    """The `[text](file.md#anchor)` links of a line (outside `code`) whose file is missing or has no
    heading with that anchor."""
    found = []
    for file, anchor in LINK.findall(SPAN.sub("", line)):
        target = (doc.parent / file) if file else doc
        if not target.is_file():
            found.append(f"no file {file}")
        elif target.suffix == ".md" and anchor not in heading_anchors(target.read_text()):
            found.append(f"no heading #{anchor} in {file or doc.name}")
    return found


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
    found = [
        (n, what)
        for n, line in enumerate(text.splitlines(), 1)
        for what in missing_names(line, root) + broken_links(line, doc)
    ]
    found += [
        (n, what)
        for n, code in code_pieces(text)
        for what in wrong_options(code, options) + wrong_keys(code, keys)
    ]
    return [f"{doc}:{number}: {what}" for number, what in sorted(found, key=lambda item: item[0])]


def doc_files() -> list[Path]:
    return sorted(p for pattern in DOCS for p in ROOT.glob(pattern))


def main(argv: list[str]) -> int:
    docs = [Path(a) for a in argv] or doc_files()
    options, keys = command_options(), config_keys()
    problems = [p for doc in docs for p in check(doc, root=ROOT, options=options, keys=keys)]
    print(
        "\n".join(problems)
        or f"docs_check: {len(docs)} docs, every test, path, option, key and heading link they name exists"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

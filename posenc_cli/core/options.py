"""Typed option groups: a command's options (eval's, probe's) as a dataclass of groups, each group a
dataclass whose fields are its options, every option defined once by its field (name, type, default)
and `option(...)` (help, further names, fixed names). The command line's parameters (cli.app.with_options)
and the Python API's keywords (posenc.keywords_of) are both made from `options_of`, and the work reads the
groups whole; tests/test_options.py holds the three equal. Torch-free, so that --help stays fast."""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, Callable

from posenc_cli.core.errors import UsageError, require_bool, require_choice


@dataclass(frozen=True)
class Choice:
    """The fixed names an option takes (a comma list of them, or values matching the regex `also` besides)."""

    names: tuple[str, ...]
    comma_list: bool = False
    also: str = ""

    def check(self, option: str, value: Any) -> None:
        """The one check of a fixed-name option: the command line's while parsing, the work's before any."""
        if value is not None:
            require_choice(option, value, self.names, comma_list=self.comma_list, also=self.also)


@dataclass(frozen=True)
class Spec:
    """What an option is besides its field: its --help, further names (-l), fixed names, and how the
    Python API also takes it (`listed`: a list for the command's comma list; `path`: a pathlib.Path), and
    for a free-form option its --help metavar and shell completion (text typed so far -> candidates)."""

    help: str
    short: tuple[str, ...] = ()
    choice: Choice | None = None
    listed: bool = False
    path: bool = False
    metavar: str | None = None
    complete: Callable[[str], list[str]] | None = None


def option(default: Any, help: str, *short: str, **spec: Any) -> Any:
    """A group's field as an option: its default, and the Spec the command line and the API are made from."""
    return field(default=default, metadata={"option": Spec(help, short, **spec)})


@dataclass(frozen=True)
class Option:
    """One option of a command, as its parameter and its keyword are made: `group` is the field of the
    command's options that holds it."""

    name: str
    type: Any
    default: Any
    spec: Spec
    group: str

    @property
    def flag(self) -> str:
        """As the command line spells it: max_tokens -> --max-tokens."""
        return option_name(self.name)


def option_name(field_name: str) -> str:
    """A command's option as its group names the field: rope_factor -> --rope-factor."""
    return "--" + field_name.replace("_", "-")


def groups_of(command: type) -> dict[str, type]:
    """The groups of a command's options class, by field, in order (its other fields, RUNS, are not options)."""
    hints = typing.get_type_hints(command)
    return {f.name: hints[f.name] for f in fields(command) if is_dataclass(hints[f.name])}


def options_of(command: type) -> list[Option]:
    """Every option of a command's options class, its groups' fields in order."""
    found = []
    for name, group in groups_of(command).items():
        hints = typing.get_type_hints(group)
        for item in fields(group):
            found.append(Option(item.name, hints[item.name], item.default, item.metadata["option"], name))
    return found


def build(command: type, values: dict[str, Any], **others: Any) -> Any:
    """A command's options from every option's value by name (the command line's parameters, the API's
    keywords); `others`: its fields besides the groups (runs)."""
    groups = groups_of(command)
    taken = {name: {} for name in groups}
    for item in options_of(command):
        taken[item.group][item.name] = values[item.name]
    return command(**others, **{name: group(**taken[name]) for name, group in groups.items()})


def given(options: Any) -> dict[str, Any]:
    """Every field of a command's options, its groups' spread flat, as results.json records them."""
    flat = {
        f.name: getattr(options, f.name)
        for f in fields(options)
        if not is_dataclass(getattr(options, f.name))
    }
    for name in groups_of(type(options)):
        flat |= dataclasses.asdict(getattr(options, name))
    return flat


def check_given(options: Any) -> None:
    """Each flag a real bool (from Python a truthy word, "no", would be taken as yes) and each fixed-name
    option one of its names, refused in the command line's words: the checks it runs while parsing."""
    for item in options_of(type(options)):
        value = getattr(getattr(options, item.group), item.name)
        if item.type is bool:
            require_bool(item.flag, value)
        if item.spec.choice is not None:
            item.spec.choice.check(item.flag, value)


def refuse_unread(options: Any, unread: typing.Iterable[str], *, why: str) -> None:
    """An option a command's path does not read (named in `unread`), given anyway (a value other than its
    default), is refused rather than silently ignored; `why` says where it goes unread."""
    unread = set(unread)
    for item in options_of(type(options)):
        value = getattr(getattr(options, item.group), item.name)
        if item.name in unread and value != item.default:
            shown = item.flag + ("" if isinstance(value, bool) else f" {value}")
            raise UsageError(f"{shown} is not read {why}; drop it")

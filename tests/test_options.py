"""Each option of eval and probe is defined once, in its group (core.option_groups): the command line's
parameters and the Python API's keywords are made from the groups, and the model layer's settings and the
effective-length rule are built from a group whole."""

from __future__ import annotations

import dataclasses
import inspect
import typing

import pytest

import posenc
from posenc_cli.cli.main import command
from posenc_cli.core.option_groups import EvalOptions, Extension, ProbeOptions, Rule
from posenc_cli.core.options import options_of
from posenc_cli.model.extension.method import ExtensionSettings
from posenc_cli.report.effective_length import LengthRule


@pytest.mark.parametrize(
    "name, call, options", [("eval", posenc.evaluate, EvalOptions), ("probe", posenc.probe, ProbeOptions)]
)
def test_the_commands_options_and_the_apis_keywords_are_the_option_groups_names_defaults_and_choices(
    name, call, options
):
    """One option, one definition: the same names in the same order, the same defaults, the same fixed
    names (listed in --help) and the same further names (-l) on the command line and in Python."""
    defined = options_of(options)
    params = command().commands[name].params
    assert [p.name for p in params] == ["runs", *(item.name for item in defined)]
    for param, item in zip(params[1:], defined):
        assert param.default == item.default and param.opts == [item.flag, *item.spec.short], item.name
        assert (param.help or "").startswith(item.spec.help[:40]), item.name
        if item.spec.choice is not None:
            assert f"[{'|'.join(item.spec.choice.names)}]" in (param.metavar or ""), item.name
    keywords = list(inspect.signature(call).parameters.values())
    assert [k.name for k in keywords] == ["targets", *(item.name for item in defined)]
    assert [k.default for k in keywords[1:]] == [item.default for item in defined]


@pytest.mark.parametrize(
    "group, settings", [(Extension, ExtensionSettings), (Rule, LengthRule)]
)  # the first: a subclass
def test_a_group_the_work_builds_a_settings_object_from_has_its_fields_names_types_and_defaults(
    group, settings
):
    """The extension group is the model layer's ExtensionSettings field for field, the rule group
    report.effective_length's LengthRule: each is built from its group whole (`Settings(**group)`)."""

    def described(cls: type) -> list:
        hints = typing.get_type_hints(cls)
        return [(f.name, hints[f.name], f.default) for f in dataclasses.fields(cls)]

    assert described(group) == described(settings)


def test_an_unknown_keyword_is_refused_as_python_refuses_one():
    with pytest.raises(TypeError, match="dca_locl"):
        posenc.evaluate("no-such-run", dca_locl=8)

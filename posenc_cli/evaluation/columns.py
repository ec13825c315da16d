"""A result column, as eval and probe both make it: --rope-scaling's methods parsed once (rope_methods),
the Label a target's variant is scored as (column_label), whether it computes what the run was trained to
(as_trained), and the note for a run no method can scale. Each command's work is in its one home:
report.run_eval and report.run_probe."""

from __future__ import annotations

from dataclasses import asdict, replace

from posenc_cli.core.errors import UsageError, require_number
from posenc_cli.core.option_groups import Extension, Scaling
from posenc_cli.evaluation.labels import Label, pretended_context, with_tokenizer
from posenc_cli.evaluation.longrope_file import read_factors
from posenc_cli.evaluation.target import EvalTarget
from posenc_cli.model.extension.method import ContextMethod, ExtensionSettings, parse_methods
from posenc_cli.model.positional.rope_scaling import MAX_FACTOR, METHODS

SCALINGS = tuple(m for m in METHODS if ContextMethod(m).scales)  # the methods a --rope-factor applies to


def extension_settings(extension: Extension) -> ExtensionSettings:
    """The model layer's settings of the extensions (--self-extend-group, ...): the extension group whole."""
    return ExtensionSettings(**asdict(extension))


def asked_methods(scaling: Scaling, extension: Extension) -> list[ContextMethod]:
    """The columns eval and probe were asked for: --rope-scaling's methods with the scaling and extension
    groups' options (rope_methods)."""
    return rope_methods(
        scaling.rope_scaling,
        scaling.rope_factor,
        extension_settings(extension),
        longrope_factors=scaling.longrope_factors,
    )


def rope_methods(
    rope_scaling: str,
    rope_factor: float | None,
    settings: ExtensionSettings,
    *,
    longrope_factors: str | None = None,
) -> list[ContextMethod]:
    """--rope-scaling's methods, parsed once with the extensions' options, and --rope-factor bounded: it
    applies to a method's frequency scaling, so with none among them it is refused. --longrope-factors is
    read (verified) once and given to the longrope methods; without one it is refused."""
    if rope_factor is not None:
        require_number("--rope-factor", rope_factor, at_least=1, at_most=MAX_FACTOR)
    methods = parse_methods(rope_scaling, settings)
    if rope_factor is not None and not any(method.scales for method in methods):
        raise UsageError(
            f"--rope-factor {rope_factor:g} applies only with a frequency scaling in --rope-scaling; add e.g. "
            "--rope-scaling yarn (or yarn+self_extend) or drop it"
        )
    if longrope_factors is None:
        return methods
    if not any(method.scaling == "longrope" for method in methods):
        raise UsageError(
            f"--longrope-factors {longrope_factors} applies only with --rope-scaling longrope; add it or drop "
            "--longrope-factors"
        )
    factors = read_factors(longrope_factors)
    return [replace(m, long_factors=factors) if m.scaling == "longrope" else m for m in methods]


def column_label(run: EvalTarget, variant, overflow: str, *, distinct, rope_factor, mixed: bool) -> Label:
    """The column a run is scored as: its variant (evaluation time only: the checkpoint is untouched),
    overflow, what sets it apart from the table's other runs, the --rope-factor, its tokenizer."""
    label = run.use_variant(variant)
    factor = rope_factor if label.variant.scaling in SCALINGS else None
    computed = replace(label.variant, factor=factor, overflow=overflow)
    label = replace(label, variant=computed, distinct=distinct, context=pretended_context(run))
    return with_tokenizer(label, run.tokenizer_name, mixed)


def as_trained(run: EvalTarget, column: Label) -> bool:
    """Whether the column computes what the run was trained to: no scaling or extension of eval's own."""
    trained, scored = run.label.variant, column.variant
    return (scored.scaling, scored.extension) == (trained.scaling, trained.extension)


def unscalable_note(label: Label) -> str:
    """What eval's and probe's tables say of a run --rope-scaling cannot scale."""
    return f"{label} takes no RoPE scaling: scored once, as trained"

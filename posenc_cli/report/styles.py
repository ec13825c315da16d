"""The figures' styles: a colour and marker per scheme (the class's registry line, never a silent grey),
a colour per pretrained model, a line style per variant and a marker per tokenizer, the same in every
figure whichever columns it shows."""

from __future__ import annotations

from posenc_cli.evaluation.labels import Label
from posenc_cli.model.positional import SCHEMES

# Okabe & Ito's colour-blind-safe palette, one colour (and marker, for print) per scheme in every figure.
SCHEME_STYLES = {
    "none": ("#000000", "o"),
    "sinusoidal": ("#E69F00", "s"),
    "learned": ("#56B4E9", "D"),
    "rope": ("#009E73", "^"),
    "alibi": ("#0072B2", "v"),
    "t5": ("#D55E00", "P"),
    "xpos": ("#CC79A7", "X"),
    "kerple": ("#999999", "*"),
    "fire": ("#882255", "p"),  # Tol's wine: Okabe & Ito's yellow is too faint on white
    # the schemes of models since 2024, from Paul Tol's "bright" palette, apart from MODEL_COLOURS
    "p_rope": ("#66CCEE", "<"),
    "schedule": ("#AA3377", ">"),
    "irope": ("#228833", "d"),
    "rnope_swa": ("#4477AA", "8"),
    "local_global": ("#CCBB44", "H"),
    "cope": ("#EE6677", "x"),
    "fox": ("#994455", "+"),
}


# Paul Tol's "vibrant" palette: a scheme registered (model.positional.SCHEMES) without a line above
# takes the next of these, by registry order
SPARE_STYLES = (
    ("#EE7733", "1"),
    ("#0077BB", "2"),
    ("#33BBEE", "3"),
    ("#EE3377", "4"),
    ("#CC3311", "|"),
    ("#009988", "_"),
)
UNKNOWN_STYLE = ("#666666", "h")  # a family that is no scheme: a pretrained model (figure_styles colours it)


def family_style(family: str) -> tuple[str, str]:
    """A scheme's colour and marker: its SCHEME_STYLES line, or for a scheme added to the registry without
    one, the next of SPARE_STYLES in registry order (never the fallback grey, which is for non-schemes)."""
    if family in SCHEME_STYLES:
        return SCHEME_STYLES[family]
    unstyled = [name for name in SCHEMES if name not in SCHEME_STYLES]
    if family in unstyled:
        return SPARE_STYLES[unstyled.index(family) % len(SPARE_STYLES)]
    return UNKNOWN_STYLE


# Paul Tol's "muted" palette: one colour per pretrained model, apart from the schemes' colours.
MODEL_COLOURS = ("#332288", "#CC6677", "#117733", "#882255", "#999933", "#44AA99", "#AA4499", "#DDCC77")


VARIANT_LINES = {  # by what a column adds to its family (Label.beyond_family)
    (): "-",
    ("linear",): "--",
    ("ntk",): "-.",
    ("dynamic",): ":",
    ("yarn",): (0, (5, 1, 1, 1, 1, 1)),
}
OTHER_LINES = ((0, (1, 1)), (0, (3, 1, 1, 1)), (0, (5, 2)), (0, (2, 2, 6, 2)))  # variants beyond those


TOKENIZER_MARKERS = {"char": "o", "byte": "s", "bpe": "^"}  # posenc's own tokenizers
OTHER_MARKERS = ("D", "v", "P", "X", "*", "h", "p", "<")  # each pretrained model's tokenizer, in turn


def scheme_style(label: Label) -> dict:
    """Colour and marker by scheme, line style by variant (`rope+yarn`, `sinusoidal+unscaled`): the same
    in every figure whichever schemes it shows. figure_styles sets pretrained models and tokenizers apart."""
    colour, marker = family_style(label.family)
    return {"color": colour, "marker": marker, "linestyle": VARIANT_LINES.get(label.beyond_family, "--")}


def figure_styles(labels: list[Label], tokenizers: dict) -> dict[Label, dict]:
    """Per column: colour by scheme for posenc's runs and by model for pretrained ones,
    line style by variant, marker by tokenizer (`tokenizers`: column -> its tokenizer's name), so that
    no two columns of one figure share all three."""
    models = list(dict.fromkeys(label.model for label in labels if label.model))
    variants = sorted({label.beyond_family for label in labels} - set(VARIANT_LINES))
    others = list(
        dict.fromkeys(t for t in (tokenizers.get(c, "") for c in labels) if t not in TOKENIZER_MARKERS)
    )
    styles = {}
    for label in labels:
        style = scheme_style(label)
        if label.model:
            style["color"] = MODEL_COLOURS[models.index(label.model) % len(MODEL_COLOURS)]
        if label.beyond_family in variants:
            style["linestyle"] = OTHER_LINES[variants.index(label.beyond_family) % len(OTHER_LINES)]
        tokenizer = tokenizers.get(label, "")
        style["marker"] = (
            TOKENIZER_MARKERS.get(tokenizer) or OTHER_MARKERS[others.index(tokenizer) % len(OTHER_MARKERS)]
        )
        styles[label] = style
    return styles

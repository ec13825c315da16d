"""report.comparison_notes: the notes under a table quote the table's own rows, in the table's order."""

from __future__ import annotations

import pandas as pd

from conftest import column
from posenc_cli.report.comparison_notes import scored_tokens


def rows(scheme: str, tokens: dict[int, int]) -> list[dict]:
    return [{"scheme": column(scheme), "eval_len": L, "tokens": n} for L, n in tokens.items()]


def test_the_scored_token_note_gives_each_length_its_own_count_in_the_tables_order():
    """Sliding windows score fewer tokens at a longer length; the note once sorted and de-duplicated the
    counts, so `rope 2,034 / 2,133` read against a table holding 2,133 at 64 and 2,034 at 128."""
    df = pd.DataFrame(rows("rope", {128: 2034, 64: 2133}) + rows("alibi", {64: 2133, 128: 2034}))
    note = scored_tokens(df, "tokens")
    assert note == "tokens per length: rope 2,133 @ 64, 2,034 @ 128; alibi 2,133 @ 64, 2,034 @ 128"


def test_one_count_everywhere_is_said_once_and_seeds_of_one_column_are_not_repeated():
    df = pd.DataFrame(rows("rope", {64: 512, 128: 512}) * 3)
    assert scored_tokens(df) == "512 validation tokens"
    df = pd.DataFrame(rows("rope", {64: 512, 128: 500}) * 2)
    assert scored_tokens(df) == "validation tokens per length: rope 512 @ 64, 500 @ 128"


def test_a_scheme_with_options_of_its_own_keeps_its_users_but_a_scaled_one_does_not():
    from posenc_cli.evaluation.labels import Label, Variant
    from posenc_cli.report.tables import used_by

    assert "cohere2" in used_by(Label(("rnope_swa",), Variant(("window=32",))))
    assert used_by(Label(("rope",), Variant(("interleaved",)))) == "LLaMA/Qwen/Mistral"
    assert used_by(Label(("rope",), Variant(scaling="yarn"))) == "—"

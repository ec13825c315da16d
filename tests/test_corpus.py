"""The synthetic corpus's information content: the event probabilities its entropy floor counts."""

from __future__ import annotations

import math

import pytest

from posenc_cli.data.synthetic import SyntheticSpec, copy_length_nats, generate, log_uniform_int_nats


def test_copy_distance_probabilities_sum_to_one():
    spec = SyntheticSpec()
    total = sum(
        math.exp(-log_uniform_int_nats(d, spec.copy_min_distance, spec.copy_max_distance))
        for d in range(spec.copy_min_distance, spec.copy_max_distance)
    )
    assert total == pytest.approx(1.0)


@pytest.mark.parametrize("distance", [32, 50, 96, 97, 2000])
def test_copy_length_probabilities_sum_to_one_for_every_distance(distance):
    """A copy from closer than its span is cut to the distance: those spans share one length."""
    spec = SyntheticSpec()
    lengths = {min(span, distance) for span in range(spec.copy_min_len, spec.copy_max_len + 1)}
    assert sum(math.exp(-copy_length_nats(n, distance, spec)) for n in lengths) == pytest.approx(1.0)


def test_the_floor_adds_the_copy_events_to_the_fresh_text():
    made = generate(SyntheticSpec(n_chars=60_000))
    fresh_part = made.fresh_entropy * (1 - made.copied_fraction)
    assert 0 < made.event_entropy < 0.2 and made.entropy_floor == pytest.approx(
        fresh_part + made.event_entropy
    )

"""qwenref.floor: the one rule that names why a run beats its read floor, used by the notebooks,
the ladder tables and the status page."""

import pytest

from qwenref import floor, nbrecords, status

MIB = 1 << 20
L2 = 60 * MIB


def _run(pct, nbytes, **extra):
    return {"kernel": "k", "pct_of_floor": pct, "bytes": nbytes, **extra}


@pytest.mark.parametrize(
    "pct, nbytes, l2, want",
    [
        (99.9, MIB, L2, None),  # at or below the floor: no reason
        (100.0, MIB, L2, None),
        (None, MIB, L2, None),  # no floor recorded
        (100.5, 2 * MIB, L2, "L2"),  # fits in the L2: whatever the margin
        (140.0, L2, L2, "L2"),  # exactly the L2's size still fits
        (101.1, 340 * MIB, L2, "noise"),  # larger than the L2, within 3 %
        (103.0, L2 + 1, L2, "noise"),
        (103.1, L2 + 1, L2, "unexplained"),
        (101.0, MIB, None, "L2 unknown"),
        (101.0, MIB, 0, "L2 unknown"),
    ],
)
def test_floor_reason(pct, nbytes, l2, want):
    assert floor.floor_reason(_run(pct, nbytes), l2) == want
    note = floor.floor_note(_run(pct, nbytes), l2)
    assert (note == "") == (want is None)


def test_every_reason_has_a_tag_and_a_note():
    cases = {"L2": (110, MIB), "noise": (102, L2 * 2), "unexplained": (110, L2 * 2)}
    for why, (pct, nbytes) in cases.items():
        run = _run(pct, nbytes)
        assert floor.floor_reason(run, L2) == why and why in floor.REASONS
    assert "fit in the 60 MiB L2" in floor.floor_note(_run(110, 2 * MIB), L2)
    assert "noise" in floor.floor_note(_run(102, 2 * L2), L2)
    assert set(floor.REASONS) == {"L2", "noise", "unexplained", "L2 unknown"}


def test_ladder_table_and_status_page_tag_by_the_rule(capsys):
    """nbrecords.print_ladder and the status page's ladder table give the same reason."""
    runs = (
        _run(105.3, 16 * MIB, rung=1, median_us=6.6, pct_of_copy=60.0, shape={"T": 32768}),
        _run(101.1, 340 * MIB, rung=1, median_us=83.0, pct_of_copy=101.0, shape={"T": 65536}),
        _run(80.0, 400 * MIB, rung=1, median_us=90.0, pct_of_copy=90.0, shape={"T": 131072}),
    )
    recs = nbrecords.Records(runs, 4000.0, "test", l2_bytes=L2)
    nbrecords.print_ladder(recs)
    out = capsys.readouterr().out.splitlines()[1:]
    assert out[0].endswith("<- above its floor: bytes from the L2")
    assert out[1].endswith("<- above its floor: timing spread")
    assert "above its floor" not in out[2]
    assert [r["pct_of_floor"] for r in nbrecords.above_floor(recs)] == [105.3, 101.1]
    ladder = [dict(r, stage="indexer", family="f", default=True, commit="c") for r in runs]
    page = status.render({"runs": ladder, "l2_bytes": L2})
    assert "| 105.3 (bytes from the L2) |" in page and "| 101.1 (timing spread) |" in page
    assert "| 80.0 |" in page

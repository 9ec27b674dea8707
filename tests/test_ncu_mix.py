"""qwenref.dev.ncu_mix on a small hand-written export in ncu's source-page CSV shape."""

import pytest

from qwenref.dev import ncu_mix

CSV = """"Kernel Name","k",
"Address","Source","Warp Stall Sampling (All Samples)","Instructions Executed",\
"stall_wait","stall_math","stall_wait (Not Issued)"
"0x10","  HMMA.16816.F32 R4, R8, R12, R4","30","200","20","10","5"
"0x10","  HMMA.16816.F32 R4, R8, R12, R4","30","200","20","10","5"
"0x20","@!P0 FMUL.FTZ R1, R2, R3","10","100","0","10","0"
"0x30","  FMUL.FTZ R1, R2, R3","0","1,000","0","0","0"
"0x40","","0","0","0","0","0"
"""


def test_rows_are_deduplicated_by_address_and_skip_empty_source():
    rows = ncu_mix.read_source_csv(CSV)
    assert [r["Address"] for r in rows] == ["0x10", "0x20", "0x30"]


def test_mix_counts_per_opcode_with_predicates_dropped():
    mix = ncu_mix.instruction_mix(ncu_mix.read_source_csv(CSV), per=100)
    assert mix == [("FMUL.FTZ", 11.0, 10.0), ("HMMA.16816.F32", 2.0, 30.0)]


def test_stall_shares_ignore_not_issued_columns():
    shares = dict(ncu_mix.stall_shares(ncu_mix.read_source_csv(CSV)))
    assert shares == pytest.approx({"wait": 0.5, "math": 0.5})


def test_main_prints_the_table(tmp_path, capsys):
    p = tmp_path / "k.csv"
    p.write_text(CSV)
    assert ncu_mix.main([str(p), "--per", "100"]) == 0
    out = capsys.readouterr().out
    assert "FMUL.FTZ" in out and "11.0" in out and "stalls: wait 50.0%" in out


def test_main_rejects_a_file_without_sass_rows(tmp_path):
    p = tmp_path / "k.csv"
    p.write_text('"ID","Metric Name"\n"0","Duration"\n')
    with pytest.raises(SystemExit):
        ncu_mix.main([str(p)])

"""Hybrid-parallel LLM tables: the reader, the bundled tables checked against independent published
figures, and bad input.

The bundled iteration times agree with other numbers their sources publish: Korthikanti et al.'s
selective-recomputation times give the model FLOPs utilisation the Megatron-LM README lists for the
same runs (41.5%, 51.4%, 56.0%, 56.3%) by the paper's formula 72 B s l h^2 (1 + s/6h + V/12hl); the
MT-NLG times give the paper's 126, 121 and 113 TFLOP/s per GPU by Narayanan et al.'s eq. 3.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import dlexplore as dlx
from dlexplore.errors import InputFileError

NARAYANAN = Path(__file__).resolve().parents[1].parent / "shared" / "reference" / "narayanan2021-table1.csv"


def test_bundled_hybrid_tables():
    assert dlx.measured.available_hybrid() == ["korthikanti-2022-megatron", "smith-2022-mt-nlg-530b"]
    for name in dlx.measured.available_hybrid():
        ds = dlx.measured.load(name)
        assert ds.attrs["table"] == "hybrid"
        assert ds.attrs["source"].startswith("measured: ")
        assert "arXiv" in ds.attrs["source"]
        for var in ds.data_vars:
            assert ds[var].attrs["units"], var
    # not among the data-parallel tables the explorer and the defaults use
    assert not set(dlx.measured.available_hybrid()) & set(dlx.measured.available())


def test_korthikanti_times_give_the_readme_mfu():
    frame = dlx.measured.to_frame(dlx.measured.load("korthikanti-2022-megatron"))
    selective = frame[frame["recompute"] == "selective"]
    readme = {"22B": 0.415, "175B": 0.514, "530B": 0.560, "1T": 0.563}
    for _, r in selective.iterrows():
        B, s, L, h, V = r.global_batch, r.seq, r.layers, r.hidden, r.vocab
        flops = 72 * B * s * L * h * h * (1 + s / (6 * h) + V / (12 * h * L))
        mfu = flops / (r.step_time * r.gpus * 312e12)
        assert mfu == pytest.approx(readme[r.model], abs=0.002), r.model  # times given to 3 digits
        assert r.sequence_parallel == "yes"


def test_mt_nlg_times_give_the_papers_tflops():
    frame = dlx.measured.to_frame(dlx.measured.load("smith-2022-mt-nlg-530b"))
    for _, r in frame.iterrows():
        B, s, L, h, V = r.global_batch, r.seq, r.layers, r.hidden, r.vocab
        flops = 96 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))
        assert flops / (r.step_time * r.gpus) / 1e12 == pytest.approx(r.tflops_per_gpu, abs=0.6)
        assert r.dp * r.tp * r.pp == r.gpus


@pytest.mark.skipif(not NARAYANAN.is_file(), reason="needs ../shared/reference")
def test_narayanan_table_reads_as_it_is():
    ds = dlx.measured.load(NARAYANAN)
    assert ds.attrs["table"] == "hybrid"
    assert ds.sizes["point"] == 10
    assert ds["tflops_per_gpu"].attrs["units"] == "TFLOP/s"
    assert list(ds["pp"].values) == [1, 1, 1, 1, 2, 4, 8, 16, 35, 64]


HEADER = "model,layers,hidden,heads,seq,vocab,gpu,gpus,tp,pp,global_batch,precision"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            f"{HEADER},recompute,step_time\nA,2,64,4,128,1000,A100-80GB,8,2,2,8,bf16,some,1.0\n",
            "column 'recompute': expected one of none, selective, full",
        ),
        (f"{HEADER},zero,step_time\nA,2,64,4,128,1000,A100-80GB,8,2,2,8,bf16,4,1.0\n", "column 'zero'"),
        (
            "gpu,gpus,tp,pp,global_batch,precision,step_time\nA100-80GB,8,2,2,8,bf16,1.0\n",
            "workload or the transformer's sizes",
        ),
        (f"{HEADER}\nA,2,64,4,128,1000,A100-80GB,8,2,2,8,bf16\n", "a measured column"),
        (f"{HEADER},step_time\nA,2,64,4,128,1000,A100-80GB,8,2,2,8,bf16,-1\n", "column 'step_time'"),
    ],
)
def test_bad_hybrid_tables(tmp_path, text, message):
    path = tmp_path / "runs.csv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputFileError, match=message) as info:
        dlx.measured.read_csv(path)
    assert str(path) in str(info.value)


def test_units_line_converts_tflops_and_percent(tmp_path):
    path = tmp_path / "runs.csv"
    path.write_text(
        "# units: mfu=%, step_time=ms\n"
        f"{HEADER},step_time,mfu\nA,2,64,4,128,1000,A100-80GB,8,2,2,8,bf16,1500,41.5\n",
        encoding="utf-8",
    )
    ds = dlx.measured.read_csv(path)
    assert float(ds["step_time"][0]) == 1.5
    assert float(ds["mfu"][0]) == pytest.approx(0.415)

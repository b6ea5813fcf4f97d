"""Strategy advisor (dlexplore.advisor): enumeration, memory filtering, ranking, Pareto front, CLI.

The counts of configurations are worked out by hand from the enumeration rules in the docstring of
:func:`dlexplore.advisor.advise`; the energy stand-in is gpus x TDP (catalog: A100-80GB 400 W) x
step time.
"""

from __future__ import annotations

import argparse
import io
import json

import pandas as pd
import pytest

from dlexplore.advisor import advise, pareto_front
from dlexplore.cli.advise import add_arguments, run_cli
from dlexplore.errors import DlexploreError
from dlexplore.model.parallel import predict_parallel


def test_enumeration_counts_and_ranking():
    # gpt2 (12 heads, 12 layers) on 8 GPUs, global batch 8: (tp, pp) with tp | 12, tp <= 8,
    # pp | 12, tp pp | 8: (1,1) (1,2) (1,4) (2,1) (2,2) (2,4) (4,1) (4,2) -> dp 8 4 2 4 2 1 2 1.
    # Micro-batches: powers of two dividing 8/dp. ZeRO 1-3 need dp > 1, 2-3 need pp = 1.
    frame = advise("gpt2", 8, "A100-80GB", batch_size=8, recompute=["none"], energy="tdp")
    per = {  # (tp, pp): micro-batch choices x ZeRO stages
        (1, 1): 1 * 4,
        (1, 2): 2 * 2,
        (1, 4): 3 * 2,
        (2, 1): 2 * 4,
        (2, 2): 3 * 2,
        (2, 4): 4 * 1,
        (4, 1): 3 * 4,
        (4, 2): 4 * 1,
    }
    assert frame.attrs["evaluated"] == sum(per.values()) == 48
    assert frame.attrs["dropped"] == 0
    assert len(frame) == 48
    assert (frame["dp"] * frame["tp"] * frame["pp"] == 8).all()
    assert frame["throughput"].is_monotonic_decreasing
    assert (frame["mem_total"] <= frame["mem_capacity"]).all()
    assert (frame["energy_per_step"] == 8 * 400.0 * frame["step_time"]).all()
    assert set(frame["energy_model"]) == {"stand-in: gpus x TDP x step_time"}


def test_rows_agree_with_predict_parallel():
    frame = advise("gpt2", 8, "A100-80GB", batch_size=16, energy="tdp")
    best = frame.iloc[0]
    ds = predict_parallel(
        "gpt2",
        "A100-80GB",
        gpus=8,
        tp=int(best.tp),
        pp=int(best.pp),
        micro_batch=int(best.micro_batch),
        batch_size=16,
        recompute=best.recompute,
        zero=int(best.zero),
        sequence_parallel=bool(best.sequence_parallel),
    )
    assert float(ds["step_time"]) == pytest.approx(best.step_time, rel=1e-12)
    assert float(ds["mem_total"]) == pytest.approx(best.mem_total, rel=1e-12)


def test_memory_drops_are_counted():
    # GPT-2 XL (1.56e9 parameters) in fp16 on 8 V100-16GB: without ZeRO the 16 bytes per parameter
    # alone (25 GB) exceed 16 GiB, so every ZeRO-0 configuration with tp = pp = 1 is dropped.
    frame = advise("gpt2-xl", 8, "V100-16GB", batch_size=64, precision="fp16", energy="tdp")
    assert frame.attrs["dropped"] > 0
    assert len(frame) == frame.attrs["evaluated"] - frame.attrs["dropped"]
    plain = frame[(frame.tp == 1) & (frame.pp == 1) & (frame.zero == 0)]
    assert plain.empty


def test_nothing_fits_is_an_error():
    with pytest.raises(DlexploreError, match="no configuration"):
        advise("gpt2-xl", 1, "V100-16GB", batch_size=8, precision="fp32")


def test_cnn_only_data_parallel():
    frame = advise("resnet50", 16, "V100-16GB", batch_size=512, precision="fp16", energy="tdp")
    assert set(frame["tp"]) == {1} and set(frame["pp"]) == {1} and set(frame["recompute"]) == {"none"}


def test_pareto_front():
    frame = pd.DataFrame(
        {"step_time": [1.0, 2.0, 1.5, 3.0, 1.0], "energy_per_step": [10.0, 5.0, 8.0, 4.0, 12.0]}
    )
    front = pareto_front(frame)
    assert front.index.tolist() == [0, 2, 1, 3]  # row 4 is dominated by row 0
    real = advise("gpt2", 8, "A100-80GB", batch_size=16)
    f = pareto_front(real)
    for _, row in f.iterrows():
        better = real[(real.step_time < row.step_time) & (real.energy_per_step < row.energy_per_step)]
        assert better.empty
    with pytest.raises(DlexploreError, match="no column"):
        pareto_front(frame, y="joules")


def _cli(*argv: str) -> str:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    out = io.StringIO()
    run_cli(parser.parse_args(list(argv)), out=out)
    return out.getvalue()


def test_cli_formats():
    base = ("--workload", "gpt2", "--gpus", "8", "--gpu", "A100-80GB", "--batch-size", "16")
    table = _cli(*base, "--top", "3")
    assert "configurations evaluated" in table and "dropped" in table
    assert len(table.strip().splitlines()) == 1 + 1 + 3  # summary, header, 3 rows
    rows = list(pd.read_csv(io.StringIO(_cli(*base, "--format", "csv", "--top", "5"))).itertuples())
    assert len(rows) == 5
    doc = json.loads(_cli(*base, "--format", "json", "--top", "2"))
    assert len(doc["rows"]) == 2 and doc["attrs"]["gpus"] == 8
    assert doc["rows"][0]["throughput"] >= doc["rows"][1]["throughput"]


def test_widget_updates():
    from dlexplore.advisor import AdvisorWidget

    view = AdvisorWidget(workload="gpt2", gpus=8, gpu="A100-80GB", batch_size=16, top=3)
    assert "configurations evaluated" in view.summary.value
    assert view.table.value.count("<tr") == 1 + 3  # header row + 3 configurations
    view.gpu.value, view.precision.value, view.gpus.value = "V100-16GB", "fp16", 1
    view.workload.value, view.batch_size.value = "gpt2-xl", 8
    view.update()
    assert view.frame is None and "No configuration" in view.summary.value

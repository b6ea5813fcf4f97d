"""TAU profiles, NCCL debug logs and TensorBoard event files, on files written by the real tools
(TAU and NCCL excerpts from other people's runs, tests/data/*/README.md; event files written here
by torch.utils.tensorboard), with hand-counted expectations and errors naming file and line."""

from __future__ import annotations

import re
import shutil
import struct
import warnings
from pathlib import Path

import numpy as np
import pytest

import dlexplore
from dlexplore.errors import DlexploreError, InputFileError
from dlexplore.fit import noise_scale_from_runs
from dlexplore.plots.convergence import loss_curves_figure
from dlexplore.traces import (
    detect_format,
    nccl_log_table,
    read_nccl_log,
    read_tau_profile,
    read_tensorboard,
    tau_breakdown,
)

DATA = Path(__file__).parent / "data"
TAU_MPI = DATA / "tau" / "jeevan0920-mpi"
TAU_MULTI = DATA / "tau" / "stevenpl98-multi"
NCCL = DATA / "nccl-log"


def test_tau_mpi_profile_hand_counts():
    prof = read_tau_profile(TAU_MPI)
    assert detect_format(TAU_MPI / "profile.0.0.0") == "tau"
    assert prof.sizes["function"] == 20 and list(prof["metric"].values) == ["TIME"]
    assert int(prof["communication"].sum()) == 9 and int(prof["io"].sum()) == 2
    barrier = prof.sel(metric="TIME", rank=0, thread=0, function="MPI_Barrier()")
    assert float(barrier["exclusive"]) == pytest.approx(26.408043)  # 26408043 us
    assert float(prof["calls"].sel(rank=0, thread=0, function="MPI_Barrier()")) == 1530
    parts = tau_breakdown(prof).sel(rank=0, thread=0)
    assert float(parts["time_comm"]) == pytest.approx(32.014278)
    assert float(parts["time_io"]) == pytest.approx(0.015362)
    assert float(parts["time_total"]) == pytest.approx(32.127351)
    assert float(parts["time_compute"]) == pytest.approx(32.127351 - 32.014278 - 0.015362)
    assert parts["time_comm"].attrs["units"] == "s"
    allreduce = prof.sel(user_event="Message size for all-reduce", rank=0, thread=0)
    assert float(allreduce["event_count"]) == 34 and float(allreduce["event_sumsqr"]) == 544
    # dlexplore.load routes a TAU folder, and one profile file, to the same reader.
    for path in (TAU_MPI, TAU_MPI / "profile.0.0.0"):
        routed = dlexplore.load(path)
        assert float(routed["calls"].sel(rank=0, thread=0, function="MPI_Barrier()")) == 1530


def test_tau_multi_metric_folders():
    prof = read_tau_profile(TAU_MULTI)
    assert detect_format(TAU_MULTI) == "tau"
    assert list(prof["metric"].values) == ["TIME", "P_WALL_CLOCK_TIME"]
    assert list(prof["metric_units"].values) == ["s", "s"]
    init = prof["exclusive"].sel(rank=0, thread=0, function="MPI_Init()")
    np.testing.assert_allclose(init.values, [0.036169, 0.036171])
    # The PAPI counter wrapped in the file (4294968161 us): kept as written.
    wrapped = prof["exclusive"].sel(
        metric="P_WALL_CLOCK_TIME",
        rank=0,
        thread=0,
        function="for (barrier enter/exit) [OpenMP location: file:/home/"
        "perezs4/Parallel/FinalProject/parallel.c <135, 142>]",
    )
    assert float(wrapped) == pytest.approx(4294.968161)
    assert "user_event" not in prof.dims


TAU_THROTTLED = DATA / "tau" / "amintos-mpi-factoring"


def test_tau_throttled_timers_are_marked_and_warned():
    """5 of amintos' 28 functions were throttled by TAU ([THROTTLED], GROUP="TAU_DISABLE"): their
    exclusive times, 54750 + 10126696 + 130116 + 42623 + 2663417 = 13017602 us, stop where TAU
    stopped timing them (tests/data/tau/README.md)."""
    with pytest.warns(UserWarning, match=r"profile\.0\.0\.0: 5 function\(s\) throttled by TAU.*rand_char"):
        prof = read_tau_profile(TAU_THROTTLED)
    one = prof.sel(metric="TIME", rank=0, thread=0)
    assert int(prof["throttled"].sum()) == 5
    assert float(one["exclusive"].where(one["throttled"]).sum()) == pytest.approx(13.017602)
    assert float(one["exclusive"].sum()) == pytest.approx(335.849084)  # the root's inclusive time
    assert not prof["throttled"].sel(function="MPI_Sendrecv()").item()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a profile without throttled timers says nothing
        assert int(read_tau_profile(TAU_MPI)["throttled"].sum()) == 0


@pytest.mark.parametrize(
    ("edit", "line", "message"),
    [
        (lambda t: t.replace("20 templated", "21 templated"), 23, "function 21 of 21"),
        (lambda t: t.replace('"MPI_Barrier()  " 1530', '"MPI_Barrier()  " x1530'), 13, "calls"),
        (lambda t: t.replace("templated_functions", "templated_fonctions"), 1, "templated_functions"),
        (lambda t: t.replace("3 userevents", "4 userevents"), 29, "user event 4 of 4"),
    ],
)
def test_tau_bad_files_name_file_and_line(tmp_path, edit, line, message):
    bad = tmp_path / "profile.0.0.0"
    bad.write_text(edit((TAU_MPI / "profile.0.0.0").read_text()))
    with pytest.raises(InputFileError, match=rf"profile\.0\.0\.0, line {line}: .*{message}"):
        read_tau_profile(bad)


def test_nccl_log_rccl_hand_counts():
    ops = read_nccl_log(NCCL / "rccl-issue-429.log")
    assert ops["op_count"].tolist() == [652, 653, 652, 653]  # 28c, 28d in hexadecimal
    assert ops["collective"].tolist() == ["allreduce", "allreduce", "allgather", "allgather"]
    assert ops["bytes"].tolist() == [9984512 * 4, 8149504 * 4, 59205120 * 4, 15360 * 4]
    assert ops["device"].tolist() == [0, 0, 2, 2] and ops["nranks"].tolist() == [4] * 4
    assert ops["rank"].isna().all()  # no globalrank, no init line: unknown, not the device


def test_nccl_log_rccl7_acc_field():
    # RCCL 7 prints "acc (nil)" between recvbuff and count; the rank is each line's globalrank
    ops = read_nccl_log(NCCL / "rccl7-gfx1100-acc-nil.log")
    assert len(ops) == 16 and set(ops["collective"]) == {"allreduce"}
    assert sorted(ops["op_count"].tolist()) == sorted(list(range(8)) * 2)
    assert ops["bytes"].tolist() == [4.0] * 16  # count 1 of datatype 7 (float32)
    assert ops.groupby("pid")["rank"].unique().map(list).to_dict() == {829507: [0], 829508: [1]}
    assert ops["line"].iloc[0] == 11 and ops["nranks"].tolist() == [2] * 16


@pytest.mark.parametrize(
    "init",
    [
        "ncclCommInitRankConfig_impl comm",  # as this RCCL 7 log writes it
        "comm",  # NCCL <= 2.18: "c197-012:7085:7104 [0] NCCL INFO comm 0x60c2d60 rank 0 nranks 2 .."
    ],
)
def test_nccl_log_rank_from_the_init_line(tmp_path, init):
    # without "task N globalrank N" on the operation lines, the rank is the init line's of the same
    # process and communicator (0x2bc1f840 rank 0 in pid 829507, 0x3ab1b680 rank 1 in pid 829508)
    text = (NCCL / "rccl7-gfx1100-acc-nil.log").read_text()
    text = re.sub(r" task \d+ globalrank \d+", "", text).replace("ncclCommInitRankConfig_impl comm", init)
    assert "globalrank" not in text
    log = tmp_path / "no-globalrank.log"
    log.write_text(text)
    ops = read_nccl_log(log)
    assert len(ops) == 16
    assert ops.groupby("pid")["rank"].unique().map(list).to_dict() == {829507: [0], 829508: [1]}


def test_nccl_log_interleaved_and_lost_prefixes():
    with pytest.warns(UserWarning, match="lines \\[6\\]"):
        ops = read_nccl_log(NCCL / "nccl-issue-147.log")
    assert ops["line"].tolist() == [1, 2, 3, 5, 6, 7]
    assert ops.loc[0, "pid"] == 32629 and ops.loc[0, "device"] == 7  # the second prefix wins
    assert ops["bytes"].tolist() == [424, 424, 51007824, 424, 51007824, 51007824]
    table = nccl_log_table(ops).set_index("bytes")
    assert table.loc[424.0, "calls"] == 3 and table.loc[424.0, "datatype"] == "int64"
    assert table.loc[51007824.0, "calls"] == 3 and table.loc[51007824.0, "processes"] == 2


def test_nccl_log_tuning_line():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ops = read_nccl_log(NCCL / "nccl-issue-1453-tuning.log")
    tuning = ops.attrs["tuning"]
    assert len(ops) == 0 and len(tuning) == 1
    row = tuning.iloc[0]
    assert (row["bytes"], row["algorithm"], row["protocol"]) == (8589934592, "ring", "simple")
    assert row["predicted_time"] == pytest.approx(0.08606996875)


def test_nccl_log_bad_line_and_routing(tmp_path):
    bad = tmp_path / "bad.log"
    text = (NCCL / "rccl-issue-429.log").read_text().replace("datatype 7", "datatype seven", 1)
    bad.write_text(text)
    # one line that does not parse among three that do: read without it, and said
    with pytest.warns(UserWarning, match=r"1 NCCL operation line\(s\) that do not parse .* lines \[1\]"):
        ops = read_nccl_log(bad)
    assert ops["line"].tolist() == [2, 3, 4]
    only = tmp_path / "only.log"
    only.write_text(text.splitlines()[0] + "\n")
    with pytest.raises(InputFileError, match=r"only\.log, line 1: an NCCL operation line"):
        read_nccl_log(only)
    with pytest.raises(DlexploreError, match="read_nccl_log"):
        dlexplore.load_trace(NCCL / "rccl-issue-429.log")
    # dlexplore.load is the one door for every format: it routes the log to its reader.
    routed = dlexplore.load(NCCL / "rccl-issue-429.log")
    assert routed["op_count"].tolist() == [652, 653, 652, 653]
    empty = tmp_path / "none.log"
    empty.write_text("hello\n")
    with pytest.raises(InputFileError, match="no NCCL collective lines"):
        read_nccl_log(empty)


def test_nccl_log_bracketed_number_after_nccl_info():
    # NVIDIA/nccl#1352 (README.md): "NCCL INFO [2] AllReduce: ..." keeps its host, pid and device
    assert dlexplore.traces.detect_format(NCCL / "nccl-1352-bracket-after-info.log") == "nccl-log"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "interleaved output" warning: the prefix is there
        ops = read_nccl_log(NCCL / "nccl-1352-bracket-after-info.log")
    assert ops["collective"].tolist() == ["allreduce", "allreduce", "allgather"]
    assert ops["bytes"].tolist() == [1.0, 1.0, 32.0]  # uint8 x 1; int8 x 8 x 4 ranks
    assert set(ops["host"]) == {"srv01"} and set(ops["pid"]) == {2016601} and set(ops["device"]) == {0}


def test_nccl_log_line_wrapped_after_comm():
    # RCCL's timestamp before NCCL INFO, the line wrapped: 1001 float32 = 4004 bytes, 2 ranks
    ops = read_nccl_log(NCCL / "rccl-2019-timestamp-wrapped.log")
    assert len(ops) == 1
    assert (ops.loc[0, "bytes"], ops.loc[0, "nranks"], ops.loc[0, "pid"]) == (4004.0, 2, 24888)


def test_nccl_log_lines_cut_short_only():
    # Both of Primus's lines are cut short by the author: nothing to read, and the error says where
    with pytest.raises(InputFileError, match=r"line 1: an NCCL operation line that does not parse.*\[acc"):
        dlexplore.load(NCCL / "primus-rccl-truncated-lines.log")


def test_nccl_log_detected_past_its_first_64_kib(tmp_path):
    # 90 kB of NCCL init lines (an 8-GPU job's channel set-up) before the first collective
    log = tmp_path / "long.log"
    init = "hopper01:191369:191420 [0] NCCL INFO Channel {:02d}/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n"
    log.write_text(
        "".join(init.format(i % 32) for i in range(1100)) + (NCCL / "torchtitan-1369-tp-h100.log").read_text()
    )
    assert log.stat().st_size > 1 << 16
    assert dlexplore.traces.detect_format(log) == "nccl-log"
    assert len(dlexplore.load(log)) == 7


def test_nccl_log_without_coll_lines_says_how_to_log_them():
    # NVIDIA/nccl#1814: init lines only
    assert dlexplore.traces.detect_format(NCCL / "nccl-1814-init-only-2.2x.log") == "nccl-log"
    with pytest.raises(InputFileError, match="NCCL_DEBUG_SUBSYS=COLL"):
        dlexplore.load(NCCL / "nccl-1814-init-only-2.2x.log")


def test_nccl_log_keeps_the_library_version(tmp_path):
    # rank 0 prints "NCCL version ..." bare (as in nccl-tests/notes-a100-docker-allreduce-nccl-debug.txt,
    # whose line this is) before the COLL lines of a run (torchtitan#1369's here)
    log = tmp_path / "versioned.log"
    log.write_text("NCCL version 2.20.5+cuda12.4\n" + (NCCL / "torchtitan-1369-tp-h100.log").read_text())
    ops = read_nccl_log(log)
    assert ops.attrs["versions"] == ["NCCL 2.20.5+cuda12.4"] and len(ops) == 7
    assert read_nccl_log(NCCL / "torchtitan-1369-tp-h100.log").attrs["versions"] == []


@pytest.mark.parametrize(
    "logged, attached", [(8388608, True), (16777216, True), (4194304, False), (33554432, False)]
)
def test_a_tuning_choice_of_an_allgather_per_rank_or_whole(tmp_path, logged, attached):
    """NCCL 2.19+ logs TUNING as the task's count x type size (src/enqueue.cc), one rank's part of an
    allgather; earlier versions the whole buffer. No real log with both lines was found: this one is
    torchtitan#1369's first AllGather (2097152 float32 x 2 ranks = 16,777,216 bytes) and a TUNING
    line of the form sglang's NCCL 2.27.5 log prints, from the same thread."""
    op = (NCCL / "torchtitan-1369-tp-h100.log").read_text().splitlines()[0]
    choice = f"hopper01:191370:191425 [1] NCCL INFO AllGather: {logged} Bytes -> Algo RING proto SIMPLE"
    log = tmp_path / "tuned.log"
    log.write_text(op + "\n" + choice + " channel{Lo..Hi}={0..7}\n")
    ops = read_nccl_log(log)
    assert ops.loc[0, "bytes"] == 16777216
    assert (ops.loc[0, "algorithm"], ops.loc[0, "protocol"]) == (("ring", "simple") if attached else ("", ""))


def test_rccl_7_version_line_with_a_colon():
    """RCCL 2.26 and later write "RCCL version : 2.27.7-HEAD:0d2c4fd": the banner of the run whose
    operations rccl7-gfx1100-acc-nil.log holds, read with them (before, no version was kept)."""
    ops = read_nccl_log([NCCL / "rccl7-gfx1100-banner.log", NCCL / "rccl7-gfx1100-acc-nil.log"])
    assert ops.attrs["versions"] == ["RCCL 2.27.7-HEAD:0d2c4fd"] and len(ops) == 16


def test_nccl_log_folder_skips_files_without_nccl_lines(tmp_path):
    # a job's folder: two ranks' logs (named .log, as NCCL_DEBUG_FILE makes them) and a hostfile
    shutil.copy(NCCL / "rccl-issue-429.log", tmp_path / "rank0.log")
    shutil.copy(NCCL / "torchtitan-1369-tp-h100.log", tmp_path / "rank1.log")
    (tmp_path / "hostfile").write_text("node-0 slots=8\n")
    with pytest.warns(UserWarning, match=r"1 file\(s\) without NCCL debug lines skipped: hostfile"):
        ops = read_nccl_log(tmp_path)
    assert len(ops) == 4 + 7
    assert len(read_nccl_log(str(tmp_path / "*.log"))) == 11  # a glob, as a shell would not expand it


def test_nccl_log_version_interleaved_with_an_operation(tmp_path):
    # two processes' lines run together: the version is kept and the operation is read
    first = (NCCL / "torchtitan-1369-tp-h100.log").read_text().splitlines()[0]
    log = tmp_path / "mixed.log"
    log.write_text("h:1:1 [0] NCCL INFO NCCL version 2.18.1+cuda12.1" + first + "\n")
    ops = read_nccl_log(log)
    assert ops.attrs["versions"] == ["NCCL 2.18.1+cuda12.1"]
    assert len(ops) == 1 and ops.loc[0, "pid"] == 191370


def test_nccl_log_line_cut_before_sendbuff_is_named(tmp_path):
    lines = (NCCL / "torchtitan-1369-tp-h100.log").read_text().splitlines()
    log = tmp_path / "cut.log"
    log.write_text("\n".join([*lines[:6], lines[6][: lines[6].index("sendbuff") - 3]]) + "\n")
    with pytest.warns(UserWarning, match=r"1 NCCL operation line\(s\) that do not parse .* lines \[7\]"):
        assert len(read_nccl_log(log)) == 6


def test_nccl_log_wrapped_inside_the_global_rank(tmp_path):
    # RCCL 7's line (rccl7-gfx1100-acc-nil.log) wrapped by a terminal inside "globalrank 12"
    line = next(
        x for x in (NCCL / "rccl7-gfx1100-acc-nil.log").read_text().splitlines() if "globalrank 1" in x
    )
    log = tmp_path / "wrapped.log"
    log.write_text(line[: line.rindex("globalrank 1") + len("globalrank 1")] + "\n2\n")
    assert read_nccl_log(log)["rank"].tolist() == [12]


@pytest.mark.parametrize("cut", [" task 0 globalrank", " task 0", " task"])
def test_nccl_log_cut_inside_the_global_rank(tmp_path, cut):
    # RCCL 7's log as a killed job leaves it: its last line (line 20, pid 829508, communicator
    # 0x3ab1b680, rank 1 by its init line 9) ends inside "task 0 globalrank 1"
    lines = (NCCL / "rccl7-gfx1100-acc-nil.log").read_text().splitlines()[:20]
    assert lines[-1].endswith(" task 0 globalrank 1")
    lines[-1] = lines[-1][: -len(" task 0 globalrank 1")] + cut
    log = tmp_path / "cut.log"
    log.write_text("\n".join(lines) + "\n")
    with pytest.warns(UserWarning, match=r"1 NCCL operation line\(s\) end inside .* lines \[20\]"):
        ops = read_nccl_log(log)
    assert ops.set_index("line").loc[20, "rank"] == 1  # the init line's
    assert ops["rank"].notna().all()


def test_nccl_log_wrapped_after_the_word_globalrank(tmp_path):
    # the same line wrapped by a terminal between "globalrank" and its digits: read whole, no warning
    line = (NCCL / "rccl7-gfx1100-acc-nil.log").read_text().splitlines()[19]
    log = tmp_path / "wrapped.log"
    log.write_text(line.removesuffix(" 1") + "\n1\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ops = read_nccl_log(log)
    assert ops["rank"].tolist() == [1]


def test_nccl_log_set_with_one_file_cut_short(tmp_path):
    # one rank's log holds only Primus's cut lines: the set is read, that file named in a warning
    shutil.copy(NCCL / "rccl-issue-429.log", tmp_path / "rank0.log")
    shutil.copy(NCCL / "primus-rccl-truncated-lines.log", tmp_path / "rank1.log")
    with pytest.warns(UserWarning, match=r"rank1\.log: 2 NCCL operation line\(s\) that do not parse"):
        assert len(read_nccl_log(tmp_path)) == 4


def test_nccl_log_deduplicated_by_ray_warns(tmp_path):
    line = (NCCL / "torchtitan-1369-tp-h100.log").read_text().splitlines()[0]
    log = tmp_path / "ray.log"
    log.write_text(f"(RayTrainWorker pid=615, ip=10.72.7.6) {line} [repeated 127x across cluster]\n")
    with pytest.warns(UserWarning, match="RAY_DEDUP_LOGS=0"):
        ops = read_nccl_log(log)
    assert ops.loc[0, "bytes"] == 2097152 * 4 * 2  # allgather: float32 x nranks


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Three runs written with torch.utils.tensorboard: loss = 8 / (1 + B step / 1024), epoch,
    and a learning rate, at global batches 64, 256 and 1024 (values known by construction)."""
    import torch.utils.tensorboard as torch_tb

    root = tmp_path_factory.mktemp("tb")
    for batch in (64, 256, 1024):
        writer = torch_tb.SummaryWriter(str(root / f"bs{batch}"))
        for step in range(0, 400, 10):
            writer.add_scalar("train/loss", 8.0 / (1 + batch * step / 1024), step)
            writer.add_scalar("epoch", step * batch / 12800, step)
            if step % 20 == 0:
                writer.add_scalar("lr", 0.1 * batch / 256, step)
        writer.close()
    return root


def test_tensorboard_scalars(runs):
    ds = read_tensorboard(runs)
    assert dlexplore.load(runs / "bs64")["run"].values.tolist() == ["bs64"]
    assert list(ds["run"].values) == ["bs1024", "bs256", "bs64"]
    assert ds.sizes["step"] == 40 and ds["step"].values[-1] == 390
    loss = ds["train.loss"].sel(run="bs256")
    assert ds["train.loss"].attrs["tag"] == "train/loss"
    np.testing.assert_allclose(loss.values, 8.0 / (1 + 256 * np.arange(0, 400, 10) / 1024), rtol=1e-6)
    lr = ds["lr"].sel(run="bs64")
    assert np.isnan(lr.sel(step=10)) and float(lr.sel(step=20)) == pytest.approx(0.025)
    assert ds["wall_time"].attrs["units"] == "s" and np.all(np.isfinite(ds["wall_time"]))
    assert ds.attrs["source"].startswith("measured: TensorBoard")
    assert detect_format(ds.attrs["files"][0]) == "tensorboard"
    fig = loss_curves_figure(ds, tag="train.loss", x="epoch")
    assert len(fig.renderers) == 3


def test_noise_scale_from_logged_loss_curves(runs):
    # loss = 8 / (1 + B s / 1024) reaches 1.0 at s = 7168 / B (112, 28, 7): perfect scaling. Logged
    # every 10 steps and interpolated linearly, by hand: bs64 between 110 (1.015873) and 120
    # (0.941176): 112.125; bs256 between 20 (1.3333) and 30 (0.941176): 28.5; bs1024 between 0 (8)
    # and 10 (0.727273): 9.625.
    ds = read_tensorboard(runs)
    fit, table = noise_scale_from_runs(ds, {"bs64": 64, "bs256": 256, "bs1024": 1024}, 1.0, tag="train.loss")
    np.testing.assert_allclose(table["steps_to_threshold"], [112.125, 28.5, 9.625], rtol=1e-5)
    # Logging every 10 steps delays the largest batch's crossing (9.625 for 7): the fit sees a bend
    # it would not see in the curve itself, and reports B_noise beyond the batches run, with an error.
    assert fit.points == 3 and fit.b_noise > 1024 and 0 < fit.b_noise_stderr < fit.b_noise


def test_tensorboard_damaged_files(runs, tmp_path):
    good = next(runs.glob("bs64/events.out.tfevents.*")).read_bytes()
    cut = tmp_path / "cut" / "events.out.tfevents.1.cut"
    cut.parent.mkdir()
    cut.write_bytes(good[:-7])
    with pytest.warns(UserWarning, match="ends inside record"):
        ds = read_tensorboard(cut)
    assert ds.attrs["truncated"] == [str(cut)] and ds.sizes["step"] >= 39
    length, _ = struct.unpack_from("<QI", good, 0)
    broken = tmp_path / "broken" / "events.out.tfevents.1.broken"
    broken.parent.mkdir()
    second = 12 + length + 4
    broken.write_bytes(good[:second] + b"\xff" + good[second + 1 :])
    with pytest.raises(InputFileError, match=rf"record 1 at byte {second}: the length field fails"):
        read_tensorboard(broken)
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputFileError, match="no TensorBoard event files"):
        read_tensorboard(tmp_path / "empty")

"""One validation layer for user input (dlexplore.validation), and property tests of every public
model function over random inputs: each either answers with no negative time or memory, or refuses
with dlexplore's own error, in words, never a numpy repr.
"""

from __future__ import annotations

import math
import os
import pickle

import numpy as np
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dlexplore as dlx
from dlexplore import validation
from dlexplore.errors import DlexploreError, InvalidValueError

# ---------------------------------------------------------------------------------------------
# the checks themselves


@pytest.mark.parametrize(
    ("check", "value", "message"),
    [
        (
            lambda v: validation.positive("bandwidth", v, units="GB/s"),
            -1,
            "bandwidth must be a number of GB/s > 0; got -1",
        ),
        (lambda v: validation.positive("bandwidth", v, units="GB/s"), 0, "got 0"),
        (
            lambda v: validation.gpu_count("gpus", v),
            1e9,
            "gpus must be a whole number from 1 to 1,048,576; got 1,000,000,000",
        ),
        (lambda v: validation.gpu_count("gpus", v), 1e30, "got 1e+30"),
        (lambda v: validation.gpu_count("gpus", v), [8, 16, 0.5], "got 0.5 (in [8, 16, 0.5])"),
        (lambda v: validation.gpu_count("gpus", v), True, "got True"),
        (lambda v: validation.gpu_count("gpus", v), "8", "got '8'"),
        (lambda v: validation.nonnegative("latency", v, units="s"), np.array([[[[-1.0]]]]), "got -1"),
        (lambda v: validation.nonnegative("latency", v, units="s"), math.nan, "got nan"),
        (lambda v: validation.nonnegative("latency", v, units="s"), math.inf, "got inf"),
        (lambda v: validation.fraction("overlap", v), 1.5, "overlap must be a number from 0 to 1; got 1.5"),
        (lambda v: validation.count("batch_size", v), [], "the sequence is empty"),
        (
            lambda v: validation.choice("schedule", v, ["1f1b", "gpipe"]),
            "zb",
            "schedule must be one of 1f1b, gpipe; got 'zb'",
        ),
    ],
)
def test_a_bad_value_is_refused_in_words(check, value, message):
    with pytest.raises(InvalidValueError) as caught:
        check(value)
    text = str(caught.value)
    assert message in text
    assert "array(" not in text and "np." not in text


def test_good_values_come_back_with_their_shape():
    assert validation.gpu_count("gpus", 8.0) == 8 and isinstance(validation.gpu_count("gpus", 8.0), int)
    assert validation.positive("bandwidth", 12.5) == 12.5
    assert validation.positive("bandwidth", [1, 2]).tolist() == [1.0, 2.0]
    assert validation.nonnegative("bucket_size", math.inf, allow_inf=True) == math.inf
    assert validation.choice("schedule", "1F1B", ["1f1b", "gpipe"]) == "1f1b"


def test_the_error_survives_pickling_and_is_a_dlexplore_error():
    with pytest.raises(DlexploreError) as caught:
        validation.positive("bandwidth", -2)
    again = pickle.loads(pickle.dumps(caught.value))
    assert str(again) == str(caught.value) and isinstance(again, InvalidValueError)


@pytest.mark.parametrize(
    ("gpu", "supported"),
    [
        ("V100-16GB", ("fp32", "fp16")),
        ("P100", ("fp32", "fp16")),
        ("K80", ("fp32",)),
        ("A100-80GB", ("fp32", "tf32", "fp16", "bf16")),
        ("MI250X", ("fp32", "fp16", "bf16")),
    ],
)
def test_supported_precisions_follow_the_catalog(gpu, supported):
    assert validation.supported_precisions(dlx.catalog.gpu(gpu)) == supported


def test_a_precision_the_gpu_lacks_is_refused_everywhere():
    with pytest.raises(InvalidValueError, match=r"V100-16GB has no tf32 arithmetic"):
        dlx.predict("resnet50", "V100-16GB", "25GbE", precision="tf32")
    with pytest.raises(InvalidValueError, match=r"one of fp32, fp16; got 'bf16'"):
        dlx.predict_parallel("gpt2", "P100", "IB-EDR", gpus=8)
    from dlexplore.advisor import advise

    with pytest.raises(InvalidValueError, match="P100 has no bf16"):
        advise("gpt2", 8, "P100", batch_size=64)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: dlx.predict("resnet50", "V100-16GB", "25GbE", gpus=10**9), "got 1,000,000,000"),
        (lambda: dlx.predict("resnet50", "V100-16GB", "25GbE", workspace=-1), "workspace must be"),
        (lambda: dlx.predict_parallel("gpt2", workspace=-1e12), "workspace must be"),
        (
            lambda: dlx.predict_parallel("gpt2", offload=True, zero=1, gpus=8, cpu_bandwidth=0),
            "cpu_bandwidth must be a number of GB/s > 0; got 0",
        ),
        (lambda: dlx.predict_comm(bandwidth=-1), "bandwidth must be a number of GB/s > 0; got -1"),
        (lambda: dlx.model.collective_time("allreduce", "ring", 1e8, 8, 10, -1e-6), "latency must be"),
    ],
)
def test_the_issues_examples_are_refused(call, message):
    with pytest.raises(InvalidValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        call()


# ---------------------------------------------------------------------------------------------
# property tests: random inputs to every public model function

# Any number a user might type, good or bad: negative, zero, fractional, huge, nan, inf.
ANY_NUMBER = st.one_of(
    st.integers(min_value=-10, max_value=2**21),
    st.floats(allow_nan=True, allow_infinity=True, width=64),
    st.sampled_from([0, 1, 2, 8, 64, 1e9, 1e30, -1, 0.5, 1e-12]),
)
SOME_NUMBERS = st.one_of(ANY_NUMBER, st.lists(ANY_NUMBER, min_size=1, max_size=3, unique=True))
GPUS = st.sampled_from(["V100-16GB", "P100", "K80", "A100-80GB", "H100-SXM", "MI250X-GCD"])
PRECISIONS = st.sampled_from(["fp32", "tf32", "fp16", "bf16"])
# CI runs a fixed set of examples; DLX_PROPERTY_EXAMPLES=2000 runs a longer random campaign.
_CAMPAIGN = int(os.environ.get("DLX_PROPERTY_EXAMPLES", "0"))
PROPERTY_SETTINGS = settings(
    max_examples=_CAMPAIGN or 60,
    deadline=None,
    derandomize=not _CAMPAIGN,
    suppress_health_check=[HealthCheck.too_slow],
)

#: Units whose values can never be negative.
NEVER_NEGATIVE = {"s", "bytes", "J", "W", "kWh", "GB/s", "samples/s", "tokens/s"}


def _no_negative(result) -> None:
    datasets = [result] if isinstance(result, xr.Dataset) else []
    if isinstance(result, xr.DataArray):
        datasets = [result.to_dataset(name=result.name or "value")]
    for ds in datasets:
        for name, var in ds.variables.items():
            units = var.attrs.get("units", "")
            if units in NEVER_NEGATIVE and var.dtype.kind == "f":
                values = var.values
                assert not np.any(values < 0), f"{name} ({units}) is negative: {values.ravel()[:5]}"
                if units in ("s", "bytes"):
                    assert not np.any(np.isneginf(values)), name


def _answers_or_refuses(call) -> None:
    try:
        result = call()
    except DlexploreError as err:
        assert "array(" not in str(err), str(err)
        return
    _no_negative(result)


@PROPERTY_SETTINGS
@given(
    gpus=SOME_NUMBERS,
    batch=SOME_NUMBERS,
    bandwidth=SOME_NUMBERS,
    latency=SOME_NUMBERS,
    per_node=ANY_NUMBER,
    efficiency=ANY_NUMBER,
    overlap=ANY_NUMBER,
    workspace=ANY_NUMBER,
    bucket=ANY_NUMBER,
    gpu=GPUS,
    precision=PRECISIONS,
)
def test_predict_answers_or_refuses(
    gpus, batch, bandwidth, latency, per_node, efficiency, overlap, workspace, bucket, gpu, precision
):
    _answers_or_refuses(
        lambda: dlx.predict(
            "resnet18",
            gpu,
            None,
            gpus=gpus,
            batch_size=batch,
            bandwidth=bandwidth,
            latency=latency,
            gpus_per_node=per_node,
            compute_efficiency=efficiency,
            overlap=overlap,
            workspace=workspace,
            bucket_size=bucket,
            precision=precision,
        )
    )


@PROPERTY_SETTINGS
@given(
    nbytes=SOME_NUMBERS,
    gpus=SOME_NUMBERS,
    bandwidth=SOME_NUMBERS,
    latency=SOME_NUMBERS,
    gamma=ANY_NUMBER,
    servers=ANY_NUMBER,
    per_node=ANY_NUMBER,
    algorithm=st.sampled_from(
        ["ring", "tree", "recursive_doubling", "halving_doubling", "hierarchical", "parameter_server"]
    ),
)
def test_predict_comm_and_collective_time_answer_or_refuse(
    nbytes, gpus, bandwidth, latency, gamma, servers, per_node, algorithm
):
    _answers_or_refuses(
        lambda: dlx.predict_comm(
            "allreduce",
            algorithm,
            nbytes=nbytes,
            gpus=gpus,
            bandwidth=bandwidth,
            latency=latency,
            gamma=gamma,
            servers=servers,
            gpus_per_node=per_node,
        )
    )

    def scalar(value):
        return value[0] if isinstance(value, list) else value

    def one():
        t = dlx.model.collective_time(
            "allreduce",
            algorithm,
            scalar(nbytes),
            scalar(gpus),
            scalar(bandwidth),
            scalar(latency),
            gamma,
            servers=servers,
            gpus_per_node=per_node,
            intra_bandwidth=scalar(bandwidth),
            intra_latency=scalar(latency),
        )
        assert not np.any(np.asarray(t) < 0)
        return None

    _answers_or_refuses(one)
    _answers_or_refuses(lambda: (dlx.model.busbw_factor("allreduce", scalar(gpus)), None)[1])


@PROPERTY_SETTINGS
@given(
    gpus=ANY_NUMBER,
    tp=ANY_NUMBER,
    pp=ANY_NUMBER,
    micro=ANY_NUMBER,
    batch=ANY_NUMBER,
    cpu=ANY_NUMBER,
    workspace=ANY_NUMBER,
    overlap=ANY_NUMBER,
    efficiency=ANY_NUMBER,
    per_node=ANY_NUMBER,
    zero=st.sampled_from([0, 1, 2, 3, 4, -1]),
    offload=st.booleans(),
    gpu=GPUS,
    precision=PRECISIONS,
)
def test_predict_parallel_answers_or_refuses(
    gpus, tp, pp, micro, batch, cpu, workspace, overlap, efficiency, per_node, zero, offload, gpu, precision
):
    _answers_or_refuses(
        lambda: dlx.predict_parallel(
            "gpt2",
            gpu,
            "IB-HDR",
            gpus=gpus,
            tp=tp,
            pp=pp,
            micro_batch=micro,
            batch_size=batch,
            cpu_bandwidth=cpu,
            workspace=workspace,
            overlap=overlap,
            compute_efficiency=efficiency,
            gpus_per_node=per_node,
            zero=zero,
            offload=offload,
            precision=precision,
        )
    )


@PROPERTY_SETTINGS
@given(
    sample=SOME_NUMBERS,
    readers=ANY_NUMBER,
    nodes=SOME_NUMBERS,
    batch=ANY_NUMBER,
    threads=ANY_NUMBER,
    cache=ANY_NUMBER,
    dataset=ANY_NUMBER,
    epochs=ANY_NUMBER,
    latency=ANY_NUMBER,
    rate=ANY_NUMBER,
    file_bytes=ANY_NUMBER,
    layout=st.sampled_from(["small_files", "lmdb", "sharded"]),
    tier=st.sampled_from(["pfs", "nvme", "burst-buffer"]),
)
def test_io_model_answers_or_refuses(
    sample, readers, nodes, batch, threads, cache, dataset, epochs, latency, rate, file_bytes, layout, tier
):
    _answers_or_refuses(
        lambda: dlx.model.io_model(
            tier,
            layout=layout,
            sample_bytes=sample,
            file_bytes=file_bytes,
            readers_per_node=readers,
            nodes=nodes,
            batch_size=batch,
            io_threads=threads,
            page_cache_bytes=cache,
            dataset_bytes=dataset,
            epochs=epochs,
            read_latency_s=latency,
            metadata_rate=rate,
        )
    )


@PROPERTY_SETTINGS
@given(compute=ANY_NUMBER, sample=ANY_NUMBER, batch=ANY_NUMBER, per_node=ANY_NUMBER)
def test_io_bound_gpus_answers_or_refuses(compute, sample, batch, per_node):
    _answers_or_refuses(
        lambda: dlx.model.io_bound_gpus(
            compute, "pfs", layout="lmdb", sample_bytes=sample, batch_size=batch, gpus_per_node=per_node
        )
    )


@pytest.fixture(scope="module")
def small_prediction():
    return dlx.predict("resnet18", "V100-16GB", "25GbE", gpus=[1, 8], batch_size=32)


@PROPERTY_SETTINGS
@given(
    pue=ANY_NUMBER,
    node=ANY_NUMBER,
    fraction=ANY_NUMBER,
    samples=ANY_NUMBER,
    per_node=ANY_NUMBER,
    utilization=st.one_of(ANY_NUMBER, st.just("efficiency"), st.just("busy")),
)
def test_energy_answers_or_refuses(small_prediction, pue, node, fraction, samples, per_node, utilization):
    _answers_or_refuses(
        lambda: dlx.model.energy(
            small_prediction,
            pue=pue,
            node_power_w=node,
            comm_power_fraction=fraction,
            samples_per_epoch=samples,
            gpus_per_node=per_node,
            utilization=utilization,
        )
    )


@PROPERTY_SETTINGS
@given(
    gpus=st.lists(ANY_NUMBER, min_size=0, max_size=3), batch=ANY_NUMBER, pue=ANY_NUMBER, samples=ANY_NUMBER
)
def test_time_energy_tradeoff_answers_or_refuses(gpus, batch, pue, samples):
    _answers_or_refuses(
        lambda: dlx.model.time_energy_tradeoff(
            "resnet18", "V100-16GB", "25GbE", gpus=gpus, batch_size=batch, pue=pue, samples_per_epoch=samples
        )
    )


@PROPERTY_SETTINGS
@given(
    times=st.lists(ANY_NUMBER, min_size=1, max_size=4), energies=st.lists(ANY_NUMBER, min_size=1, max_size=4)
)
def test_pareto_front_answers_or_refuses(times, energies):
    _answers_or_refuses(lambda: (dlx.model.pareto_front(times, energies), None)[1])


@PROPERTY_SETTINGS
@given(
    ranks=SOME_NUMBERS,
    mean=ANY_NUMBER,
    std=ANY_NUMBER,
    distribution=st.sampled_from(["normal", "exponential", "lognormal", "uniform"]),
    sample=st.lists(ANY_NUMBER, min_size=1, max_size=5),
)
def test_straggler_models_answer_or_refuse(ranks, mean, std, distribution, sample):
    def expected():
        value = dlx.model.expected_max(distribution, ranks, mean=mean, std=std)
        assert not np.any(np.asarray(getattr(value, "values", value), dtype=float) < 0)
        return None

    _answers_or_refuses(expected)
    _answers_or_refuses(lambda: dlx.model.expected_max(sample, ranks))
    _answers_or_refuses(lambda: dlx.model.straggler_slowdown(sample))


@PROPERTY_SETTINGS
@given(
    field=st.sampled_from(["fp32_tflops", "fp16_tflops", "memory_bytes", "memory_bandwidth_gbs", "tdp_w"]),
    link_field=st.sampled_from(["bandwidth_gbs", "latency_s"]),
    value=ANY_NUMBER,
    which=st.sampled_from(["gpu", "network", "intra_link", "storage"]),
)
def test_hardware_made_in_python_answers_or_refuses(field, link_field, value, which):
    """A GPU, link or storage tier made with dataclasses.replace is held to the catalog files' rules
    (a negative link bandwidth gave a negative step time; a zero memory bandwidth, ZeroDivisionError)."""
    import dataclasses

    from dlexplore import catalog

    gpu, net, intra = catalog.gpu("A100-80GB"), catalog.network("IB-HDR"), catalog.network("NVLink3")
    storage = catalog.storage(catalog.storages().name[0])
    if which == "gpu":
        gpu = dataclasses.replace(gpu, **{field: value})
    elif which == "storage":
        storage = dataclasses.replace(storage, bandwidth_gbs=value)
    elif which == "network":
        net = dataclasses.replace(net, **{link_field: value})
    else:
        intra = dataclasses.replace(intra, **{link_field: value})
    common = {"gpus": 16, "gpus_per_node": 8, "intra_link": intra}
    _answers_or_refuses(lambda: dlx.predict("resnet50", gpu, net, storage=storage, **common))
    _answers_or_refuses(lambda: dlx.predict_parallel("gpt2", gpu, net, precision="fp16", **common))


def test_hardware_made_in_python_is_refused_in_words():
    import dataclasses

    from dlexplore import catalog

    net = dataclasses.replace(catalog.network("IB-HDR"), bandwidth_gbs=-5)
    with pytest.raises(InvalidValueError, match=r"bandwidth_gbs of 'IB-HDR' must be a number > 0; got -5"):
        dlx.predict_parallel("gpt2", "A100-80GB", net, gpus=16, gpus_per_node=8)
    gpu = dataclasses.replace(catalog.gpu("V100-16GB"), memory_bandwidth_gbs=0)
    with pytest.raises(InvalidValueError, match=r"memory_bandwidth_gbs of 'V100-16GB' must be"):
        dlx.predict("resnet50", gpu)
    no_bf16 = catalog.gpu("V100-16GB")  # NaN where the file's cell may be blank is fine
    assert math.isnan(no_bf16.bf16_tflops) and catalog.gpu(no_bf16) is no_bf16


@PROPERTY_SETTINGS
@given(producers=ANY_NUMBER, rate=ANY_NUMBER, consume=ANY_NUMBER, buffer=ANY_NUMBER, duration=ANY_NUMBER)
def test_coupled_workflow_answers_or_refuses(producers, rate, consume, buffer, duration):
    def steady():
        out = dlx.model.steady_state(producers, rate, consume)
        assert all(v >= 0 for v in out.values()), out
        return None

    _answers_or_refuses(steady)
    _answers_or_refuses(
        lambda: dlx.model.coupled(
            producers,
            rate,
            consume,
            buffer,
            min(duration, 1e4) if duration == duration else duration,
            points=11,
        )
    )


@PROPERTY_SETTINGS
@given(size=ANY_NUMBER, per_gradient=ANY_NUMBER)
def test_gradient_buckets_answer_or_refuse(size, per_gradient):
    def buckets():
        out = dlx.model.gradient_buckets("resnet18", per_gradient, size)
        assert np.all(out.nbytes >= 0) and np.all((out.ready_fraction >= 0) & (out.ready_fraction <= 1))
        return None

    _answers_or_refuses(buckets)

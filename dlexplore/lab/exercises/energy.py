"""Exercises of the energy lab (``notebooks/energy-lab.ipynb``), numbers 201 and up.

Worked from the phase-power formulas, with the GPU's TDP and idle power read from the catalog (not
by calling :mod:`dlexplore.model.energy`)::

    P_compute = P_tdp (a busy GPU),  P_comm = P_idle + (P_tdp - P_idle) / 2,  P_wait = P_idle
    E_step    = PUE x gpus x (t_compute P_compute + t_comm_exposed P_comm)          [J]
    1 kWh     = 3.6e6 J
"""

from __future__ import annotations

from ... import catalog
from ..core import Exercise, Solution, register

__all__ = ["STEP", "EPOCH", "RATIO"]

_GPU = "V100-16GB"
_P = 8  # GPUs
_T_COMPUTE, _T_COMM = 0.100, 0.020  # s per step: compute, exposed communication
_PUE = 1.2
_BATCH = 64  # images per GPU per step
_IMAGENET = 1_281_167  # training images of ImageNet-1k (ILSVRC 2012)
_J_PER_KWH = 3.6e6


def _powers() -> tuple[float, float, float]:
    dev = catalog.gpu(_GPU)
    return dev.tdp_w, dev.idle_w, dev.idle_w + (dev.tdp_w - dev.idle_w) / 2


def _step_joules(pue: float = _PUE, comm_power: float | None = None) -> float:
    tdp, _, comm = _powers()
    comm = comm if comm_power is None else comm_power
    return pue * _P * (_T_COMPUTE * tdp + _T_COMM * comm)


def _step() -> Solution:
    tdp, idle, comm = _powers()
    e = _step_joules()
    working = (
        f"{_GPU}: TDP {tdp:g} W, idle {idle:g} W. Computing at TDP: {tdp:g} W; communicating only: "
        f"{idle:g} + ({tdp:g} - {idle:g}) / 2 = {comm:g} W.\n"
        f"Per GPU: {_T_COMPUTE} s x {tdp:g} W + {_T_COMM} s x {comm:g} W = "
        f"{_T_COMPUTE * tdp + _T_COMM * comm:g} J.\n"
        f"All {_P} GPUs, x PUE {_PUE}: {_P} x {_T_COMPUTE * tdp + _T_COMM * comm:g} x {_PUE} = {e:.2f} J."
    )
    return Solution(
        STEP,
        e,
        working,
        (
            (_step_joules(pue=1.0), "multiply by the PUE: the data centre spends 1.2 J per J the IT uses."),
            (
                _step_joules(comm_power=tdp),
                "while only communicating the GPU is not at TDP: halfway between idle and TDP.",
            ),
            (_step_joules(comm_power=idle), "communicating is not idle: use halfway between idle and TDP."),
            (_step_joules() / _P, f"count all {_P} GPUs."),
            (_PUE * _P * (_T_COMPUTE + _T_COMM) * tdp, "the communication phase draws less than TDP."),
        ),
    )


def _epoch() -> Solution:
    e_step = _step_joules()
    samples = _P * _BATCH
    kwh = _IMAGENET / samples * e_step / _J_PER_KWH
    working = (
        f"Each step trains {_P} x {_BATCH} = {samples} images; an epoch is {_IMAGENET:,} / {samples} = "
        f"{_IMAGENET / samples:.1f} steps.\n"
        f"Energy: {_IMAGENET / samples:.1f} x {e_step:.2f} J = {_IMAGENET / samples * e_step:,.0f} J "
        f"= / 3.6e6 J/kWh = {kwh:.4f} kWh."
    )
    return Solution(
        EPOCH,
        kwh,
        working,
        (
            (
                _IMAGENET / _BATCH * e_step / _J_PER_KWH,
                f"a step trains {_BATCH} images on each of the {_P} GPUs: {samples} per step.",
            ),
            (_IMAGENET / samples * e_step / 1e3, "1 kWh is 3.6e6 J (1000 W for 3600 s), not 1000 J."),
            (_IMAGENET / samples * _step_joules(pue=1.0) / _J_PER_KWH, "include the PUE."),
        ),
    )


def _ratio() -> Solution:
    tdp, _, comm = _powers()
    one = _T_COMPUTE * tdp  # J per step of 1 GPU, whose step has no communication
    eight = _P * (_T_COMPUTE * tdp + _T_COMM * comm)
    ratio = eight / (_P * one)  # per sample: 8 GPUs train 8 times the images per step
    working = (
        f"Per image (PUE cancels): 1 GPU spends {_T_COMPUTE} x {tdp:g} = {one:g} J per {_BATCH} images; "
        f"{_P} GPUs spend {eight:g} J per {_P * _BATCH} images.\n"
        f"Ratio = {eight:g} / ({_P} x {one:g}) = {ratio:.4f}: {(ratio - 1) * 100:.1f} % more energy for "
        f"a {_P * _T_COMPUTE / (_T_COMPUTE + _T_COMM):.2f}x faster epoch. Less than the time ratio "
        f"{(_T_COMPUTE + _T_COMM) / _T_COMPUTE:g}, because communicating GPUs draw less than TDP."
    )
    return Solution(
        RATIO,
        ratio,
        working,
        (
            (eight / one, "compare per image (or per epoch): the 8 GPUs train 8 times the images per step."),
            (
                (_T_COMPUTE + _T_COMM) / _T_COMPUTE,
                f"the communication phase draws less than TDP: {comm:g} W.",
            ),
        ),
    )


STEP = register(
    Exercise(
        201,
        "step-energy",
        "Energy of one step",
        f"8 {_GPU} GPUs each compute for {_T_COMPUTE * 1e3:g} ms and then wait {_T_COMM * 1e3:g} ms on the "
        f"allreduce per step. Computing draws TDP, communicating halfway between idle and TDP; PUE {_PUE}. "
        "Energy per step?",
        "J",
        0.01,
        "a number",
    ),
    _step,
    "E = PUE x gpus x (t_compute x P_compute + t_comm x P_comm), with P_comm halfway between idle and TDP.",
)
EPOCH = register(
    Exercise(
        202,
        "epoch-energy",
        "Energy of an ImageNet epoch",
        f"With {_BATCH} images per GPU per step, how much energy does one epoch of ImageNet-1k "
        f"({_IMAGENET:,} images) take in that setting?",
        "kWh",
        0.01,
        "a number",
    ),
    _epoch,
    "steps per epoch = images / (GPUs x batch per GPU); 1 kWh = 3.6e6 J.",
)
RATIO = register(
    Exercise(
        203,
        "energy-ratio",
        "More GPUs, more energy?",
        f"On 1 GPU the step is {_T_COMPUTE * 1e3:g} ms of compute and nothing else. How many times the "
        "1-GPU energy does an epoch on 8 GPUs take (energy per epoch on 8 / on 1)?",
        "x",
        0.01,
        "a number",
    ),
    _ratio,
    "compare energy per image: (8 GPUs' energy per step / 512) / (1 GPU's / 64).",
)

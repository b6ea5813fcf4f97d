"""Exercises of the topic labs (notebooks/*-lab.ipynb), registered with :func:`dlexplore.lab.register`
when this package is imported; check them with :func:`dlexplore.lab.check` like the classroom lab's.
"""

import importlib

# Each topic module registers its exercises on import; a topic not written yet is simply absent.
for _topic in ("parallel", "energy", "io", "stragglers"):
    try:
        importlib.import_module(f"{__name__}.{_topic}")
    except ModuleNotFoundError as _err:
        if _err.name != f"{__name__}.{_topic}":
            raise

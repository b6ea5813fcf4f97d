"""The exercises of the labs, one module per notebook, each registering its own with
:func:`dlexplore.lab.core.register` when imported: the classroom lab (numbers 1..), parallelism (101..),
energy (201..), I/O (301..) and stragglers (401..). A new lab adds a module here and one import below.
"""

# In this order: EXERCISES lists the classroom lab's exercises first.
from . import classroom, energy, io, parallel, stragglers

__all__ = ["classroom", "parallel", "energy", "io", "stragglers"]

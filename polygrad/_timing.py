"""The cost of a probe, as the check's decisions need it: unaffected by other processes.

``check`` takes three decisions from timed probes: full Jacobian or projections
(the time of one batch of evaluations), an mp reference under
``reference="auto"``, and the mp re-examination of entries in doubt (the time
of one mp evaluation). Timed by the wall clock alone, they change with the
load of the machine, and with them the verdict (an entry that mp would decide
stays INCONCLUSIVE on a busy CI runner). A probe's cost is therefore the
smaller of its wall time and the CPU time of this process: on a loaded
machine the CPU time is the work done; on an idle one, a multi-threaded
evaluation's wall time is.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["probe_seconds"]


def probe_seconds(fn: Callable[[], Any]) -> float:
    """Seconds ``fn()`` costs: min(wall time, this process's CPU time).

    Exceptions of ``fn`` propagate.
    """
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return min(time.perf_counter() - wall, time.process_time() - cpu)

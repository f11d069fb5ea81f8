"""The global random number generators a check must leave as it found them.

A gradient check calls the user's function many times. A function that draws from
a global generator (``torch.randn``, ``np.random.normal``, ``random.random``, a
``Dropout`` left in training mode) advances it on each call, and the user's next
draw would differ from the one their program makes without the check. The states
of the generators of the modules already imported are saved before a check and
restored after it, whatever it raised. No framework is imported here.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["preserving_random_state"]

_F = TypeVar("_F", bound=Callable[..., Any])


def _torch_state(torch: Any) -> tuple[Any, Any]:
    cuda = None
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        cuda = torch.cuda.get_rng_state_all()
    return torch.random.get_rng_state(), cuda


def _save() -> list[Callable[[], None]]:
    """One restore function per generator whose module is loaded."""
    restores: list[Callable[[], None]] = []
    rnd = sys.modules.get("random")
    if rnd is not None:
        py_state = rnd.getstate()
        restores.append(lambda: rnd.setstate(py_state))
    np = sys.modules.get("numpy")
    if np is not None:
        np_state = np.random.get_state()
        restores.append(lambda: np.random.set_state(np_state))
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "random"):
        cpu, cuda = _torch_state(torch)

        def torch_restore() -> None:
            torch.random.set_rng_state(cpu)
            if cuda is not None:
                torch.cuda.set_rng_state_all(cuda)

        restores.append(torch_restore)
    return restores


def preserving_random_state(fn: _F) -> _F:
    """Run ``fn`` and put the global generators of Python, NumPy (``np.random``'s
    legacy global state) and PyTorch (CPU, and CUDA once initialised) back as they were.

    TensorFlow's and Keras's generators are variables, which the TensorFlow backend
    restores with every other variable a function writes; JAX has no global state.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        restores = _save()
        try:
            return fn(*args, **kwargs)
        finally:
            for restore in restores:
                restore()

    return wrapper  # type: ignore[return-value]

"""A PyTorch function's own VJP, captured as an ATen graph and re-executed on mpmath numbers.

``torch.func.vjp`` runs the function's backward formulas (and a
``torch.autograd.Function``'s ``backward``, as the code defines it; one without
``setup_context``, which functorch refuses, runs under ``torch.autograd.grad``); traced with
the cotangent as an input (:func:`polygrad.mpexec.torch_graph.torch_mp_evaluator`,
backward operators decomposed where they have no mpmath rule of their own), it
is the rule the code computes, in exact arithmetic. Beside a reference
derivative it tells a rule that is right but rounds badly in float64 (a
cross-entropy's ``p_0 - 1`` with ``p_0`` within 1e-12 of 1) from a wrong one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .errors import GraphCaptureError
from .torch_graph import torch_mp_evaluator
from .values import vjp_rows

__all__ = ["torch_vjp_mp"]


def torch_vjp_mp(
    call: Callable[..., Any], primals: Sequence[Any], m: int
) -> Callable[[np.ndarray, np.ndarray, int], np.ndarray]:
    """``call``'s VJP on mpmath numbers.

    Parameters
    ----------
    call : callable
        ``call(*leaves) -> Tensor``: the function of the checked tensors, its
        outputs flattened to one 1-D floating tensor of ``m`` values.
    primals : sequence of Tensor
        The checked tensors at the point (traced on copies).
    m : int
        Number of outputs.

    Returns
    -------
    callable
        ``(x0: ndarray (n,), U: ndarray (k, m), dps: int) -> object ndarray (k, n)``:
        the rows ``U @ J`` as ``call``'s VJP computes them at ``x0``, on mpmath
        numbers at ``dps`` digits.

    Raises
    ------
    GraphCaptureError, UnsupportedOperatorError
        As :func:`polygrad.mpexec.torch_graph.torch_mp_evaluator`.
    """
    import torch

    k = len(primals)

    def rule(*a: Any) -> Any:
        _, pull = torch.func.vjp(call, *a[:k])
        return torch.cat([g.reshape(-1) for g in pull(a[k])])

    def engine_rule(*a: Any) -> Any:
        # an autograd.Function without setup_context runs under the autograd engine only
        xs = [t.detach().requires_grad_(True) for t in a[:k]]
        with torch.enable_grad():
            gs = torch.autograd.grad(call(*xs), xs, a[k], allow_unused=True)
        return torch.cat([(torch.zeros_like(x) if g is None else g).reshape(-1)
                          for g, x in zip(gs, xs, strict=True)])  # fmt: skip

    like = primals[0] if primals else torch.zeros(())
    u = torch.ones(m, dtype=like.dtype, device=like.device)
    try:
        ev = torch_mp_evaluator(rule, [*primals, u])
    except GraphCaptureError:
        ev = torch_mp_evaluator(engine_rule, [*primals, u])
    return vjp_rows(ev)

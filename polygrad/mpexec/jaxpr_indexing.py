"""Data-movement primitives of the jaxpr interpreter.

The simple forms (``reshape``, ``transpose``, ``slice``...) run in NumPy on the
object arrays. The index maps of the others (``gather``, ``scatter``, ``pad``,
dynamic slices, ``split``...) are computed by running the primitive itself in
JAX on an array of element positions: exact (no float value passes through
JAX), cached per equation and index values, and every form of their
parameters is covered.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .jaxpr_rules import _aval_dtype, _is_float, _is_key


def _host(value: Any) -> Any:
    """A JAX result as a NumPy array, a PRNG key array as it is (NumPy has no such dtype)."""
    return value if _is_key(getattr(value, "dtype", None)) else np.asarray(value)


class _DataMovement:
    """Rules of the primitives that only copy (or scatter-combine) elements.

    A mixin of :class:`.jaxpr._Interpreter`, which provides ``ctx``,
    ``binary`` (the float binary functions) and ``_index_cache``.
    """

    ctx: Any
    binary: dict[str, Any]
    _index_cache: dict[Any, Any]

    def _r_reshape(self, eqn: Any, invals: list[Any]) -> Any:
        x, dims = invals[0], eqn.params.get("dimensions")
        if dims is not None:
            x = np.transpose(x, dims)
        return np.reshape(x, tuple(eqn.params["new_sizes"]))

    def _r_broadcast_in_dim(self, eqn: Any, invals: list[Any]) -> Any:
        if len(invals) != 1:  # dynamic shapes
            return self._move(eqn, invals)
        shape = tuple(eqn.params["shape"])
        tmp = [1] * len(shape)
        for i, d in enumerate(eqn.params["broadcast_dimensions"]):
            tmp[d] = np.shape(invals[0])[i]
        return np.broadcast_to(np.reshape(invals[0], tmp), shape)

    def _r_squeeze(self, eqn: Any, invals: list[Any]) -> Any:
        return np.squeeze(invals[0], axis=tuple(eqn.params["dimensions"]))

    def _r_transpose(self, eqn: Any, invals: list[Any]) -> Any:
        return np.transpose(invals[0], tuple(eqn.params["permutation"]))

    def _r_rev(self, eqn: Any, invals: list[Any]) -> Any:
        return np.flip(invals[0], axis=tuple(eqn.params["dimensions"]))

    def _r_slice(self, eqn: Any, invals: list[Any]) -> Any:
        p = eqn.params
        strides = p.get("strides") or (1,) * len(p["start_indices"])
        return invals[0][
            tuple(
                slice(a, b, c)
                for a, b, c in zip(p["start_indices"], p["limit_indices"], strides, strict=True)
            )
        ]

    def _r_concatenate(self, eqn: Any, invals: list[Any]) -> Any:
        return np.concatenate([np.asarray(v, dtype=object) for v in invals], axis=_concat_axis(eqn))

    def _bind(self, eqn: Any, invals: list[Any], params: dict[str, Any] | None = None) -> Any:
        """Run the primitive in JAX itself on integer/boolean NumPy arrays (exact)."""
        import jax

        with jax.enable_x64(True):
            out = eqn.primitive.bind(*invals, **(eqn.params if params is None else params))
        if eqn.primitive.multiple_results:
            return [_host(o) for o in out]
        return _host(out)

    def _move(self, eqn: Any, invals: list[Any]) -> Any:
        """A primitive that only copies elements: find which, by running it on positions."""
        float_pos = [i for i, v in enumerate(eqn.invars) if _is_float(_aval_dtype(v.aval))]
        key_ints = tuple(
            (i, np.asarray(invals[i]).tobytes()) for i in range(len(invals)) if i not in float_pos
        )
        key = (id(eqn), key_ints)
        maps: list[np.ndarray] | None = self._index_cache.get(key)
        if maps is None:
            maps = self._index_cache[key] = self._index_maps(eqn, invals, float_pos)
        pool = self._pool([invals[i] for i in float_pos])
        res = [pool[m] for m in maps]
        return res if eqn.primitive.multiple_results else res[0]

    def _pool(self, floats: list[Any]) -> np.ndarray:
        """The float operands' elements, flattened one after another, then a NaN (the
        element a fill value points at)."""
        return np.concatenate(
            [np.asarray(v, dtype=object).ravel() for v in floats]
            + [np.array([self.ctx.nan], dtype=object)]
        )

    def _index_maps(self, eqn: Any, invals: list[Any], floats: list[int]) -> list[np.ndarray]:
        """Which element of :meth:`_pool` each output element is, found by running the
        primitive in JAX on the float operands' positions (exact)."""
        args, off = list(invals), 0
        for i in floats:
            size = int(np.prod(np.shape(invals[i]), dtype=np.int64))
            args[i] = (np.arange(size, dtype=np.int64) + off).reshape(np.shape(invals[i]))
            off += size
        params = dict(eqn.params)
        if "fill_value" in params:
            params["fill_value"] = -1
        if "update_jaxpr" in params:
            params["update_jaxpr"] = None
        out = self._bind(eqn, args, params)
        outs = out if isinstance(out, list) else [out]
        return [np.where(o < 0, off, o) for o in outs]  # -1: the fill value, NaN

    def _scatter_targets(self, eqn: Any, operand: Any, indices: Any, updates: Any) -> np.ndarray:
        """Flat operand position each update element goes to (-1: dropped)."""
        from jax import lax

        key = (id(eqn), np.asarray(indices).tobytes())
        hit = self._index_cache.get(key)
        if hit is not None:
            return hit
        d = eqn.params["dimension_numbers"]
        window = list(d.update_window_dims)
        inserted = set(d.inserted_window_dims) | set(d.operand_batching_dims)
        upd_shape = np.shape(updates)
        win_sizes = iter(upd_shape[i] for i in window)
        slice_sizes = tuple(
            1 if k in inserted else next(win_sizes) for k in range(np.ndim(operand))
        )
        gd = lax.GatherDimensionNumbers(
            offset_dims=tuple(window),
            collapsed_slice_dims=tuple(d.inserted_window_dims),
            start_index_map=tuple(d.scatter_dims_to_operand_dims),
            operand_batching_dims=tuple(d.operand_batching_dims),
            start_indices_batching_dims=tuple(d.scatter_indices_batching_dims),
        )
        pos = np.arange(int(np.prod(np.shape(operand), dtype=np.int64))).reshape(np.shape(operand))
        import jax

        with jax.enable_x64(True):
            out = lax.gather(
                pos,
                np.asarray(indices),
                gd,
                slice_sizes,
                mode=lax.GatherScatterMode.FILL_OR_DROP,
                fill_value=-1,
            )
        dest = np.asarray(out).reshape(upd_shape)
        self._index_cache[key] = dest
        return dest

    def _combine_scatter(self, eqn: Any, invals: list[Any], op: str) -> Any:
        operand, indices, updates = invals
        dest = self._scatter_targets(eqn, operand, indices, updates)
        out = np.asarray(operand, dtype=object).ravel().copy()
        for t, u in zip(dest.ravel(), np.asarray(updates, dtype=object).ravel(), strict=True):
            if t < 0:
                continue
            if op == "add":
                out[t] = out[t] + u
            elif op == "sub":
                out[t] = out[t] - u
            elif op == "mul":
                out[t] = out[t] * u
            else:
                out[t] = self.binary[op](out[t], u)
        return out.reshape(np.shape(operand))

    def _r_scatter_add(self, eqn: Any, invals: list[Any]) -> Any:
        return self._combine_scatter(eqn, invals, "add")

    def _r_scatter_sub(self, eqn: Any, invals: list[Any]) -> Any:
        return self._combine_scatter(eqn, invals, "sub")

    def _r_scatter_mul(self, eqn: Any, invals: list[Any]) -> Any:
        return self._combine_scatter(eqn, invals, "mul")

    def _r_scatter_max(self, eqn: Any, invals: list[Any]) -> Any:
        return self._combine_scatter(eqn, invals, "max")

    def _r_scatter_min(self, eqn: Any, invals: list[Any]) -> Any:
        return self._combine_scatter(eqn, invals, "min")


def _concat_axis(eqn: Any) -> int:
    return int(eqn.params["dimension"])

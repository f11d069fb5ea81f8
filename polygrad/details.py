"""The typed ``details`` of a :class:`~polygrad.Report`: everything behind its verdict.

Each part is a frozen dataclass whose :meth:`to_dict` gives the JSON form that
:meth:`polygrad.Report.to_dict` writes (optional entries that are ``None`` are
left out, as they always were). :class:`Details` holds the parts and the notes;
its costly supporting evidence (the naive central difference's predicted error,
the Taylor test) is computed on first read.

For code written against the earlier dictionary, :class:`Details` also reads
as a read-only mapping of that JSON form: ``report.details["reference"]["method"]``
is ``report.details.reference.method``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from .your_terms import YourTerms

__all__ = [
    "Deferred",
    "Details",
    "DetectionPower",
    "Escalation",
    "HiddenCancellation",
    "NaiveCentralDifference",
    "ReferenceInfo",
    "Rules",
    "TaylorSummary",
]

T = TypeVar("T")


def _plain(x: Any) -> Any:
    """Dataclasses as dicts (``None`` optional fields left out), tuples as lists."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        to_dict = getattr(x, "to_dict", None)
        if to_dict is not None:
            return to_dict()
        return {f.name: _plain(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if isinstance(x, Mapping):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


def _fields_dict(obj: Any, optional: tuple[str, ...] = ()) -> dict[str, Any]:
    """``obj``'s fields in declaration order; those named in ``optional`` only when set."""
    out = {}
    for f in dataclasses.fields(obj):
        if f.name.startswith("_"):
            continue
        value = getattr(obj, f.name)
        if value is None and f.name in optional:
            continue
        out[f.name] = _plain(value)
    return out


class Deferred(Generic[T]):
    """A value computed once, on first :meth:`get` (``None``: absent).

    A frozen dataclass holds one as a private field: the dataclass stays
    immutable while the holder fills in its value. Pickling, copying and
    comparing compute the value first (a pending computation may hold
    closures that do not pickle).
    """

    __slots__ = ("_compute", "_value")

    def __init__(self, compute: Callable[[], T | None] | None = None, value: T | None = None):
        self._compute = compute
        self._value = value

    @property
    def pending(self) -> bool:
        """True while the value has not been computed."""
        return self._compute is not None

    def get(self) -> T | None:
        """The value, computed now if still pending."""
        if self._compute is not None:
            compute, self._compute = self._compute, None
            self._value = compute()
        return self._value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Deferred) and self.get() == other.get()

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        return (Deferred, (None, self.get()))

    def __repr__(self) -> str:
        return "Deferred(<pending>)" if self.pending else f"Deferred({self._value!r})"


def _absent() -> Deferred[Any]:
    return Deferred()


@dataclass(frozen=True)
class ReferenceInfo:
    """The reference derivative: its source, noise, steps, cost.

    Attributes
    ----------
    method : str
        ``"mp"``, ``"float64"`` or ``"working"`` (central differences in that arithmetic).
    dps : int or None
        mpmath's decimal digits (mp only).
    noise, noise_max : float
        Median and largest measured noise of f along the directions.
    noise_detected_fraction : float
        Fraction of noise estimates that detected noise (not just an upper bound).
    noise_measured_along : str
        Which directions the noise was measured along.
    target_accuracy : float
        The relative accuracy asked of the reference.
    noise_relative : float
        Median largest noise relative to ``f_abs``.
    median_step, median_scale : float
        Median relative step, and median power-of-two scale the steps are relative to.
    f_abs : float
        ``max |f(x)|``.
    median_relative_error : float
        Median relative error bar of the reference.
    evaluations : int
        Evaluations of f spent on the reference.
    seconds : float
        Time spent on the reference.
    cached : bool
        Whether the reference was read from the cache.
    resolution : float or None
        Smallest relative gradient error a finite-difference reference resolves
        (float64 PASS only).
    """

    method: str
    dps: int | None
    noise: float
    noise_max: float
    noise_detected_fraction: float
    noise_measured_along: str
    target_accuracy: float
    noise_relative: float
    median_step: float
    median_scale: float
    f_abs: float
    median_relative_error: float
    evaluations: int
    seconds: float
    cached: bool
    resolution: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``resolution`` only when set)."""
        return _fields_dict(self, optional=("resolution",))


@dataclass(frozen=True)
class Rules:
    """How entries were judged: the tolerance's formula, float64 autodiff available."""

    tolerance: str
    has_float64_autodiff: bool

    def to_dict(self) -> dict[str, Any]:
        return _fields_dict(self)


@dataclass(frozen=True)
class DetectionPower:
    """What size of gradient error ``count`` random projections would have caught.

    Attributes
    ----------
    count : int
        Number of projections.
    threshold : float
        The smallest tolerance of a projection.
    single_entry_error_caught : float
        Median error of one wrong Jacobian entry that a projection catches.
    spread_error_norm_caught_99 : float
        Scaled 2-norm of an error spread over many entries caught with 99% probability.
    """

    count: int
    threshold: float
    single_entry_error_caught: float
    spread_error_norm_caught_99: float

    def to_dict(self) -> dict[str, Any]:
        return _fields_dict(self)


@dataclass(frozen=True)
class HiddenCancellation:
    """``f`` itself computed to far fewer digits than its working dtype has.

    Attributes
    ----------
    output : str
        The output that lost the most (``"f"`` for a single output).
    value : float
        Its value in the working dtype.
    accurate : float
        Its value in ``source``.
    relative_error : float
        ``|value - accurate| / max(|value|, |accurate|)``, at most 1.
    source : {"float64", "mp"}
        Where the accurate value comes from.
    allowance : float
        ``Policy.c_lost``: each entry of an output may be off by this many times the
        output's relative error times the entry's scale, where only the working
        dtype is off (see :func:`polygrad.pipeline.judge.findings`).
    """

    output: str
    value: float
    accurate: float
    relative_error: float
    source: str
    allowance: float

    def cause(self, dtype: str) -> str:
        """Why ``f`` lost its digits, in words.

        Parameters
        ----------
        dtype : str
            The working dtype's name (``"float32"``).

        Returns
        -------
        str
            ``"underflow"`` where the value is below ``dtype``'s smallest normal number
            (a subnormal keeps fewer digits), else ``"hidden cancellation"``.
        """
        from .backends.base import dtype_tiny

        small = max(abs(self.value), abs(self.accurate)) < dtype_tiny(dtype)
        return "underflow" if small else "hidden cancellation"


@dataclass(frozen=True)
class Escalation:
    """Entries in doubt re-examined with an mp reference along their directions.

    Attributes
    ----------
    reference : str
        ``"mp"``.
    dps : int
        mpmath's decimal digits.
    directions : tuple of int
        The re-examined directions (rows of the direction matrix).
    d : int
        Number of directions in all.
    decided_by : mapping of str to tuple of str, optional
        For each reference (``"mp"`` or the first one's method), the entries
        still in doubt that it decided.
    deferred : int, optional
        Directions in doubt that mp did not re-examine because those of the worst
        entries, re-examined first, already confirmed a MISMATCH (None: none left).
    """

    reference: str
    dps: int
    directions: tuple[int, ...]
    d: int
    decided_by: Mapping[str, tuple[str, ...]] | None = None
    deferred: int | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Escalation:
        by = d.get("decided_by")
        return cls(
            reference=str(d["reference"]),
            dps=int(d["dps"]),
            directions=tuple(int(i) for i in d["directions"]),
            d=int(d["d"]),
            decided_by=None if by is None else {k: tuple(v) for k, v in by.items()},
            deferred=None if d.get("deferred") is None else int(d["deferred"]),
        )

    def to_dict(self) -> dict[str, Any]:
        return _fields_dict(self, optional=("decided_by", "deferred"))


@dataclass(frozen=True)
class NaiveCentralDifference:
    """Predicted error of a plain fixed-step central difference in the working dtype.

    Attributes
    ----------
    noise : float
        Noise of f in the working dtype along one random direction.
    noise_ulps : float
        The same in ULPs of ``|f|``.
    third_derivative : float or None
        ``|f'''|`` along the direction (0 within its error bar); None without float64.
    optimal_step, optimal_error : float or None
        The step balancing truncation and round-off, and the error there.
    example_step, example_error : float
        A step of ``2**-13`` and the round-off error there.
    """

    noise: float
    noise_ulps: float
    third_derivative: float | None = None
    optimal_step: float | None = None
    optimal_error: float | None = None
    example_step: float = 2.0**-13
    example_error: float = float("nan")

    def to_dict(self) -> dict[str, Any]:
        return _fields_dict(self, optional=("third_derivative", "optimal_step", "optimal_error"))


@dataclass(frozen=True)
class TaylorSummary:
    """The Taylor-remainder test (:func:`polygrad.taylor`) in its JSON form.

    Attributes mirror :meth:`polygrad.taylor.TaylorResult.to_dict`: ``slope``
    (fitted order of the remainder), ``verdict`` (``"consistent"``, ``"wrong"``,
    ...), ``explanation`` (a sentence), the ``steps`` with their ``residual``,
    ``floor``, ``used`` flags and ``rates``, and the directional derivative.
    """

    slope: float | None
    verdict: str
    explanation: str
    steps: tuple[Any, ...]
    residual: tuple[Any, ...]
    floor: tuple[Any, ...]
    used: tuple[Any, ...]
    rates: tuple[Any, ...]
    directional_derivative: Any
    first_order_error: Any
    mode: str
    evaluation: str
    working_dtype: str
    notes: tuple[str, ...]

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TaylorSummary:
        seq = {"steps", "residual", "floor", "used", "rates", "notes"}
        values: dict[str, Any] = {k: tuple(v) if k in seq else v for k, v in d.items()}
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return _fields_dict(self)


_LAZY = ("naive_central_difference", "taylor")


@dataclass(frozen=True)
class Details:
    """Everything behind a report's verdict.

    Attributes
    ----------
    notes : tuple of str
        Explanations in words, in the order they arose.
    nonsmooth : str
        The ``nonsmooth=`` option the verdict was judged under.
    backend, working_dtype : str
        The framework and the dtype the gradient was computed in.
    eps : float
        Machine epsilon of the working dtype.
    inputs, outputs : int
        Sizes of the flattened input and output.
    input_names : tuple of str
        Names of the input leaves.
    modes : tuple of str
        ``"rev"`` (VJP) and/or ``"fwd"`` (JVP).
    strategy : str
        ``"full"`` (every Jacobian entry) or ``"projections"``.
    reference : ReferenceInfo
    rules : Rules
    escalation : Escalation or None
        Entries in doubt re-examined with mp.
    projections : DetectionPower or None
        With the projections strategy: what they would have caught.
    your_terms : YourTerms or None
        The user's own check in its own terms (``compare_with=``).
    seconds : float or None
        Time of the whole check.
    convention : str or None
        ``"symmetric-subspace"`` for a gradient checked on the symmetric subspace
        of a matrix argument (see :mod:`polygrad.pipeline.subspace`).
    subspace : dict or None
        Its arguments, directions and what was measured of them.
    hidden_cancellation : HiddenCancellation or None
        Where ``f`` itself lost far more digits in the working dtype than its
        round-off explains.
    naive_central_difference : NaiveCentralDifference or None
        Computed on first read (working dtypes narrower than float64).
    taylor : TaylorSummary or None
        Computed on first read.

    Notes
    -----
    Backward compatibility: a ``Details`` is also a read-only mapping of its
    JSON form (:meth:`to_dict`), so ``details["reference"]["method"]``,
    ``details.get("projections")``, ``"taylor" in details`` and iteration work
    as they did on the earlier dictionary. Reading one key computes only that
    key's deferred evidence; iterating computes all of it.
    """

    notes: tuple[str, ...]
    nonsmooth: str
    backend: str
    working_dtype: str
    eps: float
    inputs: int
    outputs: int
    input_names: tuple[str, ...]
    modes: tuple[str, ...]
    strategy: str
    reference: ReferenceInfo
    rules: Rules
    escalation: Escalation | None = None
    projections: DetectionPower | None = None
    your_terms: YourTerms | None = None
    seconds: float | None = None
    convention: str | None = None
    subspace: dict[str, Any] | None = None
    hidden_cancellation: HiddenCancellation | None = None
    _naive: Deferred[NaiveCentralDifference] = field(default_factory=_absent, repr=False)
    _taylor: Deferred[TaylorSummary] = field(default_factory=_absent, repr=False)

    @property
    def naive_central_difference(self) -> NaiveCentralDifference | None:
        """The naive central difference's predicted error (computed on first read)."""
        return self._naive.get()

    @property
    def taylor(self) -> TaylorSummary | None:
        """The Taylor-remainder test (computed on first read)."""
        return self._taylor.get()

    def force(self) -> Details:
        """Compute the deferred evidence now; returns ``self``."""
        self._naive.get()
        self._taylor.get()
        return self

    def with_evidence(
        self,
        naive: Callable[[], NaiveCentralDifference | None] | None = None,
        taylor: Callable[[], TaylorSummary | None] | None = None,
    ) -> Details:
        """A copy whose supporting evidence is computed by these functions on first read."""
        return dataclasses.replace(self, _naive=Deferred(naive), _taylor=Deferred(taylor))

    # -- the JSON form, and the mapping view of it ------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The JSON form of :meth:`polygrad.Report.to_dict` (before NaN/inf are spelt out)."""
        optional = ("escalation", "projections", "your_terms", "seconds", "convention",
                    "subspace", "hidden_cancellation")  # fmt: skip
        out = _fields_dict(self, optional=optional)
        for key in _LAZY:
            value = getattr(self, key)
            if value is not None:
                out[key] = _plain(value)
        return out

    def _entry(self, key: str) -> Any:
        if key.startswith("_") or not hasattr(self, key) or key in ("to_dict", "get", "keys"):
            raise KeyError(key)
        value = getattr(self, key)
        if value is None or callable(value):
            raise KeyError(key)
        return _plain(value)

    def __getitem__(self, key: str) -> Any:
        return self._entry(key)

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self._entry(key)
        except KeyError:
            return default

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None

    def keys(self) -> list[str]:
        return list(self.to_dict())

    def items(self) -> list[tuple[str, Any]]:
        return list(self.to_dict().items())

    def values(self) -> list[Any]:
        return list(self.to_dict().values())

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self.to_dict())

    def __bool__(self) -> bool:
        return True

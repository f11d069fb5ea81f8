"""The numerical core: noise estimation, finite differences, Richardson extrapolation.

Nothing in this package imports a framework: it works on plain callables on
NumPy float64 arrays (or on mpmath numbers).
"""

from .curvature import derivative_coefficients, rounding_noise
from .differences import DirectionalDerivatives, directional_derivatives, evaluate_ladder
from .mp import mp_directional_derivatives
from .noise import NoiseEstimate, ecnoise, estimate_noise
from .richardson import Estimate, neville, step_ladder

__all__ = [
    "DirectionalDerivatives",
    "Estimate",
    "NoiseEstimate",
    "derivative_coefficients",
    "directional_derivatives",
    "evaluate_ladder",
    "ecnoise",
    "estimate_noise",
    "mp_directional_derivatives",
    "neville",
    "rounding_noise",
    "step_ladder",
]

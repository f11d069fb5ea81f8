"""The numerical core: noise estimation, finite differences, Richardson extrapolation.

Nothing in this package imports a framework: it works on plain callables on
NumPy float64 arrays (or on mpmath numbers).
"""

from .differences import DirectionalDerivatives, directional_derivatives
from .mp import mp_directional_derivatives
from .noise import NoiseEstimate, ecnoise, estimate_noise
from .richardson import Estimate, neville, step_ladder

__all__ = [
    "DirectionalDerivatives",
    "Estimate",
    "NoiseEstimate",
    "directional_derivatives",
    "ecnoise",
    "estimate_noise",
    "mp_directional_derivatives",
    "neville",
    "step_ladder",
]

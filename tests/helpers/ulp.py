"""Distances in float32 steps, for tests that hold a function to an ulp bound against numpy."""
from __future__ import annotations

import numpy as np


def ulp_distance(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Distance in float32 steps between `got` and `want` (0 where both are nan; -0 and 0 are 0 apart)."""
    def ordered(values: np.ndarray) -> np.ndarray:
        bits = values.astype(np.float32).view(np.int32).astype(np.int64)
        return np.where(bits < 0, -(bits & 0x7FFFFFFF), bits)
    both_nan = np.isnan(got) & np.isnan(want)
    return np.where(both_nan, 0, np.abs(ordered(got) - ordered(want)))

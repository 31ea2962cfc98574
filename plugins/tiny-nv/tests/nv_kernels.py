"""The representative kernels of the NV tests: the core's shared cases (tinycore.testing.kernel_cases)."""
from tinycore.testing.kernel_cases import CASES, Case, case_kernels, kernels_of, symbolic_kernel

__all__ = ["CASES", "Case", "case_kernels", "kernels_of", "symbolic_kernel"]

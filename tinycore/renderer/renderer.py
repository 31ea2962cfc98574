"""Renderer: the base of every renderer (linear program -> source and ProgramSpec) and the text-rule helpers."""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, cast

from tinycore.dtype import DType, dtypes
from tinycore.helpers import to_function_name
from tinycore.plugins.contract import DeviceContract, RendererContract
from tinycore.uop.ops import Ops
from tinycore.uop.patterns import PatternMatcher, RewriteFunction, UPat
from tinycore.uop.program import Estimates, ProgramSpec, estimate, pointer_root  # the description of a program
from tinycore.uop.uop import UOp

# a rendering rule: from `ctx` and its pattern's captures, the UOp's text ("" for a statement) or None to pass it on
TextRule = Callable[..., "str | None"]

def text_rules(rules: Sequence[tuple[UPat, TextRule]]) -> PatternMatcher:
    """A PatternMatcher of rendering rules (PatternMatcher types its rules as UOp rewrites; these return text)."""
    return PatternMatcher(cast(Sequence[tuple[UPat, RewriteFunction]], rules))

class Renderer(RendererContract):
    """Linear program -> source and ProgramSpec; the attributes the core reads are declared in RendererContract."""

    string_rewrite: ClassVar[PatternMatcher | None] = None
    """The rules rendering each UOp (`text_rules`); a subclass writes `its_rules + Parent.string_rewrite`."""

    def supported_dtypes(self) -> set[DType]:
        """The scalar dtypes kernels can use: the declared `capabilities` (own, else the device's), else spelled."""
        declared = _declared_dtypes(self.capabilities)
        if declared is None and (device_reference := self.__dict__.get("_opened_device")) is not None:
            device: DeviceContract | None = device_reference()
            declared = _declared_dtypes(device.capabilities if device is not None else None)
        return {dtype.scalar for dtype in declared} if declared is not None else self.spelled_dtypes()

    def spelled_dtypes(self) -> set[DType]:
        """The dtypes of `dtypes.all` this renderer has a type for (its `type_map`; all of them without one)."""
        return {dtype for dtype in dtypes.all if dtype in self.type_map} if self.type_map else set(dtypes.all)

    def to_program(self, uops: list[UOp], name: str | None = None) -> ProgramSpec:
        """Render `uops` and describe the result (launch sizes, arguments, estimates) in a ProgramSpec."""
        function_name = name if name is not None else kernel_name(uops)
        return ProgramSpec.from_uops(function_name, self.render_named(uops, function_name), self.device, uops)

def _declared_dtypes(capabilities: object) -> Any:
    return capabilities.get("dtypes") if isinstance(capabilities, Mapping) else getattr(capabilities, "dtypes", None)

def kernel_name(uops: list[UOp], default: str = "kernel") -> str:
    """The function name of a linear program: the SINK's arg (a string or an object with `.name`), else default."""
    for arg in (uop.arg for uop in reversed(uops) if uop.op is Ops.SINK):
        name = arg if isinstance(arg, str) else getattr(arg, "function_name", getattr(arg, "name", None))
        if isinstance(name, str) and name:
            return to_function_name(name)
    return default

__all__ = ["Renderer", "ProgramSpec", "Estimates", "estimate", "kernel_name", "pointer_root", "text_rules"]

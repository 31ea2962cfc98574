"""Renderers: linear kernel programs to source code (the Renderer base, ProgramSpec, the C-like family)."""
from tinycore.renderer.cstyle import CStyleLanguage
from tinycore.renderer.renderer import Estimates, ProgramSpec, Renderer

__all__ = ["CStyleLanguage", "Estimates", "ProgramSpec", "Renderer"]

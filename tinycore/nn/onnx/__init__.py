"""ONNX models on tinycore: `OnnxRunner(path)({"input": array})` returns the outputs by name as Tensors.

Needs the `onnx` package (`pip install 'tinycore[onnx]'`) to decode files. See docs/onnx.md for the operators,
their opsets and what is missing.
"""
from tinycore.nn.onnx.parser import OnnxFormatError
from tinycore.nn.onnx.runner import OnnxRunner

__all__ = ["OnnxFormatError", "OnnxRunner"]

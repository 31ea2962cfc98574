"""PyTorch's own OpInfo samples (torch.testing._internal's op_db) on the tiny device against the CPU: every OpInfo
whose aten name is a mapped operator, and those named after a functional that reaches one; the first float32
samples of each, values and the gradients of every input that requires one, with TINY_TORCH_FALLBACK=0 (each aten
operator the call reaches runs on tinycore). test_operator_coverage.py has the hand-written table; this file is the
independent oracle PyTorch ships."""
from __future__ import annotations

import pytest
import tiny_torch
import torch
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.opinfo.core import OpInfo, SampleInput
from torch.utils._pytree import tree_flatten, tree_map

SAMPLES_PER_OPINFO = 2
PACKETS = {name.split(".")[1] for name in tiny_torch.mapped_operators()}
REACHING_MAPPED = {
    "nn.functional.conv1d", "nn.functional.conv2d", "nn.functional.linear", "softmax", "log_softmax",
    "nn.functional.softmax", "nn.functional.log_softmax", "nn.functional.nll_loss", "nn.functional.cross_entropy",
    "nn.functional.mse_loss", "nn.functional.group_norm", "nn.functional.batch_norm", "nn.functional.layer_norm",
    "nn.functional.dropout", "nn.functional.adaptive_avg_pool2d", "nn.functional.max_pool2d",
    "nn.functional.avg_pool2d", "nn.functional.embedding", "nn.functional.silu", "nn.functional.gelu",
    "nn.functional.softplus", "nn.functional.elu", "nn.functional.hardtanh", "nn.functional.leaky_relu",
    "nn.functional.relu", "nn.functional.hardswish", "nn.functional.mish", "nn.functional.logsigmoid",
    "nn.functional.tanhshrink", "clamp", "square", "lerp", "isfinite", "where", "bitwise_or", "bitwise_xor", "fmod",
    "remainder", "rsub", "pow", "__lshift__", "__rshift__", "equal",
}
"""OpInfos named after a functional (or an alias) rather than the aten operator they reach, which is mapped."""
SELECTED = [info for info in op_db if ((info.aten_name or info.name).split(".")[-1] in PACKETS
                                       or info.name in REACHING_MAPPED)
            and torch.float32 in info.supported_dtypes("cpu")]

UNSUPPORTED = {
    ("sparse.mm", "reduce"): "sparse tensors: the tiny device has only the strided layout",
}
"""OpInfos the tiny device refuses on purpose: each must still raise, with the reason given, not run wrongly."""
VALUES_UNSPECIFIED = {"empty_like", "new_empty", "new_empty_strided", "empty", "empty_strided"}
"""OpInfos whose results have unspecified contents: only shapes and dtypes compare."""


def _identifier(info: OpInfo) -> str:
    return f"{info.name}-{info.variant_test_name}" if info.variant_test_name else info.name


def _to_tiny(value: object) -> object:
    if isinstance(value, torch.Tensor):
        moved = value.detach().to("tiny")
        return moved.requires_grad_(value.requires_grad) if value.is_floating_point() else moved
    return value


def _tensors(tree: object) -> list[torch.Tensor]:
    return [leaf for leaf in tree_flatten(tree)[0] if isinstance(leaf, torch.Tensor)]


def _check_sample(info: OpInfo, sample: SampleInput) -> None:
    cpu_arguments = (sample.input, sample.args, sample.kwargs)
    tiny_arguments = tree_map(_to_tiny, cpu_arguments)
    expected = info(cpu_arguments[0], *cpu_arguments[1], **cpu_arguments[2])
    result = info(tiny_arguments[0], *tiny_arguments[1], **tiny_arguments[2])
    expected_tensors, result_tensors = _tensors(expected), _tensors(result)
    assert len(result_tensors) == len(expected_tensors)
    for got, want in zip(result_tensors, expected_tensors, strict=True):
        assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape, got.dtype, want.dtype)
        if info.name not in VALUES_UNSPECIFIED:
            torch.testing.assert_close(got.detach().cpu(), want.detach(), atol=1e-4, rtol=1e-3, equal_nan=True)
    cpu_leaves = [leaf for leaf in _tensors(cpu_arguments) if leaf.requires_grad]
    tiny_leaves = [leaf for leaf in _tensors(tiny_arguments) if leaf.requires_grad]
    outputs = [(got, want) for got, want in zip(result_tensors, expected_tensors, strict=True)
               if want.requires_grad and want.is_floating_point()]
    if not cpu_leaves or not outputs or info.name in VALUES_UNSPECIFIED:
        return
    weights = [torch.randn(want.shape, generator=torch.Generator().manual_seed(index))
               for index, (_, want) in enumerate(outputs)]
    cpu_grads = torch.autograd.grad(sum((want * weight).sum() for (_, want), weight in zip(outputs, weights,
                                                                                            strict=True)),
                                    cpu_leaves, allow_unused=True)
    tiny_grads = torch.autograd.grad(sum((got * weight.to("tiny")).sum() for (got, _), weight in zip(outputs, weights,
                                                                                                  strict=True)),
                                     tiny_leaves, allow_unused=True)
    for got, want in zip(tiny_grads, cpu_grads, strict=True):
        if want is not None:
            assert got is not None, "the tiny device gave no gradient where the CPU gives one"
            torch.testing.assert_close(got.cpu(), want, atol=1e-3, rtol=1e-2, equal_nan=True)


@pytest.mark.parametrize("info", SELECTED, ids=_identifier)
def test_opinfo_samples_match_cpu(info: OpInfo, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINY_TORCH_FALLBACK", "0")
    torch.manual_seed(0)
    samples = list(info.sample_inputs("cpu", torch.float32, requires_grad=info.supports_autograd))
    assert samples, f"{info.name} has no float32 samples"
    for sample in samples[:SAMPLES_PER_OPINFO]:
        if (info.name, info.variant_test_name) in UNSUPPORTED:
            with pytest.raises((NotImplementedError, RuntimeError, TypeError)):
                _check_sample(info, sample)
        else:
            _check_sample(info, sample)


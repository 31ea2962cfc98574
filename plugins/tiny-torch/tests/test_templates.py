"""Lazy graph templates of mapped operators (tiny_torch/templates.py): a repeated call with arguments of the same
structure takes its graph from the template with its own tensors in it, and gives PyTorch CPU's values; operators
whose graph depends on the data, or that draw random numbers, are built call by call."""
from __future__ import annotations

import pytest
import tiny_torch  # noqa: F401  (registers the tiny device)
import torch
from tiny_torch import dispatch, templates

aten = torch.ops.aten


def _counting(monkeypatch: pytest.MonkeyPatch, func: torch._ops.OpOverload) -> list[int]:
    """Count the calls of the tinycore function mapped to `func` (the template is built by one of them)."""
    calls = [0]
    original = dispatch.OPERATORS[func]

    def counted(*args: object, **kwargs: object) -> object:
        calls[0] += 1
        return original(*args, **kwargs)
    monkeypatch.setitem(dispatch.OPERATORS, func, counted)
    monkeypatch.setattr(templates, "_TEMPLATES", {})
    return calls


def test_convolution_and_its_backward_replay_their_templates_with_each_calls_values(
        monkeypatch: pytest.MonkeyPatch) -> None:
    forward_calls = _counting(monkeypatch, aten.convolution.default)
    backward_calls = _counting(monkeypatch, aten.convolution_backward.default)
    for step in range(4):
        torch.manual_seed(step)
        x, w, b = torch.randn(2, 3, 6, 6), torch.randn(4, 3, 3, 3), torch.randn(4)
        # the first layer's case too: no gradient for the input (a None among the templated results)
        wants_input = step % 2 == 0
        expected = [value.clone().requires_grad_(wants_input or index > 0) for index, value in enumerate((x, w, b))]
        torch.nn.functional.conv2d(*expected, padding=1).tanh().sum().backward()
        got = [value.to("tiny").requires_grad_(wants_input or index > 0) for index, value in enumerate((x, w, b))]
        output = torch.nn.functional.conv2d(*got, padding=1)
        torch.testing.assert_close(output.cpu(), torch.nn.functional.conv2d(x, w, b, padding=1), atol=1e-5, rtol=1e-5)
        output.tanh().sum().backward()
        for got_value, expected_value in zip(got, expected, strict=True):
            if expected_value.grad is None:
                assert got_value.grad is None
            else:
                torch.testing.assert_close(got_value.grad.cpu(), expected_value.grad, atol=1e-4, rtol=1e-4)
    assert forward_calls[0] == 1  # built once on placeholders, then substituted
    assert backward_calls[0] == 2  # one template per output mask


def test_another_size_builds_another_template(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _counting(monkeypatch, aten.mm.default)
    for rows in (2, 3, 2, 3):
        a, b = torch.randn(rows, 4), torch.randn(4, 5)
        torch.testing.assert_close((a.to("tiny") @ b.to("tiny")).cpu(), a @ b, atol=1e-5, rtol=1e-5)
    assert calls[0] == 2


def test_data_dependent_index_is_built_call_by_call(monkeypatch: pytest.MonkeyPatch) -> None:
    # a boolean mask's selection has as many rows as the mask has true values: built on placeholders it would read
    # their garbage, so it is not templated; each call gives PyTorch's rows
    monkeypatch.setattr(templates, "_TEMPLATES", {})
    values = torch.randn(6, 3)
    for mask in ([True, False, True, True, False, False], [False, True, False, False, False, True]):
        selector = torch.tensor(mask)
        torch.testing.assert_close(values.to("tiny")[selector.to("tiny")].cpu(), values[selector])
        target, expected = torch.zeros(6, 3), torch.zeros(6, 3)
        expected[selector] = 1.0
        tiny_target = target.to("tiny")
        tiny_target[selector.to("tiny")] = 1.0
        torch.testing.assert_close(tiny_target.cpu(), expected)


def test_random_operators_are_not_templated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(templates, "_TEMPLATES", {})
    ones = torch.ones(1000, device="tiny")
    first = torch.nn.functional.dropout(ones, 0.5, training=True).cpu()
    second = torch.nn.functional.dropout(ones, 0.5, training=True).cpu()
    assert not torch.equal(first, second)
    assert set(first.unique().tolist()) <= {0.0, 2.0} and 300 < int((first == 0).sum()) < 700


def test_batch_norm_templates_match_pytorch_in_training_and_evaluation(monkeypatch: pytest.MonkeyPatch) -> None:
    # batch norm's forward and backward helpers are templated under their own names: over several steps the
    # outputs, gradients and running statistics stay PyTorch CPU's, in training and in evaluation
    monkeypatch.setattr(templates, "_TEMPLATES", {})
    torch.manual_seed(0)
    reference = torch.nn.BatchNorm2d(3)
    layer = torch.nn.BatchNorm2d(3).to("tiny")
    for step in range(5):
        training = step < 3
        reference.train(training)
        layer.train(training)
        x = torch.randn(4, 3, 5, 5)
        expected_input, got_input = x.clone().requires_grad_(), x.to("tiny").requires_grad_()
        expected, got = reference(expected_input), layer(got_input)
        torch.testing.assert_close(got.cpu(), expected, atol=1e-5, rtol=1e-5)
        (expected * expected).sum().backward()
        (got * got).sum().backward()
        torch.testing.assert_close(got_input.grad.cpu(), expected_input.grad, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(layer.weight.grad.cpu(), reference.weight.grad, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(layer.bias.grad.cpu(), reference.bias.grad, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(layer.running_mean.cpu(), reference.running_mean, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(layer.running_var.cpu(), reference.running_var, atol=1e-5, rtol=1e-5)
    assert {key[0] for key in templates._TEMPLATES} >= {"batch_norm", "batch_norm_backward"}


def test_bool_int_and_float_scalars_are_told_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    # True, 1 and 1.0 hash alike; the meta kernels' cache and the templates key them by type, since PyTorch promotes
    # a bool tensor plus True to bool and plus 1 to int64 (the meta cache used to hand the first call's dtype to the
    # second)
    monkeypatch.setattr(dispatch, "_META_CACHE", {})
    monkeypatch.setattr(templates, "_TEMPLATES", {})
    flags = torch.tensor([True, False, True])
    for scalar in (True, 1, 1.0, True, 1):
        expected = torch.add(flags, scalar)
        got = torch.add(flags.to("tiny"), scalar)
        assert got.dtype == expected.dtype, (scalar, got.dtype, expected.dtype)
        torch.testing.assert_close(got.cpu(), expected)

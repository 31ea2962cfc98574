"""Calls a new user makes first, against PyTorch on the CPU: tensors made on `tiny`, `.tolist()`, `view(dtype)`,
nn.LSTM and nn.GRU, select's errors, tinygrad's backend helpers, and torch.compile's boxed functions."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import tiny_torch
import torch

from tinycore import Tensor

TINY = "tiny"


# ---- torch.tensor(..., device="tiny") reaches aten::_copy_from below the Python key ----------------------------
@pytest.mark.parametrize("data, dtype", [([1, 2], None), ([[1.5, -2.0], [3.0, 4.25]], torch.float16), (3.0, None),
                                         ([True, False, True], None), ([[1, 2, 3]], torch.int32)])
def test_tensor_made_on_tiny_matches_cpu(data: object, dtype: torch.dtype | None) -> None:
    result = torch.tensor(data, device=TINY, dtype=dtype)
    expected = torch.tensor(data, dtype=dtype)
    assert result.device.type == TINY and result.dtype == expected.dtype and result.shape == expected.shape
    assert result.stride() == expected.stride()
    torch.testing.assert_close(result.cpu(), expected)


def test_as_tensor_and_numpy_array_on_tiny() -> None:
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    torch.testing.assert_close(torch.as_tensor(array, device=TINY).cpu(), torch.from_numpy(array))
    torch.testing.assert_close(torch.tensor(array, device=TINY).t().cpu(), torch.from_numpy(array).t())


# ---- .tolist() -----------------------------------------------------------------------------------------------------
def test_tolist_matches_cpu() -> None:
    assert torch.ones(2, device=TINY).tolist() == [1.0, 1.0]
    assert torch.tensor(7, device=TINY).tolist() == 7
    base = torch.arange(6).reshape(2, 3)
    assert base.to(TINY).t().tolist() == base.t().tolist() == [[0, 3], [1, 4], [2, 5]]
    assert torch.tensor([True, False]).to(TINY).tolist() == [True, False]
    weights = torch.ones(3, device=TINY, requires_grad=True)
    assert (weights * 2).tolist() == [2.0, 2.0, 2.0]


# ---- view(dtype): the same bytes, aliased ----------------------------------------------------------------------------
VALUES = torch.tensor([1.5, -2.0, 3.25, 0.1, -0.0, 1e-3, 7.0, -1e4])


@pytest.mark.parametrize("dtype", [torch.int32, torch.uint8, torch.int16, torch.float16, torch.bfloat16, torch.int64,
                                   torch.float64, torch.float32])
def test_view_dtype_reinterprets_bits_like_cpu(dtype: torch.dtype) -> None:
    for make in (lambda x: x, lambda x: x[2:], lambda x: x.reshape(2, 4)[:, 2:]):
        expected = make(VALUES).view(dtype)
        result = make(VALUES.to(TINY)).view(dtype)
        assert result.dtype == dtype and result.shape == expected.shape and result.stride() == expected.stride()
        assert result.storage_offset() == expected.storage_offset()
        assert torch.equal(result.cpu().view(torch.uint8), expected.contiguous().view(torch.uint8))


def test_view_dtype_writes_through_both_ways() -> None:
    cpu, tiny = VALUES.clone(), VALUES.to(TINY)
    for tensor in (cpu, tiny):
        bits = tensor.view(torch.int32)
        bits[0] = 1065353216  # the bits of 1.0
        bits[2:4] += 8388608  # one more in the exponent: doubles
        tensor.view(torch.uint8)[7] = 0x40  # the top byte of the second float
        tensor.mul_(2)
    assert torch.equal(tiny.cpu(), cpu)
    assert torch.equal(tiny.view(torch.int16).cpu(), cpu.view(torch.int16))


@pytest.mark.parametrize("make, dtype", [(lambda x: x.reshape(2, 3).t(), torch.float16),
                                         (lambda x: x.reshape(2, 3), torch.float64)])
def test_view_dtype_refusals_match_cpu(make, dtype: torch.dtype) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(RuntimeError) as cpu_error:
        make(torch.arange(6.0)).view(dtype)
    with pytest.raises(RuntimeError) as tiny_error:
        make(torch.arange(6.0, device=TINY)).view(dtype)
    assert str(tiny_error.value) == str(cpu_error.value)


# ---- nn.LSTM and nn.GRU: the fused cells PyTorch calls on an accelerator -------------------------------------------
@pytest.mark.parametrize("kind", [torch.nn.LSTM, torch.nn.GRU])
@pytest.mark.parametrize("bias", [True, False])
def test_recurrent_layers_match_cpu(kind: type, bias: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINY_TORCH_FALLBACK", "0")  # the cells run on tinycore, not on the CPU
    torch.manual_seed(1)
    cpu_layer = kind(3, 2, bias=bias)
    tiny_layer = kind(3, 2, bias=bias)
    tiny_layer.load_state_dict(cpu_layer.state_dict())
    tiny_layer = tiny_layer.to(TINY)
    inputs = torch.randn(2, 2, 3, requires_grad=True)
    tiny_inputs = inputs.detach().to(TINY).requires_grad_(True)
    output, state = cpu_layer(inputs)
    tiny_output, tiny_state = tiny_layer(tiny_inputs)
    torch.testing.assert_close(tiny_output.cpu(), output.detach(), atol=1e-5, rtol=1e-4)
    cpu_states = state if isinstance(state, tuple) else (state,)
    tiny_states = tiny_state if isinstance(tiny_state, tuple) else (tiny_state,)
    for tiny_part, cpu_part in zip(tiny_states, cpu_states, strict=True):
        torch.testing.assert_close(tiny_part.cpu(), cpu_part.detach(), atol=1e-5, rtol=1e-4)
    (output.square().sum() + cpu_states[-1].sum()).backward()
    (tiny_output.square().sum() + tiny_states[-1].sum()).backward()
    torch.testing.assert_close(tiny_inputs.grad.cpu(), inputs.grad, atol=1e-5, rtol=1e-4)
    for (name, parameter), tiny_parameter in zip(cpu_layer.named_parameters(), tiny_layer.parameters(), strict=True):
        torch.testing.assert_close(tiny_parameter.grad.cpu(), parameter.grad, atol=1e-5, rtol=1e-4, msg=name)


def test_fallback_refuses_an_operator_without_a_cpu_kernel_clearly() -> None:
    from tiny_torch.dispatch import run_on_cpu
    gates, state = torch.zeros(1, 8, device=TINY), torch.zeros(1, 2, device=TINY)
    with pytest.raises(NotImplementedError, match="no CPU kernel for it to fall back on"):
        run_on_cpu(torch.ops.aten._thnn_fused_lstm_cell.default, (gates, gates, state), {})


# ---- select.int: the meta kernel's own errors ---------------------------------------------------------------------
def test_select_errors_and_values_match_cpu() -> None:
    cpu = torch.arange(6.0).reshape(2, 3)
    tiny = cpu.to(TINY)
    for dim, index in [(1, -4), (0, 2), (-1, 3)]:
        with pytest.raises(IndexError) as cpu_error:
            cpu.select(dim, index)
        with pytest.raises(IndexError) as tiny_error:
            tiny.select(dim, index)
        assert str(tiny_error.value) == str(cpu_error.value)
    for dim, index in [(1, -1), (0, 1), (-1, 0)]:
        result = torch.ops.aten.select.int(tiny, dim, index)
        assert result.stride() == cpu.select(dim, index).stride()
        assert result.storage_offset() == cpu.select(dim, index).storage_offset()
        torch.testing.assert_close(result.cpu(), cpu.select(dim, index))


# ---- the helpers tinygrad's backend module exposes ------------------------------------------------------------------
def test_unwrap_gives_the_values_and_refuses_other_devices() -> None:
    value = tiny_torch.unwrap(torch.arange(6.0).reshape(2, 3).to(TINY).t())
    assert isinstance(value, Tensor)
    np.testing.assert_equal(value.numpy(), np.arange(6.0).reshape(2, 3).T)
    np.testing.assert_equal(tiny_torch.unwrap(torch.nn.Parameter(torch.ones(4, device=TINY))).numpy(), np.ones(4))
    np.testing.assert_equal(tiny_torch.unwrap(torch.ones(4, device=TINY).detach()).numpy(), np.ones(4))
    with pytest.raises(RuntimeError, match="tiny device"):
        tiny_torch.unwrap(torch.ones(4))


def test_wrap_makes_a_tiny_tensor_of_a_tinycore_tensor() -> None:
    wrapped = tiny_torch.wrap(Tensor(np.arange(6, dtype=np.int32).reshape(3, 2)))
    assert wrapped.device.type == TINY and wrapped.dtype == torch.int32 and wrapped.stride() == (2, 1)
    assert torch.equal(wrapped.cpu(), torch.arange(6, dtype=torch.int32).reshape(3, 2))


@pytest.mark.parametrize("make, expected", [
    (lambda: Tensor.ones(3, 4), 0),
    (lambda: Tensor.ones(10, 10)[2:5, 3:7], 2 * 10 + 3),
    (lambda: Tensor.ones(5, 6, 7)[1:3, 2:4, 3:5], 1 * 42 + 2 * 7 + 3),
    (lambda: Tensor.ones(10, 10).reshape(100), 0),
    (lambda: Tensor.ones(12)[4:].reshape(2, 4)[1:], 4 + 4),
])
def test_calculate_storage_offset_counts_shrinks(make, expected: int) -> None:  # type: ignore[no-untyped-def]
    assert tiny_torch.calculate_storage_offset(make()) == expected


def test_update_metadata_restrides_and_refuses_what_it_cannot() -> None:
    tensor = torch.arange(8.0, device=TINY)
    tiny_torch.update_metadata(tensor, [2, 3], [3, 1], 1)
    assert tensor.shape == (2, 3) and tensor.stride() == (3, 1) and tensor.storage_offset() == 1
    assert torch.equal(tensor.cpu(), torch.arange(8.0)[1:7].reshape(2, 3))
    with pytest.raises(RuntimeError, match="past the storage"):
        tiny_torch.update_metadata(tensor, [9], [1], 0)
    cpu = torch.ones(4)
    with pytest.raises(RuntimeError, match="tiny device"):
        tiny_torch.mod.update_metadata(cpu, [8], [1], 0)
    assert cpu.shape == (4,)


# ---- torch.compile: boxed graph functions, so AOTAutograd does not warn ----------------------------------------------
def test_compiled_forward_and_backward_are_boxed() -> None:
    torch.manual_seed(2)
    layer = torch.nn.Linear(3, 2)
    tiny_layer = torch.nn.Linear(3, 2)
    tiny_layer.load_state_dict(layer.state_dict())
    tiny_layer = tiny_layer.to(TINY)
    compiled = torch.compile(tiny_layer, backend="tiny")
    inputs = torch.randn(4, 3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            compiled(inputs.to(TINY)).square().sum().backward()
    assert not [warning for warning in caught if "boxed" in str(warning.message)]
    for _ in range(2):
        layer(inputs).square().sum().backward()
    torch.testing.assert_close(tiny_layer.weight.grad.cpu(), layer.weight.grad, atol=1e-5, rtol=1e-4)


# ---- batch norm's backward from the statistics it is handed -------------------------------------------------------
@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("eps", [1e-5, 0.3])
def test_batch_norm_backward_uses_the_statistics_it_is_given(train: bool, eps: float) -> None:
    torch.manual_seed(3)
    inputs, grad_out = torch.randn(8, 4, 3, 3), torch.randn(8, 4, 3, 3)

    def run(device: str) -> list[torch.Tensor]:
        weight = torch.linspace(0.5, 2.0, 4).to(device)
        running_mean, running_var = torch.linspace(-1, 1, 4).to(device), torch.linspace(0.5, 2, 4).to(device)
        _, mean, invstd = torch.ops.aten.native_batch_norm(inputs.to(device), weight, None, running_mean.clone(),
                                                           running_var.clone(), True, 0.1, 1e-5)
        # in training the saved statistics are used as given (eps unused); a copy, as a realized input, must not
        # cut the input gradient's path through them
        saved = (mean.clone(), invstd.clone()) if train else (None, None)
        grads = torch.ops.aten.native_batch_norm_backward(grad_out.to(device), inputs.to(device), weight,
                                                          running_mean, running_var, *saved, train, eps,
                                                          [True, True, True])
        return [grad.cpu() for grad in grads]
    for result, expected in zip(run(TINY), run("cpu"), strict=True):
        torch.testing.assert_close(result, expected, atol=1e-4, rtol=1e-3)

"""The fused LSTM and GRU cells PyTorch's nn.LSTM / nn.GRU call on an accelerator (CUDA, PrivateUse1), and their
backward kernels, mapped onto tinycore. PyTorch's CPU has no kernel for them, so a CPU fallback cannot run them.
Gate order and the workspace layout follow PyTorch's CUDA kernels, so autograd's formulas apply unchanged."""
from __future__ import annotations

from tiny_torch.dispatch import aten, register
from tinycore import Tensor


def _gates(input_gates: Tensor, hidden_gates: Tensor, input_bias: Tensor | None,
           hidden_bias: Tensor | None) -> Tensor:
    gates = input_gates + hidden_gates
    if input_bias is not None:
        gates = gates + input_bias
    if hidden_bias is not None:
        gates = gates + hidden_bias
    return gates


@register(aten._thnn_fused_lstm_cell.default)
def fused_lstm_cell(input_gates: Tensor, hidden_gates: Tensor, cx: Tensor, input_bias: Tensor | None = None,
                    hidden_bias: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """One LSTM step from precomputed gate inputs [N, 4H] (input, forget, cell, output): (hy, cy, workspace), the
    workspace holding the four activated gates for the backward."""
    gates = _gates(input_gates, hidden_gates, input_bias, hidden_bias)
    ingate, forgetgate, cellgate, outgate = gates.chunk(4, 1)
    ingate, forgetgate, outgate = ingate.sigmoid(), forgetgate.sigmoid(), outgate.sigmoid()
    cellgate = cellgate.tanh()
    # each step's state is a buffer: a sequence of lazy steps would otherwise grow into one kernel per output that
    # recomputes every earlier step
    cy = (forgetgate * cx + ingate * cellgate).contiguous()
    hy = (outgate * cy.tanh()).contiguous()
    return hy, cy, Tensor.cat(ingate, forgetgate, cellgate, outgate, dim=1).contiguous()


@register(aten._thnn_fused_lstm_cell_backward_impl.default)
def fused_lstm_cell_backward(grad_hy: Tensor | None, grad_cy: Tensor | None, cx: Tensor, cy: Tensor,
                             workspace: Tensor, has_bias: bool) -> tuple[Tensor, Tensor, Tensor | None]:
    """Gradients of the fused LSTM cell: (gate inputs [N, 4H], cx, bias [4H] when has_bias); a missing output
    gradient counts as zero."""
    ingate, forgetgate, cellgate, outgate = workspace.chunk(4, 1)
    tanh_cy = cy.tanh()
    grad_hy = grad_hy if grad_hy is not None else cy.zeros_like()
    grad_cy = grad_cy if grad_cy is not None else cy.zeros_like()
    grad_c = grad_cy + grad_hy * outgate * (1 - tanh_cy * tanh_cy)
    grad_gates = Tensor.cat(grad_c * cellgate * ingate * (1 - ingate),
                            grad_c * cx * forgetgate * (1 - forgetgate),
                            grad_c * ingate * (1 - cellgate * cellgate),
                            grad_hy * tanh_cy * outgate * (1 - outgate), dim=1)
    return grad_gates, grad_c * forgetgate, grad_gates.sum(0) if has_bias else None


@register(aten._thnn_fused_gru_cell.default)
def fused_gru_cell(input_gates: Tensor, hidden_gates: Tensor, hx: Tensor, input_bias: Tensor | None = None,
                   hidden_bias: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """One GRU step from precomputed gate inputs [N, 3H] (reset, update, new): (hy, workspace), the workspace
    holding the reset, update and new gates, the hidden part of the new gate and hx for the backward."""
    input_reset, input_update, input_new = (input_gates + input_bias if input_bias is not None
                                            else input_gates).chunk(3, 1)
    hidden_reset, hidden_update, hidden_new = (hidden_gates + hidden_bias if hidden_bias is not None
                                               else hidden_gates).chunk(3, 1)
    resetgate = (input_reset + hidden_reset).sigmoid()
    updategate = (input_update + hidden_update).sigmoid()
    newgate = (input_new + resetgate * hidden_new).tanh()
    hy = (newgate + updategate * (hx - newgate)).contiguous()  # a buffer per step, as in fused_lstm_cell
    return hy, Tensor.cat(resetgate, updategate, newgate, hidden_new, hx, dim=1).contiguous()


@register(aten._thnn_fused_gru_cell_backward.default)
def fused_gru_cell_backward(grad_hy: Tensor, workspace: Tensor,
                            has_bias: bool) -> tuple[Tensor, Tensor, Tensor, Tensor | None, Tensor | None]:
    """Gradients of the fused GRU cell: (input gates, hidden gates, hx, input bias, hidden bias)."""
    resetgate, updategate, newgate, hidden_new, hx = workspace.chunk(5, 1)
    grad_update = grad_hy * (hx - newgate) * (1 - updategate) * updategate
    grad_new = grad_hy * (1 - updategate) * (1 - newgate * newgate)
    grad_reset = grad_new * hidden_new * (1 - resetgate) * resetgate
    grad_input_gates = Tensor.cat(grad_reset, grad_update, grad_new, dim=1)
    grad_hidden_gates = Tensor.cat(grad_reset, grad_update, grad_new * resetgate, dim=1)
    if not has_bias:
        return grad_input_gates, grad_hidden_gates, grad_hy * updategate, None, None
    return (grad_input_gates, grad_hidden_gates, grad_hy * updategate, grad_input_gates.sum(0),
            grad_hidden_gates.sum(0))

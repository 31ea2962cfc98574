"""Recurrent ONNX operators: RNN, GRU and LSTM, forward, reverse or bidirectional, with per-sample lengths.

The time loop is unrolled in Python: each step is a few lazy Tensor ops, and the whole sequence runs as one graph.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from tinycore.nn.onnx.common import index_dtype
from tinycore.nn.onnx.registry import onnx_op
from tinycore.tensor import Tensor

Activation = Callable[[Tensor], Tensor]

DEFAULT_ALPHAS = {"LeakyRelu": 0.01, "ThresholdedRelu": 1.0, "HardSigmoid": 0.2, "Elu": 1.0, "Affine": 1.0,
                  "ScaledTanh": 1.0}
DEFAULT_BETAS = {"HardSigmoid": 0.5, "Affine": 0.0, "ScaledTanh": 1.0}


def _activation(name: str, alpha: float | None, beta: float | None) -> Activation:
    """The activation ONNX names `name`, with its alpha and beta (the defaults when not given)."""
    a = alpha if alpha is not None else DEFAULT_ALPHAS.get(name, 0.0)
    b = beta if beta is not None else DEFAULT_BETAS.get(name, 0.0)
    table: dict[str, Activation] = {
        "Sigmoid": lambda x: x.sigmoid(), "Tanh": lambda x: x.tanh(), "Relu": lambda x: x.relu(),
        "Affine": lambda x: a * x + b, "LeakyRelu": lambda x: (x < 0).where(a * x, x),
        "ThresholdedRelu": lambda x: (x > a).where(x, 0), "ScaledTanh": lambda x: a * (b * x).tanh(),
        "HardSigmoid": lambda x: (a * x + b).clip(0, 1), "Elu": lambda x: (x < 0).where(a * (x.exp() - 1), x),
        "Softsign": lambda x: x / (1 + x.abs()), "Softplus": lambda x: (1 + x.exp()).log()}
    key = next((known for known in table if known.lower() == name.lower()), None)
    if key is None:
        raise NotImplementedError(f"RNN activation {name!r} is not supported (known: {sorted(table)})")
    return table[key]


def _activations(names: Sequence[str] | None, defaults: list[str], directions: int, alphas: Sequence[float] | None,
                 betas: Sequence[float] | None) -> list[list[Activation]]:
    """Per direction, the activation functions in gate order; alphas and betas are consumed in order of use."""
    chosen = list(names) if names else defaults * directions
    alpha_list, beta_list = list(alphas or []), list(betas or [])
    functions: list[Activation] = []
    for name in chosen:
        takes_alpha = name in DEFAULT_ALPHAS
        takes_beta = name in DEFAULT_BETAS
        alpha = alpha_list.pop(0) if takes_alpha and alpha_list else None
        beta = beta_list.pop(0) if takes_beta and beta_list else None
        functions.append(_activation(name, alpha, beta))
    count = len(defaults)
    return [functions[index * count:(index + 1) * count] for index in range(directions)]


def _reverse_within(x: Tensor, lengths: Tensor | None) -> Tensor:
    """x (time, batch, ...) reversed in time, within each sample's length when lengths are given."""
    if lengths is None:
        return x.flip(0)
    steps = x.shape[0]
    time = Tensor.arange(steps, device=x.device, dtype=index_dtype(x.device)).reshape(steps, 1)
    lengths = lengths.cast(index_dtype(x.device)).reshape(1, -1)
    source = (time < lengths).where(lengths - 1 - time, time)
    index = source.reshape(steps, -1, *[1] * (x.ndim - 2)).expand(x.shape)
    return x.gather(0, index)


StepFunction = Callable[[Tensor, list[Tensor]], list[Tensor]]


def _run_direction(x: Tensor, states: list[Tensor], step: StepFunction, lengths: Tensor | None, reverse: bool
                   ) -> tuple[Tensor, list[Tensor]]:
    """Run `step` over time (x: time, batch, input); all hidden outputs (time, batch, hidden) and final states."""
    sequence = _reverse_within(x, lengths) if reverse else x
    outputs = []
    for time in range(sequence.shape[0]):
        new_states = step(sequence[time], states)
        if lengths is not None:
            active = (lengths.cast(index_dtype(lengths.device)) > time).reshape(-1, 1)
            new_states = [active.where(new, old) for new, old in zip(new_states, states, strict=False)]
            outputs.append(active.where(new_states[0], 0))
        else:
            outputs.append(new_states[0])
        states = new_states
    stacked = Tensor.stack(*outputs, dim=0) if outputs else Tensor.zeros(0, *states[0].shape, device=x.device)
    return (_reverse_within(stacked, lengths) if reverse else stacked), states


def _recurrent(x: Tensor, weight: Tensor, recurrence: Tensor, bias: Tensor | None, lengths: Tensor | None,
               initial: list[Tensor | None], hidden_size: int, direction: str, layout: int,
               make_step: Callable[[int], StepFunction]) -> tuple[Tensor, list[Tensor]]:
    """Shared driver: layout, directions, initial states; Y (time, directions, batch, hidden) and final states."""
    if layout:
        x = x.transpose(0, 1)
    batch = x.shape[1]
    directions = 2 if direction == "bidirectional" else 1
    results, finals = [], []
    for index in range(directions):
        reverse = direction == "reverse" or index == 1
        states = [value[index] if value is not None else
                  Tensor.zeros(batch, hidden_size, dtype=x.dtype, device=x.device) for value in initial]
        outputs, last = _run_direction(x, states, make_step(index), lengths, reverse)
        results.append(outputs)
        finals.append(last)
    y = Tensor.stack(*results, dim=1)
    final_states = [Tensor.stack(*[state[position] for state in finals], dim=0) for position in range(len(initial))]
    if layout:
        y = y.permute(2, 0, 1, 3)
        final_states = [state.transpose(0, 1) for state in final_states]
    return y, final_states


def _clipped(clip: float | None) -> Callable[[Tensor], Tensor]:
    return (lambda value: value.clip(-clip, clip)) if clip is not None else (lambda value: value)


@onnx_op("RNN", 7)
def rnn(x: Tensor, w: Tensor, r: Tensor, b: Tensor | None = None, sequence_lens: Tensor | None = None,
        initial_h: Tensor | None = None, activation_alpha: list[float] | None = None,
        activation_beta: list[float] | None = None, activations: list[str] | None = None, clip: float | None = None,
        direction: str = "forward", hidden_size: int = 0, layout: int = 0) -> tuple[Tensor, Tensor]:
    """The simple recurrent network: H = f(X W^T + H R^T + Wb + Rb); all hidden states and the last."""
    directions = 2 if direction == "bidirectional" else 1
    functions = _activations(activations, ["Tanh"], directions, activation_alpha, activation_beta)
    limit = _clipped(clip)

    def make_step(index: int) -> StepFunction:
        bias = b[index][:hidden_size] + b[index][hidden_size:] if b is not None else 0

        def step(x_t: Tensor, states: list[Tensor]) -> list[Tensor]:
            return [functions[index][0](limit(x_t.matmul(w[index].T) + states[0].matmul(r[index].T) + bias))]
        return step

    y, (h,) = _recurrent(x, w, r, b, sequence_lens, [initial_h], hidden_size, direction, layout, make_step)
    return y, h


@onnx_op("GRU", 7)
def gru(x: Tensor, w: Tensor, r: Tensor, b: Tensor | None = None, sequence_lens: Tensor | None = None,
        initial_h: Tensor | None = None, activation_alpha: list[float] | None = None,
        activation_beta: list[float] | None = None, activations: list[str] | None = None, clip: float | None = None,
        direction: str = "forward", hidden_size: int = 0, layout: int = 0, linear_before_reset: int = 0
        ) -> tuple[Tensor, Tensor]:
    """The gated recurrent unit (gates z, r, h); all hidden states and the last."""
    directions = 2 if direction == "bidirectional" else 1
    functions = _activations(activations, ["Sigmoid", "Tanh"], directions, activation_alpha, activation_beta)
    limit = _clipped(clip)
    size = hidden_size

    def make_step(index: int) -> StepFunction:
        gate, candidate = functions[index]
        weights, recurrences = w[index], r[index]
        w_bias = b[index][:3 * size] if b is not None else Tensor.zeros(3 * size, dtype=x.dtype, device=x.device)
        r_bias = b[index][3 * size:] if b is not None else Tensor.zeros(3 * size, dtype=x.dtype, device=x.device)

        def step(x_t: Tensor, states: list[Tensor]) -> list[Tensor]:
            h = states[0]
            x_part = x_t.matmul(weights.T) + w_bias
            zr = x_part[:, :2 * size] + h.matmul(recurrences[:2 * size].T) + r_bias[:2 * size]
            z, reset = gate(limit(zr[:, :size])), gate(limit(zr[:, size:]))
            if linear_before_reset:
                hidden = reset * (h.matmul(recurrences[2 * size:].T) + r_bias[2 * size:])
            else:
                hidden = (reset * h).matmul(recurrences[2 * size:].T) + r_bias[2 * size:]
            proposal = candidate(limit(x_part[:, 2 * size:] + hidden))
            return [(1 - z) * proposal + z * h]
        return step

    y, (h,) = _recurrent(x, w, r, b, sequence_lens, [initial_h], hidden_size, direction, layout, make_step)
    return y, h


@onnx_op("LSTM", 7)
def lstm(x: Tensor, w: Tensor, r: Tensor, b: Tensor | None = None, sequence_lens: Tensor | None = None,
         initial_h: Tensor | None = None, initial_c: Tensor | None = None, p: Tensor | None = None,
         activation_alpha: list[float] | None = None, activation_beta: list[float] | None = None,
         activations: list[str] | None = None, clip: float | None = None, direction: str = "forward",
         hidden_size: int = 0, input_forget: int = 0, layout: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    """Long short-term memory (gates i, o, f, c; optional peepholes); all hidden states, the last h and c."""
    directions = 2 if direction == "bidirectional" else 1
    functions = _activations(activations, ["Sigmoid", "Tanh", "Tanh"], directions, activation_alpha,
                             activation_beta)
    limit = _clipped(clip)
    size = hidden_size

    def make_step(index: int) -> StepFunction:
        gate, candidate, output = functions[index]
        bias = b[index][:4 * size] + b[index][4 * size:] if b is not None else 0
        peephole = p[index] if p is not None else None

        def step(x_t: Tensor, states: list[Tensor]) -> list[Tensor]:
            h, c = states
            gates = x_t.matmul(w[index].T) + h.matmul(r[index].T) + bias
            i_pre, o_pre, f_pre, c_pre = (gates[:, k * size:(k + 1) * size] for k in range(4))
            if peephole is not None:
                i_pre = i_pre + peephole[:size] * c
                f_pre = f_pre + peephole[2 * size:] * c
            i_gate = gate(limit(i_pre))
            f_gate = 1 - i_gate if input_forget else gate(limit(f_pre))
            cell = f_gate * c + i_gate * candidate(limit(c_pre))
            if peephole is not None:
                o_pre = o_pre + peephole[size:2 * size] * cell
            hidden = gate(limit(o_pre)) * output(cell)
            return [hidden, cell]
        return step

    y, (h, c) = _recurrent(x, w, r, b, sequence_lens, [initial_h, initial_c], hidden_size, direction, layout,
                           make_step)
    return y, h, c

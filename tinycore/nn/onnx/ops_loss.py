"""Loss ONNX operators: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss, with class weights, an ignored
index and none / sum / mean reductions."""
from __future__ import annotations

from tinycore.nn.onnx.common import index_dtype
from tinycore.nn.onnx.registry import onnx_op
from tinycore.tensor import Tensor


def _negative_log_likelihood(log_probabilities: Tensor, target: Tensor, weight: Tensor | None, ignore_index: int | None,
                             reduction: str) -> Tensor:
    """-log_probabilities[n, target[n, ...], ...] weighted per class; the mean divides by the weights summed."""
    target = target.cast(index_dtype(target.device))
    ignored = (target == ignore_index) if ignore_index is not None else None
    safe_target = ignored.where(0, target) if ignored is not None else target
    picked = -log_probabilities.gather(1, safe_target.unsqueeze(1)).squeeze(1)
    weights = weight[safe_target] if weight is not None else Tensor.ones(*target.shape, dtype=picked.dtype,
                                                                          device=picked.device)
    if ignored is not None:
        weights = ignored.where(0, weights)
    loss = picked * weights
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / weights.sum()


@onnx_op("NegativeLogLikelihoodLoss", 12)
def negative_log_likelihood_loss(x: Tensor, target: Tensor, weight: Tensor | None = None,
                                 ignore_index: int | None = None, reduction: str = "mean") -> Tensor:
    """The negative log-likelihood of the target classes given log-probabilities x (N, C, ...)."""
    return _negative_log_likelihood(x, target, weight, ignore_index, reduction).cast(x.dtype)


@onnx_op("SoftmaxCrossEntropyLoss", 12)
def softmax_cross_entropy_loss(scores: Tensor, labels: Tensor, weights: Tensor | None = None,
                               ignore_index: int | None = None, reduction: str = "mean") -> tuple[Tensor, Tensor]:
    """Cross entropy of softmax(scores) over axis 1 against `labels`; also the log-probabilities."""
    log_probabilities = scores.log_softmax(1)
    loss = _negative_log_likelihood(log_probabilities, labels, weights, ignore_index, reduction)
    return loss.cast(scores.dtype), log_probabilities

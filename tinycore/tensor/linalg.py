"""Linear algebra on Tensors: Householder QR and one-sided Jacobi SVD over the last two dimensions."""
from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from tinycore.dtype import dtypes
from tinycore.tensor.nn import NNMixin

if TYPE_CHECKING:
    from typing import Self


TensorT = TypeVar("TensorT", bound="LinalgMixin")
"""A tensor of the chain class whose methods these helpers call (the Tensor, at run time)."""

_MAX_JACOBI_SWEEPS = 30


def _round_robin_orders(count: int) -> list[list[int]]:
    """Column orders of one Jacobi sweep: in each, positions (0,1), (2,3), ... pair every column with another,
    and across the count-1 orders every pair of columns meets once (circle method; `count` is even)."""
    others = list(range(1, count))
    orders = []
    for _ in range(count - 1):
        ring = [0] + others
        pairs = zip(ring[:count // 2], reversed(ring[count // 2:]), strict=True)
        orders.append([value for pair in pairs for value in pair])
        others = others[-1:] + others[:-1]
    return orders


class LinalgMixin(NNMixin):
    """QR and SVD decompositions of Tensor (batched over leading dimensions)."""

    def _check_matrix(self, name: str) -> None:
        """Raise unless this is a floating point tensor with at least two dimensions."""
        if self.ndim < 2:
            raise ValueError(f"{name} needs a tensor with at least 2 dimensions, got shape {self.shape}")
        if not dtypes.is_float(self.dtype):
            raise TypeError(f"{name} needs a floating point tensor, got {self.dtype}: cast it with .float() first")

    def qr(self) -> tuple[Self, Self]:
        """Householder QR of the last two dimensions: Q (..., m, m) orthogonal and R (..., m, n) upper triangular
        with A = Q @ R. Columns of Q and rows of R are unique up to sign."""
        self._check_matrix("qr")
        rows, columns = int(self.shape[-2]), int(self.shape[-1])
        batch = tuple(self.shape[:-2])
        tensor_type = type(self)
        upper = self.contiguous()
        orthogonal = tensor_type.eye(rows, dtype=self.dtype, device=self.device).expand(*batch, rows, rows)
        row_index = tensor_type.arange(rows, device=self.device)
        for step in range(min(rows - 1, columns)):
            column = upper[..., step]  # (..., m)
            column = (row_index >= step).where(column, 0.0)
            leading = column[..., step]
            norm = (column * column).sum(-1).sqrt()
            alpha = -(leading >= 0).where(1.0, -1.0) * norm
            reflector = column - (row_index == step).where(alpha.unsqueeze(-1), 0.0)
            length = (reflector * reflector).sum(-1, keepdim=True).sqrt()
            reflector = reflector / (length == 0).where(1.0, length)
            vector = reflector.unsqueeze(-1)  # (..., m, 1)
            upper = (upper - 2 * vector * (vector.transpose(-1, -2) @ upper)).realize()
            orthogonal = (orthogonal - 2 * (orthogonal @ vector) * vector.transpose(-1, -2)).realize()
        below = tensor_type.arange(rows, device=self.device).unsqueeze(-1) > \
            tensor_type.arange(columns, device=self.device)
        return orthogonal, below.where(0.0, upper).cast(self.dtype)

    def svd(self, full_matrices: bool = True) -> tuple[Self, Self, Self]:
        """Singular value decomposition of the last two dimensions by one-sided Jacobi rotations.

        Returns (U, S, V) with A = U[..., :k] * S @ V[..., :k, :] for k = min(m, n): S descending, V holds the
        right singular vectors as rows (numpy's Vh). With full_matrices U is (..., m, m) and V (..., n, n), else
        U is (..., m, k) and V (..., k, n). Singular vectors are unique up to sign.
        """
        self._check_matrix("svd")
        rows, columns = int(self.shape[-2]), int(self.shape[-1])
        if rows < columns:
            left, values, right = self.transpose(-1, -2).svd(full_matrices)
            return right.transpose(-1, -2), values, left.transpose(-1, -2)
        left, values, right = self._jacobi_svd()
        if full_matrices and rows > columns:
            left = left._complete_basis()
        return left, values, right

    def _jacobi_svd(self) -> tuple[Self, Self, Self]:
        """Thin SVD of a tall (m >= n) matrix: U (..., m, n), S (..., n) descending, Vh (..., n, n)."""
        tensor_type = type(self)
        columns = int(self.shape[-1])
        batch = tuple(self.shape[:-2])
        padded = columns + columns % 2
        work = self.pad(((0, 0),) * (len(batch) + 1) + ((0, padded - columns),)).contiguous().realize()
        vectors = tensor_type.eye(padded, dtype=self.dtype, device=self.device).expand(*batch, padded, padded)
        vectors = vectors.contiguous().realize()
        orders = _round_robin_orders(padded) if padded > 1 else []
        permutations = [tensor_type([[1.0 if order[dest] == src else 0.0 for dest in range(padded)]
                                     for src in range(padded)], dtype=self.dtype, device=self.device)
                        for order in orders]
        tolerance = 1e-14 if self.dtype == dtypes.float64 else 1e-6
        for _ in range(_MAX_JACOBI_SWEEPS):
            largest_coupling = 0.0
            for permutation in permutations:
                work, vectors, coupling = _jacobi_round(work, vectors, permutation)
                largest_coupling = max(largest_coupling, float(coupling.item()))
            if largest_coupling < tolerance:
                break
        norms = (work * work).sum(-2).sqrt()  # (..., padded)
        order = norms.argsort(-1, descending=True)[..., :columns]
        selector = order.one_hot(padded).cast(self.dtype).transpose(-1, -2)  # (..., padded, columns)
        values = (norms.unsqueeze(-2) @ selector).squeeze(-2)
        left = (work @ selector) / (values == 0).where(1.0, values).unsqueeze(-2)
        right = (vectors @ selector)[..., :columns, :].transpose(-1, -2)
        return left.cast(self.dtype), values.cast(self.dtype), right.cast(self.dtype)

    def _complete_basis(self) -> Self:
        """Extend orthonormal columns (..., m, k) to an orthogonal (..., m, m) matrix keeping the first k columns
        (columns that are all zero are replaced by new basis vectors)."""
        rows, kept = int(self.shape[-2]), int(self.shape[-1])
        identity = type(self).eye(rows, dtype=self.dtype, device=self.device).expand(*self.shape[:-2], rows, rows)
        basis, upper = self.cat(identity, dim=-1).qr()
        diagonal = upper[..., :kept, :kept].diagonal(dim1=-2, dim2=-1)
        signs = (diagonal < 0).where(-1.0, 1.0)
        scale = signs.pad(((0, 0),) * (signs.ndim - 1) + ((0, rows - kept),), value=1.0)
        return basis * scale.unsqueeze(-2)


def _jacobi_round(work: TensorT, vectors: TensorT, permutation: TensorT) -> tuple[TensorT, TensorT, TensorT]:
    """Rotate each column pair of `work` (after `permutation`) so the pair becomes orthogonal, applying the same
    rotations to `vectors`; returns both (back in the original column order) and the largest relative coupling."""
    paired = work @ permutation
    paired_vectors = vectors @ permutation
    half = int(paired.shape[-1]) // 2
    shape = (*paired.shape[:-1], half, 2)
    first, second = paired.reshape(shape)[..., 0], paired.reshape(shape)[..., 1]
    alpha, beta = (first * first).sum(-2), (second * second).sum(-2)
    gamma = (first * second).sum(-2)
    negligible = gamma.abs() <= 1e-30
    safe_gamma = negligible.where(1.0, gamma)
    zeta = (beta - alpha) / (2 * safe_gamma)
    tangent = (zeta >= 0).where(1.0, -1.0) / (zeta.abs() + (1 + zeta * zeta).sqrt())
    tangent = negligible.where(0.0, tangent)
    cosine = 1 / (1 + tangent * tangent).sqrt()
    sine = cosine * tangent
    scale = (alpha * beta).sqrt()
    coupling = (negligible | (scale == 0)).where(0.0, gamma.abs() / (scale == 0).where(1.0, scale)).max()

    def rotate(matrix: TensorT) -> TensorT:
        pair_shape = (*matrix.shape[:-1], half, 2)
        left, right = matrix.reshape(pair_shape)[..., 0], matrix.reshape(pair_shape)[..., 1]
        cos_b, sin_b = cosine.unsqueeze(-2), sine.unsqueeze(-2)
        rotated = (cos_b * left - sin_b * right).stack(sin_b * left + cos_b * right, dim=-1)
        return rotated.reshape(matrix.shape) @ permutation.transpose(-1, -2)

    return rotate(paired).realize(), rotate(paired_vectors).realize(), coupling.realize()

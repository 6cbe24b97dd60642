"""``ImageDataGenerator.fit``'s statistics: per-channel std and the ZCA matrix, in float64 chunks."""

from __future__ import annotations

import math

import numpy as np

_FIT_CHUNK = 1024  # images per float64 step in fit (bounds its extra memory)


def _channel_std(data: np.ndarray) -> np.ndarray:
    """Per-channel std over samples, rows and columns, in float64 one chunk at a time.

    ``np.std(data, dtype=np.float64)`` would hold a float64 copy of the whole
    data set (1.2 GB for CIFAR-10's training images).
    """
    count = data.size // data.shape[-1]
    sums, squares = np.zeros(data.shape[-1]), np.zeros(data.shape[-1])
    for start in range(0, len(data), _FIT_CHUNK):
        chunk = data[start : start + _FIT_CHUNK].astype(np.float64).reshape(-1, data.shape[-1])
        sums += chunk.sum(axis=0)
        squares += np.einsum("ij,ij->j", chunk, chunk)
    mean = sums / count
    return np.sqrt(np.maximum(squares / count - mean**2, 0.0))


def _zca_matrix(data: np.ndarray, epsilon: float) -> np.ndarray:
    """tf_keras's ZCA matrix ``u diag(sqrt(n) / (s + eps)) u.T``, s the singular values of the data.

    Through the eigendecomposition of the Gram matrix (s**2 are its
    eigenvalues), summed in float64 over chunks: the same matrix as tf_keras's
    SVD of the (features x samples) data, at a fraction of the time and memory.
    Only the min(n, features) largest components are kept, as a thin SVD does.
    """
    n = len(data)
    flat = data.reshape(n, -1)
    gram = np.zeros((flat.shape[1],) * 2)
    for start in range(0, n, _FIT_CHUNK):
        chunk = flat[start : start + _FIT_CHUNK].astype(np.float64)
        gram += chunk.T @ chunk
    eigenvalues, vectors = np.linalg.eigh(gram)
    keep = min(n, flat.shape[1])
    singular = np.sqrt(np.clip(eigenvalues[::-1][:keep], 0, None))
    vectors = vectors[:, ::-1][:, :keep]
    return ((vectors * (math.sqrt(n) / (singular + epsilon))) @ vectors.T).astype(np.float32)

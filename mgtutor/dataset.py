"""A data set in memory: `Dataset` (Keras' layout, with where it came from), its class-balanced
`subset`, its `prepared` arrays, and the labelled synthetic stand-in the notebooks use offline."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np

from mgtutor.support.checks import check_whole, is_whole


@dataclass(frozen=True)
class Dataset:
    """Images (N, H, W, C) uint8 and labels (N, 1) uint8, with where they came from.

    Unpacks like ``keras.datasets.cifar10.load_data()``:
    ``(x_train, y_train), (x_test, y_test) = load_cifar10()``.
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    class_names: tuple[str, ...]
    source: str
    synthetic: bool = False
    # The synthetic stand-in's seed: `subset` regenerates it at any size a notebook asks for.
    synthetic_seed: int | None = None

    def __iter__(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        yield self.x_train, self.y_train
        yield self.x_test, self.y_test

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])

    def subset(self, train_samples: int | None, test_samples: int | None = None, seed: int = 0):
        """A class-balanced, reproducible subset (None keeps a split whole).

        The synthetic stand-in has no fixed size: asked for more examples than it holds, it is
        generated again at the size asked, so every notebook's defaults run offline too.
        """
        for name, value in (("train_samples", train_samples), ("test_samples", test_samples)):
            if value is not None:
                check_whole(name, value, 1, "Pass None to keep the whole split.")
        if self.synthetic and self.synthetic_seed is not None:
            wanted_train = max(len(self.y_train), train_samples or 0)
            wanted_test = max(len(self.y_test), test_samples or 0)
            if (wanted_train, wanted_test) != (len(self.y_train), len(self.y_test)):
                grown = synthetic_dataset(
                    wanted_train, wanted_test, image_shape=self.input_shape,
                    num_classes=self.num_classes, seed=self.synthetic_seed,
                )  # fmt: skip
                return grown.subset(train_samples, test_samples, seed)
        x_train, y_train = take_subset(self.x_train, self.y_train, train_samples, seed, "train_samples")
        x_test, y_test = take_subset(self.x_test, self.y_test, test_samples, seed, "test_samples")
        return replace(self, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)

    def prepared(
        self, *, standardize: bool = False
    ) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
        """``((x_train, Y_train), (x_test, Y_test))``: float32 pixels in [0, 1], one-hot labels.

        With `standardize`, pixels are instead centred and scaled per channel by the
        training split's mean and standard deviation (Keras 2's ``featurewise_center``
        and ``featurewise_std_normalization``), which the classroom recipe trains faster on.
        """
        if not isinstance(standardize, bool):
            raise TypeError(f"standardize must be True or False, got {standardize!r}.")
        from mgtutor.prepare import one_hot, scale_images  # with TensorFlow: only when asked

        x_train, x_test = scale_images(self.x_train), scale_images(self.x_test)
        if standardize:
            mean = x_train.mean(axis=(0, 1, 2), dtype=np.float64)
            std = x_train.std(axis=(0, 1, 2), dtype=np.float64)
            std = np.where(std > 0, std, 1.0)  # a constant channel stays put instead of dividing by 0
            x_train = ((x_train - mean) / std).astype(np.float32)
            x_test = ((x_test - mean) / std).astype(np.float32)
        return (
            (x_train, one_hot(self.y_train, self.num_classes)),
            (x_test, one_hot(self.y_test, self.num_classes)),
        )

    def summary(self) -> str:
        label = "SYNTHETIC stand-in" if self.synthetic else "real"
        return (
            f"{self.name} ({label}) from {self.source}: train {self.x_train.shape}, "
            f"test {self.x_test.shape}, {self.num_classes} classes"
        )


def take_subset(
    x: np.ndarray, y: np.ndarray, n: int | None, seed: int = 0, parameter: str = "n"
) -> tuple[np.ndarray, np.ndarray]:
    """`n` examples, as close to equally many per class as the data allows, in random order."""
    if n is None:
        return x, y
    if not is_whole(n) or n < 1:
        raise ValueError(f"{parameter} must be a whole number >= 1 or None, got {n!r}.")
    if n > len(y):
        raise ValueError(f"{parameter}={n} but only {len(y)} examples exist; use at most {len(y)}.")
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(y))
    labels = np.asarray(y).reshape(-1)[order]
    rank_in_class = np.zeros(len(order), dtype=np.int64)
    for label in np.unique(labels):
        members = labels == label
        rank_in_class[members] = np.arange(members.sum())
    # Ranks interleave the classes: the first n picks take from every class in turn.
    chosen = order[np.argsort(rank_in_class, kind="stable")[:n]]
    chosen = rng.permutation(chosen)
    return x[chosen], y[chosen]


def class_counts(y: np.ndarray, num_classes: int) -> np.ndarray:
    """How many examples each class has."""
    return np.bincount(np.asarray(y).reshape(-1).astype(np.int64), minlength=num_classes)


# --------------------------------------------------------------------------- synthetic


def synthetic_dataset(
    train_samples: int = 5000,
    test_samples: int = 1000,
    *,
    image_shape: tuple[int, int, int] = (32, 32, 3),
    num_classes: int = 10,
    seed: int = 0,
) -> Dataset:
    """A learnable stand-in: class k is a striped pattern of its own angle and frequency.

    Random phase, contrast, colour and noise make each image different, so a CNN
    must learn orientation and frequency, not memorise pixels. Not CIFAR-10:
    accuracies on it say nothing about accuracies on real images.
    """
    for label, value in (("train_samples", train_samples), ("test_samples", test_samples)):
        check_whole(label, value, 1)
    check_whole("num_classes", num_classes, 2)
    height, width, channels = image_shape
    rng = np.random.default_rng(seed)
    total = train_samples + test_samples
    # Each split balanced on its own, so a subset of all of it is balanced too.
    splits = (train_samples, test_samples)
    labels = np.concatenate([rng.permutation(np.arange(n) % num_classes) for n in splits])
    half = (num_classes + 1) // 2
    angle = (labels % half) * np.pi / half + rng.normal(0, 0.05, total)
    cycles = np.where(labels < half, 2.0, 4.5) + rng.normal(0, 0.1, total)
    phase = rng.uniform(0, 2 * np.pi, total)
    rows, cols = np.mgrid[0:height, 0:width].astype(np.float32)
    along = (np.cos(angle)[:, None, None] * cols + np.sin(angle)[:, None, None] * rows) / width
    pattern = np.sin(2 * np.pi * cycles[:, None, None] * along + phase[:, None, None])
    tint = rng.uniform(0.4, 1.0, (total, 1, 1, channels))
    contrast = rng.uniform(0.5, 1.0, (total, 1, 1, 1))
    image = 0.5 + 0.4 * contrast * pattern[..., None] * tint
    image += rng.normal(0, 0.08, image.shape)
    pixels = np.clip(image * 255, 0, 255).astype(np.uint8)
    y = labels.astype(np.uint8).reshape(-1, 1)
    return Dataset(
        "synthetic",
        pixels[:train_samples], y[:train_samples], pixels[train_samples:], y[train_samples:],
        class_names=tuple(f"pattern-{k}" for k in range(num_classes)),
        source=f"synthetic_dataset(seed={seed})",
        synthetic=True,
        synthetic_seed=seed,
    )  # fmt: skip

"""mgtutor.training.losses: the Trainer's loss as per-example values, its metrics resolved as compile does."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from mgtutor.training.losses import make_metric, per_example_loss

Y_TRUE = np.eye(3, dtype="float32")[[0, 2, 1, 1]]
Y_PRED = np.array([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8], [0.3, 0.4, 0.3], [0.5, 0.25, 0.25]], "float32")


@pytest.mark.parametrize(
    "loss",
    ["categorical_crossentropy", keras.losses.CategoricalCrossentropy(),
     keras.losses.categorical_crossentropy],
    ids=["name", "Loss", "function"],
)  # fmt: skip
def test_every_form_of_a_loss_gives_one_value_per_example(loss):
    values = np.asarray(per_example_loss(loss)(Y_TRUE, Y_PRED))
    expected = -np.log(Y_PRED[np.arange(4), Y_TRUE.argmax(1)])
    assert values.shape == (4,)  # not reduced: the trainer divides by the global batch itself
    np.testing.assert_allclose(values, expected, rtol=1e-6)


def test_a_function_with_one_output_gets_labels_of_shape_b_as_keras_does():
    loss = per_example_loss(lambda y_true, y_pred: keras.ops.mean(keras.ops.square(y_true - y_pred), axis=-1))
    values = np.asarray(loss(np.array([1.0, 0.0], "float32"), np.array([[0.5], [0.25]], "float32")))
    np.testing.assert_allclose(values, [0.25, 0.0625])


def test_bad_losses_and_metrics_are_named():
    with pytest.raises(ValueError, match="unknown loss 'nope'"):
        per_example_loss("nope")
    with pytest.raises(TypeError, match="loss must be a loss name"):
        per_example_loss(3)
    with pytest.raises(ValueError, match="unknown metric 'nope'"):
        make_metric("nope", Y_TRUE, (None, 3))


def test_accuracy_is_resolved_from_the_label_and_output_shapes():
    assert isinstance(make_metric("accuracy", Y_TRUE, (None, 3)), keras.metrics.CategoricalAccuracy)
    sparse = Y_TRUE.argmax(1)[:, None]
    assert isinstance(make_metric("acc", sparse, (None, 3)), keras.metrics.SparseCategoricalAccuracy)
    assert isinstance(make_metric("accuracy", np.zeros((4, 1)), (None, 1)), keras.metrics.BinaryAccuracy)
    given = keras.metrics.AUC(name="auc")
    rebuilt = make_metric(given, Y_TRUE, (None, 3))
    assert isinstance(rebuilt, keras.metrics.AUC) and rebuilt is not given  # fresh variables
    mae = make_metric("mae", Y_TRUE, (None, 3))
    mae.update_state(Y_TRUE, Y_PRED)
    assert float(mae.result()) == pytest.approx(float(np.abs(Y_TRUE - Y_PRED).mean()), rel=1e-6)

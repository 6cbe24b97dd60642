"""The seed tutorials' own code runs on Keras 3 with only its imports changed.

``seed_000_child.py`` is seed 000's code as written (Keras 1 layer syntax translated
to Keras 3, as the issue allows), with `mgtutor` imports in place of the removed
Keras 2 APIs: ``fit`` on the real CIFAR-10 subset, a generator through
``fit_generator``, and its ImageDataGenerator training cell unchanged. It runs in a
child process because it sets up its devices.
"""

from __future__ import annotations

import math

import pytest

from tests.conftest import ROOT, run_child

SEED_000 = ROOT / "tests" / "unit" / "seed_000_child.py"


@pytest.mark.slow
def test_seed_000_runs_with_only_imports_changed(data_dir):
    result = run_child(SEED_000, timeout=600)
    assert result["n_train"] == 5085  # the shared CIFAR-10 subset; last batch 93 over 4 towers
    assert result["towers"] == [f"/device:CPU:{i}" for i in range(4)]
    history = result["history"]
    assert len(history["loss"]) == 1 and 0 < history["loss"][0] < 10
    assert 0.0 <= history["val_accuracy"][0] <= 1.0
    assert 0 < result["more"]["loss"][0] < 10
    # The training cell, unchanged: ImageDataGenerator.flow through the towers' fit_generator.
    augmented = result["augmented"]
    assert set(augmented) == {"loss", "accuracy", "val_loss", "val_accuracy"}
    for name, values in augmented.items():
        assert len(values) == 1 and math.isfinite(values[0]), name
    assert 0 < augmented["loss"][0] < 10 and 0 <= augmented["val_accuracy"][0] <= 1
    assert result["template_moved"] > 0  # training the wrapper trained the template

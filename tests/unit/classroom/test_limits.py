"""mgtutor.classroom.limits: every lesson takes the common overrides or refuses them up front, naming it."""

from __future__ import annotations

import itertools
import math

import pytest

from mgtutor.classroom.lessons import find_notebooks, notebook_parameters, validate_overrides
from mgtutor.classroom.limit_checks import empties_a_replica
from mgtutor.classroom.limits import ACCURACY_GAP_LIMIT, lesson_plan
from mgtutor.classroom.runner import main as series_main
from tests.conftest import ROOT

NOTEBOOKS = find_notebooks(ROOT / "notebooks")
# What a new user tries first: `make run TRAIN_SAMPLES=512 EPOCHS=1`, and the like, for every lesson at once.
GRID = list(itertools.product([256, 512, 1000], [1, 2], [1, 2, 4]))


def plans(train: int, epochs: int, devices: int) -> dict[str, dict]:
    """Each lesson's plan at these overrides, or the text of its refusal."""
    out = {}
    for nb in NOTEBOOKS:
        defaults = notebook_parameters(nb)
        wanted = {"TRAIN_SAMPLES": train, "EPOCHS": epochs, "N_DEVICES": devices, "N_WORKERS": devices}
        overrides = {k: v for k, v in wanted.items() if k in defaults}
        try:
            out[nb.stem] = lesson_plan(nb.stem, {**defaults, **overrides})
        except ValueError as err:
            out[nb.stem] = str(err)
    return out


def test_every_lesson_accepts_its_defaults_and_the_tests_tiny_values():
    from tests.notebooks.test_notebooks import tiny_parameters

    for nb in NOTEBOOKS:
        lesson_plan(nb.stem, notebook_parameters(nb))
        lesson_plan(nb.stem, {**notebook_parameters(nb), **tiny_parameters(nb)})


def test_the_lessons_that_print_an_accuracy_gap_read_it_against_one_limit():
    for stem in ("03_data_parallel_step", "11_where_time_goes"):
        plan = lesson_plan(stem, notebook_parameters(ROOT / "notebooks" / f"{stem}.ipynb"))
        assert plan == {"accuracy_gap_limit": ACCURACY_GAP_LIMIT}
    assert ACCURACY_GAP_LIMIT == 0.05  # five points, as lesson 03 says


@pytest.mark.parametrize(("train", "epochs", "devices"), GRID)
def test_common_overrides_are_taken_or_refused_naming_the_parameter(train, epochs, devices):
    for stem, plan in plans(train, epochs, devices).items():
        if isinstance(plan, str):  # refused: the message names a parameter, its minimum and why
            assert plan.startswith(f"{stem} cannot run with these parameters")
            assert any(name in plan for name in ("TRAIN_SAMPLES", "N_DEVICES", "N_WORKERS", "EPOCHS")), plan
            assert ">=" in plan or "<=" in plan, plan
    if devices >= 2:  # every refusal at two devices or more is about too few images
        refused = [stem for stem, plan in plans(train, epochs, devices).items() if isinstance(plan, str)]
        assert all(f"{stem} cannot run" in plans(train, epochs, devices)[stem] for stem in refused)
        assert devices * 32 * 3 > train or not refused, refused


def test_one_device_is_refused_by_the_lessons_that_compare_replicas():
    refused = {stem for stem, plan in plans(5000, 3, 1).items() if isinstance(plan, str)}
    assert refused == {"03_data_parallel_step", "04_multi_gpu_wrapping", "05_batchnorm_and_replica_state",
                       "06_augmented_training", "07_save_and_restore", "08_scaling_study",
                       "09_parameter_averaging", "10_multi_worker", "11_where_time_goes", "12_keras_on_jax",
                       "13_sharding", "15_when_it_breaks", "18_pipeline_parallelism"}  # fmt: skip
    assert "N_DEVICES must be a whole number >= 2" in plans(5000, 3, 1)["04_multi_gpu_wrapping"]


def test_the_quick_run_of_the_issue_is_taken_by_every_lesson():
    quick = plans(512, 1, 2)
    assert not [stem for stem, plan in quick.items() if isinstance(plan, str)]
    # 07: 8 batches of 64; saved every 2, killed after batch 5 of the only epoch: the last save is mid-epoch.
    assert quick["07_save_and_restore"] == {"steps_per_epoch": 8, "checkpoint_every_steps": 2,
                                            "kill_at": [0, 5]}
    # 09: 512 images hold 8 rounds of 2 x 32: the seed's wrapper runs 6 (two averagings), the parity check 8.
    assert quick["09_parameter_averaging"] == {"seed_rounds": 6, "parity_rounds": 8}
    # 10: 8 steps of 2 x 32: a checkpoint every 2, the kill after the one at step 4.
    assert quick["10_multi_worker"] == {"total_steps": 8, "checkpoint_every_steps": 2, "kill_after_step": 4}


@pytest.mark.parametrize(("train", "epochs", "devices"), [g for g in GRID if g[2] >= 2])
def test_derived_steps_fit_the_run(train, epochs, devices):
    plan = plans(train, epochs, devices)
    save = plan["07_save_and_restore"]
    if isinstance(save, dict):
        kill_epoch, kill_batch = save["kill_at"]
        assert 0 <= kill_epoch < epochs
        assert 1 <= save["checkpoint_every_steps"] < kill_batch <= save["steps_per_epoch"]
    job = plan["10_multi_worker"]
    if isinstance(job, dict):
        assert 0 < job["kill_after_step"] < job["total_steps"]
        assert job["kill_after_step"] % job["checkpoint_every_steps"] == 0


def test_a_value_given_that_cannot_work_is_refused_with_the_fix():
    p07 = notebook_parameters(ROOT / "notebooks" / "07_save_and_restore.ipynb")
    with pytest.raises(ValueError, match=r"SAVE_EVERY_STEPS=5 saves no checkpoint .* SAVE_EVERY_STEPS <= 4"):
        lesson_plan("07_save_and_restore", {**p07, "TRAIN_SAMPLES": 512, "SAVE_EVERY_STEPS": 5})
    p10 = notebook_parameters(ROOT / "notebooks" / "10_multi_worker.ipynb")
    with pytest.raises(ValueError, match=r"KILL_AFTER_STEP=5 must be a checkpoint step"):
        lesson_plan("10_multi_worker", {**p10, "CHECKPOINT_EVERY_STEPS": 2, "KILL_AFTER_STEP": 5})
    p04 = notebook_parameters(ROOT / "notebooks" / "04_multi_gpu_wrapping.ipynb")
    with pytest.raises(ValueError, match=r"PARITY_STEPS=3 needs 3 global batch\(es\) of 128 .* >= 384"):
        lesson_plan("04_multi_gpu_wrapping", {**p04, "TRAIN_SAMPLES": 256, "N_DEVICES": 4})
    p16 = notebook_parameters(ROOT / "notebooks" / "16_capstone.ipynb")
    with pytest.raises(ValueError, match=r"XLA=True needs N_DEVICES=1, got N_DEVICES=2: .* Use XLA=False"):
        lesson_plan("16_capstone", {**p16, "N_DEVICES": 2, "XLA": True})
    with pytest.raises(ValueError, match=r"XLA must be None \(the faster, .*\), True or False, got 'yes'"):
        lesson_plan("16_capstone", {**p16, "XLA": "yes"})
    with pytest.raises(ValueError, match=r"PRECISION must be None .* or \"mixed_bfloat16\", got 'bf16'"):
        lesson_plan("16_capstone", {**p16, "PRECISION": "bf16"})
    assert lesson_plan("16_capstone", {**p16, "PRECISION": "mixed_bfloat16", "XLA": False}) == {}
    with pytest.raises(ValueError, match=r"WIDTHS must be the channels .*, got \[64, 256\]"):
        lesson_plan("16_capstone", {**p16, "WIDTHS": [64, 256]})
    assert lesson_plan("16_capstone", {**p16, "N_DEVICES": 2}) == {}  # the default: XLA off there
    with pytest.raises(ValueError, match=r"SMALL_SIZES must be a list of image sides >= 10 .* \[16, 8\]"):
        lesson_plan("16_capstone", {**p16, "SMALL_SIZES": [16, 8]})
    with pytest.raises(ValueError, match=r"SMALL_SIZES must be a list .*, got 24"):
        lesson_plan("16_capstone", {**p16, "SMALL_SIZES": 24})
    with pytest.raises(ValueError, match=r"LOOKAHEAD must be True or False, got 'yes'"):
        lesson_plan("16_capstone", {**p16, "LOOKAHEAD": "yes"})
    assert lesson_plan("16_capstone", {**p16, "SMALL_SIZES": []}) == {}  # every epoch at full size
    with pytest.raises(ValueError, match=r"FULL_SIZE_EPOCHS must be a whole number >= 0 .*, got -1"):
        lesson_plan("16_capstone", {**p16, "FULL_SIZE_EPOCHS": -1})
    assert lesson_plan("16_capstone", {**p16, "EPOCHS": 1}) == {}  # under FULL_SIZE_EPOCHS: all full size
    with pytest.raises(ValueError, match=r"WHITENING_BIAS_EPOCHS must be a whole number >= 0 .*, got 1.5"):
        lesson_plan("16_capstone", {**p16, "WHITENING_BIAS_EPOCHS": 1.5})
    assert lesson_plan("16_capstone", {**p16, "WHITENING_BIAS_EPOCHS": 20}) == {}  # past EPOCHS: every epoch
    assert lesson_plan("no_such_lesson", {}) == {}


def test_lesson_09_refuses_a_step_per_image_its_workers_diverged_at():
    # The sweep drew BATCH_SIZE_PER_REPLICA=1 at LEARNING_RATE=0.02: every variant's weights grew past 1e14.
    p09 = {**notebook_parameters(ROOT / "notebooks" / "09_parameter_averaging.ipynb"), "TRAIN_SAMPLES": 1024}
    refused = (r"LEARNING_RATE=0.02 over BATCH_SIZE_PER_REPLICA=1 is 0.02 an image; above 0.005 .* "
               r"give BATCH_SIZE_PER_REPLICA >= 4 or LEARNING_RATE <= 0.005")
    with pytest.raises(ValueError, match=refused):
        lesson_plan("09_parameter_averaging", {**p09, "BATCH_SIZE_PER_REPLICA": 1})
    with pytest.raises(ValueError, match=r"BATCH_SIZE_PER_REPLICA >= 4 or LEARNING_RATE <= 0.01\."):
        lesson_plan("09_parameter_averaging", {**p09, "BATCH_SIZE_PER_REPLICA": 2})
    assert lesson_plan("09_parameter_averaging", {**p09, "BATCH_SIZE_PER_REPLICA": 4})["seed_rounds"] == 12
    assert lesson_plan("09_parameter_averaging", {**p09, "BATCH_SIZE_PER_REPLICA": 2, "LEARNING_RATE": 0.01})
    # The sweep's LEARNING_RATE=0.04 at 16 a replica (0.0025 an image) diverged all the same.
    with pytest.raises(ValueError, match=r"LEARNING_RATE=0.04 is above 0.02: .* LEARNING_RATE <= 0.02\.$"):
        lesson_plan("09_parameter_averaging", {**p09, "LEARNING_RATE": 0.04})


def test_lesson_12s_sets_split_over_the_devices_and_the_refusal_names_the_set():
    p12 = notebook_parameters(ROOT / "notebooks" / "12_keras_on_jax.ipynb")
    # Issue 58: at 3 devices the test set's 1,000 left a last batch of 40; it was named "Train on ... 999".
    with pytest.raises(ValueError) as refused:
        lesson_plan("12_keras_on_jax", {**p12, "N_DEVICES": 3, "TRAIN_SAMPLES": 999})
    (problem,) = str(refused.value).splitlines()[1:]
    assert problem.startswith("  - TEST_SAMPLES=1000 (the test set) in global batches of 96 ")
    assert "last batch of 40" in problem and "TRAIN_SAMPLES" not in problem
    assert problem.endswith("Use a multiple of 3: TEST_SAMPLES=999 or 1002.")
    at_999 = {**p12, "N_DEVICES": 3, "TRAIN_SAMPLES": 999, "TEST_SAMPLES": 999}
    assert lesson_plan("12_keras_on_jax", at_999) == {}
    with pytest.raises(ValueError, match=r"TRAIN_SAMPLES=1001 \(the training set\) .*=1000 or 1002\."):
        lesson_plan("12_keras_on_jax", {**p12, "TRAIN_SAMPLES": 1001})


def test_the_issues_parameter_sets_are_taken_or_refused_with_the_fix():
    p15 = notebook_parameters(ROOT / "notebooks" / "15_when_it_breaks.ipynb")
    # Issue 58's lesson 15 set: taken (its drills split evenly over 3 devices; the notebook test runs them).
    issue = {"N_DEVICES": 3, "BAD_STEP": 3, "NAN_REPLICA": 2, "STEPS": 6}
    assert lesson_plan("15_when_it_breaks", {**p15, **issue}) == {}
    with pytest.raises(ValueError, match=r"BATCH_SIZE_PER_REPLICA must be >= 3: section 3 blanks the third"):
        lesson_plan("15_when_it_breaks", {**p15, "BATCH_SIZE_PER_REPLICA": 2})
    p08 = notebook_parameters(ROOT / "notebooks" / "08_scaling_study.ipynb")
    with pytest.raises(ValueError, match=r"over N_DEVICES=3 .* use a multiple of 3: GLOBAL_BATCH=63 or 66\."):
        lesson_plan("08_scaling_study", {**p08, "N_DEVICES": 3})
    p11 = notebook_parameters(ROOT / "notebooks" / "11_where_time_goes.ipynb")
    with pytest.raises(ValueError, match=r"ACCUMULATION_STEPS=8 micro-batches of the global batch 64 .*512"):
        lesson_plan("11_where_time_goes", {**p11, "ACCUMULATION_STEPS": 8, "TRAIN_SAMPLES": 256})
    p14 = notebook_parameters(ROOT / "notebooks" / "14_pinned_workers.ipynb")
    with pytest.raises(ValueError, match=r"TIMEOUT must be a whole number >= 30 .*, got 1\."):
        lesson_plan("14_pinned_workers", {**p14, "TIMEOUT": 1})


def test_the_runner_checks_every_lesson_before_the_first_starts(tmp_path, capsys):
    with pytest.raises(ValueError, match="04_multi_gpu_wrapping cannot run") as refused:
        validate_overrides({"N_DEVICES": 1}, NOTEBOOKS)
    assert "07_save_and_restore cannot run" in str(refused.value)  # every refusal at once
    with pytest.raises(SystemExit) as stopped:  # make run: the same refusal, before any run folder exists
        series_main(["--notebooks", str(ROOT / "notebooks"), "--runs", str(tmp_path), "--no-preflight",
                     "-p", "N_DEVICES", "1"])  # fmt: skip
    assert stopped.value.code == 2 and "N_DEVICES must be a whole number >= 2" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_lesson_15_refuses_a_share_its_small_device_could_hold():
    # The sweep drew OOM_BATCH=1, OOM_BATCH=128 and MEMORY_BUDGET_MB=256: each fitted, no symptom to show.
    p15 = notebook_parameters(ROOT / "notebooks" / "15_when_it_breaks.ipynb")
    with pytest.raises(ValueError, match=r"OOM_BATCH=1 images could fit in MEMORY_BUDGET_MB=128: .* on "
                       r"cifar10 take 0.71 MiB an image: give OOM_BATCH >= 180\.$"):  # fmt: skip
        lesson_plan("15_when_it_breaks", {**p15, "OOM_BATCH": 1})
    with pytest.raises(ValueError, match=r"OOM_BATCH=128 .* give OOM_BATCH >= 180\.$"):
        lesson_plan("15_when_it_breaks", {**p15, "OOM_BATCH": 128})
    with pytest.raises(ValueError, match=r"give OOM_BATCH >= 360 or MEMORY_BUDGET_MB <= 182\.$"):
        lesson_plan("15_when_it_breaks", {**p15, "MEMORY_BUDGET_MB": 256})
    with pytest.raises(ValueError, match=r"MEMORY_BUDGET_MB=300 must be <= 256: "):
        lesson_plan("15_when_it_breaks", {**p15, "MEMORY_BUDGET_MB": 300, "OOM_BATCH": 512,
                                          "TRAIN_SAMPLES": 512})  # fmt: skip
    with pytest.raises(ValueError, match=r"mnist take 0.53 MiB an image: .* >= 240 or .* <= 127\.$"):
        lesson_plan("15_when_it_breaks", {**p15, "DATASET": "mnist", "OOM_BATCH": 239})
    for taken in ({"OOM_BATCH": 180}, {"MEMORY_BUDGET_MB": 182}, {"DATASET": "mnist"},
                  {"MEMORY_BUDGET_MB": 256, "OOM_BATCH": 360, "TRAIN_SAMPLES": 1024},
                  {"DATA_PATH": "my_images.npz", "OOM_BATCH": 1}):  # fmt: skip
        assert lesson_plan("15_when_it_breaks", {**p15, **taken}) == {}, taken


def test_the_up_front_count_of_the_seed_cnns_outputs_is_the_lessons_keras_count():
    import keras

    from mgtutor import build_model
    from mgtutor.classroom.limit_checks import seed_cnn_floats

    for shape, classes in (((32, 32, 3), 10), ((28, 28, 1), 10), ((40, 36, 3), 7)):
        model = build_model("seed_cnn", shape, classes, dropout=False)
        outputs = keras.Model(model.inputs, [layer.output for layer in model.layers]).outputs
        assert seed_cnn_floats(*shape[:2], classes) == sum(math.prod(o.shape[1:]) for o in outputs), shape


def test_lessons_04_08_and_16_refuse_the_sets_the_sweep_found_failing():
    # 04 at one image a replica: its evaluation's last batch (partial, not split evenly) left a replica empty,
    # and TensorFlow's convolution failed on it ("input depth must be evenly divisible by filter depth").
    p04 = notebook_parameters(ROOT / "notebooks" / "04_multi_gpu_wrapping.ipynb")
    with pytest.raises(ValueError, match=r"BATCH_SIZE_PER_REPLICA must be >= 2: the evaluation's hard case"):
        lesson_plan("04_multi_gpu_wrapping", {**p04, "BATCH_SIZE_PER_REPLICA": 1})
    assert lesson_plan("04_multi_gpu_wrapping", {**p04, "BATCH_SIZE_PER_REPLICA": 2, "TEST_SAMPLES": 1000})
    # 16 with one test image on two devices: the probe's empty replica failed in AddN.
    p16 = {**notebook_parameters(ROOT / "notebooks" / "16_capstone.ipynb"), "N_DEVICES": 2, "BATCH_SIZE": 64}
    with pytest.raises(ValueError, match=r"TEST_SAMPLES must be a whole number >= 100 .*, got 1\."):
        lesson_plan("16_capstone", {**p16, "TEST_SAMPLES": 1})
    with pytest.raises(ValueError, match=r"TEST_SAMPLES=257 .* last batch of 1, handed to the N_DEVICES=2 "
                       r"replicas in turn, up to 1 each: .* Use TEST_SAMPLES=256 or 258\."):  # fmt: skip
        lesson_plan("16_capstone", {**p16, "TEST_SAMPLES": 257})
    # More images than replicas can still leave one empty: in turn, 4 on 3 replicas is [2, 2, 0].
    with pytest.raises(ValueError, match=r"TEST_SAMPLES=196 .* last batch of 4, handed to the N_DEVICES=3 "
                       r"replicas in turn, up to 2 each: .* Use TEST_SAMPLES=192 or 197\."):  # fmt: skip
        lesson_plan("16_capstone", {**p16, "N_DEVICES": 3, "BATCH_SIZE": 48, "TEST_SAMPLES": 196})
    assert [last for last in range(1, 12) if empties_a_replica(last, 4)] == [1, 2, 3, 5, 6, 9]
    for taken in ({"TEST_SAMPLES": 257, "N_DEVICES": 1}, {"TRAIN_SAMPLES": 1}, {"TRAIN_SAMPLES": 65}):
        assert lesson_plan("16_capstone", {**p16, **taken}) == {}, taken  # training drops a last part
    # 11 at ACCUMULATION_STEPS=1: Keras' gradient_accumulation_steps refused it, mid-lesson.
    p11 = notebook_parameters(ROOT / "notebooks" / "11_where_time_goes.ipynb")
    with pytest.raises(ValueError, match=r"ACCUMULATION_STEPS must be a whole number >= 2 .*, got 1\."):
        lesson_plan("11_where_time_goes", {**p11, "ACCUMULATION_STEPS": 1})
    # 08 at STUDY_SAMPLES=1: the scaling study itself refused it, mid-lesson.
    p08 = {**notebook_parameters(ROOT / "notebooks" / "08_scaling_study.ipynb"), "DEVICE_COUNTS": [1, 2, 4]}
    with pytest.raises(ValueError, match=r"STUDY_SAMPLES must be >= 128: .*_PER_REPLICA x the most "):
        lesson_plan("08_scaling_study", {**p08, "STUDY_SAMPLES": 127})
    assert lesson_plan("08_scaling_study", {**p08, "STUDY_SAMPLES": 128}) == {}


def test_lesson_13_splits_the_images_values_of_the_dataset_it_reads():
    p13 = notebook_parameters(ROOT / "notebooks" / "13_sharding.ipynb") | {"WIDTH": 1008, "GLOBAL_BATCH": 252}
    assert lesson_plan("13_sharding", {**p13, "N_DEVICES": 6}) == {}  # 3,072 values split in 6
    with pytest.raises(ValueError, match=r"N_DEVICES=6 must divide the 784 values .* one of 2, 4, 7, 8\."):
        lesson_plan("13_sharding", {**p13, "N_DEVICES": 6, "DATASET": "mnist"})

"""tests.notebooks.noise: which output lines of an executed notebook are not the lesson's."""

from __future__ import annotations

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from mgtutor.support.records import MIME_TYPE
from tests.notebooks.noise import noise_in

# Keras 3's bar in a saved notebook (verbose=1): frames joined by backspaces and carriage returns.
KERAS_BAR = (
    "Epoch 1/3\n\r\x1b[1m1/6\x1b[0m \x1b[32m━━━\x1b[0m\x1b[37m━━━━━━━━━━━━━━━━━\x1b[0m - loss: 0.7887"
    + "\x08" * 72 + "\r\x1b[1m6/6\x1b[0m \x1b[32m━━━━━━━━━━━━━━━━━━━━\x1b[0m - loss: 0.7079\n"
)


def _write(tmp_path, *cells) -> str:
    path = tmp_path / "executed.ipynb"
    nbformat.write(new_notebook(cells=[new_markdown_cell("# A lesson"), *cells]), path)
    return str(path)


def _cell(*outputs):
    return new_code_cell("...", outputs=list(outputs))


def _stream(text: str, name: str = "stdout"):
    return new_output("stream", name=name, text=text)


def test_a_clean_notebook_has_no_noise(tmp_path):
    path = _write(
        tmp_path,
        _cell(_stream("setup_devices: using the CPU split into 2 logical CPU device(s): /device:CPU:0\n")),
        _cell(new_output("display_data", data={"text/plain": "epoch 1/3 - 2.4 s - loss 0.69 - accuracy 1"}),
              new_output("display_data", data={MIME_TYPE: {"accuracy": 0.58}, "text/plain": ""}),
              new_output("execute_result", data={"text/plain": "0.58"}, execution_count=2)),
        _cell(_stream("a line the lesson writes to stderr\n", "stderr"), _stream("Warning: CPU only\n")),
        # A failing cell fails the run by itself; its traceback is not counted again.
        _cell(new_output("error", ename="UserWarning", evalue="x", traceback=["UserWarning: x"])),
        _cell(),
    )  # fmt: skip
    assert noise_in(path) == []


def test_each_kind_of_noise_is_flagged_in_order(tmp_path):
    tf_lines = (
        "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
        "I0000 00:00:1795454077.083047    5446 port.cc:153] oneDNN custom operations are on.\n"
        "E0000 00:00:1795454078.915999    5446 cuda_platform.cc:52] failed call to cuInit: (303)\n"
    )
    path = _write(
        tmp_path,
        _cell(_stream("setup_devices: using 2 devices\n"), _stream(tf_lines, "stderr")),
        _cell(_stream("INFO:tensorflow:Using MirroredStrategy with devices ('/cpu:0', '/cpu:1')\n"
                      "WARNING:tensorflow:5 out of the last 5 calls to <function f> triggered tf.function "
                      "retracing. Tracing is expensive.\n")),
        _cell(_stream(KERAS_BAR)),
        _cell(new_output("display_data", data={MIME_TYPE: {"n": 1}, "text/plain": "recorded n = 1"})),
        _cell(_stream("/venv/keras/src/trainers/epoch_iterator.py:164: UserWarning: Your input ran out of "
                      "data; interrupting training.\n  warnings.warn(\n", "stderr"),
              _stream("/x.py:3: DeprecationWarning: old\n", "stderr")),
        _cell(_stream("7/8 epochs\r8/8 epochs\n"), _stream("kept\n")),
    )  # fmt: skip
    found = noise_in(path)
    assert found[:5] == [
        "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
        "I0000 00:00:1795454077.083047    5446 port.cc:153] oneDNN custom operations are on.",
        "E0000 00:00:1795454078.915999    5446 cuda_platform.cc:52] failed call to cuInit: (303)",
        "INFO:tensorflow:Using MirroredStrategy with devices ('/cpu:0', '/cpu:1')",
        "WARNING:tensorflow:5 out of the last 5 calls to <function f> triggered tf.function retracing. "
        "Tracing is expensive.",
    ]
    # The bar: one line of frames, its escapes shown and its length cut; "Epoch 1/3" is Keras's too
    # but harmless alone, so only the bar is flagged.
    bar = found[5]
    assert bar.startswith("\\r\x1b[1m1/6") and "\\b\\b" in bar and bar.endswith("…") and len(bar) == 200
    assert found[6:] == [
        "recorded n = 1",
        "/venv/keras/src/trainers/epoch_iterator.py:164: UserWarning: Your input ran out of data; "
        "interrupting training.",
        "  warnings.warn(",
        "/x.py:3: DeprecationWarning: old",
        "7/8 epochs\\r8/8 epochs",
    ]


@pytest.mark.parametrize(
    "line",
    [
        "2024-01-09 10:00:00.1: E external/xla/cuda_dnn.cc:9261] Unable to register cuDNN factory",
        "Epoch 1/3 ━━━━━━━━━━━━━━━━━━━━ 1s 86ms/step - accuracy: 0.5 - loss: 0.69",  # verbose=2 too
        "Your input ran out of data; interrupting training. Make sure that your dataset can generate",
        "/venv/tf/util/deprecation.py:588: FutureWarning: soon",
    ],
)
def test_single_lines(tmp_path, line):
    assert noise_in(_write(tmp_path, _cell(_stream(line + "\n")))) == [line]


def test_a_model_summary_table_is_the_lesson_not_noise(tmp_path):
    summary = (
        "┏━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━┳━━━━━━━━━━━┓\n"
        "┃ Layer (type)          ┃ Output Shape   ┃   Param # ┃\n"
        "┡━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━╇━━━━━━━━━━━┩\n"
        "│ conv2d (Conv2D)       │ (None, 32, 32, │       896 │\n"
        "└───────────────────────┴────────────────┴───────────┘\n"
    )
    assert noise_in(_write(tmp_path, _cell(_stream(summary)))) == []


# Each new kind: a line that must be flagged, beside one like it that must not.
@pytest.mark.parametrize(
    ("noisy", "clean"),
    [
        # rich's plain-text form of model.summary() in a kernel: colour codes around the words.
        ('\x1b[1mModel: "lenet"\x1b[0m', 'Model: "lenet"'),
        ("│ conv2d (\x1b[38;5;33mConv2D\x1b[0m) │ (\x1b[38;5;45mNone\x1b[0m, 24) │ \x1b[38;5;34m520\x1b[0m │",
         "│ conv2d (Conv2D) │ (None, 24) │ 520 │"),
        ("a link \x1b]8;;https://keras.io\x1b\\keras.io\x1b]8;;\x1b\\", "a link keras.io"),
        # Keras's fit(verbose=2) line, in the notebook or relayed from a worker; the lesson's own epoch line.
        ("12/12 - 1s - 36ms/step - loss: 2.2015 - accuracy: 0.2240",
         "epoch 1/2 - 3.6 s - loss 2.03 - accuracy 0.23"),
        ("[worker 0] 78/78 - 9s - 110ms/step - accuracy: 0.2324 - loss: 2.0418",
         "[worker 0] checkpoint saved: step 39 (epoch 1, batch 39/78) -> checkpoints/resume-state.npz"),
        ("3/3 - 0s - 850us/step", "3/3 steps trained, 12 ms a step"),
        ("[worker 1] I0000 00:00:1795454077.083047    5446 port.cc:153] oneDNN custom operations are on.",
         "[worker 1] hello"),
        # A message cut inside a sentence, at the end of the line or of a clause; ellipses that are not cuts.
        ("IndivisibleError: per-dimension tiling factors: [2, 1, 1, 1] should evenly divide the …",
         "IndivisibleError: per-dimension tiling factors: [2, 1, 1, 1] should evenly divide the shape."),
        ("as written failed: You must feed a value for placeholder tensor …; built first: loss 2.2",
         "worker counts 1, 2, 4, … as many as the cores allow"),
        ("resuming from the checkpoint at step 12, after epoch...",
         "  … 5 frame(s) inside installed libraries (TensorFlow, Keras) …"),
    ],
)
def test_each_new_kind_of_noise_and_its_look_alike(tmp_path, noisy, clean):
    path = _write(tmp_path, _cell(_stream(f"{noisy}\n{clean}\n")))
    assert noise_in(path) == [noisy.replace("\r", "\\r")]


BULLETS = [
    "* **The collective timeout** turns the wait into `DeadlineExceededError`; `launch` stops the rest.",
    "* **The watchdog's stacks** say where each worker waits.",
]


def test_a_bullet_said_twice_in_one_cell_is_flagged_where_it_comes_again(tmp_path):
    again = BULLETS[0][:-1] + ". The cell below prints the error worker 0 ended on."  # it, and more
    markdown = new_markdown_cell("\n".join([*BULLETS, again, "", "- ok", "- ok"]))  # short items may repeat
    waited = "  - worker 0 waited in the all-reduce"
    output = _cell(_stream(f"Findings:\n{waited}\n{waited}\n"))
    assert noise_in(_write(tmp_path, markdown, output)) == [again, waited]


def test_the_same_bullet_in_two_markdown_cells_is_not_a_repetition_but_printed_again_it_is(tmp_path):
    cells = [new_markdown_cell(BULLETS[0]), new_markdown_cell("\n".join(BULLETS))]
    assert noise_in(_write(tmp_path, *cells)) == []
    # Lesson 08's weak-scaling reading printed four of strong scaling's bullets again, word for word.
    printed = [_cell(_stream(BULLETS[1] + "\n")), _cell(_stream("- new\n" + BULLETS[1] + "\n"))]
    assert noise_in(_write(tmp_path, *printed)) == [BULLETS[1]]


TABLE = (
    "kind      type  name\n--------- ----- -----\n"
    "physical  CPU   /physical_device:CPU:0\nlogical   CPU   /device:CPU:0\n"
)



def test_a_table_an_earlier_cell_printed_is_flagged_where_it_comes_again(tmp_path):
    # Lesson 00 printed its device table twice: describe(), then describe(model).
    again = _cell(_stream(TABLE + "\nmodel small_mlp: 1,578,506 parameters\n"))
    assert noise_in(_write(tmp_path, _cell(_stream(TABLE)), again)) == TABLE.splitlines()
    # Look-alikes: two tables of one kind share their headers and may share a row (lesson 13); two
    # drills relay the same worker lines.
    header = "MiB per device   weights   gradients\n                 formula   measured\n"
    tables = [_cell(_stream(header + "DP   16.05   16.05\n")),
              _cell(_stream(header + "DP   16.05   16.05\nZeRO-1  8  8\n"))]
    relayed = "[worker 0] worker 0 step 0: loss 2.38\n[worker 1] worker 1 step 0: loss 2.38\n[worker 0] ok\n"
    banner = "!" * 78 + "\nWARNING: real cifar10 data is not available.\nNo cifar10 data.\n  - a\n" + "!" * 78
    cells = [*tables, *(_cell(_stream(text)) for text in (relayed, relayed, banner, banner))]
    assert noise_in(_write(tmp_path, *cells)) == []  # and the stand-in data's warning, at each load


def test_a_line_said_twice_in_one_cell_is_flagged_where_it_comes_again(tmp_path):
    # Lesson 15: the child's line streamed, then the cell's own print of it; gRPC's report of a lost peer,
    # once per pending call.
    said = "built first: first step loss 2.2868 in 0.6 s"
    grpc = "[worker 0] Additional GRPC error information from remote target /job:worker/replica:0/task:1"
    lines = [said, "Traceback (most recent call last):", said, grpc, grpc]
    path = _write(tmp_path, _cell(_stream("\n".join(lines) + "\n")))
    assert noise_in(path) == [said, grpc]
    # Look-alikes: short lines, a table's borders, a header for each of two tables, a checklist's row.
    border = "├─────────────────────────────────┼────────────────┤"
    header = "                 ----------- predicted ----------  -- measured --"
    check = "  ok  collective timeout: set with CommunicationOptions: a hang becomes an error"  # two reports
    clean = f"ok\nok\n{border}\n{border}\n{header}\nrow 1\n{header}\nrow 2\n{check}\n{check}\n"
    assert noise_in(_write(tmp_path, _cell(_stream(clean)))) == []


@pytest.mark.parametrize(
    ("noisy", "clean"),
    [
        ("[worker 0] \t [[{{node sgd/CollectiveReduceV2}}]] [Op:__inference_<lambda>_238]",
         "[worker 0] worker 0 step 1: loss 2.3715"),
        ("\t [[cond/else/_1/cond/StatefulPartitionedCall/sequential_1/dense_2/bias/Initializer/_66]]",
         "[[1, 2], [3, 4]] is the matrix"),
        ("[worker 0] The error could be from a previous operation. Restart your program to reset. "
         "[type.googleapis.com/tensorflow.DerivedStatus='']", "Restart the kernel (Kernel > Restart)"),
        ("0 derived errors ignored. [Op:__inference_fn_with_cond_4209]", "0 errors in 12 steps"),
        ("DeadlineExceededError: {{function_node __inference_<lambda>_238}} Collective has timed out.",
         "DeadlineExceededError: Collective has timed out during execution."),
    ],
)
def test_tensorflow_runtime_internals_are_noise_and_the_error_itself_is_not(tmp_path, noisy, clean):
    assert noise_in(_write(tmp_path, _cell(_stream(f"{noisy}\n{clean}\n")))) == [noisy]

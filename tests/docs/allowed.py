"""The figures and directions that may stay in prose (tests/docs/figures.py), each with why.

Kinds: a **law** holds on every machine (arithmetic, a format's definition, an algorithm's cost);
a **setting** is chosen, not measured (a default, a budget, a version, a data set's size, a plan);
a **citation** is a published figure with its source in the sentence; a **bound** is a limit
the tests assert on every run; a **reading** says how to read an output, or defines a word.
`text` is a regular expression over the sentence: an entry covers the figures inside its match.
An entry that covers nothing fails the test: remove it with the sentence it was for.
"""

from __future__ import annotations

from tests.docs.figures import Allowed

_VERSION = r"(?:TensorFlow|TF|Keras|Python|JAX|jax|jaxlib|PCIe)\s?(?:≥\s?)?\d+(?:\.\d+)+(?:–\d+(?:\.\d+)+)?"
_SEED_001 = r"63 s (?:→|to) 16 s|63 → 16 s|\*\*63 s to 16 s per epoch\*\*|\"16 s\"|63 s per epoch on one V100"

ALLOWED: list[Allowed] = [
    # Everywhere.
    Allowed("*", _VERSION, "setting", "the versions the series pins and is written for"),
    Allowed(
        "*",
        r"Keras \(?3\.7–3\.10\)?|known-bad Keras \(3\.7–3\.10\)",
        "setting",
        "the Keras versions the preflight refuses (keras#21061, keras#20611)",
    ),
    Allowed("*", _SEED_001, "citation", "seed 001's published 63 s -> 16 s per epoch on four V100s"),
    Allowed(
        "*",
        r"[Cc]hance (?:on 10 balanced classes )?is 10 %|(?:above|against) chance \((?:10 %|0\.10)\)"
        r"|chance is 0\.10",
        "law",
        "ten balanced classes: a guess is right one time in ten",
    ),
    # Notebooks.
    Allowed(
        "notebooks/14_*",
        r"4 KB (?:to|up to) (?:64 MB|`…` MB)",
        "setting",
        "the all-reduce sizes lesson 14's code measures (4 KB up to LINK_MAX_MB, 64 by default)",
    ),
    Allowed(
        "notebooks/00_*",
        r"about 826 MB, and `…` showed 849 MB",
        "citation",
        "seed 002's quoted parameter count and nvidia-smi reading",
    ),
    Allowed("notebooks/solutions/00_*", r"\"about 826 MB\"", "citation", "seed 002's own figure"),
    Allowed("notebooks/01_*", r"downloads 170 MB", "citation", "the size of Keras' CIFAR-10 download"),
    Allowed(
        "notebooks/02_*",
        r"RMSprop at 1e-4|the seed's own values, 1e-4 and 1e-6",
        "setting",
        "seed 000's optimizer settings",
    ),
    Allowed(
        "notebooks/solutions/02_*",
        r"RMSprop at 1e-4 for 50 epochs; the lesson's recipe uses Adam at 1e-3",
        "setting",
        "the seed's and the lesson's optimizer settings",
    ),
    Allowed(
        "notebooks/02_*",
        r"1,250,858 parameters — 4\.8 MiB",
        "law",
        "parameters × 4 bytes (section 2 prints it)",
    ),
    Allowed(
        "*",
        r"float32 rounding \(about 1e-[78]( or less)?\)|float32 rounding, ~1e-8|"
        r"sections 3–6 showed to 1e-7|float32 rounding, below 1e-6",
        "law",
        "float32 keeps 24 bits of mantissa: sums in another order differ by about 1e-7 of their size",
    ),
    Allowed("notebooks/04_*", r"a 12 GB and a 6 GB card", "citation", "seed 003's reader's two cards"),
    Allowed("docs/keras2.md", r"a 12 GB \+ 6 GB pair", "citation", "seed 003's reader's two cards"),
    Allowed(
        "notebooks/06_*",
        r"Shifts of up to 10 % \(3 pixels\)",
        "setting",
        "seed 000's width_shift_range=0.1 of 32 pixels",
    ),
    Allowed(
        "notebooks/06_*",
        r"Training runs at the speed of the \*\*slower\*\* side",
        "law",
        "a pipeline and the training it feeds: the slower sets the pace",
    ),
    Allowed(
        "notebooks/06_*",
        r"is how many times faster it delivers images than training consumes them",
        "reading",
        "the definition of headroom",
    ),
    Allowed(
        "notebooks/06_*",
        r"give training a pipeline slower than it",
        "setting",
        "the lesson builds that pipeline: its wait is set from the measured training rate",
    ),
    Allowed(
        "notebooks/08_*",
        r"get no speed-up at all \(tensorflow#35095, keras#9502\)",
        "citation",
        "the users' reports in those two issues",
    ),
    Allowed(
        "notebooks/08_*",
        r"mean 98 % efficiency: Amdahl's law fits them with 99\.5 %|98 % efficiency",
        "law",
        "63/16/4 is 98 %; Amdahl's law solved for the fraction gives 99.5 %",
    ),
    Allowed(
        "notebooks/08_*",
        r"a smaller model or a slower link scales less well",
        "law",
        "Amdahl's law and the link model: less compute or less bandwidth per byte, a larger serial share",
    ),
    Allowed(
        "notebooks/11_*",
        r"make a step cheaper",
        "reading",
        "what the three techniques are for; section 4 measures each on this machine",
    ),
    Allowed(
        "notebooks/11_*",
        r"PCIe per PCI-SIG's specifications \(.*?\); NVLink per NVIDIA's V100 and A100 "
        r"datasheets \(300 GB/s and 600 GB/s",
        "citation",
        "the published link bandwidths, with their sources",
    ),
    Allowed(
        "notebooks/11_*",
        r"PCIe 3\.0 included, and it is smaller than the rounding of \"16 s\"|"
        r"MiniGoogLeNet's 6\.6 MB gradient is cheap beside its 80 ms of compute",
        "law",
        "computed from seed 001's published figures (the cells print both)",
    ),
    Allowed("notebooks/11_*", r"numbers below 6e-8 become 0", "law", "float16's smallest subnormal, 2^-24"),
    Allowed(
        "notebooks/11_*",
        r"an error below 1e-2 of the largest element",
        "law",
        "bfloat16's 8-bit mantissa: a relative error of at most 2^-8",
    ),
    Allowed(
        "notebooks/11_*", r"\(to 1e-12 in float64\)", "bound", "the tests' bound for accumulation in float64"
    ),
    Allowed(
        "notebooks/*11_*",
        r"lose 10 % (?:of its step )?to (?:its|the) ring all-reduce|"
        r"link cost 10 %|10 % of the step when it is 1/9|"
        r"assume 5 ms per step|seed CNN at 5 ms of compute per step",
        "setting",
        "the exercise's own question: a 10 % share and an assumed 5 ms step",
    ),
    Allowed(
        "notebooks/solutions/11_*",
        r"little more than 1 GB/s: any GPU link keeps its sync under 10 %|"
        r"5 MB gradient against 5 ms of compute needs about 16 GB/s, PCIe 3\.0's peak|"
        r"its 1\.2 M parameters",
        "law",
        "the link model's formula on the cited figures; the cell prints them",
    ),
    Allowed(
        "notebooks/16_*",
        r"94 % in 3\.8 s on one A100|94 % in 9\.9 epochs instead of 10\.8|published its 94 % on the original",
        "citation",
        "airbench's published record and ablation",
    ),
    Allowed(
        "benchmarks/README.md",
        r"airbench94 reaches 94 % in 3\.8 s on one A100",
        "citation",
        "airbench's published record",
    ),
    Allowed(
        "benchmarks/README.md",
        r"at most 0\.8 is \"ahead\"|the peer's 9\.9 all at 32×32",
        "setting",
        "issue 56's target ratio, and airbench94's own epochs (its hyp's train_epochs)",
    ),
    Allowed(
        "notebooks/16_*",
        r"\(16/32\)² = 25 % and \(24/32\)² ≈ 56 %",
        "law",
        "pixels scale with the side squared",
    ),
    Allowed("benchmarks/README.md", r"56 % of a 32×32 image's pixels", "law", "(24/32)² of the pixels"),
    Allowed(
        "notebooks/16_*",
        r"BatchNorm and GELU then work on a quarter of the pixels: cheaper",
        "law",
        "a 2×2 max-pool leaves a quarter of the pixels",
    ),
    Allowed("notebooks/16_*", r"falls linearly to 7 % of it", "setting", "the schedule's final fraction"),
    Allowed("notebooks/16_*", r"1 − 0\.95⁵ ≈ 0\.23", "law", "lookahead's pull after five steps at 0.95"),
    Allowed(
        "notebooks/16_*",
        r"Saved, reloaded, the same accuracy",
        "bound",
        "a reloaded model scores what the live one did (the tests assert it)",
    ),
    Allowed(
        "notebooks/solutions/03_*",
        r"4\.0 with four devices \(2\.0 in the lesson with two\)",
        "law",
        "the mistake's factor is exactly N",
    ),
    Allowed(
        "notebooks/solutions/05_*",
        r"√\(32/4\) ≈ 2\.8 times noisier",
        "law",
        "the noise of a mean falls as 1/√batch",
    ),
    Allowed(
        "notebooks/solutions/05_*", r"shrinks \(by 0\.99 per step\)", "setting", "BatchNorm's momentum, 0.99"
    ),
    Allowed(
        "*",
        r"(?:spread|copies equal|difference|ends at|drift[^.]*?) \(?0\.0\)?",
        "bound",
        "exactly zero: the tests assert equality there",
    ),
    Allowed(
        "notebooks/solutions/07_*",
        r"about 15 MB for this model \(weights plus Adam's two moments\)",
        "law",
        "3 × 1,250,858 parameters × 4 bytes",
    ),
    Allowed(
        "notebooks/solutions/08_*",
        r"produces batches faster than training consumes them|"
        r"Devices that train \*k\* times as fast",
        "reading",
        "the definition of headroom, and how it scales",
    ),
    Allowed(
        "notebooks/solutions/08_*",
        r"whether the difference is larger than 0\.01",
        "setting",
        "the threshold the cell applies",
    ),
    Allowed(
        "notebooks/solutions/08_*",
        r"the same 1\.25 million gradients",
        "law",
        "the seed CNN's 1,250,858 parameters",
    ),
    Allowed(
        "notebooks/15_*",
        r"ln 10 ≈ 2\.3026",
        "law",
        "the cross-entropy of a uniform guess over ten classes",
    ),
    # The project's pages (README, CONTRIBUTING, benchmarks, docs/).
    Allowed(
        "CONTRIBUTING.md",
        r"within 3 minutes, `…` within 25|test still running after 20 minutes|"
        r"a notebook cell after 10 minutes|within its 90",
        "setting",
        "budgets and time limits the project sets",
    ),
    Allowed(
        "*",
        r"budget of 1\.5 minutes|1\.5-minute budget|uses 1\.5\)|\(`…`, 1\.5\)|"
        r"budget of 1 minute \(0\.5 with",
        "setting",
        "the capstone's MINUTES in make run",
    ),
    Allowed(
        "*",
        r"(?:make wheelhouse[^)]*)?\(783 MB(?: here, 143 files| for laptops of the same platform)?|"
        r"adds two wheels, 89 MB \(jaxlib 85 MB, jax 3 MB|380 MB to `…` \(2,825 → 3,205 MB\)",
        "citation",
        "sizes of the published wheels and of what they install: the same on every machine of the platform",
    ),
    Allowed(
        "README.md", r"2 GB each by default", "setting", "setup_devices' default memory limit per logical GPU"
    ),
    Allowed(
        "*",
        r"the 90 % aim|for 10 minutes each|\"by 10 min\" row",
        "setting",
        "the capstone's target and the study's budget",
    ),
    Allowed(
        "benchmarks/README.md",
        r"at least 0\.9\)|shift 0\.1, horizontal flip|at most 5 % more",
        "setting",
        "the targets and transforms the benchmarks were written for",
    ),
    # The teacher's guide: a plan is a setting.
    Allowed(
        "docs/teachers.md",
        r"^\|[^|]*\| \d+ min \||^\| \d:\d\d \| [^|]*\(\d+ min\)",
        "setting",
        "the lesson plan's teaching minutes: a plan, not a measurement",
    ),
    Allowed(
        "docs/teachers.md",
        r"about \d+ h \d+ min of teaching \(the column's sum\)",
        "law",
        "the sum of the plan",
    ),
    Allowed(
        "docs/teachers.md",
        r"off by a factor of exactly \*N\* \(2\.0000 with two devices\)",
        "law",
        "averaging per replica divides by the slice, N times smaller than the global batch",
    ),
    Allowed(
        "docs/teachers.md", r"ln 10 ≈ 2\.3026", "law", "the cross-entropy of a uniform guess over ten classes"
    ),
    Allowed(
        "docs/teachers.md",
        r"above chance \(0\.10\), parity differences below 1e-5 \(float32 rounding\) while "
        r"training moves the weights by more than 1e-3, 0\.0 after a resume",
        "bound",
        "what the notebook tests assert on every run",
    ),
    Allowed(
        "docs/teachers.md",
        r"20 steps apart from the pinned workers, are allowed 1e-3",
        "bound",
        "lesson 17's notebook test: float32 rounding grown by 20 steps of training, on every run",
    ),
    Allowed(
        "docs/teachers.md",
        r"aims at a peak of at most 3,000 MiB \(2\.9 GiB\) for each notebook",
        "bound",
        "the low-memory preset's aim, presets.LOW_MEMORY_PEAK_MB",
    ),
]

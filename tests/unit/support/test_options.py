"""mgtutor.support.options: options written once, as a dataclass's fields, and the signatures derived."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from mgtutor.support.options import REQUIRED, option_defaults, takes_options


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Options:
    size: int
    rate: float = 0.5
    names: tuple = ()
    extra: dict = dataclasses.field(default_factory=dict)


def _parameters(function) -> list[tuple[str, str, object]]:
    return [(p.name, p.kind.name, p.default) for p in inspect.signature(function).parameters.values()]


def test_the_signature_is_the_fields_and_a_call_is_bound_to_it_before_the_body_runs():
    calls = []

    @takes_options(_Options, ("size", "rate"), positional=("size",), defaults={"rate": 0.25})
    def run(data, *, loud=False, **options):
        calls.append((data, loud, options))
        return len(calls)

    assert _parameters(run) == [
        ("data", "POSITIONAL_OR_KEYWORD", REQUIRED), ("size", "POSITIONAL_OR_KEYWORD", REQUIRED),
        ("rate", "KEYWORD_ONLY", 0.25), ("loud", "KEYWORD_ONLY", False),
    ]  # fmt: skip
    assert run("d", 3) == 1 and calls[-1] == ("d", False, {"size": 3, "rate": 0.25})
    assert run("d", size=4, rate=1.0, loud=True) == 2 and calls[-1] == ("d", True, {"size": 4, "rate": 1.0})
    for call, message in [
        (lambda: run("d", 3, colour=1), "got an unexpected keyword argument 'colour'"),
        (lambda: run("d"), "missing a required argument: 'size'"),
        (lambda: run("d", 3, 4), "too many positional arguments"),
    ]:
        with pytest.raises(TypeError, match=rf"^test_the_signature.*<locals>\.run\(\) {message}"):
            call()
    assert len(calls) == 2  # the refused calls never reached the body


def test_rest_keeps_other_keywords_and_the_fields_keep_their_own_defaults():
    @takes_options(_Options, rest="more")
    def run(**options):
        return options

    assert _parameters(run)[-1] == ("more", "VAR_KEYWORD", REQUIRED)
    assert run(size=1, colour="red") == {"size": 1, "rate": 0.5, "names": (), "extra": {}, "colour": "red"}
    assert run(size=1)["extra"] is not run(size=1)["extra"]  # a default_factory's value, fresh per call
    assert option_defaults(_Options) == {"size": REQUIRED, "rate": 0.5, "names": (), "extra": {}}
    with pytest.raises(ValueError, match=r"_Options has no field\(s\) \['colour'\]"):
        takes_options(_Options, ("size", "colour"))


def test_both_fit_engines_take_the_fit_options_as_written_once_in_fit_options():
    from mgtutor.training.plan import RESUMABLE_FIT, TRAINER, FitOptions
    from mgtutor.training.resume import resumable_fit
    from mgtutor.training.trainer import Trainer

    defaults = option_defaults(FitOptions)
    trainer = inspect.signature(Trainer.fit).parameters
    # The signature learners saw before issue 54, written out by hand then; now every name and default
    # but x and y comes from FitOptions.
    assert [(name, p.default) for name, p in trainer.items()] == [
        ("self", REQUIRED), ("x", REQUIRED), ("y", REQUIRED), ("batch_size", REQUIRED), ("epochs", 1),
        ("steps_per_epoch", None), ("validation_data", None), ("validation_batch_size", None),
        ("shuffle", True), ("seed", 0), ("callbacks", None), ("verbose", "auto"), ("checkpoint_dir", None),
        ("checkpoint_every_steps", None), ("log_dir", None), ("accumulation_steps", 1),
        ("resume_on_other_replicas", False),
    ]  # fmt: skip
    assert all(trainer[name].default == defaults[name] for name in TRAINER.options)
    resumable = inspect.signature(resumable_fit).parameters
    assert {name: p.default for name, p in resumable.items() if p.kind is p.KEYWORD_ONLY} == {
        "batch_size": REQUIRED, "epochs": REQUIRED, "seed": 0, "sample_weight": None,
        "checkpoint_dir": REQUIRED, "checkpoint_every_steps": 50, "accumulation_steps": 1,
        "resume_on_other_replicas": False, "strategy": None, "monitor": None, "mode": "auto",
    }  # fmt: skip
    assert list(resumable)[:3] == ["model", "x", "y"]
    assert resumable["fit_kwargs"].kind is inspect.Parameter.VAR_KEYWORD
    own = dict(RESUMABLE_FIT.defaults)
    assert all(resumable[name].default == own.get(name, defaults[name]) for name in RESUMABLE_FIT.options)


def test_the_scaling_study_and_its_command_line_take_study_args_defaults():
    from mgtutor.speed.study import StudyArgs, _parser, scaling_study

    parameters = inspect.signature(scaling_study).parameters
    fields = option_defaults(StudyArgs)
    assert list(parameters) == [*fields, "verbose", "reuse"]
    assert [p.kind.name for p in parameters.values()][:3] == ["POSITIONAL_OR_KEYWORD"] * 2 + ["KEYWORD_ONLY"]
    assert {name: parameters[name].default for name in fields} == fields
    parsed = vars(_parser().parse_args([]))
    assert {name: parsed[name] for name in fields if name in parsed} == {
        name: list(value) if isinstance(value, tuple) else value
        for name, value in fields.items() if name not in ("global_batch", "output")
    }  # fmt: skip
    with pytest.raises(TypeError, match=r"^scaling_study\(\) got an unexpected keyword argument 'device'"):
        scaling_study(device=(1, 2))
    # A child measures with every option but the study's own, under measure_training's names.
    from mgtutor.speed.measure import measure_training

    child = StudyArgs(global_batch=64).child_settings(4)
    assert set(child) == set(inspect.signature(measure_training).parameters) - {"n_devices", "pipeline"}
    assert child["batch_size_per_replica"] == 16 and child["repeats"] == fields["repeats"]

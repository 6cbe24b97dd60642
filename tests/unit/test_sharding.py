"""mgtutor.sharding: the counts on paper and the HLO reading here; the stages on 4 JAX devices in a child
(sharding_child.py), since JAX takes its device count once per process."""

from __future__ import annotations

import numpy as np
import pytest

from mgtutor.sharding import (
    STAGES,
    Collective,
    Rates,
    bytes_moved,
    collectives,
    decision_table,
    memory_formula,
    stage_layout_map,
)
from tests.conftest import ROOT, run_child

CHILD = ROOT / "tests" / "unit" / "sharding_child.py"

# Instructions as XLA's CPU compiler prints them (jax 0.10.2), one per form of replica_groups.
HLO = """
  %all-reduce.7 = (f32[], f32[1024,3072]{1,0}, f32[10]{0}) all-reduce(%a, %b, %c), channel_id=1, replica_groups=mesh['axis_0'=8,'axis_1'=1] {'axis_0'}, use_global_device_ids=true, to_apply=%add
  %psum.7 = f32[8,16]{1,0} all-reduce(%param.2), channel_id=1, replica_groups={{0,1,2,3},{4,5,6,7}}, use_global_device_ids=true, to_apply=%region_0.0, metadata={op_name="jit(f)/shard_map/psum"}
  %reduce_scatter.7 = f32[2,16]{1,0} reduce-scatter(%param.2), channel_id=1, replica_groups={{0,1,2,3},{4,5,6,7}}, dimensions={0}, to_apply=%region_1.0
  %all_gather.3 = f32[4,3]{1,0} all-gather(%param.3), channel_id=1, replica_groups={{0,4},{1,5},{2,6},{3,7}}, dimensions={0}
  %ppermute.3 = f32[2,3]{1,0} collective-permute(%param.3), channel_id=1, source_target_pairs={{0,4},{4,0}}
  %all-to-all = (f32[2,16]{1,0}, f32[2,16]{1,0}, f32[2,16]{1,0}, f32[2,16]{1,0}) all-to-all(%s, %s.1, %s.2, %s.3), channel_id=1, replica_groups={{0,1,2,3},{4,5,6,7}}
  %iota = bf16[64]{0} all-gather(%p), replica_groups=[2,4]<=[8], dimensions={0}
  %everyone = f32[100]{0} all-reduce(%p), replica_groups={}, to_apply=%add
  %add.1 = f32[100]{0} add(%p, %q), metadata={op_name="all-reduce"}
"""  # noqa: E501


def test_collectives_are_read_with_their_groups_and_sizes():
    found = collectives(HLO, n_devices=8)
    assert [(c.op, c.result_bytes, c.group) for c in found] == [
        ("all-reduce", 4 + 1024 * 3072 * 4 + 40, 8), ("all-reduce", 8 * 16 * 4, 4),
        ("reduce-scatter", 2 * 16 * 4, 4), ("all-gather", 12 * 4, 2), ("collective-permute", 6 * 4, 2),
        ("all-to-all", 4 * 2 * 16 * 4, 4), ("all-gather", 64 * 2, 4), ("all-reduce", 400, 8),
    ]  # fmt: skip


def test_the_ring_law_per_collective():
    # Lesson 11: a device sends (g-1)/g of the whole for a reduce-scatter or an all-gather, twice that
    # for an all-reduce; a reduce-scatter's whole is g of its results.
    assert Collective("all-reduce", 800, 4).moved == 2 * 3 / 4 * 800
    assert Collective("all-gather", 800, 4).moved == 3 / 4 * 800
    assert Collective("reduce-scatter", 200, 4).moved == 3 * 200  # its input was 800
    assert Collective("all-to-all", 800, 4).moved == 600
    assert Collective("collective-permute", 800, 2).moved == 800
    assert Collective("all-reduce", 800, 1).moved == 0.0  # a group of one sends nothing
    moved = bytes_moved(collectives(HLO, n_devices=8))
    assert moved["reduce-scatter"] == 3 * 128 and moved["all-gather"] == 24 + 96
    ring = [2 * 7 / 8 * (4 + 1024 * 3072 * 4 + 40), 2 * 3 / 4 * 512, 2 * 7 / 8 * 400]
    assert moved["all-reduce"] == pytest.approx(sum(ring))


def test_memory_formula_splits_what_the_stage_splits_and_what_divides():
    shapes = {"weights": [(8, 3), (3,)], "gradients": [(8, 3), (3,)], "optimizer": [(), (8, 3), (8, 3), (3,)]}
    whole = {"weights": 4 * 27, "gradients": 4 * 27, "optimizer": 4 * (1 + 48 + 3)}
    assert memory_formula("DP", shapes, 4) == whole
    assert memory_formula("ZeRO-1", shapes, 4) == {**whole, "optimizer": 4 + 2 * 24 + 12}
    split_optimizer = 4 + 2 * 24 + 12
    zero2 = {**whole, "gradients": 24 + 12, "optimizer": split_optimizer}
    assert memory_formula("ZeRO-2", shapes, 4) == zero2
    assert memory_formula("ZeRO-3", shapes, 4) == memory_formula("FSDP", shapes, 4) == {
        "weights": 24 + 12, "gradients": 24 + 12, "optimizer": 4 + 2 * 24 + 12}  # fmt: skip
    # Neither (3,) nor (8, 3) splits in 5: everything stays whole on 5 devices.
    assert memory_formula("ZeRO-3", shapes, 5) == whole
    assert memory_formula("DP", shapes, 4, bytes_per_value=2)["weights"] == 2 * 27


@pytest.mark.parametrize("call, message", [
    (lambda: memory_formula("ZeRO-4", {}, 2), "stage must be one of 'DP', 'ZeRO-1', 'ZeRO-2', 'ZeRO-3'"),
    (lambda: memory_formula("DP", {"activations": []}, 2), "the parts are weights, gradients, optimizer"),
    (lambda: memory_formula("DP", {}, 0), "n_devices must be a whole number >= 1"),
    (lambda: decision_table(0, 1.0, 8, 1e6, {}), "parameters must be a whole number >= 1"),
    (lambda: decision_table(10, -1.0, 8, 1e6, {}), "activation_bytes must be a number of bytes >= 0"),
    (lambda: decision_table(10, 1.0, 8, 0, {}), "budget_bytes must be a number of bytes > 0"),
    (lambda: decision_table(10, 1.0, 8, 1e6, {}, input_bytes="a"), "input_bytes must be a number of bytes"),
])  # fmt: skip
def test_bad_input_is_refused_by_name(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_zero_1_and_2_are_refused_as_layout_maps_with_the_reason():
    for stage in ("ZeRO-1", "ZeRO-2"):
        with pytest.raises(ValueError, match="Keras gives every slot its weight's layout"):
            stage_layout_map(stage, [], None)


def test_decision_table_scales_the_rates():
    # The old form (temporaries counted in the bytes per parameter; the input's share the example's) still
    # holds: low and high differ by the activations alone.
    rates = {"DP": Rates(20.0, 0.125, 7.0), "TP": Rates(5.0, 0.5, 1.0, 0.25)}
    rows = decision_table(1000, 100.0, 64, 20_000, rates, input_bytes=28.0)
    keys = ("strategy", "low_bytes", "high_bytes", "fits", "bytes_moved_per_step")
    assert [tuple(row[key] for key in keys) for row in rows] == [
        ("DP", 20_000 + 0.125 * 28 * 64, 20_000 + 0.125 * 128 * 64, False, 7000.0),
        ("TP", 5000 + 0.5 * 28 * 64, 5000 + 0.5 * 128 * 64, True, 1000 + 0.25 * 100 * 64),
    ]  # fmt: skip
    assert [r["verdict"] for r in rows] == ["too big", "fits"]


def test_the_floor_and_the_activations_bound_the_peak_and_between_them_it_cannot_say():
    # 1,000 parameters: 16 bytes of arrays and a floor of 4 each; 8 examples of 100 activation bytes and 10
    # of input, 1/8 of each on a device (the input's share given apart): low 20,010, high 20,110.
    rate = Rates(16.0, 0.125, 7.0, temporaries_per_parameter=4.0, input_share=0.125)
    verdicts = {budget: decision_table(1000, 100.0, 8, budget, {"DP": rate}, input_bytes=10.0)[0]
                for budget in (20_009, 20_010, 20_060, 20_110)}  # fmt: skip
    assert {b: (r["low_bytes"], r["high_bytes"]) for b, r in verdicts.items()} == dict.fromkeys(
        verdicts, (20_010.0, 20_110.0))
    fits = {b: r["fits"] for b, r in verdicts.items()}
    assert fits == {20_009: False, 20_010: None, 20_060: None, 20_110: True}
    assert verdicts[20_060]["verdict"] == "cannot say" and "lies between" in verdicts[20_060]["why"]
    assert "exceed the budget" in verdicts[20_009]["why"] and "no buffer shared" in verdicts[20_110]["why"]


def test_an_uncertain_floor_moves_to_the_high_end_of_the_range():
    # Lesson 18's stages: XLA may write the gradient straight into the step's outputs, so the floor of 4
    # bytes a parameter is not sure to be there: low 16,010 (the arrays and the input), high 20,110.
    rate = Rates(16.0, 0.125, 0.0, temporaries_per_parameter=4.0, input_share=0.125, floor_certain=False)
    row = decision_table(1000, 100.0, 8, 18_000, {"1 x 2 x 4": rate}, input_bytes=10.0)[0]
    assert (row["low_bytes"], row["high_bytes"], row["fits"]) == (16_010.0, 20_110.0, None)
    assert "of temporaries (floor, activations) add" in row["why"]
    assert decision_table(1000, 100.0, 8, 16_009, {"x": rate}, input_bytes=10.0)[0]["verdict"] == "too big"


def test_rates_refuse_a_negative_or_missing_figure_by_name():
    with pytest.raises(ValueError, match="Rates.temporaries_per_parameter must be a number of bytes >= 0"):
        Rates(16.0, 0.125, 7.0, temporaries_per_parameter=-1.0)
    with pytest.raises(ValueError, match="Rates.example_share must be a number of bytes >= 0, got None"):
        Rates(16.0, None, 7.0)


def test_every_stage_splits_what_zero_says():
    assert STAGES["DP"] == set() and STAGES["ZeRO-1"] == {"optimizer"}
    assert STAGES["ZeRO-2"] == {"optimizer", "gradients"} and STAGES["ZeRO-3"] == STAGES["FSDP"]


@pytest.fixture(scope="module")
def child():
    return run_child(CHILD, timeout=600)


@pytest.mark.slow
def test_every_stage_trains_like_data_parallelism(child):
    assert child["devices"] == 4 and child["moved"] > 1e-2  # 3 Adam steps at 1e-2 moved the weights
    for stage, result in child["stages"].items():
        # The same sums, the collectives placed differently: float32 rounding at most (measured 0.0 here).
        assert result["vs_dp"] <= 1e-6, stage


@pytest.mark.slow
def test_the_shards_hold_what_the_formula_says(child):
    for stage, result in child["stages"].items():
        assert result["measured"] == result["formula"], stage
        # The compiled step's arguments are its state and one batch of 32 x (48 + 10) float32 on 4 devices.
        state = result["measured"]["weights"] + result["measured"]["optimizer"]
        assert result["arguments"] == state + 8 * (48 + 10) * 4, stage
        assert result["peak"] >= state + result["measured"]["gradients"], stage
    dp, zero3 = child["stages"]["DP"]["measured"], child["stages"]["ZeRO-3"]["measured"]
    assert zero3["weights"] < dp["weights"] / 3  # split in 4, the logit biases whole


@pytest.mark.slow
def test_collectives_of_each_stage(child):
    stages = child["stages"]
    weights = stages["DP"]["measured"]["weights"]
    # Data parallelism: one all-reduce of the gradients (and the loss), the ring's 2(N-1)/N of them.
    assert set(stages["DP"]["moved"]) == {"all-reduce"}
    assert stages["DP"]["moved"]["all-reduce"] == pytest.approx(2 * 3 / 4 * weights, rel=1e-3)
    # ZeRO-1 hands the new weights back to every device: an all-gather the compiler adds.
    assert "all-gather" in stages["ZeRO-1"]["moved"] and "all-gather" in stages["ZeRO-3"]["moved"]


@pytest.mark.slow
def test_zero_3_as_a_keras_layout_map(child):
    assert child["layout_map_as_jax"] is True
    assert child["layout_map_bytes"]["weights"] == child["stages"]["ZeRO-3"]["measured"]["weights"]
    assert child["layout_map_bytes"]["optimizer"] == child["stages"]["ZeRO-3"]["measured"]["optimizer"]
    assert len(child["refusals"]) == 2 and all("LayoutMap cannot say" in r for r in child["refusals"])


@pytest.mark.slow
def test_the_megatron_block_equals_one_device(child):
    assert child["megatron"] <= 1e-5 * max(1.0, child["megatron_largest"])
    # One psum of the (32, 48) float32 output over 4 devices: the ring's 2(N-1)/N of it.
    assert child["megatron_moved"] == {"all-reduce": 2 * 3 / 4 * 32 * 48 * 4}


def test_bytes_per_device_counts_jax_arrays_only():
    from mgtutor.sharding import bytes_per_device

    with pytest.raises(TypeError, match="counts jax.Arrays, got ndarray"):
        bytes_per_device([np.zeros(3)])

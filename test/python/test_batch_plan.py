"""plan_batches, admissible_world_sizes, discrete_values_flag."""

import itertools
import random

import pytest

from elasticrun.batch import (
    BatchPlan,
    admissible_world_sizes,
    discrete_values_flag,
    micro_batch_sizes,
    plan_batches,
)


def brute_force_key(global_batch, world, sizes, max_accum):
    """The best (accum, spread, -smallest) over every multiset of sizes; None if none."""
    for accum in range(1, max_accum + 1):
        if global_batch % accum:
            continue
        keys = [(accum, max(c) - min(c), -min(c))
                for c in itertools.combinations_with_replacement(sizes, world)
                if sum(c) == global_batch // accum]
        if keys:
            return min(keys)
    return None


def key(plan):
    return (plan.accum_steps, max(plan.micro_batches) - min(plan.micro_batches),
            -min(plan.micro_batches))


def test_128_at_24_ranks_with_sizes_5_and_6_is_8_ranks_of_6_and_16_of_5_without_accumulation():
    plan = plan_batches(128, 24, [5, 6])
    assert plan.accum_steps == 1
    assert plan.micro_batches == (6,) * 8 + (5,) * 16
    assert sum(plan.local_batches) == 128
    assert plan.world_size == 24
    assert plan.local_batch(0) == 6 and plan.local_batch(23) == 5
    assert plan.describe() == "global batch 128 on 24 ranks = 8 ranks x 6 + 16 ranks x 5, 1 accumulation step"


def test_a_single_size_too_small_for_the_batch_is_made_up_by_accumulation():
    plan = plan_batches(64, 4, 8)
    assert (plan.micro_batches, plan.accum_steps) == ((8, 8, 8, 8), 2)
    assert plan.local_batches == (16, 16, 16, 16)
    assert plan.micro_batch(3) == 8 and plan.local_batch(3) == 16
    assert plan.describe().endswith("4 ranks x 8, 2 accumulation steps")


def test_fewer_accumulation_steps_win_over_a_more_even_split():
    # 12 = 10 + 2 in one step; 3 + 3 twice would be even, but twice as many passes.
    plan = plan_batches(12, 2, [2, 3, 10])
    assert (plan.micro_batches, plan.accum_steps) == ((10, 2), 1)


def test_the_most_even_split_is_chosen_among_those_with_the_fewest_steps():
    plan = plan_batches(10, 3, range(1, 9))
    assert (plan.micro_batches, plan.accum_steps) == ((4, 3, 3), 1)


def test_among_equally_even_splits_the_one_with_larger_micro_batches_wins():
    # 9 on 3 ranks from {1, 2, 4, 5}: 4+4+1 and 5+2+2 both spread by 3.
    assert plan_batches(9, 3, [1, 2, 4, 5]).micro_batches == (5, 2, 2)


def test_sizes_with_gaps_can_need_three_distinct_micro_batches():
    assert plan_batches(17, 3, [4, 6, 7]).micro_batches == (7, 6, 4)


def test_plans_agree_with_a_brute_force_search_on_small_cases():
    rng = random.Random(5)
    checked = 0
    for _ in range(1500):
        sizes = sorted(rng.sample(range(1, 10), rng.randint(1, 4)))
        world = rng.randint(1, 4)
        global_batch = rng.randint(1, 60)
        max_accum = rng.randint(1, 6)
        expected = brute_force_key(global_batch, world, sizes, max_accum)
        if expected is None:
            with pytest.raises(ValueError):
                plan_batches(global_batch, world, sizes, max_accum)
            continue
        plan = plan_batches(global_batch, world, sizes, max_accum)
        assert key(plan) == expected, (global_batch, world, sizes, max_accum, plan)
        assert sum(plan.local_batches) == global_batch
        assert set(plan.micro_batches) <= set(sizes)
        assert list(plan.micro_batches) == sorted(plan.micro_batches, reverse=True)
        checked += 1
    assert checked > 250  # the generator must produce feasible cases too


def test_a_large_world_with_gapped_sizes_is_planned_without_enumeration():
    plan = plan_batches(100_003, 1000, [64, 100, 137])
    assert sum(plan.local_batches) == 100_003
    assert plan.accum_steps == 1


def test_micro_batches_that_overshoot_the_batch_give_a_value_error_that_says_so():
    with pytest.raises(ValueError, match=r"4 ranks at the smallest micro-batch \(3\) already take 12 samples"):
        plan_batches(10, 4, 3)


def test_a_batch_no_accumulation_count_can_reach_gives_a_value_error_naming_the_inputs():
    with pytest.raises(ValueError, match=r"global batch 97 on 8 ranks with micro-batch sizes \[4, 8\] "
                                         r"and at most 64 accumulation steps"):
        plan_batches(97, 8, [4, 8])


def test_max_accum_bounds_the_accumulation_steps():
    assert plan_batches(64, 2, 4).accum_steps == 8
    with pytest.raises(ValueError):
        plan_batches(64, 2, 4, max_accum=7)


@pytest.mark.parametrize("args", [
    (0, 4, 8), (128, 0, 8), (128, 4, []), (128, 4, [0, 8]), (128, 4, 8, 0), (True, 4, 8),
])
def test_arguments_that_are_not_positive_integers_are_refused(args):
    with pytest.raises((ValueError, TypeError)):
        plan_batches(*args)


def test_a_rank_outside_the_plan_is_refused():
    with pytest.raises(ValueError, match="outside a world of 2 ranks"):
        plan_batches(8, 2, 4).local_batch(2)


def test_admissible_world_sizes_are_exactly_those_with_a_plan():
    assert admissible_world_sizes(128, 8, range(1, 33)) == [1, 2, 4, 8, 16]
    assert admissible_world_sizes(128, 8, range(1, 33), max_accum=2) == [8, 16]
    assert admissible_world_sizes(128, [5, 6], [24, 24, 7, 25]) == [24, 25]
    sizes = [3, 4]
    candidates = range(1, 50)
    admitted = admissible_world_sizes(100, sizes, candidates, max_accum=4)
    for w in candidates:
        try:
            plan_batches(100, w, sizes, max_accum=4)
            planned = True
        except ValueError:
            planned = False
        assert planned == (w in admitted)


def test_the_discrete_values_flag_lists_the_node_counts_that_admit_the_batch():
    # 4 ranks per node at micro-batch 8: 4n * 8 * k = 128 needs n to divide 4.
    assert discrete_values_flag(128, 8, 4, range(1, 9)) == "--replica-discrete-values 1,2,4"


def test_an_override_micro_batch_replaces_the_sizes_at_its_node_count():
    overrides = {4: {"microBatchSize": 3, "learningRate": 0.1}, 2: {"learningRate": 0.2}}
    assert discrete_values_flag(128, 8, 4, range(1, 9), overrides=overrides) == \
        "--replica-discrete-values 1,2"


def test_an_override_range_replaces_the_sizes_at_its_node_count_and_admits_uneven_splits():
    # 3 nodes are 12 ranks: 12 x 8 x k is never 128, but 64 = 4 ranks x 6 +
    # 8 ranks x 5 in 2 steps is, from the sizes up to 8.
    overrides = {3: {"maxMicroBatchSize": 8}, 2: {"maxMicroBatchSize": 2}}
    assert discrete_values_flag(128, 8, 4, range(1, 9), overrides=overrides) == \
        "--replica-discrete-values 1,2,3,4"
    # 2 nodes at sizes 1 and 2 take 8 steps (8 ranks x 2): not within 4.
    assert discrete_values_flag(128, 8, 4, range(1, 9), max_accum=4, overrides=overrides) == \
        "--replica-discrete-values 1,3,4"


def test_an_override_gives_one_size_a_range_or_else_the_default_sizes():
    default = [4, 6, 8]
    assert micro_batch_sizes({"microBatchSize": 5, "learningRate": 0.1}, default) == 5
    assert list(micro_batch_sizes({"maxMicroBatchSize": 3}, default)) == [1, 2, 3]
    assert list(micro_batch_sizes({"minMicroBatchSize": 2, "maxMicroBatchSize": 4}, default)) == \
        [2, 3, 4]
    assert micro_batch_sizes({"learningRate": 0.1}, default) is default
    assert micro_batch_sizes({}, default) is default
    assert len(micro_batch_sizes({"maxMicroBatchSize": 1 << 20}, default)) == 1 << 20


@pytest.mark.parametrize("override, message", [
    ({"microBatchSize": 4, "maxMicroBatchSize": 8}, "not both"),
    ({"microBatchSize": 4, "minMicroBatchSize": 2}, "not both"),
    ({"minMicroBatchSize": 2}, "minMicroBatchSize needs maxMicroBatchSize"),
    ({"minMicroBatchSize": 5, "maxMicroBatchSize": 4},
     "minMicroBatchSize 5 is above maxMicroBatchSize 4"),
    ({"maxMicroBatchSize": 0}, "maxMicroBatchSize must be at least 1, got 0"),
    ({"maxMicroBatchSize": (1 << 20) + 1}, "maxMicroBatchSize must be at most 1048576"),
])
def test_an_override_load_overrides_would_refuse_is_refused_by_micro_batch_sizes(override, message):
    with pytest.raises(ValueError, match=message):
        micro_batch_sizes(override, [8])


def test_a_range_that_does_not_divide_the_batch_keeps_it_with_uneven_micro_batches():
    # What elasticctl plan writes for 3 nodes of 8 GPUs at a global batch of
    # 256 when 4 sequences fit: no common micro-batch makes 256 over 24 ranks.
    plan = plan_batches(256, 24, micro_batch_sizes({"maxMicroBatchSize": 4}, [8]))
    assert (plan.micro_batches, plan.accum_steps) == ((3,) * 16 + (2,) * 8, 4)
    assert sum(plan.local_batches) == 256


def test_plans_from_a_range_stay_within_it_and_keep_the_global_batch():
    rng = random.Random(21)
    planned = 0
    for _ in range(2000):
        low = rng.randint(1, 6)
        high = low + rng.randint(0, 10)
        override = {"maxMicroBatchSize": high}
        if low > 1 or rng.random() < 0.5:
            override["minMicroBatchSize"] = low
        g, w, max_accum = rng.randint(1, 400), rng.randint(1, 24), rng.choice([1, 4, 64])
        sizes = micro_batch_sizes(override, [1000])
        want = brute_force_key(g, w, list(sizes), max_accum) if w <= 4 and g <= 60 else None
        try:
            plan = plan_batches(g, w, sizes, max_accum)
        except ValueError:
            assert want is None
            # No k divides g with w x low <= g / k <= w x high: nothing in the range can.
            assert not any(g % k == 0 and w * low <= g // k <= w * high
                           for k in range(1, max_accum + 1))
            continue
        assert all(low <= m <= high for m in plan.micro_batches), (override, plan)
        assert sum(plan.local_batches) == g
        assert max(plan.micro_batches) - min(plan.micro_batches) <= 1
        if want is not None:
            assert key(plan) == want
        planned += 1
    assert 500 < planned < 2000


def test_a_plan_a_range_cannot_make_names_the_range_in_a_few_characters():
    # A hand-written maxMicroBatchSize at the cap: a million sizes, one line.
    sizes = micro_batch_sizes({"maxMicroBatchSize": 1 << 20}, [8])
    with pytest.raises(ValueError) as e:
        plan_batches(10, 20, sizes)
    assert "micro-batch sizes [1..1048576] and at most 64" in str(e.value)
    assert len(str(e.value)) < 300
    with pytest.raises(ValueError, match=r"sizes \[1, 2, 4\.\.6, 9\] and"):
        plan_batches(5, 10, [9, 1, 2, 4, 5, 6])


def test_no_admissible_node_count_is_a_value_error_rather_than_an_empty_flag():
    with pytest.raises(ValueError, match="no node count in"):
        discrete_values_flag(97, 8, 4, range(1, 9))


def test_a_plan_is_an_immutable_value():
    plan = plan_batches(8, 2, 4)
    assert plan == BatchPlan(8, (4, 4), 1)
    with pytest.raises(AttributeError):
        plan.accum_steps = 2

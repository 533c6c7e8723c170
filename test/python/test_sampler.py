"""ElasticSampler: exactly-once data within an epoch across resizes."""

import itertools
import json
import random

import pytest

from elasticrun.batch import plan_batches
from elasticrun.sampler import ElasticSampler, _Permutation


def random_split(rng, total, parts):
    """total as `parts` positive ints, uneven at random."""
    cuts = sorted(rng.sample(range(1, total), parts - 1))
    return [b - a for a, b in zip([0] + cuts, cuts + [total])]


def run_step(state, dataset_len, seed, shuffle, drop_last, local_batches, rng):
    """One optimizer step at a world of len(local_batches), every rank a
    fresh sampler restored from `state` as a restarted worker would be.
    Returns (the step's indices in rank order, the state after it)."""
    taken, states = [], []
    for rank in range(len(local_batches)):
        sampler = ElasticSampler(dataset_len, seed=seed, shuffle=shuffle, drop_last=drop_last)
        sampler.load_state_dict(state)
        sampler.set_world(rank, len(local_batches), local_batches)
        expected = sampler.step_indices()
        # Half the ranks read through iteration, as a DataLoader would.
        if rng.random() < 0.5:
            got = list(itertools.islice(iter(sampler), len(expected)))
        else:
            got = expected
        assert got == expected
        taken.extend(got)
        sampler.advance()
        states.append(sampler.state_dict())
    assert all(s == states[0] for s in states), "ranks disagree on the data position"
    return taken, states[0]


def test_every_sample_is_seen_once_per_epoch_across_random_resizes_with_uneven_batches():
    rng = random.Random(20240607)
    total_resizes = 0
    for case in range(300):
        dataset_len = rng.randint(1, 300)
        global_batch = rng.randint(1, 40)
        seed = rng.randrange(2**64)
        shuffle = rng.random() < 0.8
        drop_last = rng.random() < 0.3
        state = ElasticSampler(dataset_len, seed=seed, shuffle=shuffle).state_dict()
        seen = []
        resizes = 0
        while True:
            world = rng.randint(1, min(8, global_batch))
            local_batches = random_split(rng, global_batch, world)
            probe = ElasticSampler(dataset_len, seed=seed, shuffle=shuffle, drop_last=drop_last)
            probe.load_state_dict(state)
            probe.set_world(0, world, local_batches)
            if probe.steps_left == 0:
                break
            for _ in range(rng.randint(1, probe.steps_left)):
                taken, state = run_step(state, dataset_len, seed, shuffle, drop_last,
                                        local_batches, rng)
                seen.extend(taken)
            resizes += 1
        total_resizes += resizes - 1
        assert len(seen) == len(set(seen)), f"case {case}: a sample was seen twice"
        expected_count = dataset_len - (dataset_len % global_batch if drop_last else 0)
        assert len(seen) == expected_count, f"case {case}: samples were lost"
        # Not only once: in the permutation's order, whatever the world sizes were.
        assert seen == _Permutation(dataset_len, seed, 0, shuffle).take(0, expected_count)
    assert total_resizes > 300  # the generator must resize mid-epoch, and often


def test_the_job_sees_the_same_order_at_a_fixed_world_size_and_across_resizes():
    def run(worlds):
        # worlds: (local batches, steps) per segment; global batch 12 throughout.
        state = ElasticSampler(120, seed=7).state_dict()
        order = []
        for local_batches, steps in worlds:
            for _ in range(steps):
                taken, state = run_step(state, 120, 7, True, False, local_batches, random.Random(0))
                order.append(taken)
        return order

    fixed = run([([3, 3, 3, 3], 10)])
    resized = run([([6, 6], 3), ([5, 4, 3], 4), ([12], 1), ([2, 2, 2, 2, 2, 2], 2)])
    assert fixed == resized
    assert sorted(itertools.chain(*fixed)) == list(range(120))


def test_a_resize_mid_epoch_continues_from_the_saved_position():
    old = [ElasticSampler(20, seed=0, shuffle=False) for _ in range(2)]
    for rank, sampler in enumerate(old):
        sampler.set_world(rank, 2, [3, 3])
    assert [s.step_indices() for s in old] == [[0, 1, 2], [3, 4, 5]]
    for sampler in old:
        sampler.advance()
    state = old[1].state_dict()
    assert state["position"] == 6

    new = [ElasticSampler(20, seed=0, shuffle=False) for _ in range(3)]
    for rank, sampler in enumerate(new):
        sampler.load_state_dict(state)
        sampler.set_world(rank, 3, [1, 2, 3])
    assert [s.step_indices() for s in new] == [[6], [7, 8], [9, 10, 11]]


def test_a_batch_plan_gives_the_sampler_its_uneven_local_batches():
    plan = plan_batches(128, 24, [5, 6])
    samplers = [ElasticSampler(1000, seed=3) for _ in range(24)]
    for rank, sampler in enumerate(samplers):
        sampler.set_world(rank, 24, plan)
    assert [len(s.step_indices()) for s in samplers] == list(plan.local_batches)
    assert len({i for s in samplers for i in s.step_indices()}) == 128
    assert samplers[0].global_batch == 128


def test_the_same_seed_gives_the_same_order_and_another_seed_or_epoch_another():
    def order(seed, epoch):
        sampler = ElasticSampler(500, seed=seed)
        sampler.set_epoch(epoch)
        sampler.set_world(0, 1, 500)
        return list(sampler)

    assert order(1, 0) == order(1, 0)
    assert order(1, 0) != order(2, 0)
    assert order(1, 0) != order(1, 1)
    assert sorted(order(1, 1)) == list(range(500))


def test_the_permutation_is_pinned_so_a_resumed_job_and_the_cpp_sdk_agree():
    # Changing the algorithm changes which samples a resumed run sees:
    # the permutation is part of the checkpoint format.
    assert _Permutation(1000, 42, 3, True).take(0, 10) == [692, 695, 15, 597, 790, 267, 473, 276, 201, 458]
    assert _Permutation(5, 0, 0, True).take(0, 5) == [3, 2, 1, 4, 0]


@pytest.mark.parametrize("n", list(range(0, 70)) + [255, 256, 257, 1023, 1025, 4097])
def test_the_permutation_is_a_bijection_at_every_length(n):
    assert sorted(_Permutation(n, n * 31 + 1, n % 3, True).take(0, n)) == list(range(n))


@pytest.mark.parametrize("n", [1000, 4096, 4097, 10_000])
def test_the_shuffled_order_is_far_from_the_identity(n):
    perm = _Permutation(n, 99, 0, True).take(0, n)
    mean = (n - 1) / 2
    cov = sum((i - mean) * (p - mean) for i, p in enumerate(perm))
    var = sum((i - mean) ** 2 for i in range(n))
    assert abs(cov / var) < 0.06  # correlation of position and sample
    assert sum(1 for i, p in enumerate(perm) if i == p) < 10  # about 1 expected


def test_without_shuffle_the_order_is_the_dataset_order():
    sampler = ElasticSampler(10, seed=5, shuffle=False)
    sampler.set_world(1, 2, [2, 3])
    assert list(sampler) == [2, 3, 4, 7, 8, 9]


def test_the_short_last_step_splits_the_tail_in_proportion_to_the_local_batches():
    samplers = [ElasticSampler(10, shuffle=False) for _ in range(2)]
    for rank, sampler in enumerate(samplers):
        sampler.set_world(rank, 2, [1, 3])
    assert samplers[0].steps_left == 3
    assert [list(s) for s in samplers] == [[0, 4], [1, 2, 3, 5, 6, 7, 8, 9]]
    for sampler in samplers:
        sampler.advance(2)
    assert samplers[0].next_step_samples == 2
    assert [s.step_indices() for s in samplers] == [[], [8, 9]]
    for sampler in samplers:
        sampler.advance()
    assert samplers[0].position == 10 and samplers[0].steps_left == 0
    assert samplers[0].next_step_samples == 0 and list(samplers[0]) == []


def test_drop_last_ends_the_epoch_at_the_last_full_step():
    sampler = ElasticSampler(10, shuffle=False, drop_last=True)
    sampler.set_world(1, 2, [1, 3])
    assert sampler.steps_left == 2
    assert list(sampler) == [1, 2, 3, 5, 6, 7]
    sampler.advance(2)
    assert sampler.position == 8 and sampler.steps_left == 0 and sampler.step_indices() == []


def test_len_is_the_number_of_indices_iteration_yields():
    rng = random.Random(11)
    for _ in range(200):
        n = rng.randint(0, 100)
        g = rng.randint(1, 20)
        world = rng.randint(1, min(g, 5))
        split = random_split(rng, g, world)
        sampler = ElasticSampler(n, seed=rng.randrange(1000), drop_last=rng.random() < 0.5)
        sampler.set_world(rng.randrange(world), world, split)
        sampler.advance(rng.randint(0, sampler.steps_left))
        assert len(sampler) == len(list(sampler))


def test_a_new_epoch_starts_at_position_zero_and_the_same_epoch_keeps_the_position():
    sampler = ElasticSampler(30, seed=1)
    sampler.set_world(0, 1, 10)
    sampler.advance(2)
    sampler.set_epoch(0)
    assert sampler.position == 20
    first = list(sampler)
    sampler.advance()
    sampler.set_epoch(1)
    assert (sampler.epoch, sampler.position, sampler.steps_left) == (1, 0, 3)
    second = list(sampler)
    assert sorted(second) == list(range(30)) and second[20:] != first


def test_the_state_is_plain_ints_and_round_trips():
    sampler = ElasticSampler(100, seed=2**63 + 5)
    sampler.set_world(0, 1, 7)
    sampler.set_epoch(4)
    sampler.advance(3)
    state = json.loads(json.dumps(sampler.state_dict()))
    assert all(type(v) is int for v in state.values())
    restored = ElasticSampler(100, seed=2**63 + 5)
    restored.load_state_dict(state)
    restored.set_world(0, 1, 7)
    assert (restored.epoch, restored.position) == (4, 21)
    assert list(restored) == list(sampler)


@pytest.mark.parametrize("change, message", [
    ({"dataset_len": 99}, "dataset_len=99"),
    ({"seed": 4}, "seed=4"),
    ({"shuffle": 0}, "shuffle=0"),
    ({"version": 2}, "version 2"),
    ({"position": 101}, "position 101"),
    ({"epoch": -1}, "epoch -1"),
])
def test_a_state_from_another_dataset_seed_or_format_is_refused(change, message):
    state = ElasticSampler(100, seed=3).state_dict()
    state.update(change)
    with pytest.raises(ValueError, match=message):
        ElasticSampler(100, seed=3).load_state_dict(state)


def test_advancing_past_the_end_of_the_epoch_is_refused():
    sampler = ElasticSampler(10, seed=0)
    sampler.set_world(0, 1, 4)
    with pytest.raises(ValueError, match="cannot advance 4 steps: epoch 0 has 3 left"):
        sampler.advance(4)
    assert sampler.position == 0


def test_a_sampler_without_a_world_says_to_call_set_world():
    sampler = ElasticSampler(10, seed=0)
    with pytest.raises(RuntimeError, match="set_world"):
        iter(sampler)
    with pytest.raises(RuntimeError, match="set_world"):
        sampler.advance()


@pytest.mark.parametrize("rank, world, local, message", [
    (2, 2, [1, 1], "outside a world of 2"),
    (0, 3, [1, 1], "2 local batches for a world of 3"),
    (0, 2, [0, 4], "at least 1"),
    (0, 0, [], "at least 1"),
])
def test_a_world_that_does_not_add_up_is_refused(rank, world, local, message):
    with pytest.raises(ValueError, match=message):
        ElasticSampler(10).set_world(rank, world, local)


def test_a_torch_dataloader_cuts_each_local_batch_into_micro_batches():
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, Sampler

    plan = plan_batches(24, 2, [5, 7])  # (7 + 5) x 2 accumulation steps
    sampler = ElasticSampler(100, seed=9, drop_last=True)
    sampler.set_world(1, 2, plan)
    assert isinstance(sampler, Sampler)
    loader = DataLoader(list(range(100)), batch_size=plan.micro_batch(1), sampler=sampler)
    batches = [b.tolist() for b in loader]
    expected = []
    for step in range(sampler.steps_left):
        indices = sampler.step_indices(step)
        expected += [indices[i:i + plan.micro_batch(1)] for i in range(0, len(indices), plan.micro_batch(1))]
    assert batches == expected
    assert len(batches) == sampler.steps_left * plan.accum_steps
    assert torch.is_tensor(next(iter(loader)))

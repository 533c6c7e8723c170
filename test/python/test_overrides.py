"""load_overrides: worldSizeOverrides of the job config file (docs/job-config.md)."""

import textwrap

import pytest

from elasticrun.batch import CONFIG_FILE_ENV, load_overrides

DOCS_EXAMPLE = """\
# job.yaml: grow from 2 to 8 nodes, at 2, 4 or 8 only.
elasticPolicy:
  minReplicas: 2
  maxReplicas: 8
  replicaDiscreteValues: [2, 4, 8]     # or replicaIncrementStep: 2
  gracefulShutdownTimeoutInSeconds: 120

# The global batch stays constant; these say how to train at each size.
worldSizeOverrides:
  2: {learningRate: 1.0e-4, microBatchSize: 32}
  4: {learningRate: 2.0e-4, microBatchSize: 16}
  8:
    learningRate: 4.0e-4
    microBatchSize: 8
"""


def write(tmp_path, text):
    path = tmp_path / "job.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_the_example_of_the_docs_reads_as_numbers_per_node_count(tmp_path):
    overrides = load_overrides(write(tmp_path, DOCS_EXAMPLE))
    assert overrides == {
        2: {"learningRate": 1.0e-4, "microBatchSize": 32},
        4: {"learningRate": 2.0e-4, "microBatchSize": 16},
        8: {"learningRate": 4.0e-4, "microBatchSize": 8},
    }
    assert type(overrides[8]["microBatchSize"]) is int
    assert type(overrides[8]["learningRate"]) is float


def test_the_file_named_by_the_agent_is_read_by_default(tmp_path, monkeypatch):
    monkeypatch.setenv(CONFIG_FILE_ENV, str(write(tmp_path, DOCS_EXAMPLE)))
    assert load_overrides()[4]["microBatchSize"] == 16


def test_without_a_config_file_there_are_no_overrides(monkeypatch):
    monkeypatch.delenv(CONFIG_FILE_ENV, raising=False)
    assert load_overrides() == {}


@pytest.mark.parametrize("text", [
    "",
    "elasticPolicy:\n  minReplicas: 2\n",
    "worldSizeOverrides:\n",
    "worldSizeOverrides: {}\n",
    "# only a comment\n---\n",
])
def test_a_file_without_overrides_gives_none(tmp_path, text):
    assert load_overrides(write(tmp_path, text)) == {}


def test_an_entry_holds_only_the_keys_the_file_gives_and_exponents_without_a_dot_are_numbers(tmp_path):
    path = write(tmp_path, """\
        worldSizeOverrides:   # per size
          3:
            learningRate: 1e-4   # not a string, as elasticrun reads it
          5: {microBatchSize: +6}
        elasticPolicy: {minReplicas: 1, maxReplicas: 5}
        """)
    assert load_overrides(path) == {3: {"learningRate": 1e-4}, 5: {"microBatchSize": 6}}


def test_a_flow_mapping_over_several_lines_is_read(tmp_path):
    path = write(tmp_path, """\
        worldSizeOverrides: {2: {learningRate: 0.5,
                                 microBatchSize: 4},
                             16: {microBatchSize: 1}}
        """)
    assert load_overrides(path) == {2: {"learningRate": 0.5, "microBatchSize": 4},
                                    16: {"microBatchSize": 1}}


def test_a_range_reads_as_its_bounds_in_either_form_with_comments_after_entries(tmp_path):
    # As elasticctl plan --emit-config writes it: a comment after each entry.
    path = write(tmp_path, """\
        worldSizeOverrides:
          2: {maxMicroBatchSize: 6}  # 2 ranks x 6, 4 accumulation steps
          3:
            minMicroBatchSize: 2
            maxMicroBatchSize: 4
            learningRate: 0.1
        """)
    overrides = load_overrides(path)
    assert overrides == {2: {"maxMicroBatchSize": 6},
                         3: {"minMicroBatchSize": 2, "maxMicroBatchSize": 4, "learningRate": 0.1}}
    assert type(overrides[3]["minMicroBatchSize"]) is int


@pytest.mark.parametrize("body, message", [
    ("  4: {microBatchSize: 4, maxMicroBatchSize: 8}",
     r"line 2: .*4.maxMicroBatchSize: a range, or one size \(microBatchSize\), not both"),
    ("  4: {maxMicroBatchSize: 8, microBatchSize: 4}",
     r"4.microBatchSize: one size, or a range .* not both"),
    ("  4: {minMicroBatchSize: 2, microBatchSize: 4}", r"4.microBatchSize: one size, or a range"),
    ("  4:\n    minMicroBatchSize: 2\n    learningRate: 1",
     r"line 2: .*4.minMicroBatchSize: a range needs maxMicroBatchSize"),
    ("  4: {minMicroBatchSize: 5, maxMicroBatchSize: 4}",
     r"4.maxMicroBatchSize: the range's minimum 5 is above its maximum 4"),
    ("  4: {maxMicroBatchSize: 4, minMicroBatchSize: 5}",
     r"4.minMicroBatchSize: the range's minimum 5 is above its maximum 4"),
    ("  4: {maxMicroBatchSize: 0}", r"4.maxMicroBatchSize: must be at least 1"),
    ("  4: {minMicroBatchSize: 0, maxMicroBatchSize: 2}",
     r"4.minMicroBatchSize: must be at least 1"),
    ("  4: {maxMicroBatchSize: 2.5}", r"4.maxMicroBatchSize: expected an integer"),
    ("  4: {maxMicroBatchSize: 1048577}", r"4.maxMicroBatchSize: must be at most 1048576"),
    ("  4: {learningRate: 1, batch: 2}", r"line 2: worldSizeOverrides: unknown key 'batch' in 4"),
    ("  4: {microBatchSize: \"8\"}", r"line 2: .*4.microBatchSize: expected an integer"),
    ("  4: {microBatchSize: 4.5}", r"expected an integer, got '4.5'"),
    ("  4: {microBatchSize: 0}", r"4.microBatchSize: must be at least 1"),
    ("  4: {learningRate: -0.1}", r"4.learningRate: must not be negative"),
    ("  4: {learningRate: .inf}", r"4.learningRate: expected a number"),
    ("  4: {learningRate: 1_0}", r"4.learningRate: expected a number"),
    ("  0: {learningRate: 1}", r"a world size must be at least 1 node"),
    ("  four: {learningRate: 1}", r"key 'four' is not a world size in nodes"),
    ("  8: {learningRate: 1}\n  08: {learningRate: 2}", r"line 3: .*world size 8 is given twice"),
    ("  8: {learningRate: 1, learningRate: 2}", r"8.learningRate is given twice"),
    ("  8:", r"8: expected a mapping"),
    ("  8: {learningRate: 1", r"line 2: .*expected ',' or '}'"),
    ("  8: [1, 2]", r"expected '\{'"),
    ("  8:\n    learningRate: 1\n      microBatchSize: 2", r"line 4: .*unexpected indentation"),
])
def test_a_section_elasticrun_would_refuse_is_refused_with_its_line(tmp_path, body, message):
    path = write(tmp_path, "worldSizeOverrides:\n" + body + "\n")
    with pytest.raises(ValueError, match=message):
        load_overrides(path)
    assert str(path) in _error(path)


def _error(path):
    try:
        load_overrides(path)
    except ValueError as e:
        return str(e)
    return ""


def test_a_file_over_one_mebibyte_is_refused(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("# " + "x" * (1 << 20) + "\n")
    with pytest.raises(ValueError, match="larger than"):
        load_overrides(path)

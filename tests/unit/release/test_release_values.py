import copy

import pytest
import yaml

from areal_workers.release.client import merge_values
from repo_paths import REPO

CHART = REPO / "charts" / "areal-workers"


def test_no_layers_is_empty():
    assert merge_values() == {}


def test_one_layer_is_an_equal_copy():
    layer = {"a": {"b": [1, {"c": 2}]}, "d": None}
    merged = merge_values(layer)
    assert merged == layer
    assert merged is not layer
    assert merged["a"] is not layer["a"]
    assert merged["a"]["b"] is not layer["a"]["b"]
    assert merged["a"]["b"][1] is not layer["a"]["b"][1]


def test_maps_merge_deeply():
    base = {"workerDefaults": {"resources": {"cpu": "1", "memory": "4Gi", "gpu": 0}, "shm": {"enabled": True}}}
    override = {"workerDefaults": {"resources": {"gpu": 8}, "hostNetwork": True}}
    assert merge_values(base, override) == {
        "workerDefaults": {
            "resources": {"cpu": "1", "memory": "4Gi", "gpu": 8},
            "shm": {"enabled": True},
            "hostNetwork": True,
        }
    }


def test_lists_replace_not_concatenate():
    base = {"image": {"pullSecrets": ["a", "b"]}, "command": ["python", "-m", "x"]}
    override = {"image": {"pullSecrets": ["c"]}, "command": []}
    assert merge_values(base, override) == {"image": {"pullSecrets": ["c"]}, "command": []}


def test_lists_of_maps_replace_whole():
    base = {"tolerations": [{"key": "a", "effect": "NoSchedule"}, {"key": "b"}]}
    override = {"tolerations": [{"key": "c"}]}
    assert merge_values(base, override) == {"tolerations": [{"key": "c"}]}


@pytest.mark.parametrize(
    "old,new",
    [
        (1, 2),
        ("a", "b"),
        (True, False),
        (0, ""),
        ("x", 0),
        (1.5, "2"),
        ({"map": 1}, "scalar"),
        ("scalar", {"map": 1}),
        ([1], {"map": 1}),
        ({"map": 1}, [1]),
    ],
)
def test_scalars_and_mismatched_kinds_replace(old, new):
    assert merge_values({"k": old, "other": 1}, {"k": new}) == {"k": new, "other": 1}


def test_falsy_values_override():
    base = {"enabled": True, "count": 3, "name": "x", "map": {"a": 1}, "list": [1]}
    override = {"enabled": False, "count": 0, "name": "", "map": {}, "list": []}
    assert merge_values(base, override) == {"enabled": False, "count": 0, "name": "", "map": {"a": 1}, "list": []}


def test_none_values_are_kept_as_null():
    """Like helm's merge of -f files: a null replaces the value and stays null (helm then drops the key from
    the chart's defaults)."""
    merged = merge_values({"a": {"b": 1}, "c": 2}, {"a": None, "c": None, "d": None})
    assert merged == {"a": None, "c": None, "d": None}


def test_map_over_null_replaces():
    assert merge_values({"a": None}, {"a": {"b": 1}}) == {"a": {"b": 1}}


def test_later_layers_win():
    layers = [{"x": 1, "m": {"a": 1, "b": 1}}, {"x": 2, "m": {"b": 2, "c": 2}}, {"x": 3, "m": {"c": 3}}]
    assert merge_values(*layers) == {"x": 3, "m": {"a": 1, "b": 2, "c": 3}}
    assert merge_values(*reversed(layers)) == {"x": 1, "m": {"a": 1, "b": 1, "c": 2}}


def test_key_order_keeps_the_first_appearance():
    assert list(merge_values({"b": 1, "a": 1}, {"c": 1, "a": 2})) == ["b", "a", "c"]


def test_inputs_are_not_mutated():
    base = {"roles": {"actor": {"replicas": 2, "env": {"A": "1"}}}, "list": [{"x": 1}]}
    override = {"roles": {"actor": {"env": {"B": "2"}}, "rollout": {"replicas": 1}}, "list": [{"y": 2}]}
    base_before, override_before = copy.deepcopy(base), copy.deepcopy(override)
    merged = merge_values(base, override)
    assert base == base_before and override == override_before
    # the result shares nothing with the inputs
    merged["roles"]["actor"]["env"]["C"] = "3"
    merged["roles"]["rollout"]["replicas"] = 9
    merged["list"][0]["y"] = 99
    assert base == base_before and override == override_before


def test_result_shares_nothing_with_a_base_only_subtree():
    base = {"only_in_base": {"deep": {"list": [1]}}}
    merged = merge_values(base, {"other": 1})
    merged["only_in_base"]["deep"]["list"].append(2)
    assert base == {"only_in_base": {"deep": {"list": [1]}}}


def test_deeply_nested_merge():
    base = {"a": {"b": {"c": {"d": {"e": 1, "f": 1}}}}}
    override = {"a": {"b": {"c": {"d": {"f": 2, "g": 2}}}}}
    assert merge_values(base, override) == {"a": {"b": {"c": {"d": {"e": 1, "f": 2, "g": 2}}}}}


def test_merging_over_the_chart_defaults():
    """A platform values file, then the adapter's values, over values.yaml: the shape helm would see."""
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    platform = {
        "workerDefaults": {
            "nodeSelector": {"pool": "gpu"},
            "tolerations": [{"key": "gpu"}],
            "env": {"HF_HOME": "/cache"},
        }
    }
    adapter = {
        "experiment": "exp",
        "trial": "t",
        "roles": {"actor": {"replicas": 2, "env": {"OMP_NUM_THREADS": "4"}}},
        "workerDefaults": {"terminationGracePeriodSeconds": 30},
    }
    merged = merge_values(defaults, platform, adapter)
    wd = merged["workerDefaults"]
    assert wd["nodeSelector"] == {"pool": "gpu"}
    assert wd["tolerations"] == [{"key": "gpu"}]
    assert wd["env"] == {"HOME": "/tmp", "USER": "areal", "HF_HOME": "/cache"}
    assert wd["terminationGracePeriodSeconds"] == 30
    assert wd["resources"] == defaults["workerDefaults"]["resources"]
    assert merged["roles"] == {"actor": {"replicas": 2, "env": {"OMP_NUM_THREADS": "4"}}}
    assert merged["image"] == defaults["image"]

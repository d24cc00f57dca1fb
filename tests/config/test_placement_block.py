"""The reserved ``placement:`` block of a server instance (docs/scale-out.md): checked like every key."""

from __future__ import annotations

import pytest

from gym_runtime.config.placement import (
    ANY_NODE_MEMORY,
    DEFAULT_NUM_CPUS,
    RELAY_NUM_CPUS,
    Placement,
    default_num_cpus,
    placement_of,
)
from gym_runtime.errors import ConfigError
from tests.config.test_instances_refs import AG, MODEL, RS, base


def _with(block) -> dict:
    cfg = base()
    cfg["res"]["resources_servers"]["r"]["placement"] = block
    return cfg


def _placement_violations(pkg_with, build, block) -> list:
    with pytest.raises(ConfigError) as e:
        build(pkg_with({"configs/a.yaml": _with(block)}, [MODEL, RS, AG]))
    hits = [v for v in e.value.violations if v.code == "GR-CONFIG-PLACEMENT"]
    assert hits and len(hits) == len(e.value.violations), [(v.code, v.message) for v in e.value.violations]
    return hits


def test_a_full_block_is_accepted_and_read(pkg_with, build) -> None:
    block = {
        "num_cpus": 1,
        "num_gpus": 0,
        "memory": "2GiB",
        "resources": {"judge_slots": 1},
        "labels": {"pool": "cpu-heavy"},
        "replicas": 3,
    }
    m = build(pkg_with({"configs/a.yaml": _with(block)}, [MODEL, RS, AG]))
    p = placement_of(m.instances["res"].config)
    assert (p.num_cpus, int(p.memory), p.resources, p.labels, p.replicas) == (
        1.0,
        2 * 1024**3,
        {"judge_slots": 1.0},
        {"pool": "cpu-heavy"},
        3,
    )
    assert p.ray_options() == {
        "num_cpus": 1.0,
        "num_gpus": 0.0,
        "memory": 2 * 1024**3,
        "resources": {"judge_slots": 1.0},
        "label_selector": {"pool": "cpu-heavy"},
    }


def test_a_replica_asking_for_nothing_still_asks_for_one_byte() -> None:
    """Ray sends an actor that asks for no resource to a node it picks among those it holds alive,
    label selector unread: after a node's loss, possibly the lost node (docs/scale-out.md)."""
    relay = Placement(num_cpus=RELAY_NUM_CPUS, labels={"pool": "a"})
    assert relay.ray_options() == {
        "num_cpus": 0.0,
        "num_gpus": 0,
        "memory": ANY_NODE_MEMORY,
        "label_selector": {"pool": "a"},
    }
    assert "memory" not in Placement().ray_options()  # asks for CPU: the scheduler reads the selector
    assert "memory" not in Placement(num_cpus=0, resources={"slots": 1}).ray_options()


def test_no_block_means_defaults_that_fit_a_two_core_node(pkg_with, build) -> None:
    m = build(pkg_with({"configs/a.yaml": base()}, [MODEL, RS, AG]))
    p = placement_of(m.instances["res"].config)
    assert p == Placement() and p.replicas == 1 and p.num_cpus == DEFAULT_NUM_CPUS
    assert 3 * DEFAULT_NUM_CPUS <= 2  # model + agent + resources server on one 2-core node


def test_unknown_key_names_file_key_path_and_the_near_key(pkg_with, build) -> None:
    (v,) = _placement_violations(pkg_with, build, {"num_cpu": 1})
    assert v.file == "configs/a.yaml" and v.key == "res.resources_servers.r.placement.num_cpu"
    assert "unknown placement key `num_cpu`" in v.message and "did you mean `num_cpus`" in v.hint


@pytest.mark.parametrize(
    "block, key, words",
    [
        ({"num_cpus": "two"}, "num_cpus", "valid number, got 'two'"),
        ({"replicas": 0}, "replicas", "greater than or equal to 1"),
        ({"replicas": True}, "replicas", "valid integer, got True"),
        ({"labels": {"pool": True}}, "labels.pool", "valid string, got True"),
        ({"memory": "lots"}, "memory", "could not parse"),
        ({"resources": {"CPU": 2}}, "resources.CPU", "Ray's built-in resources"),
        ({"retry_run_on_node_loss": "yes"}, "retry_run_on_node_loss", "valid boolean, got 'yes'"),
    ],
)
def test_wrong_types_and_values_name_the_key(pkg_with, build, block, key, words) -> None:
    (v,) = _placement_violations(pkg_with, build, block)
    assert v.key == f"res.resources_servers.r.placement.{key}" and v.file == "configs/a.yaml"
    assert words in v.message


def test_retry_run_on_node_loss_is_off_unless_declared(pkg_with, build) -> None:
    assert Placement().retry_paths() == frozenset()
    m = build(pkg_with({"configs/a.yaml": _with({"retry_run_on_node_loss": True})}, [MODEL, RS, AG]))
    assert placement_of(m.instances["res"].config).retry_paths() == {"/run"}


def test_a_misspelt_retry_key_gets_the_near_key(pkg_with, build) -> None:
    (v,) = _placement_violations(pkg_with, build, {"retry_run_on_nodeloss": True})
    assert "did you mean `retry_run_on_node_loss`" in v.hint


def test_block_that_is_not_a_mapping(pkg_with, build) -> None:
    (v,) = _placement_violations(pkg_with, build, 4)
    assert v.key == "res.resources_servers.r.placement" and "must be a mapping" in v.message


def test_validate_cli_reports_a_bad_block_with_its_code(pkg_with, tmp_path, capsys) -> None:
    from gym_runtime.cli.main import main

    pkg = pkg_with({"configs/a.yaml": _with({"replica": 2})}, [MODEL, RS, AG])
    code = main(["validate", str(pkg)])
    err = capsys.readouterr()
    assert code == 1
    assert "GR-CONFIG-PLACEMENT" in err.out + err.err and "did you mean `replicas`" in err.out + err.err


def test_the_generated_relay_reserves_no_cpu_and_every_other_server_the_default(pkg_with, build) -> None:
    m = build(pkg_with({"configs/a.yaml": base()}, [MODEL, RS, AG]))
    relays = [i for i in m.instances.values() if i.server_type == "environment_servers"]
    assert relays and all(i.server_dir.origin == "builtin" for i in relays)
    for inst in m.instances.values():
        p = placement_of(inst.config, default_num_cpus(inst.server_type, inst.server_dir.origin))
        assert p.num_cpus == (RELAY_NUM_CPUS if inst in relays else DEFAULT_NUM_CPUS) and RELAY_NUM_CPUS == 0
    assert default_num_cpus("environment_servers", "package") == DEFAULT_NUM_CPUS  # declared by a package
    assert placement_of({"placement": {"num_cpus": 2}}, RELAY_NUM_CPUS).num_cpus == 2.0  # a block's value wins
    assert placement_of({"placement": {"replicas": 2}}, RELAY_NUM_CPUS).num_cpus == RELAY_NUM_CPUS

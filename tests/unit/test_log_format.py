"""log_format "json": the scheduler's log lines as one JSON object each on stderr, written once (not also through
AReaL's root handlers), with the release and namespace; "text" gives the lines back to AReaL's logging."""

from __future__ import annotations

import json
import logging
import sys

import pytest

from areal_workers import KubernetesScheduler, KubernetesSchedulerConfig, log_format as log_format_module
from areal_workers.areal_types import Job, SchedulingSpec
from areal_workers.config import ConfigError
from areal_workers.log_format import JsonLines, apply
from memory_backend import MemoryCluster, memory_connect

FIELDS = {"release": "aw-exp-t", "namespace": "rl"}


@pytest.fixture(autouse=True)
def text_again():
    yield
    apply("text", {})


def lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_a_record_is_one_json_object_with_the_fields_and_its_traceback():
    logger = logging.getLogger("areal_workers.test")
    try:
        raise ValueError("bad value")
    except ValueError:
        record = logger.makeRecord(
            logger.name, logging.ERROR, __file__, 1, "rolled back %s", ("aw-exp-t",), sys.exc_info()
        )
    entry = json.loads(JsonLines(FIELDS).format(record))
    assert entry["level"] == "ERROR" and entry["logger"] == "areal_workers.test"
    assert entry["message"] == "rolled back aw-exp-t"
    assert entry["release"] == "aw-exp-t" and entry["namespace"] == "rl"
    assert entry["time"].endswith("Z") and "T" in entry["time"]
    assert "ValueError: bad value" in entry["exception"]
    assert "\n" not in JsonLines(FIELDS).format(record)  # one line, whatever the traceback


def test_json_lines_go_to_stderr_once_and_text_gives_them_back_to_the_root_handlers(capsys, caplog):
    caplog.set_level(logging.INFO, logger="areal_workers")
    apply("json", FIELDS)
    apply("json", FIELDS)  # a second scheduler replaces the handler: still one line per record
    logging.getLogger("areal_workers.orchestration.driver").info("revision %d written", 3)
    [entry] = lines(capsys.readouterr().err)
    assert entry["message"] == "revision 3 written" and entry["release"] == "aw-exp-t"
    assert caplog.records == []  # not through the root logger's handlers as well

    apply("text", {})
    logging.getLogger("areal_workers.orchestration.driver").info("revision %d written", 4)
    assert capsys.readouterr().err == ""
    assert [r.getMessage() for r in caplog.records] == ["revision 4 written"]
    assert not any(isinstance(h, log_format_module._JsonHandler) for h in logging.getLogger("areal_workers").handlers)


def test_a_scheduler_with_log_format_json_writes_its_lines_as_json_with_its_release(capsys, caplog):
    caplog.set_level(logging.INFO, logger="areal_workers")
    cluster = MemoryCluster("aw-json")

    def scheduler(log_format: str) -> KubernetesScheduler:
        config = KubernetesSchedulerConfig(namespace="rl", release_name="aw-json", log_format=log_format)
        return KubernetesScheduler(
            config=config, experiment_name="exp", trial_name="t", connect=memory_connect(cluster)
        )

    first = scheduler("text")
    task = SchedulingSpec(cpu=1, mem=1, gpu=0, port_count=1, image="example.com/areal:1", cmd="python -m x")
    first.create_workers(Job(role="actor", replicas=1, tasks=[task]))
    first.close()
    capsys.readouterr()
    scheduler("json").close()  # a restarted trainer's scheduler adopts the release, and says so
    written = lines(capsys.readouterr().err)
    assert any(entry["message"].startswith("adopted release aw-json revision 1") for entry in written), written
    assert all(entry["release"] == "aw-json" and entry["namespace"] == "rl" for entry in written)
    assert all(entry["logger"].startswith("areal_workers.") for entry in written)


def test_the_setting_comes_from_the_environment_and_a_wrong_one_is_refused():
    assert KubernetesSchedulerConfig.from_env({"AREAL_K8S_LOG_FORMAT": "json"}).log_format == "json"
    assert KubernetesSchedulerConfig.from_env({}).log_format == "text"
    with pytest.raises(ConfigError, match="log_format must be one of text, json, got 'yaml'"):
        KubernetesSchedulerConfig.from_env({"AREAL_K8S_LOG_FORMAT": "yaml"})

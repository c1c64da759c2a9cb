"""trainer_address: the form is checked with the config, the address against this machine's interfaces, and AReaL's
gethostip() answers it wherever AReaL's modules bound the function (stand-in modules: AReaL is not in this
environment; tests/integration/test_rollout_controller.py runs AReaL's own RolloutController with it)."""

from __future__ import annotations

import sys
import types

import pytest

from areal_workers import KubernetesSchedulerConfig
from areal_workers.config import ConfigError
from areal_workers.trainer_address import NETWORK_MODULE, advertise, check_local_address


def test_the_config_refuses_what_is_not_an_ip_address():
    with pytest.raises(
        ConfigError, match=r"trainer_address must be an IP address the worker pods can reach, got 'trainer.local'"
    ):
        KubernetesSchedulerConfig(trainer_address="trainer.local")
    assert KubernetesSchedulerConfig.from_env({"AREAL_K8S_TRAINER_ADDRESS": "127.0.0.1"}).trainer_address == "127.0.0.1"


def test_an_address_no_interface_holds_is_refused_with_the_fix():
    check_local_address("127.0.0.1")
    with pytest.raises(ConfigError) as refused:
        check_local_address("192.0.2.254")  # TEST-NET-1: binding fails locally, nothing is sent
    assert str(refused.value).startswith("trainer_address 192.0.2.254 is not an address of this machine")
    assert "ip -brief address" in str(refused.value)


@pytest.fixture
def areal_modules(monkeypatch):
    """AReaL's network module and a controller module that imported gethostip by name, as AReaL's do."""

    def gethostip(probe_host: str = "8.8.8.8", probe_port: int = 80) -> str:
        return "192.0.2.2"

    network = types.ModuleType(NETWORK_MODULE)
    network.gethostip = gethostip
    controller = types.ModuleType("areal.infra.controller.rollout_controller")
    controller.gethostip = gethostip
    for module in (network, controller):
        monkeypatch.setitem(sys.modules, module.__name__, module)
    return network, controller


def test_advertise_answers_the_address_in_every_module_that_bound_gethostip(areal_modules):
    network, controller = areal_modules
    changed = advertise("127.0.0.1")
    assert changed == [controller.__name__, NETWORK_MODULE]
    assert network.gethostip() == controller.gethostip() == "127.0.0.1"
    assert advertise("::1" if _has_ipv6_loopback() else "127.0.0.1") == changed  # a second call replaces the first
    assert network.gethostip.__wrapped__() == "192.0.2.2"  # AReaL's own function, kept


def test_a_refused_address_changes_nothing(areal_modules):
    network, controller = areal_modules
    with pytest.raises(ConfigError):
        advertise("192.0.2.254")
    assert network.gethostip() == controller.gethostip() == "192.0.2.2"


def _has_ipv6_loopback() -> bool:
    try:
        check_local_address("::1")
    except (ConfigError, OSError):
        return False
    return True

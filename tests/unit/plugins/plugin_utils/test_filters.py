"""The filters that hand their arguments to the monitoring engine (plugin_utils._filters): each
is the engine's function, and the engine's refusal reaches the task as Ansible's filter error
naming the filter, with the engine's message; any other error is not disguised."""
import importlib

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.pro6000.inference.plugins.module_utils import _monitoring
from ansible_collections.pro6000.inference.plugins.plugin_utils._filters import engine_filters

# Each filter with arguments its engine refuses (monitoring_exposure refuses nothing: it only
# sorts addresses, so it is checked for its name alone).
MONITORING_FILTERS = {
    "metrics_listen_address": ([["10.0.0.0/33"]], {}),
    "prometheus_scrape_configs": ([[{"host": "h"}, {"host": "h"}]], {}),
    "smoke_textfile": (["not a result"], {}),
    "web_config": ([{"prometheus": ""}, "site"], {}),
}


def filters_of(name):
    return importlib.import_module("ansible_collections.pro6000.inference.plugins.filter." + name).FilterModule().filters()


@pytest.mark.parametrize("name", sorted(MONITORING_FILTERS) + ["monitoring_exposure"])
def test_each_file_offers_its_own_filter_only(name):
    assert list(filters_of(name)) == [name]


@pytest.mark.parametrize("name", sorted(MONITORING_FILTERS))
def test_each_filter_names_itself_in_the_engines_refusal(name):
    filters = filters_of(name)
    args, kwargs = MONITORING_FILTERS[name]
    with pytest.raises(_monitoring.MonitoringError) as engine:
        getattr(_monitoring, name)(*args, **kwargs)
    with pytest.raises(AnsibleFilterError) as refused:
        filters[name](*args, **kwargs)
    assert str(refused.value).startswith(name + ": ") and str(engine.value) in str(refused.value)


def test_the_filter_is_the_engine_and_other_errors_pass_unchanged():
    def engine(value, scale=1):
        if value is None:
            raise TypeError("no value")
        if value < 0:
            raise ValueError("negative")
        return value * scale

    double = engine_filters(ValueError, double=engine)["double"]
    assert double(2, scale=2) == 4
    with pytest.raises(AnsibleFilterError, match="^double: negative$"):
        double(-1)
    with pytest.raises(TypeError):
        double(None)

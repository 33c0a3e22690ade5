"""The batches in which site.yml and deploy.yml roll over a fleet, as ansible-core itself cuts
them (PlaybookExecutor's serial batching over the play's templated `serial`): a canary host
first, then a quarter of the fleet at a time; `site_serial` forces any other batching."""
import os
import pathlib

import pytest
from ansible import context
from ansible._internal._templating._engine import TemplateEngine
from ansible.executor.playbook_executor import PlaybookExecutor
from ansible.inventory.manager import InventoryManager
from ansible.module_utils.common.collections import ImmutableDict
from ansible.parsing.dataloader import DataLoader
from ansible.playbook.play import Play
from ansible.vars.manager import VariableManager

REPO = pathlib.Path(__file__).resolve().parents[2]
PLAYBOOKS = ["playbooks/site.yml", "playbooks/deploy.yml"]


@pytest.fixture(autouse=True)
def stdio_stays_inheritable():
    """The executor's TaskQueueManager makes stdin, stdout and stderr non-inheritable, as
    ansible-playbook wants for itself (ansible-core 2.21 does; 2.19 did not); left so in the test process,
    every later test's ansible-playbook would start without a stdin and its workers die ("Could
    not detach from stdio")."""
    before = {fd: os.get_inheritable(fd) for fd in (0, 1, 2)}
    yield
    for fd, inheritable in before.items():
        os.set_inheritable(fd, inheritable)


def batch_sizes(playbook, hosts, extra_vars, tmp_path):
    inventory_file = tmp_path / "hosts.ini"
    inventory_file.write_text("[pro6000]\n" + "\n".join(f"host{i}" for i in range(hosts)) + "\n")
    context.CLIARGS = ImmutableDict(syntax=False, start_at_task=None, forks=10, listhosts=False,
                                    listtasks=False, listtags=False)
    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources=[str(inventory_file)])
    variables = VariableManager(loader=loader, inventory=inventory)
    variables._extra_vars = extra_vars
    # The play's own hosts and batching keywords, without its roles (the collection's role
    # loader is not needed to cut batches).
    keywords = loader.load_from_file(str(REPO / playbook), trusted_as_template=True)[0]
    play = Play.load({key: keywords[key] for key in ("name", "hosts", "serial")}
                     | {"gather_facts": False}, variable_manager=variables, loader=loader)
    # As PlaybookExecutor.run does before it cuts the batches.
    play.post_validate(TemplateEngine(loader=loader, variables=variables.get_vars(play=play)))
    executor = PlaybookExecutor([str(REPO / playbook)], inventory, variables, loader, passwords={})
    return [len(batch) for batch in executor._get_serialized_batches(play)]


@pytest.mark.parametrize("playbook", PLAYBOOKS)
@pytest.mark.parametrize(("hosts", "sizes"), [(1, [1]), (2, [1, 1]), (4, [1, 1, 1, 1]),
                                              (8, [1, 2, 2, 2, 1]), (40, [1] + [10] * 3 + [9])])
def test_a_canary_then_a_quarter_of_the_fleet_at_a_time(playbook, hosts, sizes, tmp_path):
    assert batch_sizes(playbook, hosts, {}, tmp_path) == sizes


@pytest.mark.parametrize("playbook", PLAYBOOKS)
@pytest.mark.parametrize(("site_serial", "sizes"), [("1", [1] * 8), ("8", [8]), ("50%", [4, 4]),
                                                    ([1, 3, "100%"], [1, 3, 4])])
def test_site_serial_forces_any_batching(playbook, site_serial, sizes, tmp_path):
    assert batch_sizes(playbook, 8, {"site_serial": site_serial}, tmp_path) == sizes

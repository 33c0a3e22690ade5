"""replace_file through the real AnsibleModule.atomic_move, which gives a new file the umask's
mode and an existing one its old mode."""
import os
import stat

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.testing import patch_module_args

from ansible_collections.pro6000.inference.plugins.module_utils._files import replace_file


@pytest.fixture
def module():
    with patch_module_args({}):
        return AnsibleModule(argument_spec={})


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("existing_mode", [None, 0o666])
def test_the_file_gets_the_content_and_the_mode_asked_for_and_no_temporary_file_stays(tmp_path, module, existing_mode):
    target = tmp_path / "journal.json"
    if existing_mode is not None:
        target.write_bytes(b"old")
        os.chmod(target, existing_mode)
    old_umask = os.umask(0o022)
    try:
        replace_file(str(target), b'{"a": 1}\n', 0o600, module.atomic_move)
    finally:
        os.umask(old_umask)
    assert target.read_bytes() == b'{"a": 1}\n' and mode(target) == 0o600
    assert os.listdir(tmp_path) == ["journal.json"]


def test_a_failed_move_leaves_the_old_file_and_no_temporary_file(tmp_path):
    target = tmp_path / "result.json"
    target.write_bytes(b"old")

    def failing_move(src, dest):
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        replace_file(str(target), b"new", 0o644, failing_move)
    assert target.read_bytes() == b"old" and os.listdir(tmp_path) == ["result.json"]

"""host_state run as Ansible runs it (a process reading an args file) against files in a
temporary folder and this machine's real dpkg database; the systemctl parser against output
captured from systemd 252 in a lab container."""
import hashlib
import json
import grp
import os
import pwd

import pytest

from support import load_module, REPO_ROOT, run_module_file

host_state = load_module("host_state", REPO_ROOT / "plugins" / "modules" / "host_state.py")

# `systemctl show --property=Id,LoadState,ActiveState,UnitFileState,InvocationID -- ...` in a lab
# container (Debian 12's systemd 252): a running replica, a unit that does not exist, an enabled
# unit that is not running, in the order asked.
SYSTEMCTL_SHOW = """Id=sglang-qwen-0.service
LoadState=loaded
ActiveState=active
UnitFileState=enabled
InvocationID=a1041905b76d414788915dbd332d3a44

Id=smg-gateway.service
LoadState=not-found
ActiveState=inactive
UnitFileState=
InvocationID=

Id=nvidia-persistenced.service
LoadState=loaded
ActiveState=inactive
UnitFileState=enabled
InvocationID=
"""


def run(tmp_path, **args):
    return run_module_file("host_state", args, tmp_path)


def sha1(data):
    return hashlib.sha1(data).hexdigest()


def test_a_host_as_wanted_has_no_drift(tmp_path):
    conf = tmp_path / "cuda.sh"
    conf.write_bytes(b"export PATH=/usr/local/cuda/bin:$PATH\n")
    conf.chmod(0o644)
    (tmp_path / "cuda").symlink_to("/etc/alternatives/cuda")
    (tmp_path / "facts").mkdir()
    (tmp_path / "facts" / "cuda_toolkit.fact").write_text(json.dumps({"default_version": "13.1", "count": 16}))
    result = run(tmp_path,
                 files=[{"path": str(conf), "checksum": sha1(conf.read_bytes()), "mode": "0644"},
                        {"path": str(tmp_path / "cuda"), "state": "link", "src": "/etc/alternatives/cuda"},
                        {"path": str(tmp_path), "state": "directory"},
                        {"path": str(tmp_path / "gone"), "state": "absent"}],
                 packages={"dpkg": "present", "pro6000-no-such-package": "absent"},
                 record={"name": "cuda_toolkit", "fact_path": str(tmp_path / "facts"),
                         "match": {"default_version": "13.1", "count": "16"}})
    assert result["changed"] is False
    assert result["drift"] == [], result
    assert result["files"][1] == {"path": str(tmp_path / "cuda"), "state": "link", "src": "/etc/alternatives/cuda",
                                  "owner": pwd.getpwuid(os.getuid()).pw_name,
                                  "group": grp.getgrgid(os.getgid()).gr_name, "mode": "0777"}
    # What was read is what a later run can be compared with.
    assert run(tmp_path, files=result["files"])["drift"] == []
    assert result["packages"]["dpkg"] and result["packages"]["pro6000-no-such-package"] is None
    assert result["record"] == {"default_version": "13.1", "count": 16}


def test_every_difference_is_named(tmp_path):
    conf = tmp_path / "blacklist.conf"
    conf.write_text("edited by hand\n")
    conf.chmod(0o600)
    (tmp_path / "cuda").symlink_to("/usr/local/cuda-13.0")
    (tmp_path / "stray").mkdir()
    (tmp_path / "facts").mkdir()
    (tmp_path / "facts" / "nvidia_driver.fact").write_text(json.dumps({"version": "580.95.05"}))
    result = run(tmp_path,
                 files=[{"path": str(conf), "checksum": sha1(b"blacklist nouveau\n"), "mode": "0644"},
                        {"path": str(tmp_path / "cuda"), "state": "link", "src": "/usr/local/cuda-13.1"},
                        {"path": str(tmp_path / "missing.conf")},
                        {"path": str(tmp_path / "stray"), "state": "absent"}],
                 packages={"pro6000-no-such-package": "1.0-1", "dpkg": "0.0-0"},
                 record={"name": "nvidia_driver", "fact_path": str(tmp_path / "facts"),
                         "match": {"version": "590.48.01", "flavour": "open"}})
    dpkg_version = result["packages"]["dpkg"]
    assert result["drift"] == [
        f"{conf}: content differs from the wanted one",
        f"{conf}: mode 0600, wanted 0644",
        f"{tmp_path / 'cuda'}: points at /usr/local/cuda-13.0, wanted /usr/local/cuda-13.1",
        f"{tmp_path / 'missing.conf'}: missing, wanted file",
        f"{tmp_path / 'stray'}: a directory, wanted absent",
        f"package dpkg: at {dpkg_version}, wanted 0.0-0",
        "package pro6000-no-such-package: not installed, wanted 1.0-1",
        'nvidia_driver.fact: version is "580.95.05", wanted "590.48.01"',
        'nvidia_driver.fact: no flavour, wanted "open"',
    ]


def test_values_the_controller_knows_are_compared_first(tmp_path):
    result = run(tmp_path, expect=[{"what": "loaded driver", "found": None, "wanted": "590.48.01"},
                                   {"what": "GPUs", "found": 4, "wanted": "4"}],
                 files=[{"path": str(tmp_path / "missing")}])
    assert result["drift"] == ['loaded driver: null, wanted "590.48.01"', f"{tmp_path / 'missing'}: missing, wanted file"]


def test_a_secret_file_is_compared_by_its_checksum_never_shown(tmp_path):
    secret = tmp_path / "api-key"
    secret.write_text("sk-pro6000-secret")
    same = run(tmp_path, files=[{"path": str(secret), "secret_checksum": sha1(b"sk-pro6000-secret"), "mode": "0644"}])
    other = run(tmp_path, files=[{"path": str(secret), "secret_checksum": sha1(b"sk-pro6000-other")}])
    assert same["drift"] == [] and other["drift"] == [f"{secret}: content differs from the wanted one"]
    for result in (same, other):
        assert "checksum" not in result["files"][0]
        assert sha1(b"sk-pro6000-secret") not in json.dumps(result)


def test_a_missing_record_is_drift(tmp_path):
    result = run(tmp_path, record={"name": "sglang", "fact_path": str(tmp_path)})
    assert result["drift"] == ["sglang.fact: no record, wanted one"] and result["record"] is None


def test_owner_and_group_are_names(tmp_path):
    path = tmp_path / "owned"
    path.write_text("x")
    result = run(tmp_path, files=[{"path": str(path), "owner": "nobody-pro6000", "group": "root"}])
    found = result["files"][0]
    assert found["owner"] == pwd.getpwuid(os.getuid()).pw_name
    assert result["drift"][0] == f"{path}: owner {found['owner']}, wanted nobody-pro6000"


@pytest.mark.parametrize("args, message", [
    ({"files": [{"path": "/etc/x", "mode": "rw-r--r--"}]}, "files[/etc/x].mode = 'rw-r--r--': must be an octal string"),
    ({"files": [{"path": "/etc/x", "src": "/y"}]}, "files[/etc/x].src is given but state is file"),
    ({"packages": {"nvidia-open": ""}}, "packages nvidia-open: each needs a version string"),
    ({"files": [{"path": "/etc/x", "checksum": "0" * 40, "secret_checksum": "1" * 40}]},
     "checksum and secret_checksum are alternatives"),
    # What the action plugin renders on the controller never reaches the host.
    ({"files": [{"path": "/etc/x", "content": "x"}]}, "rendered by this module's action plugin on the controller"),
    ({"files": [{"path": "/etc/x", "template": "x.j2"}]}, "rendered by this module's action plugin on the controller"),
])
def test_bad_input_is_refused_before_reading(tmp_path, args, message):
    result = run(tmp_path, **args)
    assert result["failed"] and message in result["msg"]


def test_systemctl_show_blocks_map_to_the_units_asked_in_order():
    names = ["sglang-qwen-0.service", "smg-gateway.service", "nvidia-persistenced.service"]
    units = host_state.parse_systemctl_show(SYSTEMCTL_SHOW, names)
    assert units["sglang-qwen-0.service"] == {"load": "loaded", "active": "active", "enabled": "enabled",
                                              "invocation": "a1041905b76d414788915dbd332d3a44"}
    wanted_running = [{"name": name, "active": True, "enabled": True} for name in ("sglang-qwen-0", "smg-gateway",
                                                                                   "nvidia-persistenced")]
    drift = [line for spec in wanted_running for line in host_state.unit_drift(spec, units[host_state.unit_name(spec["name"])])]
    assert drift == ["unit smg-gateway.service: not-found, wanted installed",
                     "unit nvidia-persistenced.service: inactive, wanted active"]
    assert host_state.unit_drift({"name": "nvidia-persistenced", "active": False, "enabled": False},
                                 units["nvidia-persistenced.service"]) == [
        "unit nvidia-persistenced.service: enabled at boot, wanted disabled"]


def test_units_that_systemd_cannot_answer_for_are_drift(tmp_path):
    """This machine's systemctl has no systemd to ask (not the init system): every unit unreadable."""
    result = run(tmp_path, units=[{"name": "dbus", "active": True}])
    if not result["drift"]:
        pytest.skip("systemd runs on this machine")
    assert result["drift"][0].startswith("units unreadable: ")


@pytest.mark.parametrize("recorded, wanted, same", [
    (16, "16", True), (True, "True", True), (False, "false", True), (0.8, "0.8", True),
    ({"a": [1, None]}, {"a": ["1", None]}, True), ("590", "595", False), (None, "", False),
])
def test_record_values_compare_as_templating_hands_them_over(recorded, wanted, same):
    assert (host_state.canonical(recorded) == host_state.canonical(wanted)) is same


def test_broken_rules_fail_naming_each_before_the_host_is_read(tmp_path):
    rules = [{"name": "cuda_toolkit_versions", "value": ["13"], "rule": False, "why": 'must list releases such as "13.1"'},
             {"name": "cuda_toolkit_profile", "value": True, "rule": True, "why": "holds"},
             {"name": "sglang_service_api_key", "value": "(hidden)", "rule": "False", "why": "must not contain whitespace"}]
    result = run(tmp_path, rules=rules, record={"name": "cuda_toolkit", "fact_path": str(tmp_path)})
    assert result["failed"] is True
    assert result["msg"] == ('cuda_toolkit_versions = ["13"]: must list releases such as "13.1"; '
                             'sglang_service_api_key = "(hidden)": must not contain whitespace.')
    assert "drift" not in result


def test_warnings_about_the_wanted_state_are_shown(tmp_path):
    result = run(tmp_path, warnings=['nvidia_driver_branch "590" is past its updates'])
    # ansible-core 2.19 hands a module's warnings to the controller as summaries of events.
    shown = [warning["event"]["msg"] if isinstance(warning, dict) else warning for warning in result["warnings"]]
    assert shown == ['nvidia_driver_branch "590" is past its updates'] and result["drift"] == []


def stage_copy(tmp_path, files, identity):
    """A copy laid out as model_stage leaves it: <dest>.revs/<revision>/ with its marker, <dest> a
    relative link to it."""
    revs = tmp_path / "Qwen3.6-27B.revs"
    copy = revs / identity["revision"]
    copy.mkdir(parents=True)
    marker = dict(identity, commit=identity["revision"], files={})
    for name, data in files.items():
        (copy / name).write_bytes(data)
        marker["files"][name] = {"algo": "sha256", "digest": hashlib.sha256(data).hexdigest(), "size": len(data),
                                 "mtime_ns": (copy / name).stat().st_mtime_ns}
    (copy / ".model_weights.json").write_text(json.dumps(marker))
    (tmp_path / "Qwen3.6-27B").symlink_to(f"Qwen3.6-27B.revs/{identity['revision']}")
    return tmp_path / "Qwen3.6-27B", copy


IDENTITY = {"source": "hub", "repo_id": "Qwen/Qwen3.6-27B", "revision": "8aa9d962952ef7b591050b219808ef68cfad355c",
            "allow_patterns": [], "ignore_patterns": []}


def test_a_staged_copy_is_checked_as_model_stage_keeps_it(tmp_path):
    dest, copy = stage_copy(tmp_path, {"config.json": b"{}", "model.safetensors": b"weights" * 100}, IDENTITY)
    weights = [{"path": str(dest), "identity": IDENTITY}]
    assert run(tmp_path, weights=weights)["drift"] == []

    assert run(tmp_path, weights=[{"path": str(dest), "identity": dict(IDENTITY, revision="0" * 40)}])["drift"] == [
        f'weights {dest}: revision is "{IDENTITY["revision"]}", wanted "{"0" * 40}"']

    os.utime(copy / "config.json", ns=(1, 1))
    assert run(tmp_path, weights=weights)["drift"] == [
        f"weights {dest}: touched since verified (content intact): config.json"]

    (copy / "model.safetensors").write_bytes(b"edited by hand")
    (copy / "config.json").unlink()
    assert run(tmp_path, weights=weights)["drift"] == [
        f"weights {dest}: missing or changed since verified: config.json, model.safetensors"]


def test_weights_that_are_not_a_staged_copy_are_drift(tmp_path):
    (tmp_path / "plain").mkdir()
    (tmp_path / "elsewhere").symlink_to("/srv/models/other")
    result = run(tmp_path, weights=[{"path": str(tmp_path / "plain")}, {"path": str(tmp_path / "elsewhere")}])
    assert result["drift"] == [f"weights {tmp_path / 'plain'}: no staged copy (not a link)",
                               f"weights {tmp_path / 'elsewhere'}: /srv/models/other holds no verified copy"]


def test_a_copy_the_service_user_owns_is_drift_until_it_is_roots(tmp_path):
    # Issue 36, finding 2: the earlier layout gave <dest>.revs and the copies to the service user;
    # the fast path must see that, or no run would take them over.
    dest, copy = stage_copy(tmp_path, {"config.json": b"{}", "model.safetensors": b"weights" * 100}, IDENTITY)
    nobody = pwd.getpwnam("nobody")
    group = grp.getgrgid(nobody.pw_gid).gr_name
    revs = copy.parent
    for path in [revs, copy] + sorted(copy.iterdir()):
        os.chown(path, nobody.pw_uid, nobody.pw_gid)
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    weights = [{"path": str(dest), "identity": IDENTITY, "owner": "root", "group": group, "dir_mode": "0750",
                "file_mode": "0640"}]
    assert run(tmp_path, weights=weights)["drift"] == [
        f"weights {dest}: owner, group or mode in {revs} differ from the wanted ones (directories and the marker "
        f"root's, files root's, group {group}, modes 0750 and 0640)"]
    for path in [revs, copy] + sorted(copy.iterdir()):
        os.chown(path, 0, nobody.pw_gid)
        os.chmod(path, 0o750 if path.is_dir() else 0o640)
    assert run(tmp_path, weights=weights)["drift"] == []
    (copy / "planted").symlink_to("/etc/shadow")
    assert run(tmp_path, weights=weights)["drift"] == [
        f"weights {dest}: {copy / 'planted'} is a symbolic link: refused (root never writes through a link; the "
        f"copies hold only files and directories the module made; remove it)"]

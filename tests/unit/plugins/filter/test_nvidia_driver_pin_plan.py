"""The pinning decision against apt-cache madison output as NVIDIA's repositories answer it:
ubuntu2404 with exact and branch pinning packages (590.48.01-0ubuntu1 in NVIDIA's ubuntu2404
metadata, dsx-ai-factory/infra-controller #6049; 595.71.05-1ubuntu1, NVIDIA/gpu-driver-container
#899), and a layout with the branch pinning package only."""
from ansible_collections.pro6000.inference.plugins.filter.nvidia_driver_pin_plan import pin_plan

REPO = "http://mirror/ubuntu2404/x86_64/"
SOURCE = " | http://mirror/ubuntu2404/x86_64  Packages"


def madison(*rows):
    return ["%s | %s%s" % (name, version, SOURCE) for name, version in rows]


DRIVER = madison(("nvidia-dkms-open", "595.91.07-1ubuntu1"), ("nvidia-dkms-open", "595.71.05-1ubuntu1"),
                 ("nvidia-dkms-open", "590.48.01-0ubuntu1"))
BOTH_PINS = madison(("nvidia-driver-pinning-595", "595.91.07-1ubuntu1"),
                    ("nvidia-driver-pinning-595.71.05", "595.71.05-1ubuntu1"))
BRANCH_PIN = madison(("nvidia-driver-pinning-595", "595.91.07-1"))


def plan(pins, version, branch="595", driver=DRIVER):
    return pin_plan(pins, driver, branch, version, "nvidia-dkms-open", REPO)


def test_exact_pinning_package_when_the_layout_has_it():
    result = plan(BOTH_PINS, "595.71.05")
    assert result["error"] == ""
    assert (result["pinning_package"], result["exact_pin"]) == ("nvidia-driver-pinning-595.71.05", False)
    assert (result["version"], result["package_version"]) == ("595.71.05", "595.71.05-1ubuntu1")


def test_branch_package_plus_own_exact_pin_when_the_layout_has_only_the_branch_one():
    result = plan(BRANCH_PIN, "595.71.05")
    assert result["error"] == ""
    assert (result["pinning_package"], result["exact_pin"]) == ("nvidia-driver-pinning-595", True)
    assert result["package_version"] == "595.71.05-1ubuntu1"
    assert "no package nvidia-driver-pinning-595.71.05: falling back to nvidia-driver-pinning-595" in result["note"]


def test_empty_version_tracks_the_newest_of_the_branch():
    result = plan(BOTH_PINS, "")
    assert (result["pinning_package"], result["exact_pin"]) == ("nvidia-driver-pinning-595", False)
    assert result["version"] == "595.91.07"


def test_unknown_version_names_the_pinning_package_and_the_versions_offered():
    result = plan(BRANCH_PIN, "595.99.99")
    assert result["pinning_package"] == ""
    assert result["error"] == (
        'nvidia_driver_version "595.99.99" is not in %s: it has no package nvidia-driver-pinning-595.99.99 and no '
        'nvidia-dkms-open version 595.99.99 (nvidia-dkms-open has 595.91.07-1ubuntu1, 595.71.05-1ubuntu1, '
        '590.48.01-0ubuntu1).' % REPO)


def test_exact_pinning_package_without_the_driver_version_names_the_driver_package():
    pins = madison(("nvidia-driver-pinning-595.45.04", "595.45.04-1ubuntu1"), ("nvidia-driver-pinning-595", "x"))
    error = plan(pins, "595.45.04")["error"]
    assert "it has no nvidia-dkms-open version 595.45.04 (" in error
    assert "package nvidia-driver-pinning-595.45.04" not in error


def test_unknown_branch_names_both_pinning_packages_looked_for():
    error = plan([], "610.57.04", branch="610")["error"]
    assert error == ('nvidia_driver_branch "610" is not a branch of %s: it has no package '
                     'nvidia-driver-pinning-610.57.04 or nvidia-driver-pinning-610.' % REPO)
    assert plan([], "", branch="610")["error"].endswith("it has no package nvidia-driver-pinning-610.")


def test_a_branch_with_pins_but_no_driver_of_it():
    error = plan(madison(("nvidia-driver-pinning-610", "610.57.04-1ubuntu1")), "", branch="610")["error"]
    assert error.startswith('nvidia_driver_version "610.*" is not in')

"""The ansible-builder definition produces a build context that installs this collection, and
ansible-builder's own introspection reads the collection's meta/execution-environment.yml.

Building the image itself needs a container registry for the base image, which these machines
cannot reach; the build context is as far as a test can go here.
"""
import shutil
import subprocess
import sys

import pytest
import yaml

from pro6000_chatops.inventory import ansible_tool

from chatops_support import REPO_ROOT

pytest.importorskip("ansible_builder", reason="ansible-builder is not installed")


def test_the_definition_installs_the_built_collection_and_its_declared_needs(tmp_path):
    version = yaml.safe_load((REPO_ROOT / "galaxy.yml").read_text())["version"]
    definition = yaml.safe_load((REPO_ROOT / "execution-environment.yml").read_text())
    (requirement,) = definition["dependencies"]["galaxy"]["collections"]
    assert requirement["name"] == f"collections/pro6000-inference-{version}.tar.gz", \
        "execution-environment.yml must name the tarball of galaxy.yml's version"

    shutil.copy(REPO_ROOT / "execution-environment.yml", tmp_path)
    subprocess.run([ansible_tool("ansible-galaxy"), "collection", "build", "--output-path",
                    str(tmp_path / "build"), str(REPO_ROOT)], check=True, capture_output=True)
    context = tmp_path / "context"
    subprocess.run([ansible_tool("ansible-builder"), "create", "-f", str(tmp_path / "execution-environment.yml"),
                    "-c", str(context), "--output-filename", "Containerfile"], check=True, capture_output=True)
    containerfile = (context / "Containerfile").read_text()
    assert 'ARG ANSIBLE_INSTALL_REFS="ansible-core==2.19.14 ansible-runner==2.4.3"' in containerfile

    # The galaxy and introspection stages of the image, run here as the Containerfile runs them.
    collections = tmp_path / "collections"
    subprocess.run([ansible_tool("ansible-galaxy"), "collection", "install", "--force", "-r", "requirements.yml",
                    "-p", str(collections)], cwd=context / "_build", check=True, capture_output=True)
    assert (collections / "ansible_collections/pro6000/inference/meta/execution-environment.yml").is_file()
    subprocess.run([sys.executable, "scripts/introspect.py", "introspect", str(collections),
                    "--write-bindep", str(tmp_path / "bindep.txt"), "--write-pip", str(tmp_path / "pip.txt")],
                   cwd=context / "_build", check=True, capture_output=True)
    assert (tmp_path / "bindep.txt").read_text().splitlines() == [
        "openssh-clients [platform:rpm]  # from collection pro6000.inference",
        "openssh-client [platform:dpkg]  # from collection pro6000.inference",
    ]
    # The image gets the collection's declared Python needs (meta/ee-requirements.txt) and nothing
    # of the developers' requirements.txt.
    declared = [line for line in (REPO_ROOT / "meta/ee-requirements.txt").read_text().splitlines()
                if line and not line.startswith("#")]
    assert declared, "meta/ee-requirements.txt declares the controller's Python needs"
    assert (tmp_path / "pip.txt").read_text().splitlines() == [
        f"{requirement}  # from collection pro6000.inference" for requirement in declared]

# One entry point for everything: `make test` takes a fresh machine to a full test run.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
VENV := .venv
BIN := $(VENV)/bin
export PATH := $(CURDIR)/$(BIN):$(PATH)
export ANSIBLE_COLLECTIONS_PATH := $(CURDIR)/collections
# Longest first (as measured on 2 cores), so that a long one does not start last.
SCENARIOS := default production driver_upgrade sglang_service replicas sglang cuda_toolkit rolling monitoring nvidia_driver \
	model_weights_failures model_weights nvidia_driver_guards chatops_bot harness
# Run by a stage of their own: execution_environment by tests/scripts/ee.sh, once the image exists.
STAGE_SCENARIOS := execution_environment
ifneq ($(sort $(SCENARIOS) $(STAGE_SCENARIOS)),$(sort $(patsubst molecule/%/molecule.yml,%,$(wildcard molecule/*/molecule.yml))))
$(error SCENARIOS and STAGE_SCENARIOS in the Makefile must list every directory under molecule/ with a molecule.yml)
endif
# galaxy-importer and antsibull-changelog: their pins do not resolve with the main toolchain's.
GALAXY_VENV := .cache/venv-galaxy

.PHONY: test venv galaxy-venv host image lint sanity unit integration molecule newest ee galaxy controller-install \
	lab lab-down build clean

# Taken when make reads this file, before the prerequisites: run-all.sh reports the set-up time.
SETUP_STARTED := $(shell date +%s)

# The set-up steps side by side: the virtual environments (pip, about 75 s on a bare machine)
# build while the Docker engine is installed and the base images are bootstrapped, which wait on
# apt and debootstrap more than on the CPU (issue #42).
test:
	$(MAKE) --no-print-directory -j3 venv galaxy-venv image
	PRO6000_SETUP_STARTED=$(SETUP_STARTED) tests/scripts/run-all.sh $(SCENARIOS)

# The main toolchain's Python (ansible-core 2.21 needs >= 3.12): PYTHON=... names one; else
# python3.12 on PATH (Ubuntu 24.04's own, with package python3-venv), else the newest 3.12 that
# pyenv installed (its shim hides one while pyenv's global version is older).
ifndef PYTHON
PYTHON := $(shell for p in python3.12 $$(ls -d $${PYENV_ROOT:-$$HOME/.pyenv}/versions/3.12*/bin/python3.12 2>/dev/null \
	| sort -V -r); do $$p -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null && { command -v $$p; break; }; done)
endif

# A venv of another Python (the 3.11 one of earlier pins) is made anew, not upgraded in place.
$(BIN)/activate: requirements.txt
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null || { \
	  echo "make venv: '$(PYTHON)' is not a working Python >= 3.12; install python3.12 and" \
	    "python3-venv (Ubuntu 24.04's), or name one: make venv PYTHON=/path/to/python3.12" >&2; exit 1; }
	if [ -x $(BIN)/python ] && [ "$$($(BIN)/python -V)" != "$$($(PYTHON) -V)" ]; then rm -rf $(VENV); fi
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -r requirements.txt
	touch $@

venv: $(BIN)/activate

$(GALAXY_VENV)/bin/activate: tests/requirements-galaxy.txt
	python3 -m venv $(GALAXY_VENV)
	$(GALAXY_VENV)/bin/pip install -q -r tests/requirements-galaxy.txt
	touch $@

galaxy-venv: $(GALAXY_VENV)/bin/activate

host:
	tests/scripts/host-setup.sh

image: host
	tests/images/build.sh

lint: venv
	tests/scripts/lint.sh

sanity: venv
	tests/scripts/sanity.sh

unit: venv
	python -m pytest tests/unit chatops/tests -q

integration: venv
	python -m pytest tests/integration -q

# The newest ansible-core line (2.22 on Python 3.13) from a controller image of its own:
# sanity, unit tests and the cuda_toolkit scenario (tests/scripts/newest-lane.sh).
newest: host
	tests/scripts/newest-lane.sh

# The execution environment: built from execution-environment.yml, checked, and smoke.yml run
# in it through ansible-navigator (tests/scripts/ee.sh).
ee: venv host image
	tests/scripts/ee.sh

# antsibull-changelog lint and galaxy-importer on the built tarball, offline.
galaxy: galaxy-venv
	tests/scripts/galaxy-check.sh

# The README's controller install line in a fresh Ubuntu 24.04 container (tests/scripts/controller-install.sh).
controller-install: host image
	tests/scripts/controller-install.sh

# make molecule S=harness runs one scenario; without S, all of them.
molecule: venv host image
	for s in $(or $(S),$(SCENARIOS)); do molecule test -s $$s; done

build: venv
	ansible-galaxy collection build --force --output-path build/

clean:
	rm -rf build .cache

# The lab host is the Molecule `default` scenario's container, so the lab and that scenario
# share one definition; the site itself runs exactly as users run it.
# Molecule's create runs the scenario's prepare too, and each step only when it has not run yet;
# tests/scripts/lab-up.sh first starts a lab stopped by a restart, or clears a vanished one.
lab: venv host image
	tests/scripts/lab-up.sh
	molecule create -s default
	ansible-playbook -i inventories/lab site.yml -l pro6000

lab-down: venv
	molecule destroy -s default

#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: contributors to pro6000.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_server_options
short_description: Report the options, choices and speculative algorithms an SGLang build accepts
version_added: 0.1.0
description:
  - Builds SGLang's own argument parser with the given interpreter, as C(sglang.launch_server)
    does (C(ServerArgs.add_cli_args(argparse.ArgumentParser()))), and reads from the parser
    object the long options it accepts, the values of options with choices, the speculative
    algorithms and how the build offers DDTree (if at all), the default and limits of its DDTree
    budget, whether its mamba validator takes C(extra_buffer_lazy) with speculative decoding,
    plus the installed SGLang version.
  - The C(sglang) role records the result in C(/etc/ansible/facts.d/sglang.fact); the filter
    P(pro6000.inference.sglang_argv#filter) renders only what it lists.
  - Only reads; never changes anything.
options:
  python:
    description: Interpreter of the virtual environment SGLang is installed in.
    type: path
    required: true
  timeout:
    description:
      - Seconds reading the parser may take. Importing SGLang takes seconds, and minutes on a
        busy host when its bytecode was not compiled at install.
    type: int
    default: 300
extends_documentation_fragment:
  - pro6000.inference.attributes
  - pro6000.inference.attributes.read_only
notes:
  - Options a release hides from C(--help) (old aliases such as
    C(--speculative-dflash-draft-window-size) up to 0.5.19) are listed, since the parser accepts them.
  - Releases up to 0.5.9 declare the speculative algorithms as choices; later ones name them in
    the option's help ("Builtins, ..."), which is where they are read from; a build with
    C(--speculative-ddtree-budget) (pull request 29907) offers C(DDTREE).
author:
  - pro6000.inference developers (@pro6000)
"""

EXAMPLES = r"""
- name: Read what the installed SGLang accepts
  pro6000.inference.sglang_server_options:
    python: /opt/sglang/venv/bin/python
  register: __sglang_accepts

- name: Check that this build has DDTree
  ansible.builtin.assert:
    that: __sglang_accepts.ddtree is not none
    fail_msg: "SGLang {{ __sglang_accepts.version }} has no DDTree"
"""

RETURN = r"""
version:
  description: The installed SGLang version (C(importlib.metadata.version("sglang"))).
  returned: success
  type: str
  sample: 0.5.23
options:
  description: Every long option the parser accepts, sorted.
  returned: success
  type: list
  elements: str
  sample: ["--attention-backend", "--host", "--model-path", "--speculative-algorithm"]
choices:
  description: Option to accepted values (sorted), for options with choices.
  returned: success
  type: dict
  sample: {"--mamba-radix-cache-strategy": ["auto", "extra_buffer", "extra_buffer_lazy", "no_buffer"]}
speculative_algorithms:
  description: Values of C(--speculative-algorithm), upper case (its choices, or the builtins its help names).
  returned: success
  type: list
  elements: str
  sample: ["DFLASH", "EAGLE", "EAGLE3", "NEXTN", "NGRAM", "STANDALONE"]
ddtree:
  description:
    - C(algorithm) when C(--speculative-algorithm DDTREE) exists (SGLang pull request 29907),
      C(dflash_flag) when the build has C(--speculative-dflash-enable-ddtree), else null.
  returned: success
  type: str
  sample: algorithm
ddtree_budget:
  description:
    - For a build with C(--speculative-ddtree-budget) (else null) the parser's C(default) (null
      when the parser has none, as pull request 29907's worker then takes the draft length - 1), and
      the C(minimum) and C(maximum) its choices allow (1 and null when it declares none).
  returned: success
  type: dict
  sample: {"default": null, "minimum": 1, "maximum": null}
mamba_lazy_with_speculation:
  description:
    - Whether the build's mamba validator takes C(--mamba-radix-cache-strategy extra_buffer_lazy)
      together with DFLASH-family speculative decoding, read from its source
      (C(ServerArgs._validate_mamba_extra_buffer) up to 0.5.18,
      C(sglang.srt.arg_groups.mamba_hook.validate_mamba_extra_buffer) from 0.5.19), false where
      it asserts "extra_buffer_lazy unsupported with ..." (before SGLang pull request 34763,
      0.5.14 to 0.5.17), null where the build has no C(extra_buffer_lazy) or the validator
      could not be read.
  returned: success
  type: bool
  sample: true
"""

import json
import os
import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.pro6000.inference.plugins.module_utils._sglang.options import (
    accepted,
    describe_parser_code,
)

# No warnings on stdout and a fixed hash seed: some choice lists are sets. Unbuffered, so that
# what a build that dies without a report printed before it died reaches the error message.
ENVIRONMENT = {"PYTHONWARNINGS": "ignore", "PYTHONIOENCODING": "utf-8", "PYTHONHASHSEED": "0",
               "PYTHONUNBUFFERED": "1", "LC_ALL": "C.UTF-8", "TERM": "dumb"}


def _read_parser(module, python):
    """What describe_parser prints, run with the build's interpreter."""
    what = "reading the SGLang argument parser with %s" % python
    # subprocess rather than run_command: run_command has no timeout, and a hung import must
    # not hang the play.
    try:
        proc = subprocess.run([python, "-c", describe_parser_code()], capture_output=True, text=True,  # pylint: disable=ansible-bad-function
                              errors="replace", env=dict(os.environ, **ENVIRONMENT),
                              timeout=module.params["timeout"], check=False)
    except subprocess.TimeoutExpired:
        module.fail_json(msg="%s took longer than %d s" % (what, module.params["timeout"]))
    if proc.returncode != 0:
        module.fail_json(msg="%s failed with exit code %d: %s"
                         % (what, proc.returncode, (proc.stderr or proc.stdout)[-2000:]),
                         rc=proc.returncode, stdout=proc.stdout, stderr=proc.stderr)
    try:
        # The report is the last line: an import may print before it.
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        module.fail_json(msg="%s printed no report: %s" % (what, proc.stdout[-2000:]))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            python=dict(type="path", required=True),
            timeout=dict(type="int", default=300),
        ),
        supports_check_mode=True,
    )
    python = module.params["python"]
    if not os.access(python, os.X_OK):
        module.fail_json(msg="python %s is not an executable interpreter" % python)
    try:
        result = accepted(_read_parser(module, python))
    except ValueError as error:
        module.fail_json(msg="could not read what SGLang accepts: %s" % error)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()

# -*- coding: utf-8 -*-
# Copyright: contributors to pro6000.inference
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Turns the wanted SGLang serving config into the command line one SGLang build accepts, and
says what that command line serves. The one place that decides the speculative settings (the
DDTree budget rule included); every role and playbook reads the plan it returns."""

from __future__ import annotations

DOCUMENTATION = r"""
name: sglang_speculative_plan
short_description: The sglang.launch_server command line a given SGLang build accepts, and what it serves
version_added: 0.1.0
description:
  - Turns the wanted serving config (built by the C(sglang_service) role from its variables) plus
    what the installed SGLang build accepts (the C(sglang) fact, see
    M(pro6000.inference.sglang_server_options)) into the argument list after
    C(python -m sglang.launch_server), together with the speculative settings it serves
    (algorithm, draft length, DDTree budget) and any DDTree to DFLASH fallback.
  - Chooses the flag names that build has (C(--speculative-draft-window-size) or the older
    C(--speculative-dflash-draft-window-size); C(--mamba-radix-cache-strategy) or the older
    C(--mamba-scheduler-strategy); C(--speculative-num-draft-tokens) or
    C(--speculative-dflash-block-size)) and checks every rendered flag, every value with
    choices and every extra argument against the fact, so the unit never fails on
    "unrecognized arguments".
  - "DDTree: C(--speculative-algorithm DDTREE --speculative-ddtree-budget N --page-size 1) on a
    build from SGLang pull request 29907; C(--speculative-algorithm DFLASH
    --speculative-dflash-enable-ddtree) on the fork that offers it that way."
  - "Draft length is the DFlash block size: C(--speculative-num-draft-tokens B) (B-1 drafted
    tokens plus one anchor, at most B tokens committed per verify step). It defaults to the
    drafter's trained C(block_size) and may not exceed it."
  - "The DDTree node budget defaults to B-1 (the default of pull request 29907, and the fixed
    budget of the fork's C(--speculative-dflash-enable-ddtree)); this filter is the one place
    that applies that rule. On the fork, which has no budget option, a budget other than B-1
    is refused."
  - Fails with a message that says what to change when the build cannot serve the config
    (DDTree wanted on a build without it, unless O(_input.allow_ddtree_fallback) is set and the
    build has DFLASH),
    when the draft length exceeds the drafter's block size, when the attention backend does
    not run on the GPU's compute capability, when tensor parallel size exceeds the GPUs
    present, when the DDTree budget or the draft window is out of range.
  - The API key is not part of the command line; the role hands it to the server in a
    config file only root and the service group read (C(--config)).
positional: sglang, drafter
options:
  _input:
    description: The wanted serving config.
    type: dict
    required: true
    suboptions:
      model_path:
        description: Target model directory or hub id (C(--model-path)).
        type: str
        required: true
      served_model_name:
        description: Name the OpenAI API reports (C(--served-model-name)).
        type: str
      host:
        description: Address to bind (C(--host)).
        type: str
      port:
        description: Port to bind (C(--port)), 1 to 65535.
        type: int
      tensor_parallel_size:
        description: GPUs one server spans (C(--tp-size)); at most O(_input.gpu_count).
        type: int
        default: 1
      gpu_count:
        description: GPUs present for this server; unchecked when omitted.
        type: int
      compute_capability:
        description:
          - Compute capability of the GPUs, such as C(12.0) for the RTX PRO 6000 (sm_120).
          - On 12.x the Hopper and data-center Blackwell attention backends (C(fa3), C(flashmla),
            C(cutlass_mla), C(trtllm_mla)) are refused. Unchecked when omitted.
        type: str
      algorithm:
        description: Speculative decoding algorithm.
        type: str
        choices: [ddtree, dflash, none]
        default: dflash
      allow_ddtree_fallback:
        description: Serve DFLASH instead of failing when DDTree is wanted and the build lacks it.
        type: bool
        default: false
      draft_model_path:
        description: Drafter directory or hub id; required unless O(_input.algorithm=none).
        type: str
      draft_model_revision:
        description: Drafter revision, for hub ids.
        type: str
      draft_length:
        description: Block size B (1 to 16); defaults to the drafter's C(block_size).
        type: int
      ddtree_budget:
        description: DDTree node budget, 1 to 1024; unset or V(0) takes draft length - 1.
        type: int
      draft_window:
        description: Drafter sliding window; at least the draft length. Omitted when unset.
        type: int
      attention_backend:
        description: C(--attention-backend); one of the build's choices.
        type: str
      mamba_strategy:
        description:
          - Mamba cache strategy for hybrid targets (C(extra_buffer) works on every release;
            C(auto) needs C(--mamba-radix-cache-strategy)). Omitted when unset.
        type: str
      page_size:
        description: C(--page-size); DDTree needs 1 and renders it.
        type: int
      mem_fraction_static:
        description: C(--mem-fraction-static), above 0 and below 1.
        type: float
      max_running_requests:
        description: C(--max-running-requests).
        type: int
      context_length:
        description: C(--context-length).
        type: int
      enable_metrics:
        description: Add C(--enable-metrics) (needed for C(/metrics)).
        type: bool
        default: false
      extra_args:
        description:
          - Further arguments, appended as given; each flag must exist in the build and must
            not repeat one rendered from the settings above.
        type: list
        elements: str
  sglang:
    description:
      - What the build accepts, as the C(sglang) local fact holds it (C(options), C(choices),
        C(speculative_algorithms), C(ddtree), C(version)).
    type: dict
    required: true
  drafter:
    description:
      - The drafter entry of the C(model_weights) fact; its C(dflash.block_size) (or
        C(block_size)) is the trained block size. Unchecked when omitted.
    type: dict
author:
  - pro6000.inference developers (@pro6000)
"""

EXAMPLES = r"""
- name: Render the command line for the installed build
  ansible.builtin.set_fact:
    __sglang_service_plan: >-
      {{ __sglang_service_wanted
         | pro6000.inference.sglang_speculative_plan(ansible_local.sglang,
             drafter=ansible_local.model_weights.models.drafter) }}
  vars:
    __sglang_service_wanted:
      model_path: /srv/models/Qwen3.6-27B
      draft_model_path: /srv/models/Qwen3.6-27B-DFlash
      algorithm: ddtree
      draft_length: 16
      attention_backend: flashinfer
      compute_capability: "12.0"
      gpu_count: 1
      host: 127.0.0.1
      port: 30000
      enable_metrics: true

# With ansible_local.sglang.ddtree == "algorithm" the result is:
# {"algorithm": "ddtree", "draft_length": 16, "ddtree_budget": 15, "fallback": false, "note": null,
#  "argv": ["--model-path", "/srv/models/Qwen3.6-27B", "--host", "127.0.0.1", "--port", "30000",
#           "--tp-size", "1", "--speculative-algorithm", "DDTREE",
#           "--speculative-draft-model-path", "/srv/models/Qwen3.6-27B-DFlash",
#           "--speculative-num-draft-tokens", "16", "--speculative-ddtree-budget", "15",
#           "--page-size", "1", "--attention-backend", "flashinfer", "--enable-metrics"]}

- name: Report a fallback
  ansible.builtin.debug:
    msg: "{{ __sglang_service_plan.note }}"
  when: __sglang_service_plan.fallback
"""

RETURN = r"""
_value:
  description: The plan.
  type: dict
  contains:
    argv:
      description: Arguments for C(python -m sglang.launch_server), every one accepted by the build.
      type: list
      elements: str
    algorithm:
      description: What is served, C(ddtree), C(dflash) or C(none).
      type: str
    draft_length:
      description: The draft length (block size) rendered; null without speculation or when the server chooses it.
      type: int
    ddtree_budget:
      description: The DDTree node budget served (rendered, or the fork's fixed draft length - 1); null unless DDTree is served.
      type: int
    fallback:
      description: True when DDTree was wanted and DFLASH is served instead.
      type: bool
    note:
      description: Says why a fallback happened; null otherwise.
      type: str
"""

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.text.converters import to_text

ALGORITHMS = ("ddtree", "dflash", "none")
MAX_DRAFT_LENGTH = 16
MAX_DDTREE_BUDGET = 1024
# Attention backends whose kernels are built for sm_90/sm_100 only; on sm_120 (RTX PRO 6000)
# use flashinfer (the default there), triton or trtllm_mha.
NOT_ON_SM12X = ("fa3", "flashmla", "cutlass_mla", "trtllm_mla")
# Where the advice names a setting: the sglang_service role variable, then the wanted key.
GET_DDTREE = "build SGLang from a ref that has DDTree (sglang_git_ref, e.g. refs/pull/29907/head)"
GET_DFLASH = "a release with DFLASH (0.5.14 or later runs this drafter as trained)"


class _Build:
    """The sglang fact, asked about flags; every flag rendered goes through flag()/value()."""

    def __init__(self, fact):
        if not isinstance(fact, dict) or not isinstance(fact.get("options"), list) or not fact["options"]:
            raise AnsibleFilterError("sglang_speculative_plan: the sglang fact has no 'options' list: run the "
                                     "sglang role (or sglang_server_options) first")
        self.options = set(fact["options"])
        self.choices = fact.get("choices") or {}
        self.algorithms = [a.upper() for a in fact.get("speculative_algorithms") or []]
        self.ddtree = fact.get("ddtree")
        self.version = fact.get("version", "unknown")

    def has(self, option):
        return option in self.options

    def first(self, *candidates):
        """The first of several names of one setting that this build accepts, or None."""
        return next((option for option in candidates if option in self.options), None)

    def flag(self, option, why):
        if option not in self.options:
            raise AnsibleFilterError("sglang_speculative_plan: SGLang %s does not accept %s (needed for %s)"
                                     % (self.version, option, why))
        return [option]

    def value(self, option, value, why):
        allowed = self.choices.get(option)
        if allowed and to_text(value) not in allowed:
            raise AnsibleFilterError("sglang_speculative_plan: %s %s is not accepted by SGLang %s (choices: %s)"
                                     % (option, value, self.version, ", ".join(allowed)))
        return self.flag(option, why) + [to_text(value)]


def _integer(wanted, key, low=None, high=None):
    value = wanted.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            value = int(to_text(value))
        except ValueError:
            raise AnsibleFilterError("sglang_speculative_plan: %s must be an integer, got %r" % (key, value))
    if (low is not None and value < low) or (high is not None and value > high):
        raise AnsibleFilterError("sglang_speculative_plan: %s is %d, it must lie between %s and %s"
                                 % (key, value, low, high))
    return value


def _drafter_block_size(drafter):
    if not drafter:
        return None
    dflash = drafter.get("dflash") or {}
    block = dflash.get("block_size", drafter.get("block_size"))
    return int(block) if block is not None else None


def _check_attention_backend(backend, compute_capability):
    if backend is None or compute_capability in (None, ""):
        return
    major = to_text(compute_capability).replace("sm_", "").split(".")[0]
    major = major[:-1] if len(major) == 3 else major  # "120" (sm_120) -> "12"
    if major == "12" and backend in NOT_ON_SM12X:
        raise AnsibleFilterError(
            "sglang_speculative_plan: attention backend %s does not run on compute capability %s (sm_120, "
            "RTX PRO 6000): use flashinfer, triton or trtllm_mha" % (backend, compute_capability))


def _ddtree_budget(wanted, build, block):
    """The DDTree node budget served and its argv: the one place of the rule draft length - 1."""
    budget = _integer(wanted, "ddtree_budget", 0, MAX_DDTREE_BUDGET) or None  # 0: the rule
    rule = max(block - 1, 1) if block is not None else None
    if build.has("--speculative-ddtree-budget"):
        budget = budget or rule
        return budget, build.value("--speculative-ddtree-budget", budget, "the DDTree budget") if budget else []
    # The fork's --speculative-dflash-enable-ddtree takes no budget: it verifies draft length - 1.
    if budget is not None and budget != rule:
        raise AnsibleFilterError(
            "sglang_speculative_plan: SGLang %s offers DDTree through --speculative-dflash-enable-ddtree, "
            "which has no budget option: its node budget is the draft length - 1 (%s); set "
            "sglang_service_ddtree_budget (ddtree_budget) to 0 or %s" % (build.version, rule, rule))
    return rule, []


def _speculative(wanted, build, algorithm, drafter):
    """(argv, algorithm rendered, draft length, DDTree budget, fallback note or None)."""
    note = None
    offers = ", ".join(build.algorithms) or "none"
    has_dflash = "DFLASH" in build.algorithms
    if algorithm == "ddtree" and not build.ddtree:
        if not has_dflash:
            raise AnsibleFilterError(
                "sglang_speculative_plan: SGLang %s has neither DDTree nor DFLASH (offers: %s): %s, "
                "or install %s; sglang_service_ddtree_fallback_to_dflash (allow_ddtree_fallback) "
                "cannot help on this build" % (build.version, offers, GET_DDTREE, GET_DFLASH))
        if not wanted.get("allow_ddtree_fallback"):
            raise AnsibleFilterError(
                "sglang_speculative_plan: SGLang %s has no DDTree (offers: %s): %s, set "
                "sglang_service_ddtree_fallback_to_dflash (allow_ddtree_fallback) to serve DFLASH "
                "instead, or set sglang_service_speculative_algorithm (algorithm) to dflash"
                % (build.version, offers, GET_DDTREE))
        algorithm = "dflash"
        note = ("SGLang %s has no DDTree; serving DFLASH instead (sglang_service_ddtree_fallback_to_dflash)"
                % build.version)
    if algorithm == "none":
        return [], algorithm, None, None, note
    if algorithm == "dflash" and not has_dflash:
        raise AnsibleFilterError(
            "sglang_speculative_plan: SGLang %s has no DFLASH speculative algorithm (offers: %s): "
            "install %s, or set sglang_service_speculative_algorithm (algorithm) to none"
            % (build.version, offers, GET_DFLASH))
    if not wanted.get("draft_model_path"):
        raise AnsibleFilterError("sglang_speculative_plan: draft_model_path is required for algorithm %s"
                                 % algorithm)

    trained = _drafter_block_size(drafter)
    block = _integer(wanted, "draft_length", 1, MAX_DRAFT_LENGTH)
    if block is None:
        block = trained
    if block is not None and trained is not None and block > trained:
        raise AnsibleFilterError("sglang_speculative_plan: draft_length %d exceeds the drafter's trained "
                                 "block size %d" % (block, trained))

    if algorithm == "ddtree" and build.ddtree == "algorithm":
        argv = build.value("--speculative-algorithm", "DDTREE", "DDTree")
    else:
        argv = build.value("--speculative-algorithm", "DFLASH", "DFLASH")
        if algorithm == "ddtree":
            argv += build.flag("--speculative-dflash-enable-ddtree", "DDTree")
    argv += build.value("--speculative-draft-model-path", wanted["draft_model_path"], "the drafter")
    if wanted.get("draft_model_revision"):
        argv += build.value("--speculative-draft-model-revision", wanted["draft_model_revision"],
                            "the drafter revision")
    if block is not None:
        size_flag = build.first("--speculative-num-draft-tokens", "--speculative-dflash-block-size")
        argv += build.value(size_flag or "--speculative-num-draft-tokens", block, "the draft length")

    budget = None
    if algorithm == "ddtree":
        budget, budget_argv = _ddtree_budget(wanted, build, block)
        argv += budget_argv
        page_size = _integer(wanted, "page_size", 1)
        if page_size not in (None, 1):
            raise AnsibleFilterError("sglang_speculative_plan: DDTree needs page_size 1, got %d" % page_size)
        argv += build.value("--page-size", 1, "DDTree")

    window = _integer(wanted, "draft_window", 1)
    if window is not None:
        if block is not None and window < block:
            raise AnsibleFilterError("sglang_speculative_plan: draft_window %d is smaller than the draft "
                                     "length %d" % (window, block))
        window_flag = build.first("--speculative-draft-window-size",
                                  "--speculative-dflash-draft-window-size")
        if not window_flag:
            raise AnsibleFilterError("sglang_speculative_plan: SGLang %s has no draft window flag: leave "
                                     "draft_window unset" % build.version)
        argv += build.value(window_flag, window, "the draft window")
    return argv, algorithm, block, budget, note


def sglang_speculative_plan(wanted, sglang, drafter=None):
    """{argv, algorithm, fallback, note}: the command line and what it serves."""
    if not isinstance(wanted, dict):
        raise AnsibleFilterError("sglang_speculative_plan: the wanted config must be a dict, got %s"
                                 % type(wanted).__name__)
    build = _Build(sglang)
    algorithm = to_text(wanted.get("algorithm") or "dflash").lower()
    if algorithm not in ALGORITHMS:
        raise AnsibleFilterError("sglang_speculative_plan: algorithm must be one of %s, got %s"
                                 % (", ".join(ALGORITHMS), algorithm))
    if not wanted.get("model_path"):
        raise AnsibleFilterError("sglang_speculative_plan: model_path is required")

    tp_size = _integer(wanted, "tensor_parallel_size", 1) or 1
    gpu_count = _integer(wanted, "gpu_count", 0)
    if gpu_count is not None and tp_size > gpu_count:
        raise AnsibleFilterError("sglang_speculative_plan: tensor_parallel_size %d exceeds the %d GPU(s) present"
                                 % (tp_size, gpu_count))
    _check_attention_backend(wanted.get("attention_backend"), wanted.get("compute_capability"))

    argv = build.value("--model-path", wanted["model_path"], "the target model")
    if wanted.get("served_model_name"):
        argv += build.value("--served-model-name", wanted["served_model_name"], "the served name")
    if wanted.get("host"):
        argv += build.value("--host", wanted["host"], "the bind address")
    port = _integer(wanted, "port", 1, 65535)
    if port is not None:
        argv += build.value("--port", port, "the port")
    argv += build.value(build.first("--tp-size", "--tensor-parallel-size") or "--tp-size", tp_size,
                        "tensor parallelism")

    speculative, served, draft_length, budget, note = _speculative(wanted, build, algorithm, drafter)
    argv += speculative
    page_size = _integer(wanted, "page_size", 1)
    if page_size is not None and "--page-size" not in argv:
        argv += build.value("--page-size", page_size, "the page size")
    if wanted.get("attention_backend"):
        argv += build.value("--attention-backend", wanted["attention_backend"], "the attention backend")
    if wanted.get("mamba_strategy"):
        strategy = to_text(wanted["mamba_strategy"])
        strategy_flag = build.first("--mamba-radix-cache-strategy", "--mamba-scheduler-strategy")
        if strategy_flag == "--mamba-scheduler-strategy" and strategy == "auto":
            raise AnsibleFilterError("sglang_speculative_plan: SGLang %s has only --mamba-scheduler-strategy, "
                                     "which has no 'auto': set mamba_strategy extra_buffer" % build.version)
        argv += build.value(strategy_flag or "--mamba-radix-cache-strategy", strategy, "the mamba strategy")
    if wanted.get("mem_fraction_static") is not None:
        fraction = float(wanted["mem_fraction_static"])
        if not 0 < fraction < 1:
            raise AnsibleFilterError("sglang_speculative_plan: mem_fraction_static must lie between 0 and 1, got %s"
                                     % fraction)
        argv += build.value("--mem-fraction-static", fraction, "the memory fraction")
    for key, option in (("max_running_requests", "--max-running-requests"),
                        ("context_length", "--context-length")):
        number = _integer(wanted, key, 1)
        if number is not None:
            argv += build.value(option, number, key)
    if wanted.get("enable_metrics"):
        argv += build.flag("--enable-metrics", "metrics")
    argv += _extra_args(wanted.get("extra_args") or [], build, set(a for a in argv if a.startswith("--")))
    return {"argv": argv, "algorithm": served, "draft_length": draft_length, "ddtree_budget": budget,
            "fallback": note is not None, "note": note}


def _extra_args(extra, build, rendered):
    if not isinstance(extra, list):
        raise AnsibleFilterError("sglang_speculative_plan: extra_args must be a list of strings")
    extra = [to_text(item) for item in extra]
    for index, item in enumerate(extra):
        if not item.startswith("--"):
            continue
        option, has_value, value = item.partition("=")
        if option in rendered:
            raise AnsibleFilterError("sglang_speculative_plan: extra_args repeat %s, which is rendered from the "
                                     "role's own settings: set it there" % option)
        if not has_value and index + 1 < len(extra) and not extra[index + 1].startswith("--"):
            value, has_value = extra[index + 1], True
        if has_value:
            build.value(option, value, "extra_args")
        else:
            build.flag(option, "extra_args")
    return extra


class FilterModule(object):
    def filters(self):
        return {"sglang_speculative_plan": sglang_speculative_plan}

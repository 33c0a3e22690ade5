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
  - "The DDTree node budget defaults to the build's own default (C(ddtree_budget.default) of the
    C(sglang) fact, read from its parser); where the parser has none, to B-1, what pull request
    29907's worker derives, and the fixed budget of the fork's C(--speculative-dflash-enable-ddtree).
    A budget outside the build's limits (C(ddtree_budget.minimum) and C(maximum)) is refused. On
    the fork, which has no budget option, a budget other than B-1 is refused."
  - "Mamba strategy under speculative decoding (SGLang issue 36537: the radix cache with
    C(extra_buffer) corrupts outputs of hybrid targets): unset, it renders C(extra_buffer_lazy)
    where the build accepts it with speculation (C(mamba_lazy_with_speculation) of the fact,
    SGLang pull request 34763) and the overlap scheduler runs, else C(--disable-radix-cache);
    C(extra_buffer) or C(auto) with the radix cache are refused unless
    O(_input.allow_mamba_extra_buffer); C(extra_buffer_lazy) on a build that asserts against it,
    or with the overlap scheduler off (DDTree turns it off; SGLang asserts \"Lazy extra buffer
    requires overlap schedule\"), is refused. The plan's C(mamba) says what and why."
  - "Drafter context: SGLang runs the drafter at the target's context and refuses to start when
    the drafter's checkpoint declares less, unless C(SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1);
    the plan's C(environment) carries it when the drafter's declared context is shorter or
    unknown, and a O(_input.context_length) above the target's declared context is refused."
  - Fails with a message that says what to change when the build cannot serve the config
    (DDTree wanted on a build without it, unless O(_input.allow_ddtree_fallback) is set and the
    build has DFLASH),
    when the draft length exceeds the drafter's block size, when the attention backend does
    not run on the GPU's compute capability, when tensor parallel size exceeds the GPUs
    present, when the DDTree budget or the draft window is out of range.
  - The API key is not part of the command line; the role hands it to the server in a
    config file only root and the service group read (C(--config)).
positional: sglang, drafter, target
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
        description:
          - Name the OpenAI API reports (C(--served-model-name)); clients send it as C(model).
          - Empty, the target's short name, the last part of O(target)'s C(repo_id) (V(Qwen/Qwen3.6-27B)
            serves V(Qwen3.6-27B)), else of O(_input.model_path).
          - Rendered only where the build accepts C(--served-model-name); there the server reports
            O(_input.model_path), and so does the plan's C(served_model_name).
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
        description:
          - DDTree node budget within the build's limits (at most 1024); unset or V(0) takes the
            build's default (draft length - 1 where its parser has none).
        type: int
      draft_window:
        description: Drafter sliding window; at least the draft length. Omitted when unset.
        type: int
      attention_backend:
        description: C(--attention-backend); one of the build's choices.
        type: str
      mamba_strategy:
        description:
          - Mamba cache strategy for hybrid targets (C(auto) needs C(--mamba-radix-cache-strategy)).
            Unset without speculation, the server's own; unset with speculation, chosen for
            correctness (see the description).
        type: str
      allow_mamba_extra_buffer:
        description:
          - Serve O(_input.mamba_strategy) C(extra_buffer) or C(auto) with the radix cache under
            speculative decoding although SGLang issue 36537 shows it corrupting outputs.
        type: bool
        default: false
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
          - C(--enable-mixed-chunk) is refused unless O(target) is recorded with a C(model_type)
            that is not hybrid (linear-attention layers, as Qwen3.6's C(qwen3_5)), after SGLang issue 39342.
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
        C(block_size)) is the trained block size, its C(context_length) the context its
        checkpoint declares. Unchecked when omitted.
    type: dict
  target:
    description:
      - The target entry of the C(model_weights) fact; its C(context_length) is the context the
        target declares (the served one unless O(_input.context_length) is set), its C(repo_id)
        names what is served when O(_input.served_model_name) is empty, its C(model_type) whether
        it is hybrid. Unchecked when omitted.
    type: dict
author:
  - pro6000.inference developers (@pro6000)
"""

EXAMPLES = r"""
- name: Render the command line for the installed build
  ansible.builtin.set_fact:
    __sglang_service_plan: >-
      {{ __sglang_service_wanted
         | pro6000.inference.sglang_speculative_plan(ansible_facts['ansible_local'].sglang,
             drafter=ansible_facts['ansible_local'].model_weights.models.drafter) }}
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

# With ansible_facts['ansible_local'].sglang.ddtree == "algorithm", ddtree_budget.default null and
# mamba_lazy_with_speculation true (a build with pull request 34763), and a drafter record that
# declares no context, the result is:
# {"algorithm": "ddtree", "draft_length": 16, "ddtree_budget": 15, "fallback": false, "note": null,
#  "served_model_name": "Qwen3.6-27B",
#  "argv": ["--model-path", "/srv/models/Qwen3.6-27B", "--served-model-name", "Qwen3.6-27B",
#           "--host", "127.0.0.1", "--port", "30000", "--tp-size", "1", "--speculative-algorithm", "DDTREE",
#           "--speculative-draft-model-path", "/srv/models/Qwen3.6-27B-DFlash",
#           "--speculative-num-draft-tokens", "16", "--speculative-ddtree-budget", "15",
#           "--page-size", "1", "--attention-backend", "flashinfer",
#           "--mamba-radix-cache-strategy", "extra_buffer_lazy", "--enable-metrics"],
#  "mamba": {"strategy": "extra_buffer_lazy", "radix_cache": true, "why": "extra_buffer_lazy: ..."},
#  "environment": {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"},
#  "drafter_context": {"drafter": null, "served": null, "overwrite": true}}

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
    served_model_name:
      description: The model id C(/v1/models) lists and clients send as C(model).
      type: str
    fallback:
      description: True when DDTree was wanted and DFLASH is served instead.
      type: bool
    note:
      description: Says why a fallback happened; null otherwise.
      type: str
    mamba:
      description:
        - C(strategy) rendered (null leaves the server's), C(radix_cache) (false when turned
          off) and C(why) (null when nothing was decided for correctness).
      type: dict
    environment:
      description: Variables the server's environment needs (C(SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN)).
      type: dict
    drafter_context:
      description:
        - C(drafter) (declared, or null when unknown), C(served) (the context served, null when
          unknown) and C(overwrite) (whether the environment lets SGLang run the drafter at the
          longer context); null without speculation.
      type: dict
"""

import re

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.text.converters import to_text

from ansible_collections.pro6000.inference.plugins.module_utils._inputs import single_line
from ansible_collections.pro6000.inference.plugins.module_utils._sglang.speculative import (
    ALGORITHMS, DDTREE_BUDGET_RANGE, DRAFT_LENGTH_RANGE)

# What a model id clients send as one JSON string and a Prometheus label must not hold.
WHITESPACE_OR_CONTROL = re.compile(r"[\s\x00-\x1f\x7f]")
# Attention backends whose kernels are built for sm_90/sm_100 only; on sm_120 (RTX PRO 6000)
# use flashinfer (the default there), triton or trtllm_mha.
NOT_ON_SM12X = ("fa3", "flashmla", "cutlass_mla", "trtllm_mla")
# Where the advice names a setting: the sglang_service role variable, then the wanted key.
GET_DDTREE = ("build SGLang from a ref that has DDTree, pinned to its commit (sglang_source: git, "
              "sglang_git_ref e.g. refs/pull/29907/head, sglang_git_commit)")
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
        self.ddtree_budget = fact.get("ddtree_budget") or {}
        self.mamba_lazy = fact.get("mamba_lazy_with_speculation")
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
                                 % (key, value, low, "any" if high is None else high))
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


def ddtree_budgets(sglang, draft_length):
    """(default, lowest, highest) DDTree node budget the build serves for ``draft_length``; the
    three are equal on the fork's --speculative-dflash-enable-ddtree, which has no budget option
    and verifies draft length - 1. Also read by playbooks/tune.yml (filter tune_sweep)."""
    build = sglang if isinstance(sglang, _Build) else _Build(sglang)
    rule = max(draft_length - 1, 1) if draft_length is not None else None
    if not build.has("--speculative-ddtree-budget"):
        return rule, rule, rule
    limits = build.ddtree_budget
    return (limits.get("default") or rule, limits.get("minimum") or DDTREE_BUDGET_RANGE[0],
            limits.get("maximum") or DDTREE_BUDGET_RANGE[1])


def _ddtree_budget(wanted, build, block):
    """The DDTree node budget served and its argv: the build's own default (its parser's, else
    what pull request 29907's worker derives: draft length - 1), checked against its limits."""
    budget = _integer(wanted, "ddtree_budget", 0, DDTREE_BUDGET_RANGE[1]) or None  # 0: the build's default
    rule = max(block - 1, 1) if block is not None else None
    if build.has("--speculative-ddtree-budget"):
        default, low, high = ddtree_budgets(build, block)
        budget = budget or default
        if budget is not None and not low <= budget <= high:
            raise AnsibleFilterError(
                "sglang_speculative_plan: sglang_service_ddtree_budget (ddtree_budget) %d lies outside what "
                "SGLang %s accepts for --speculative-ddtree-budget (%d to %d)" % (budget, build.version, low, high))
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
    block = _integer(wanted, "draft_length", *DRAFT_LENGTH_RANGE)
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


def sglang_speculative_plan(wanted, sglang, drafter=None, target=None):
    """{argv, algorithm, fallback, note, mamba, environment, drafter_context}: the command line,
    its environment and what it serves."""
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
    served_model_name = _served_model_name(wanted, target)
    if build.has("--served-model-name"):
        argv += build.value("--served-model-name", served_model_name, "the served name")
    else:
        served_model_name = to_text(wanted["model_path"])
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
    mamba_argv, mamba = _mamba(wanted, build, served)
    argv += mamba_argv
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
    _refuse_mixed_chunk_on_hybrid(argv, target)
    # Each word becomes part of a unit's ExecStart: a newline there would be a line of its own.
    multiline = [word for word in argv if not single_line(word)]
    if multiline:
        raise AnsibleFilterError("sglang_speculative_plan: %s: a command line word holds a newline or another "
                                 "control character (model_path, served_model_name, extra_args, ...)"
                                 % ", ".join(repr(word) for word in multiline))
    environment, context = _drafter_context(wanted, served, drafter, target)
    return {"argv": argv, "algorithm": served, "draft_length": draft_length, "ddtree_budget": budget,
            "served_model_name": served_model_name, "fallback": note is not None, "note": note, "mamba": mamba, "environment": environment,
            "drafter_context": context}


def _served_model_name(wanted, target):
    """The site's name, else the target's short name: the last part of the repo id role
    model_weights recorded, else of the model path. Without --served-model-name SGLang lists the
    model path itself (server_args.py: served_model_name = model_path), which clients would have
    to send as their model."""
    name = to_text(wanted.get("served_model_name") or "")
    if not name:
        source = (target or {}).get("repo_id") or wanted["model_path"]
        name = to_text(source).rstrip("/").rpartition("/")[2]
    if not name or WHITESPACE_OR_CONTROL.search(name):
        raise AnsibleFilterError("sglang_speculative_plan: the served model name %r is empty or holds whitespace or "
                                 "a control character: set sglang_service_served_model_name (served_model_name) to "
                                 "one word" % name)
    return name


# SGLang issue 36537: the radix cache with --mamba-radix-cache-strategy extra_buffer under
# speculative decoding corrupts the outputs of hybrid (Gated-DeltaNet/mamba) targets at high KV
# usage; extra_buffer_lazy keeps the radix cache without it. "auto" picks extra_buffer whenever
# the overlap scheduler runs (python/sglang/srt/arg_groups/overrides.py of 0.5.23; server_args.py
# _handle_mamba_radix_cache of 0.5.14), as it does for DFLASH.
CORRUPTING_STRATEGIES = ("extra_buffer", "auto")
LAZY = "extra_buffer_lazy"
DISABLE_RADIX_CACHE = "--disable-radix-cache"
DISABLE_OVERLAP = "--disable-overlap-schedule"


def _flags(words):
    """The flag names of argv words (``--flag=value`` counts as ``--flag``)."""
    return set(to_text(word).partition("=")[0] for word in words or [])


def _overlap_off(wanted, served):
    """Why the overlap scheduler will be off, or None. extra_buffer_lazy needs it: SGLang asserts
    "Lazy extra buffer requires overlap schedule (--disable-overlap-schedule is incompatible)" when
    it sizes the KV cache, after the arguments passed (python/sglang/srt/mem_cache/
    kv_cache_configurator.py, _calculate_mamba_ratio, 0.5.19 to 0.5.23; model_executor/
    model_runner_kv_cache_mixin.py in 0.5.14). DDTree, which the build offers (the fact's ddtree:
    pull request 29907's algorithm or the fork's flag), turns the overlap scheduler off."""
    if served == "ddtree":
        return "DDTree turns the overlap scheduler off"
    if DISABLE_OVERLAP in _flags(wanted.get("extra_args")):
        return "extra_args turn the overlap scheduler off (%s)" % DISABLE_OVERLAP
    return None


def _mamba(wanted, build, served):
    """(argv, {strategy, radix_cache, why}): the mamba cache strategy of the hybrid target. SGLang
    applies it only to targets with mamba layers (and not at all without the radix cache), so it
    is harmless on others."""
    strategy = to_text(wanted.get("mamba_strategy") or "") or None
    flag = build.first("--mamba-radix-cache-strategy", "--mamba-scheduler-strategy")
    if strategy == "auto" and flag == "--mamba-scheduler-strategy":
        raise AnsibleFilterError("sglang_speculative_plan: SGLang %s has only --mamba-scheduler-strategy, "
                                 "which has no 'auto': set mamba_strategy extra_buffer" % build.version)
    radix_cache = DISABLE_RADIX_CACHE not in _flags(wanted.get("extra_args"))
    lazy_offered = LAZY in build.choices.get(flag or "", [])
    overlap_off = _overlap_off(wanted, served)
    why = None
    argv = []
    if served != "none" and radix_cache and flag:
        if strategy is None and lazy_offered and build.mamba_lazy and not overlap_off:
            strategy = LAZY
            why = ("extra_buffer_lazy: keeps the radix cache without the output corruption of extra_buffer "
                   "under speculative decoding (SGLang issue 36537); SGLang %s accepts it with %s (pull "
                   "request 34763)" % (build.version, served.upper()))
        elif strategy is None:
            radix_cache = False
            argv = build.flag(DISABLE_RADIX_CACHE, "turning the radix cache off")
            if lazy_offered and build.mamba_lazy:
                why = ("radix cache off: extra_buffer_lazy needs the overlap scheduler and %s (SGLang asserts "
                       "\"Lazy extra buffer requires overlap schedule\"), and extra_buffer with the radix cache "
                       "corrupts outputs under speculative decoding (SGLang issue 36537)" % overlap_off)
            else:
                reason = ("its mamba validator asserts against it before pull request 34763" if lazy_offered
                          else "no such choice")
                why = ("radix cache off: SGLang %s %s extra_buffer_lazy with speculative decoding (%s), and "
                       "extra_buffer (the server's auto) with the radix cache corrupts outputs under speculative "
                       "decoding (SGLang issue 36537); a build with pull request 34763 (0.5.18 or later) keeps "
                       "the radix cache" % (build.version, "refuses" if lazy_offered else "has no", reason))
        elif strategy in CORRUPTING_STRATEGIES and not wanted.get("allow_mamba_extra_buffer"):
            raise AnsibleFilterError(
                "sglang_speculative_plan: sglang_service_mamba_strategy (mamba_strategy) %s with the radix cache "
                "and speculative decoding corrupts the outputs of the hybrid target (SGLang issue 36537%s): "
                "leave it empty (the role then picks extra_buffer_lazy where the build accepts it, else turns "
                "the radix cache off), or set sglang_service_mamba_extra_buffer_override "
                "(allow_mamba_extra_buffer) to serve it anyway"
                % (strategy, "; auto picks extra_buffer under the overlap scheduler" if strategy == "auto" else ""))
        elif strategy == LAZY and not build.mamba_lazy:
            raise AnsibleFilterError(
                "sglang_speculative_plan: SGLang %s refuses mamba_strategy extra_buffer_lazy together with %s "
                "(its mamba validator asserts against it before SGLang pull request 34763): leave "
                "sglang_service_mamba_strategy empty, or build 0.5.18 or later" % (build.version, served.upper()))
        elif strategy in CORRUPTING_STRATEGIES:
            why = ("%s kept by sglang_service_mamba_extra_buffer_override although it corrupts outputs "
                   "with the radix cache under speculative decoding (SGLang issue 36537)" % strategy)
    # After the build's own validator (above): SGLang asserts this one later, when it sizes the cache.
    if strategy == LAZY and radix_cache and overlap_off:
        raise AnsibleFilterError(
            "sglang_speculative_plan: mamba_strategy extra_buffer_lazy needs the overlap scheduler, and %s: SGLang "
            "asserts \"Lazy extra buffer requires overlap schedule\" at start; leave sglang_service_mamba_strategy "
            "empty (the role then turns the radix cache off)" % overlap_off)
    if strategy is not None:
        argv += build.value(flag or "--mamba-radix-cache-strategy", strategy, "the mamba strategy")
    return argv, {"strategy": strategy, "radix_cache": radix_cache, "why": why}


def _declared_context(model):
    """The context a model_weights entry records (a drafter's under dflash), or None."""
    model = model or {}
    value = (model.get("dflash") or {}).get("context_length", model.get("context_length"))
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


# Every DFLASH release (0.5.14 to 0.5.23 read) runs the drafter at the target's context length
# (dflash_worker_v2.py up to 0.5.16, draft_worker_common.py build_draft_tp_worker from 0.5.17),
# and ModelConfig._derive_context_length (python/sglang/srt/configs/model_config.py) raises
# ValueError at start when that exceeds what the draft checkpoint declares, unless this is set:
# then it overrides the drafter's max_position_embeddings. It also lets a --context-length above
# the target's own declared length through, which this filter refuses instead.
OVERWRITE_CONTEXT = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"


def _drafter_context(wanted, served, drafter, target):
    """({environment}, {drafter, served, overwrite}): what the server needs to start a drafter
    whose checkpoint declares a shorter context than the one served."""
    served_context = _integer(wanted, "context_length", 1) or _declared_context(target)
    target_context = _declared_context(target)
    if target_context and served_context and served_context > target_context:
        raise AnsibleFilterError(
            "sglang_speculative_plan: context_length %d exceeds the %d tokens the target declares: set "
            "sglang_service_context_length (context_length) to at most %d, or 0 for the target's own"
            % (served_context, target_context, target_context))
    if served == "none":
        return {}, None
    declared = _declared_context(drafter)
    # Unknown on either side: z-lab's instructions and SGLang's own DFLASH tests set it.
    overwrite = declared is None or served_context is None or declared < served_context
    return ({OVERWRITE_CONTEXT: "1"} if overwrite else {},
            {"drafter": declared, "served": served_context, "overwrite": overwrite})


# model_type of the targets SGLang 0.5.23 serves with linear-attention (Gated-DeltaNet, mamba)
# layers beside attention: the config classes of hybrid_gdn_config and mamba2_config
# (python/sglang/srt/configs/hybrid_arch.py), Qwen3.6's qwen3_5 among them.
HYBRID_MODEL_TYPES = frozenset((
    "qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text", "jet_vlm",
    "nemotron_h", "falcon_h1", "mamba", "mamba2", "falcon_mamba", "zaya", "granitemoehybrid"))
MIXED_CHUNK = "--enable-mixed-chunk"


def _refuse_mixed_chunk_on_hybrid(argv, target):
    """Mixed chunked prefill on a hybrid target: SGLang issue 39342 (0.5.23 keeps it on with DFLASH,
    speculative_hook.py / spec_info.supports_mixed_chunk). Only a target recorded as not hybrid
    may have it; the role itself never renders it."""
    if MIXED_CHUNK not in _flags(argv):
        return
    model_type = to_text((target or {}).get("model_type") or "")
    if not model_type or model_type in HYBRID_MODEL_TYPES:
        raise AnsibleFilterError(
            "sglang_speculative_plan: extra_args holds %s, which breaks hybrid (linear-attention) targets "
            "(SGLang issue 39342); the target %s: remove it from sglang_service_extra_args (extra_args)"
            % (MIXED_CHUNK, "is one (model_type %s)" % model_type if model_type
               else "has no model_weights record saying it is not one"))


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

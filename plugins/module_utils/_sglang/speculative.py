# -*- coding: utf-8 -*-
# Copyright: pro6000.inference developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one source of the speculative settings a caller may ask for: the algorithms and the
ranges of draft length and DDTree budget. The plan filter (plugins/filter/sglang_speculative_plan.py)
imports it; chatops/pro6000_chatops/speculative.py is a copy of this file (the bot is a wheel of
its own); the argument specs of roles sglang_service and smoke and the filter's documentation
state them. tests/unit/test_speculative_drift.py fails when any of them differs.

What one build accepts beyond these (its DDTree budget range, its choices) is the build's, read
from the sglang fact by the plan filter.
"""

# sglang_service_speculative_algorithm: DDTree, plain DFLASH, or the target alone.
ALGORITHMS = ("ddtree", "dflash", "none")
# The DFlash drafter's block size (z-lab/Qwen3.6-27B-DFlash trains 16): the verify width.
DRAFT_LENGTH_RANGE = (1, 16)
# DDTree tree nodes verified per step; 0 in the role's variable means the build's default.
DDTREE_BUDGET_RANGE = (1, 1024)

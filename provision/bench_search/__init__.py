"""`provision bench --best`: each environment's best setting on one GPU, found by trying the
settings that matter one after another, each bounded, the whole search within a budget.

The plan: the defaults first (the baseline of every speed-up), then each setting alone:
BatchNormalization fused (Keras 3 only: Keras 2's is fused already), XLA (`--jit --strategy
default`), mixed_bfloat16 (compute capability 8.0 and newer) and mixed_float16 (7.0 and newer);
then the combinations of the values that helped or learnt, the most promising first (a
combination's expected speed-up is the product of its parts'; XLA is always combined with each
precision that learnt, because XLA fuses the casts that make a mixed precision slow alone); then
the best so far at twice its batch, while memory allows and it pays. A setting that does not
learn (accuracy at chance, or less than half of the defaults' gain over chance) is never called
best, however fast. Every trial runs under a bound on its first step (the compile) and the time
left in the budget; what no longer fits is recorded as skipped, with why.
"""

from provision.bench_search.plan import (
    BUDGET_S,
    DEFAULT,
    SCHEMA_TOOL,
    TRIAL_BOUND_S,
    Search,
    SearchResult,
    Setting,
    Trial,
    choose_best,
    learns,
    load,
    outcome,
)
from provision.bench_search.searcher import run

__all__ = [
    "BUDGET_S",
    "DEFAULT",
    "SCHEMA_TOOL",
    "TRIAL_BOUND_S",
    "Search",
    "SearchResult",
    "Setting",
    "Trial",
    "choose_best",
    "learns",
    "load",
    "outcome",
    "run",
]

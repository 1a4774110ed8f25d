"""What the two op profiles (`bench.search_profile`, `bench.training_profile`) share: an op's
class by its type and name scope, the sums of op time by class and type, and their tables."""

import collections
import re
from collections.abc import Collection, Sequence

OTHER = "other (elementwise, shapes, reductions)"
MATMUL = "matmul (projections, attention scores)"
MATMULS = {"MatMul", "_FusedMatMul", "FusedMatMul", "BatchMatMulV2", "BatchMatMulV3", "Einsum"}
# (class, op types or None, name-scope pattern or None): the first match names an op's class.
Classes = Sequence[tuple[str, Collection[str] | None, re.Pattern | None]]


def op_class(classes: Classes, name: str, op: str) -> str:
    """The class of the op `name` of type `op` (oneDNN's prefix already taken off)."""
    for label, types, scope in classes:
        if (types is not None and op in types) or (scope is not None and scope.search(name)):
            return label
    return OTHER


class OpTimes:
    """Op time by class, by (class, op type) and ops run by class, as ops are `add`ed."""

    def __init__(self, classes: Classes):
        self.classes, self.by_class, self.by_type = (
            classes,
            collections.Counter(),
            collections.Counter(),
        )
        self.counts = collections.Counter()

    def add(self, name: str, op: str, time: float, type_name: str | None = None) -> None:
        label = op_class(self.classes, name, op)
        self.by_class[label] += time
        self.by_type[label, type_name or op] += time
        self.counts[label] += 1


def share_tables(
    by_class: collections.Counter,
    by_type: collections.Counter,
    top_types: int,
    counts: collections.Counter | None = None,
) -> str:
    """Markdown: each class's share of the summed op time (and its op count, if given),
    then the `top_types` largest (class, op type) pairs'."""
    total, ops_run = sum(by_class.values()), counts is not None
    lines = ["| op class | share of op time |" + (" ops run |" if ops_run else "")]
    lines.append("|---|---|" + ("---|" if ops_run else ""))
    for label, time in by_class.most_common():
        count = f" {counts[label]:,} |" if ops_run else ""
        lines.append(f"| {label} | {time / total:.1%} |{count}")
    lines += ["", "| op type (its class) | share of op time |", "|---|---|"]
    for (label, op), time in by_type.most_common(top_types):
        lines.append(f"| {op} ({label}) | {time / total:.1%} |")
    return "\n".join(lines)

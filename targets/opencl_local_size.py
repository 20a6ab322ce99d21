"""Work-group sizes for OpenCL launches: what a kernel's global size, the device's limits and a group reduce allow."""

from __future__ import annotations

from jit.common.errors import CompileError
from jit.common.helpers import prod

# work-group size aimed for when the device allows more: large enough to fill a GPU wave, small enough that
# register pressure does not bite; the device and kernel limits still cap it
PREFERRED_LOCAL_SIZE = 256
GROUPS_PER_COMPUTE_UNIT = 4  # enough work-groups per compute unit that an uneven split costs little


def choose_local_size(global_size: tuple[int, ...], max_group: int, max_items: tuple[int, ...],
                      preferred: int = PREFERRED_LOCAL_SIZE, min_groups: int = 1) -> tuple[int, ...]:
    """A local size that divides ``global_size`` (OpenCL 1.2 needs uniform work-groups), stays within the
    per-dimension limits ``max_items`` and, in product, within ``min(max_group, preferred)``; dimension 0 (the
    innermost, contiguous in memory) is filled first. The budget halves while that leaves fewer than
    ``min_groups`` work-groups (a register-tiled kernel launches few items: 3 groups on 2 compute units leave
    one idle for a third of the time)."""
    budget = max(1, min(max_group, preferred))
    while True:
        local, left = [], budget
        for dim, g in enumerate(global_size):
            cap = min(left, max_items[dim] if dim < len(max_items) else 1, g)
            size = next(d for d in range(max(cap, 1), 0, -1) if g % d == 0)
            local.append(size)
            left //= size
        if budget == 1 or prod(global_size) // prod(local) >= min_groups:
            return tuple(local)
        budget //= 2


def sharing_local_size(global_size: tuple[int, ...], sharing: tuple[bool, ...], max_group: int,
                       max_items: tuple[int, ...], preferred: int = PREFERRED_LOCAL_SIZE,
                       min_groups: int = 1) -> tuple[int, ...] | None:
    """For a CPU device: a work-group along the dimensions whose work-items read the same input (``sharing``: a
    conv's output channels), 1 along the others, or None where none shares or no such group leaves ``min_groups``
    work-groups. A CPU device runs a work-group's items one after another on one core, so items sharing their
    input find it in that core's cache; filled along the rows instead (``choose_local_size``), each item streams an
    input of its own and the items sharing one run on other cores, each reading it again. Within the limits of
    ``choose_local_size``."""
    budget = max(1, min(max_group, preferred))
    while budget > 1:
        local, left = [], budget
        for dim, g in enumerate(global_size):
            shares = dim < len(sharing) and sharing[dim]
            cap = min(left, max_items[dim] if dim < len(max_items) else 1, g) if shares else 1
            size = next(d for d in range(max(cap, 1), 0, -1) if g % d == 0)
            local.append(size)
            left //= size
        if prod(local) > 1 and prod(global_size) // prod(local) >= min_groups:
            return tuple(local)
        budget //= 2
    return None


def group_local_size(global_size: tuple[int, ...], group: int, max_group: int, max_items: tuple[int, ...],
                     preferred: int = PREFERRED_LOCAL_SIZE, min_groups: int = 1) -> tuple[int, ...]:
    """``choose_local_size``, or for a kernel sharing reduces over dimension 0 (jit/codegen/opt/group.py) exactly one
    output's ``group`` work-items per work-group: the local array holding their partials is indexed by the local
    id of dimension 0 alone."""
    if group <= 1:
        return choose_local_size(global_size, max_group, max_items, preferred, min_groups)
    if group > min(max_group, max_items[0] if max_items else 1):
        raise CompileError(f"group reduce: {group} work-items expected within the work-group limits "
                          f"(max {max_group}, dimension 0 max {max_items[0] if max_items else 1})")
    return (group, *(1,) * (len(global_size) - 1))


def valid_local_size(local: tuple[int, ...], global_size: tuple[int, ...], max_group: int,
                     max_items: tuple[int, ...]) -> tuple[int, ...] | None:
    """``local`` when it is a launchable work-group size for ``global_size`` (one entry per dimension, each
    dividing its global extent and within ``max_items``, product within ``max_group``), else None."""
    if len(local) != len(global_size) or prod(local) > max_group:
        return None
    for dim, (lo, g) in enumerate(zip(local, global_size, strict=True)):
        if lo < 1 or g % lo or lo > (max_items[dim] if dim < len(max_items) else 1):
            return None
    return local

"""The wgmma pipeline's ring protocol (csrc/kernels/fwd/pipeline_wgmma.h) as a model: can the
consumers' order of mbarrier waits and slot releases deadlock against the producer's lazy finalize?

The producer issues tile g into slot g % S after the consumers released tile g - S, and publishes
(k_full, v_full) tile fz only just before it issues tile fz + S - 1, or when it drains at the next
item. A consumer step is a list of ("wait_k" | "wait_v" | "release", tile offset) relative to the
tile whose P the step holds. The kernel's step releases the previous tile first (its P.V retired
at the end of that step); the rotated order of wip/wgmma-wait-next (the wait for P.V at the start of
the next step) also completes; the "k first" order waits for the next K before it releases the
previous tile, which the lazy finalize can only publish after that release: it hung on the H200
(docs/h200-logs/40-*), and the model finds that."""

import pytest

# step on tile g: S of tile g + 1 is issued with P.V of tile g; the P.V of tile g - 1 retires
KERNEL = (("release", -1), ("wait_k", 1), ("wait_v", 0))
ROTATED = (("wait_v", 0), ("release", -1), ("wait_k", 1))
K_FIRST = (("wait_k", 1), ("wait_v", 0), ("release", -1))


def run(step, stages: int, items: list[int]) -> bool:
    """True if every tile of every item is consumed; False on a deadlock."""
    total = sum(items)
    ends = [sum(items[: i + 1]) for i in range(len(items))]  # global tile index past each item
    published, released = -1, -1  # highest tile published (k and v), highest tile released
    issued = 0
    item = 0  # the producer's item
    # consumer program, per item of tiles [start, L]: the first tile's K, the steps, the last P.V
    prog = []
    start = 0
    for n in items:
        last = start + n - 1
        prog.append(("wait_k", start))
        for g in range(start, last):
            prog += [(op, g + off) for op, off in step if op != "release" or g + off >= start]
        prog += [("wait_v", last)] + [("release", t) for t in (last - 1, last) if t >= start]
        start += n
    pc = 0
    while pc < len(prog) or issued < total:
        progress = False
        # producer: lazy finalize before the slot wait, drain at the item's end
        while issued < total:
            if issued == ends[item]:
                published = issued - 1  # drain (at the next item's start)
                item += 1
            if issued - (published + 1) >= stages - 1:
                published += 1
            if issued >= stages and released < issued - stages:
                break
            issued += 1
            progress = True
        if issued == total:
            published = total - 1
        # consumer
        while pc < len(prog):
            op, t = prog[pc]
            if op in ("wait_k", "wait_v") and t > published:
                break
            if op == "release":
                assert t == released + 1, "slots are released in order"
                released = t
            pc += 1
            progress = True
        if not progress:
            return False
    return True


@pytest.mark.parametrize("stages", [3, 4])
@pytest.mark.parametrize("items", [[1], [2], [9], [3, 1, 7], [16, 16]])
def test_kernel_order_completes(stages: int, items: list[int]) -> None:
    assert run(KERNEL, stages, items)
    assert run(ROTATED, stages, items)


def test_k_first_order_deadlocks() -> None:
    assert not run(K_FIRST, 3, [9])

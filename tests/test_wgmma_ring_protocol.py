"""The wgmma pipeline's ring protocol (csrc/kernels/fwd/pipeline_wgmma.h) as a model: can the
consumers' order of mbarrier waits and slot releases deadlock against the producer's lazy finalize?

The producer issues tile g into slot g % S once the consumers released tile g - S's K (its copy
writes K and its own Vraw), and publishes tile fz (k_full, then v_full once the consumers released
tile fz - S's Vt, which the transpose overwrites) only just before it issues tile fz + S - 1, or
when it drains at the next item. With one release per tile ("release": K and Vt together) the
publication of the next K waits for the previous tile's release, so the "k first" order (wait for
the next K, then release the previous tile) deadlocks: it hung on the H200 (lab/h200-logs/40-*),
and the model finds that. A consumer order is (first, step, last): the ops of an item's first tile,
of each step on tile g (S of g + 1 issued with P.V of g), and of its last tile, as (op, tile offset)
with op one of wait_k, wait_v, release (K and Vt), release_k, release_v; each item also waits for its
Q and releases it after its epilogue (the producer's order of Q and drain: q_before_drain)."""

import pytest

ORDERS = {
    # main: the P.V of tile g retires at the end of its step (its slot released), then the next step
    "joint": ((("wait_k", 0),), (("wait_k", 1), ("wait_v", 0), ("release", 0)), (("wait_v", 0), ("release", 0))),
    # wip/wgmma-wait-next: the wait for P.V at the start of the next step, after that step's V
    "joint rotated": (
        (("wait_k", 0),),
        (("wait_v", 0), ("release", -1), ("wait_k", 1)),
        (("wait_v", 0), ("release", -1), ("release", 0)),
    ),
    # its first form: it hung
    "joint k first": (
        (("wait_k", 0),),
        (("wait_k", 1), ("wait_v", 0), ("release", -1)),
        (("wait_v", 0), ("release", -1), ("release", 0)),
    ),
    # wip/wgmma-split-release: K released once S landed, Vt once P.V did
    "split rotated": (
        (("wait_k", 0), ("release_k", 0)),
        (("wait_v", 0), ("release_v", -1), ("wait_k", 1), ("release_k", 1)),
        (("wait_v", 0), ("release_v", -1), ("release_v", 0)),
    ),
    "split k first": (
        (("wait_k", 0), ("release_k", 0)),
        (("wait_k", 1), ("release_k", 1), ("wait_v", 0), ("release_v", -1)),
        (("wait_v", 0), ("release_v", -1), ("release_v", 0)),
    ),
}


def program(order, items: list[int]) -> list[tuple[str, int]]:
    first, step, last = order
    prog, start = [], 0
    for j, n in enumerate(items):
        end = start + n - 1
        ops = [("wait_q", j)] + [(op, start + off) for op, off in first]
        for g in range(start, end):
            ops += [(op, g + off) for op, off in step]
        ops += [(op, end + off) for op, off in last]
        # releases of tiles before the item's first were done by the previous item
        prog += [(op, t) for op, t in ops if not (op.startswith("release") and t < start)]
        prog.append(("release_q", j))  # after the epilogue
        start += n
    return prog


def run(order, stages: int, items: list[int], q_before_drain: bool = False, q_buffers: int = 2) -> bool:
    """True if every tile of every item is consumed; False on a deadlock. The producer publishes
    item j's Q once the consumers released item j - q_buffers's, after draining the previous item's
    tiles, or (q_before_drain) waits for that release before the drain."""
    total = sum(items)
    ends = [sum(items[: i + 1]) for i in range(len(items))]
    starts = [0] + ends[:-1]
    rel_k = rel_v = rel_q = -1  # highest tile whose K / Vt, highest item whose Q the consumers released
    pub_k = pub_v = pub_q = -1  # highest tile published (k_full / v_full), item whose Q is (q_full)
    issued = 0
    prog, pc = program(order, items), 0

    def finalize() -> bool:  # publishes tile pub_v + 1; False while its Vt slot is still read
        nonlocal pub_k, pub_v
        fz = pub_v + 1
        pub_k = max(pub_k, fz)
        if fz >= stages and rel_v < fz - stages:
            return False
        pub_v = fz
        return True

    while True:
        progress = False
        while True:  # producer
            j = pub_q + 1  # the next item to start
            starting = j < len(items) and issued == starts[j]
            if starting or issued == total:  # item start (or the kernel's end): drain, Q
                q_free = j < q_buffers or rel_q >= j - q_buffers
                if starting and q_before_drain and not q_free:
                    break
                if pub_v + 1 < issued:
                    if not finalize():
                        break
                    progress = True
                    continue
                if not starting or not q_free:
                    break
                pub_q = j
                progress = True
                continue
            if pub_v + 1 < issued and issued - (pub_v + 1) >= stages - 1:
                if not finalize():
                    break
                progress = True
                continue
            if issued >= stages and rel_k < issued - stages:
                break
            issued += 1
            progress = True
        while pc < len(prog):  # consumer
            op, t = prog[pc]
            if (op == "wait_k" and t > pub_k) or (op == "wait_v" and t > pub_v) or (op == "wait_q" and t > pub_q):
                break
            if op in ("release", "release_k"):
                assert t == rel_k + 1, "K slots are released in order"
                rel_k = t
            if op in ("release", "release_v"):
                assert t == rel_v + 1, "Vt slots are released in order"
                rel_v = t
            if op == "release_q":
                rel_q = t
            pc += 1
            progress = True
        if pc == len(prog) and issued == total and pub_v == total - 1:
            return True
        if not progress:
            return False


@pytest.mark.parametrize("stages", [3, 4])
@pytest.mark.parametrize("items", [[1], [2], [9], [3, 1, 7], [16, 16]])
@pytest.mark.parametrize("order", ["joint", "joint rotated", "split rotated", "split k first"])
@pytest.mark.parametrize("q_before_drain", [False, True])
def test_kernel_orders_complete(order: str, stages: int, items: list[int], q_before_drain: bool) -> None:
    assert run(ORDERS[order], stages, items, q_before_drain)


def test_one_q_buffer_before_the_drain_deadlocks() -> None:
    """Why the Q of the next item may be loaded before the drain only with two Q buffers."""
    assert run(ORDERS["joint"], 3, [2, 2], q_buffers=1)
    assert not run(ORDERS["joint"], 3, [2, 2], q_before_drain=True, q_buffers=1)


def test_joint_k_first_deadlocks() -> None:
    assert not run(ORDERS["joint k first"], 3, [9])
    assert not run(ORDERS["joint k first"], 4, [9])

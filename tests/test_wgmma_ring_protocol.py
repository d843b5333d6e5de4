"""The wgmma pipeline's ring protocol (csrc/kernels/fwd/pipeline_wgmma.h) as a model: can the
consumers' order of mbarrier waits and slot releases deadlock against the producer's lazy finalize?

The producer issues tile g into slot g % S once the consumers released tile g - S's K (its copy
writes K and its own Vraw), and publishes tile fz (k_full, then v_full once the consumers released
tile fz - S's Vt, which the transpose overwrites) only just before it issues tile fz + S - 1, or
when it drains at the next item. With one release per tile ("release": K and Vt together) the
publication of the next K waits for the previous tile's release, so the "k first" order (wait for
the next K, then release the previous tile) deadlocks: it hung on the H200 (lab-notes:lab/h200-logs/40-*),
and the model finds that. A consumer order is (first, step, last): the ops of an item's first tile,
of each step on tile g (S of g + 1 issued with P.V of g), and of its last tile, as (op, tile offset)
with op one of wait_k, wait_v, release (K and Vt), release_k, release_v; each item also waits for its
Q and releases it after its epilogue (the producer's order of Q and drain: q_before_drain).

The second model (below) is the protocol as the kernel runs it now, with consumer steps of one or two
ring tiles (D 256 at 128-key steps), TMA and cp.async tiles, and one or two Q buffers."""

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


# ---- the protocol as the kernel runs it now (pipeline_wgmma.h: Producer::item / make_room, Consumer::item) ----
# Ring tiles of kRingN keys, kSlots of them per consumer step (2: D 256 at 128-key steps); a TMA tile's K
# completes k_full by its bytes when issued, a cp.async tile's only when finalized; one or two Q buffers
# (one: the item's Q is loaded after its first step's tiles are issued, once the previous item's Q was
# released). The producer and the consumers are generators that yield the condition they wait for.


def producer(
    st: dict,
    stages: int,
    slots: int,
    items: list[int],
    tma: list[bool],
    q_buffers: int,
    room_tma: list[bool] | None = None,
):
    """room_tma: what make_room believes of the tiles (default: the truth), for the negative test."""
    room_tma = tma if room_tma is None else room_tma
    g = fz = 0

    def finalize():
        nonlocal fz
        st["v"] = fz  # v_full (and k_full for a cp.async tile)
        if not tma[fz]:
            st["k"].add(fz)
        fz += 1

    def make_room():
        v_need = g - stages + slots
        k_need = v_need + slots
        while fz < v_need:
            finalize()
        if slots == 1 or any(not room_tma[t] for t in range(fz, k_need)):
            while fz < k_need:
                finalize()

    def load_q(j):
        if q_buffers == 1 and j >= 1:
            yield lambda: st["rel_q"] >= j - 1
        st["q"] = j

    for j, n in enumerate(items):
        while fz < g:  # drain
            finalize()
        if j >= 2:  # publish: the item's index slot
            yield lambda j=j: st["rel_q"] >= j - 2
        if q_buffers == 2:
            yield from load_q(j)
        for i in range(slots * n):
            if q_buffers == 1 and i == slots:
                yield from load_q(j)
            if g % slots == 0:
                make_room()
            if g >= stages:
                yield lambda g=g: st["rel"] >= g - stages  # empty
            if tma[g]:
                st["k"].add(g)
            g += 1
        if q_buffers == 1 and n <= 1:
            yield from load_q(j)
    while fz < g:
        finalize()


def consumer(st: dict, slots: int, items: list[int], overlap: bool):
    g = 0

    def wait(kind, step):  # every ring tile of the step
        tiles = range(slots * step, slots * step + slots)
        if kind == "k":
            return lambda: all(t in st["k"] for t in tiles)
        return lambda: st["v"] >= tiles[-1]

    def release(step):
        st["rel"] = slots * step + slots - 1

    step0 = 0
    for j, n in enumerate(items):
        yield lambda j=j: st["q"] >= j
        steps = range(step0, step0 + n)
        if overlap:
            yield wait("k", steps[0])
            for s in steps[:-1]:
                yield wait("k", s + 1)
                yield wait("v", s)
                release(s)
            yield wait("v", steps[-1])
            release(steps[-1])
        else:
            for s in steps:
                yield wait("k", s)
                yield wait("v", s)
                release(s)
        st["rel_q"] = j
        step0 += n
        g += slots * n


def completes(
    stages: int,
    slots: int,
    items: list[int],
    tma: list[bool],
    q_buffers: int,
    overlap: bool,
    room_tma: list[bool] | None = None,
) -> bool:
    st = dict(k=set(), v=-1, rel=-1, q=-1, rel_q=-1)
    actors = [producer(st, stages, slots, items, tma, q_buffers, room_tma), consumer(st, slots, items, overlap)]
    waits = [None, None]
    done = [False, False]
    while not all(done):
        progress = False
        for a in range(2):
            while not done[a] and (waits[a] is None or waits[a]()):
                progress = True
                try:
                    waits[a] = next(actors[a])
                except StopIteration:
                    done[a] = True
        if not progress:
            return False
    return True


TILE_KINDS = {
    "tma": lambda n: [True] * n,
    "cp.async": lambda n: [False] * n,
    "tma, cp.async tail": lambda n: [(i % 7) != 6 for i in range(n)],  # every 7th tile a tail
    "alternating": lambda n: [i % 2 == 0 for i in range(n)],
}


@pytest.mark.parametrize(
    "stages, slots, q_buffers, overlap",
    [
        (3, 1, 2, True),
        (4, 1, 2, True),  # 64- / 128-key steps at D <= 128, 64 at D 256
        (4, 2, 1, False),  # D 256 at 128-key steps
        (4, 2, 1, True),
        (4, 2, 2, True),  # (configurations the kernel does not build: the rule holds there too)
    ],
)
@pytest.mark.parametrize("items", [[1], [2], [9], [3, 1, 7], [1, 1, 1, 1], [16, 16]])
@pytest.mark.parametrize("kinds", list(TILE_KINDS))
def test_ring_completes(stages: int, slots: int, q_buffers: int, overlap: bool, items: list[int], kinds: str) -> None:
    tma = TILE_KINDS[kinds](slots * sum(items))
    assert completes(stages, slots, items, tma, q_buffers, overlap)


def test_model_finds_the_deadlock_make_room_avoids() -> None:
    """Not vacuous: with two-tile steps and overlapped consumers (which release a step after the
    next one's K), cp.async tiles finalized one step late (as if their K came by bytes) leave that K
    unpublished while the producer waits for the slots: a hang."""
    n = 2 * 4
    assert not completes(4, 2, [4], [False] * n, 1, True, room_tma=[True] * n)
    assert completes(4, 2, [4], [False] * n, 1, True)

"""The clocks: the virtual kernel's ordering, deadlines, failures and determinism."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from quiesce.adapters import (
    ClockStopped,
    Lock,
    Queue,
    RealClock,
    UnmanagedTask,
    VirtualClock,
    VirtualDeadlock,
)

pytestmark = pytest.mark.anyio

Trace = list[tuple[Any, ...]]


def _scenario(clock: VirtualClock, trace: Trace) -> Any:
    """Workers with seeded latencies, a queue, deadlines that fire, and a cancelled group."""

    async def worker(name: str, queue: Queue[tuple[str, int]]) -> None:
        for i in range(6):
            await clock.sleep(clock.rng.uniform(0.0, 3.0))
            queue.put_nowait((name, i))
            trace.append(("put", name, i, clock.now()))

    async def consumer(queue: Queue[tuple[str, int]]) -> None:
        while True:
            item = await queue.get()
            trace.append(("got", item, clock.now()))

    async def bounded(name: str) -> None:
        with clock.move_on_at(clock.now() + 2.5) as scope:
            await clock.sleep(10.0)
        trace.append(("moved_on", name, scope.cancelled_caught, clock.now()))
        try:
            with clock.fail_at(clock.now() + 1.0):
                async with clock.task_group() as tg:
                    tg.start_soon(clock.sleep, 5.0)
                    tg.start_soon(clock.sleep, 7.0)
        except TimeoutError:
            trace.append(("timed_out", name, clock.now()))

    async def main() -> float:
        queue: Queue[tuple[str, int]] = Queue(clock)
        async with clock.task_group() as outer:
            outer.start_soon(consumer, queue)
            async with clock.task_group() as tg:
                for name in "abc":
                    clock.start_soon(tg, worker, name, queue)
                tg.start_soon(bounded, "x")
            await clock.sleep(1.0)
            outer.cancel()
        trace.append(("end", clock.now()))
        return clock.now()

    return main


def _run_scenario(seed: int, backend: str) -> Trace:
    clock = VirtualClock(seed=seed)
    trace: Trace = []
    anyio.run(clock.run, _scenario(clock, trace), backend=backend)
    return trace


def test_same_seed_gives_the_same_trace_on_asyncio_and_trio() -> None:
    traces = [_run_scenario(5, backend) for backend in ("asyncio", "trio", "asyncio")]
    assert traces[0] == traces[1] == traces[2]
    assert ("moved_on", "x", True, 2.5) in traces[0]
    assert ("timed_out", "x", 3.5) in traces[0]
    assert sum(1 for t in traces[0] if t[0] == "got") == 18
    assert _run_scenario(6, "asyncio") != traces[0]


async def test_sleepers_wake_in_time_order_then_fifo() -> None:
    clock = VirtualClock()
    order: list[tuple[str, float]] = []

    async def sleeper(name: str, at: float) -> None:
        await clock.sleep_until(at)
        order.append((name, clock.now()))

    async def main() -> None:
        async with clock.task_group() as tg:
            for name, at in [("late", 5.0), ("tie-1", 2.0), ("early", 1.0), ("tie-2", 2.0)]:
                tg.start_soon(sleeper, name, at)

    await clock.run(main)
    assert order == [("early", 1.0), ("tie-1", 2.0), ("tie-2", 2.0), ("late", 5.0)]


async def test_ten_thousand_virtual_seconds_use_no_real_timer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def no_real_sleep(*args: object) -> None:
        raise AssertionError("the virtual clock armed a real timer")

    for name in ("sleep", "sleep_until", "sleep_forever"):
        monkeypatch.setattr(anyio, name, no_real_sleep)
    clock = VirtualClock(seed=1)
    ticks: list[int] = [0, 0]

    async def ticker(index: int, period: float) -> None:
        while clock.now() + period <= 10_000.0:
            await clock.sleep(period)
            ticks[index] += 1

    async def main() -> float:
        async with clock.task_group() as tg:
            tg.start_soon(ticker, 0, 1.0)
            tg.start_soon(ticker, 1, 2.5)
        return clock.now()

    assert await clock.run(main) == 10_000.0
    assert ticks == [10_000, 4_000]
    assert clock.steps >= 14_000


async def test_deadline_already_due_cancels_at_the_first_wait() -> None:
    clock = VirtualClock(start=10.0)

    async def main() -> tuple[bool, float]:
        with clock.move_on_at(5.0) as scope:
            await clock.sleep(1.0)
        return scope.cancelled_caught, clock.now()

    assert await clock.run(main) == (True, 10.0)


async def test_fail_at_raises_timeout_and_cancels_children_one_by_one() -> None:
    clock = VirtualClock()
    cleaned: list[tuple[str, float]] = []

    async def child(name: str) -> None:
        try:
            await clock.sleep(100.0)
        finally:
            cleaned.append((name, clock.now()))

    async def main() -> float:
        with pytest.raises(TimeoutError), clock.fail_at(3.0):
            async with clock.task_group() as tg:
                for name in ("a", "b", "c"):
                    tg.start_soon(child, name)
        return clock.now()

    assert await clock.run(main) == 3.0
    assert cleaned == [("a", 3.0), ("b", 3.0), ("c", 3.0)]


async def test_deadline_that_does_not_fire_changes_nothing() -> None:
    clock = VirtualClock()

    async def main() -> tuple[bool, float]:
        with clock.fail_at(10.0) as scope:
            await clock.sleep(2.0)
        await clock.sleep(20.0)
        return scope.cancelled_caught, clock.now()

    assert await clock.run(main) == (False, 22.0)


async def test_event_wakes_waiters_in_the_order_they_waited() -> None:
    clock = VirtualClock()
    woke: list[str] = []

    async def waiter(name: str, event: Any) -> None:
        await event.wait()
        woke.append(name)

    async def main() -> None:
        event = clock.event()
        async with clock.task_group() as tg:
            for name in ("first", "second", "third"):
                tg.start_soon(waiter, name, event)
            await clock.sleep(1.0)
            assert not event.is_set()
            event.set()
        assert event.is_set()
        await event.wait()

    await clock.run(main)
    assert woke == ["first", "second", "third"]


async def test_lock_serialises_critical_sections_in_fifo_order() -> None:
    clock = VirtualClock()
    log: list[tuple[str, str, float]] = []

    async def user(name: str, lock: Lock) -> None:
        async with lock:
            log.append(("in", name, clock.now()))
            await clock.sleep(1.0)
            log.append(("out", name, clock.now()))

    async def main() -> None:
        lock = Lock(clock)
        async with clock.task_group() as tg:
            for name in ("a", "b"):
                tg.start_soon(user, name, lock)
        assert not lock.locked()

    await clock.run(main)
    assert log == [("in", "a", 0.0), ("out", "a", 1.0), ("in", "b", 1.0), ("out", "b", 2.0)]


async def test_a_failing_task_ends_the_run_with_its_own_exception() -> None:
    clock = VirtualClock()

    async def boom() -> None:
        await clock.sleep(1.0)
        raise ValueError("boom")

    async def main() -> None:
        async with clock.task_group() as tg:
            tg.start_soon(boom)
            tg.start_soon(clock.sleep, 100.0)

    with pytest.raises(ValueError, match="boom"):
        await clock.run(main)
    assert clock.now() == 1.0


async def test_everyone_blocked_with_nothing_scheduled_is_a_deadlock() -> None:
    clock = VirtualClock()

    async def main() -> None:
        await clock.sleep(4.0)
        await clock.event().wait()

    with pytest.raises(VirtualDeadlock) as caught:
        await clock.run(main)
    assert caught.value.now == 4.0
    assert caught.value.blocked == ("event.wait()",)


async def test_a_raw_anyio_task_is_refused() -> None:
    clock = VirtualClock()

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(clock.sleep, 1.0)

    with pytest.raises(UnmanagedTask) as caught:
        await clock.run(main)
    assert caught.value.primitive.startswith("sleep_until")


async def test_a_clock_runs_once() -> None:
    clock = VirtualClock()

    async def main() -> None:
        await clock.sleep(1.0)

    await clock.run(main)
    with pytest.raises(ClockStopped):
        await clock.run(main)


async def test_real_clock_offers_the_same_api() -> None:
    clock = RealClock(seed=3)
    queue: Queue[int] = Queue(clock)
    start = clock.now()

    async def producer() -> None:
        await clock.sleep(0.01)
        queue.put_nowait(7)

    async def main() -> int:
        async with clock.task_group() as tg:
            clock.start_soon(tg, producer)
            value = await queue.get()
        with clock.move_on_at(clock.now() + 0.01) as scope:
            await clock.event().wait()
        assert scope.cancelled_caught
        with pytest.raises(TimeoutError), clock.fail_at(clock.now() + 0.01):
            await clock.sleep_until(clock.now() + 10.0)
        return value

    assert await clock.run(main) == 7
    assert clock.now() > start
    assert clock.rng.random() == RealClock(seed=3).rng.random()


async def test_a_child_cancelling_its_group_stops_waiting_siblings() -> None:
    clock = VirtualClock()
    stopped: list[str] = []

    async def waiter(name: str, queue: Queue[int]) -> None:
        try:
            await queue.get()
        finally:
            stopped.append(name)

    async def main() -> tuple[float, int]:
        queue: Queue[int] = Queue(clock)
        async with clock.task_group() as tg:
            tg.start_soon(waiter, "a", queue)
            tg.start_soon(waiter, "b", queue)

            async def canceller() -> None:
                await clock.sleep(2.0)
                tg.cancel()

            tg.start_soon(canceller)
        queue.put_nowait(1)
        return clock.now(), await queue.get()

    assert await clock.run(main) == (2.0, 1)
    assert stopped == ["a", "b"]


async def test_a_timed_out_getter_hands_its_item_to_the_next_getter() -> None:
    clock = VirtualClock()
    got: list[tuple[str, int, float]] = []

    async def getter(name: str, queue: Queue[int], patience_s: float) -> None:
        with clock.move_on_at(clock.now() + patience_s):
            got.append((name, await queue.get(), clock.now()))

    async def main() -> None:
        queue: Queue[int] = Queue(clock)
        async with clock.task_group() as tg:
            tg.start_soon(getter, "impatient", queue, 1.0)
            tg.start_soon(getter, "patient", queue, 10.0)
            await clock.sleep(5.0)
            queue.put_nowait(42)

    await clock.run(main)
    assert got == [("patient", 42, 5.0)]

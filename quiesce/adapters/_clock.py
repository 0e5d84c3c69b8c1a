"""Time for the driver: a `Clock` interface, a real clock, and a virtual clock.

What lives here: how the adapters sleep, bound calls by absolute deadlines, start tasks and
wait for one another. What it does not know: the protocol. The pure core never reads a
clock; the driver asks a `Clock` and feeds `now` in.

Two implementations share one API:

- `RealClock`: anyio's own time. `now()` is `anyio.current_time()`, deadline scopes are
  `anyio.fail_at` / `anyio.move_on_at`, task groups are anyio task groups.
- `VirtualClock`: a seeded discrete-event kernel running on top of anyio (asyncio or trio).
  Every wakeup -- a sleep ending, a deadline firing, a task starting, an event being set --
  is an entry in one heap ordered by `(time, seq)`, where `seq` is handed out when the entry
  is registered. The kernel releases one entry, waits until the task it woke is blocked
  again on a clock primitive, then releases the next. Exactly one managed task runs at a
  time, time jumps straight to the next entry, and no real timer is ever armed: ten
  thousand virtual seconds cost the CPU of the work done in them, nothing more.

Determinism guaranteed by `VirtualClock`: for the same seed and the same code, the order in
which managed tasks run, the value of `now()` at every point, and every draw from
`clock.rng` are identical across runs and across the asyncio and trio backends. Code keeps
that guarantee by following four rules:

1. start tasks with `clock.task_group()` and `tg.start_soon` (or `clock.start_soon(tg,
   ...)`), never with a raw anyio task group: a raw task is not managed, and a clock
   primitive called from it raises `UnmanagedTask`;
2. block only on clock primitives: `clock.sleep`, `clock.sleep_until`, `clock.event()`,
   `Queue`, `Lock`, a task group's exit. Awaiting anything else (a socket, a file, an
   `anyio.Event` set by another managed task) is treated as running: virtual time stands
   still until it returns, and if it waits on another managed task it never returns;
3. draw every random choice from `clock.rng`;
4. bound work with `clock.fail_at` / `clock.move_on_at` / `tg.cancel()`, not with raw cancel
   scopes, so cancellation is delivered by the kernel one task at a time.

An exception escaping a managed task ends the run: the kernel stops, every blocked task
is woken with `ClockStopped` (or with cancellation, if its task group is tearing down), and
`VirtualClock.run` raises the original exception. A run where every task is blocked and no
wakeup is pending raises `VirtualDeadlock`, naming what each task waits on.

>>> import anyio
>>> clock = VirtualClock(seed=7)
>>> async def main() -> float:
...     await clock.sleep(3600.0)
...     return clock.now()
>>> anyio.run(clock.run, main)
3600.0
"""

from __future__ import annotations

import contextvars
import heapq
import itertools
import random
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from enum import Enum
from types import TracebackType
from typing import Any, Generic, Protocol, TypeVar, TypeVarTuple

import anyio
import anyio.abc
from anyio.lowlevel import checkpoint_if_cancelled

from quiesce.fsm import QuiesceError

__all__ = [
    "Clock",
    "ClockEvent",
    "ClockStopped",
    "Lock",
    "Queue",
    "RealClock",
    "TaskGroup",
    "UnmanagedTask",
    "VirtualClock",
    "VirtualDeadlock",
]

T = TypeVar("T")
PosArgsT = TypeVarTuple("PosArgsT")


class ClockStopped(QuiesceError):
    """The virtual kernel stopped (another task failed, or a deadlock); nothing more runs."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"virtual clock stopped: {reason}")


class UnmanagedTask(QuiesceError):
    """A clock primitive was awaited from a task the virtual clock did not start."""

    def __init__(self, primitive: str) -> None:
        self.primitive = primitive
        super().__init__(
            f"{primitive} was awaited from a task the VirtualClock does not manage; start it "
            "with clock.task_group() / clock.start_soon(tg, ...), not a raw anyio task group"
        )


class VirtualDeadlock(QuiesceError):
    """Every managed task is blocked and no wakeup is pending: the run can never advance."""

    def __init__(self, now: float, blocked: list[str]) -> None:
        self.now = now
        self.blocked = tuple(blocked)
        super().__init__(
            f"virtual deadlock at t={now}: every task is blocked and nothing is scheduled; "
            f"blocked: {list(self.blocked)}"
        )


class ClockEvent(Protocol):
    """A one-shot flag tasks can wait on (`anyio.Event` semantics)."""

    def set(self) -> None:
        """Set the flag and wake every waiter."""

    def is_set(self) -> bool:
        """Whether `set()` was called."""

    async def wait(self) -> None:
        """Return once the flag is set."""


class TaskGroup(Protocol):
    """A structured task group whose starts are ordered by the clock."""

    async def __aenter__(self) -> TaskGroup: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None: ...

    def start_soon(
        self,
        fn: Callable[[*PosArgsT], Awaitable[Any]],
        *args: *PosArgsT,
        name: str | None = None,
    ) -> None:
        """Start `fn(*args)` as a child task."""

    def cancel(self) -> None:
        """Cancel every child task and the body of the `async with`."""


class Clock(ABC):
    """What the driver needs from time: now, sleeps, absolute deadlines, ordered tasks.

    Deadlines are absolute (`deadline_at`, in the clock's own time base, the one `now()`
    returns); durations say so (`duration_s`). `rng` is the one seeded source of randomness
    adapters draw latencies and faults from.
    """

    rng: random.Random

    @abstractmethod
    def now(self) -> float:
        """The current time in seconds, in this clock's time base."""

    @abstractmethod
    async def sleep_until(self, deadline_at: float) -> None:
        """Block until `now() >= deadline_at` (a deadline in the past still yields)."""

    async def sleep(self, duration_s: float) -> None:
        """Block for `duration_s` seconds."""
        await self.sleep_until(self.now() + duration_s)

    @abstractmethod
    def move_on_at(self, deadline_at: float) -> AbstractContextManager[anyio.CancelScope]:
        """Cancel the body at `deadline_at` and carry on silently (`anyio.move_on_at`)."""

    @abstractmethod
    def fail_at(self, deadline_at: float) -> AbstractContextManager[anyio.CancelScope]:
        """Cancel the body at `deadline_at` and raise `TimeoutError` (`anyio.fail_at`)."""

    @abstractmethod
    def task_group(self) -> TaskGroup:
        """A task group for this clock: `async with clock.task_group() as tg: ...`."""

    def start_soon(
        self,
        tg: TaskGroup,
        fn: Callable[[*PosArgsT], Awaitable[Any]],
        *args: *PosArgsT,
        name: str | None = None,
    ) -> None:
        """Start `fn(*args)` in `tg`; same as `tg.start_soon`, kept for symmetry."""
        tg.start_soon(fn, *args, name=name)

    @abstractmethod
    def event(self) -> ClockEvent:
        """A fresh one-shot event whose wakeups this clock orders."""

    @abstractmethod
    async def run(self, fn: Callable[[*PosArgsT], Awaitable[T]], *args: *PosArgsT) -> T:
        """Run `fn(*args)` under this clock (inside a running anyio event loop)."""


class RealClock(Clock):
    """anyio's own time, for real participants and real networks.

    >>> clock = RealClock(seed=1)
    >>> 0.0 <= clock.rng.random() < 1.0
    True
    """

    def __init__(self, seed: int | None = None) -> None:
        self.rng = random.Random(seed)

    def now(self) -> float:
        """`anyio.current_time()`: the event loop's monotonic clock."""
        return anyio.current_time()

    async def sleep_until(self, deadline_at: float) -> None:
        """`anyio.sleep_until`."""
        await anyio.sleep_until(deadline_at)

    def move_on_at(self, deadline_at: float) -> AbstractContextManager[anyio.CancelScope]:
        """`anyio.move_on_at`."""
        return anyio.move_on_at(deadline_at)

    def fail_at(self, deadline_at: float) -> AbstractContextManager[anyio.CancelScope]:
        """`anyio.fail_at`."""
        return anyio.fail_at(deadline_at)

    def task_group(self) -> TaskGroup:
        """An anyio task group behind the `TaskGroup` interface."""
        return _RealTaskGroup()

    def event(self) -> ClockEvent:
        """An `anyio.Event`."""
        return anyio.Event()

    async def run(self, fn: Callable[[*PosArgsT], Awaitable[T]], *args: *PosArgsT) -> T:
        """Await `fn(*args)`; real time needs no kernel."""
        return await fn(*args)


async def _await(fn: Callable[..., Awaitable[Any]], args: tuple[Any, ...]) -> None:
    await fn(*args)


class _RealTaskGroup:
    def __init__(self) -> None:
        self._tg: anyio.abc.TaskGroup | None = None

    async def __aenter__(self) -> TaskGroup:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._tg is not None
        return await self._tg.__aexit__(exc_type, exc, tb)

    def start_soon(
        self,
        fn: Callable[[*PosArgsT], Awaitable[Any]],
        *args: *PosArgsT,
        name: str | None = None,
    ) -> None:
        assert self._tg is not None, "start_soon outside `async with`"
        self._tg.start_soon(_await, fn, args, name=name)

    def cancel(self) -> None:
        assert self._tg is not None
        self._tg.cancel_scope.cancel()


# --------------------------------------------------------------------------- virtual


class _Wake(Enum):
    NORMAL = "normal"  # the thing waited for happened (timer, event, start)
    CANCEL = "cancel"  # an enclosing virtual scope was cancelled
    TEARDOWN = "teardown"  # the kernel stopped


@dataclass(eq=False, slots=True)
class _VScope:
    """A real anyio cancel scope plus the blocked waiters the kernel must wake if it fires."""

    cancel_scope: anyio.CancelScope
    closed: bool = False
    waiters: dict[int, _Waiter] = field(default_factory=dict)


@dataclass(eq=False, slots=True)
class _Waiter:
    seq: int
    what: str
    scopes: tuple[_VScope, ...]
    raw: anyio.Event | None = None
    blocked: bool = False
    reason: _Wake = _Wake.NORMAL


# The virtual scopes enclosing the current task, innermost last. A child task's value is
# set from its task group (not inherited from whoever called start_soon), which is
# exactly the set of anyio cancel scopes that enclose it.
_SCOPES: contextvars.ContextVar[tuple[_VScope, ...]] = contextvars.ContextVar(
    "quiesce_virtual_scopes", default=()
)


class VirtualClock(Clock):
    """A seeded discrete-event kernel for anyio: see the module docstring for the contract.

    >>> import anyio
    >>> clock = VirtualClock(seed=1)
    >>> async def main() -> list[str]:
    ...     trace: list[str] = []
    ...     async def worker(name: str, delay: float) -> None:
    ...         await clock.sleep(delay)
    ...         trace.append(f"{name}@{clock.now()}")
    ...     async with clock.task_group() as tg:
    ...         tg.start_soon(worker, "b", 2.0)
    ...         tg.start_soon(worker, "a", 1.0)
    ...     return trace
    >>> anyio.run(clock.run, main)
    ['a@1.0', 'b@2.0']
    """

    def __init__(self, seed: int = 0, *, start: float = 0.0) -> None:
        self.rng = random.Random(seed)
        self.seed = seed
        self._now = float(start)
        self._seq = itertools.count()
        self._heap: list[tuple[float, int, Callable[[], bool]]] = []
        self._running = 0
        self._idle: anyio.Event | None = None
        self._managed: set[int] = set()
        self._blocked: dict[int, _Waiter] = {}
        self._failure: BaseException | None = None
        self._main_done = False
        self._started = False
        self.steps = 0
        """How many heap entries the kernel has released (a cheap progress counter)."""

    # -- public API ---------------------------------------------------------------

    def now(self) -> float:
        """Virtual seconds; jumps to each released entry's time, never goes backwards."""
        return self._now

    async def sleep_until(self, deadline_at: float) -> None:
        """Block until virtual time reaches `deadline_at` (FIFO among equal times)."""
        waiter = self._waiter(f"sleep_until({deadline_at})")
        at = max(deadline_at, self._now)
        while True:
            self._push(at, self._waker(waiter, _Wake.NORMAL))
            if await self._park(waiter):
                return

    @contextmanager
    def move_on_at(self, deadline_at: float) -> Iterator[anyio.CancelScope]:
        """Cancel the body when virtual time reaches `deadline_at`; carry on after it."""
        with anyio.CancelScope() as cancel_scope, self._scope(cancel_scope, deadline_at):
            yield cancel_scope

    @contextmanager
    def fail_at(self, deadline_at: float) -> Iterator[anyio.CancelScope]:
        """Like `move_on_at`, then raise `TimeoutError` if the deadline cancelled the body."""
        with self.move_on_at(deadline_at) as cancel_scope:
            yield cancel_scope
        if cancel_scope.cancelled_caught:
            raise TimeoutError(f"virtual deadline {deadline_at} reached")

    def task_group(self) -> TaskGroup:
        """A task group whose child starts and exit are ordered by the kernel."""
        return _VirtualTaskGroup(self)

    def event(self) -> ClockEvent:
        """An event whose waiters are woken one at a time, in the order they waited."""
        return _VirtualEvent(self)

    async def run(self, fn: Callable[[*PosArgsT], Awaitable[T]], *args: *PosArgsT) -> T:
        """Run `fn(*args)` as the first managed task and drive the kernel until it returns.

        Call it inside a running event loop, e.g. `anyio.run(clock.run, main)` or
        `await clock.run(main)` in an anyio test. A clock runs once.
        """
        if self._started:
            raise ClockStopped("a VirtualClock runs once; create a new one for another run")
        self._started = True
        result: list[T] = []

        async def main() -> None:
            result.append(await fn(*args))

        try:
            async with anyio.create_task_group() as raw:
                raw.start_soon(self._kernel)
                self._spawn(raw, main, (), (), "main", None)
        except BaseExceptionGroup:
            if self._failure is not None:
                raise self._failure from None
            raise
        if self._failure is not None:
            raise self._failure
        return result[0]

    # -- kernel -------------------------------------------------------------------

    async def _kernel(self) -> None:
        while True:
            if self._running:
                self._idle = anyio.Event()
                await self._idle.wait()
                self._idle = None
            if self._main_done or self._failure is not None:
                return
            if not self._heap:
                self._fail(VirtualDeadlock(self._now, [w.what for w in self._blocked.values()]))
                return
            at, _, fire = heapq.heappop(self._heap)
            if at > self._now:
                self._now = at
            self.steps += 1
            fire()

    def _push(self, at: float, fire: Callable[[], bool]) -> None:
        heapq.heappush(self._heap, (at, next(self._seq), fire))

    def _waker(self, waiter: _Waiter, reason: _Wake) -> Callable[[], bool]:
        def fire() -> bool:
            return self._wake(waiter, reason)

        return fire

    def _wake(self, waiter: _Waiter, reason: _Wake) -> bool:
        # A stale entry (the waiter already woke for another reason) is skipped.
        if not waiter.blocked:
            return False
        waiter.blocked = False
        waiter.reason = reason
        for scope in waiter.scopes:
            scope.waiters.pop(waiter.seq, None)
        del self._blocked[waiter.seq]
        # The kernel counts the task as running *before* it resumes, so it never races
        # ahead of the task it just woke.
        self._running += 1
        assert waiter.raw is not None
        waiter.raw.set()
        return True

    def _wake_soon(self, waiter: _Waiter) -> None:
        self._push(self._now, self._waker(waiter, _Wake.NORMAL))

    def _stopped(self) -> None:
        if self._running == 0 and self._idle is not None:
            self._idle.set()

    def _fail(self, error: BaseException) -> None:
        if self._failure is not None:
            return
        self._failure = error
        self._heap.clear()
        for waiter in list(self._blocked.values()):
            self._wake(waiter, _Wake.TEARDOWN)
        if self._idle is not None:
            self._idle.set()

    def _waiter(self, what: str) -> _Waiter:
        return _Waiter(next(self._seq), what, _SCOPES.get())

    async def _park(self, waiter: _Waiter) -> bool:
        """Block the current task until the kernel wakes `waiter`.

        True: woken for the thing waited on. False: woken by a cancelled scope that turned
        out not to enclose this task (the caller re-arms and parks again). Raises the
        backend's cancellation when an enclosing scope was cancelled.
        """
        # A blocking call first honours a cancellation already pending (a deadline that
        # was due when its scope was entered, or a scope this very task cancelled).
        await checkpoint_if_cancelled()
        if self._failure is not None:
            raise ClockStopped(repr(self._failure))
        if anyio.get_current_task().id not in self._managed:
            # Fail the whole run: an unmanaged task breaks the one-task-at-a-time count.
            error = UnmanagedTask(waiter.what)
            self._fail(error)
            raise error
        waiter.raw = anyio.Event()
        waiter.blocked = True
        waiter.scopes = _SCOPES.get()
        for scope in waiter.scopes:
            scope.waiters[waiter.seq] = waiter
        self._blocked[waiter.seq] = waiter
        self._running -= 1
        self._stopped()
        # Shielded: only the kernel wakes a parked task, so cancellation reaches tasks one
        # at a time, in registration order, instead of all at once in backend order.
        with anyio.CancelScope(shield=True):
            await waiter.raw.wait()
        if waiter.reason is _Wake.NORMAL:
            return True
        await checkpoint_if_cancelled()
        if waiter.reason is _Wake.TEARDOWN:
            raise ClockStopped(repr(self._failure))
        return False

    @contextmanager
    def _scope(self, cancel_scope: anyio.CancelScope, deadline_at: float) -> Iterator[None]:
        scope = _VScope(cancel_scope)
        token = _SCOPES.set((*_SCOPES.get(), scope))
        try:
            if deadline_at <= self._now:
                # Already due: the body's first checkpoint raises, in this (running) task.
                cancel_scope.cancel()
            else:
                self._push(deadline_at, lambda: self._cancel(scope))
            yield
        finally:
            scope.closed = True
            _SCOPES.reset(token)

    def _cancel(self, scope: _VScope) -> bool:
        if scope.closed or scope.cancel_scope.cancel_called:
            return False
        scope.cancel_scope.cancel()
        for waiter in list(scope.waiters.values()):
            self._push(self._now, self._waker(waiter, _Wake.CANCEL))
        return False

    def _spawn(
        self,
        raw: anyio.abc.TaskGroup,
        fn: Callable[..., Awaitable[Any]],
        args: tuple[Any, ...],
        scopes: tuple[_VScope, ...],
        name: str,
        group: _VirtualTaskGroup | None,
    ) -> None:
        gate = _Waiter(next(self._seq), f"start {name}", scopes)
        # The task exists at once but parks on its start gate; the gate's heap entry,
        # registered now, decides when it really starts.
        gate.raw = anyio.Event()
        gate.blocked = True
        for scope in scopes:
            scope.waiters[gate.seq] = gate
        self._blocked[gate.seq] = gate
        self._wake_soon(gate)
        raw.start_soon(self._managed_task, gate, fn, args, scopes, group, name=name)

    async def _managed_task(
        self,
        gate: _Waiter,
        fn: Callable[..., Awaitable[Any]],
        args: tuple[Any, ...],
        scopes: tuple[_VScope, ...],
        group: _VirtualTaskGroup | None,
    ) -> None:
        _SCOPES.set(scopes)
        task_id = anyio.get_current_task().id
        assert gate.raw is not None
        with anyio.CancelScope(shield=True):
            await gate.raw.wait()
        self._managed.add(task_id)
        try:
            if gate.reason is not _Wake.NORMAL:
                await checkpoint_if_cancelled()
            if gate.reason is _Wake.TEARDOWN:
                raise ClockStopped(repr(self._failure))
            await fn(*args)
        except BaseException as error:
            if not isinstance(error, anyio.get_cancelled_exc_class() | ClockStopped):
                self._fail(error)
            raise
        finally:
            self._managed.discard(task_id)
            if group is None:
                self._main_done = True
            if group is not None and group._child_done():
                # The last child hands its running slot to the host joining the group.
                pass
            else:
                self._running -= 1
                self._stopped()


class _VirtualTaskGroup:
    def __init__(self, clock: VirtualClock) -> None:
        self._clock = clock
        self._raw: anyio.abc.TaskGroup | None = None
        self._scopes: tuple[_VScope, ...] = ()
        self._vscope: _VScope | None = None
        self._token: contextvars.Token[tuple[_VScope, ...]] | None = None
        self._live = 0
        self._joining = False

    async def __aenter__(self) -> TaskGroup:
        self._raw = anyio.create_task_group()
        await self._raw.__aenter__()
        self._vscope = _VScope(self._raw.cancel_scope)
        self._scopes = (*_SCOPES.get(), self._vscope)
        self._token = _SCOPES.set(self._scopes)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._raw is not None and self._vscope is not None and self._token is not None
        _SCOPES.reset(self._token)
        clock = self._clock
        if exc is not None and not isinstance(exc, anyio.get_cancelled_exc_class()):
            # The body failed: cancel the children through the kernel, then join them.
            self.cancel()
        if self._live and clock._failure is None:
            self._joining = True
            clock._running -= 1
            clock._stopped()
        try:
            return await self._raw.__aexit__(exc_type, exc, tb)
        finally:
            self._vscope.closed = True

    def start_soon(
        self,
        fn: Callable[[*PosArgsT], Awaitable[Any]],
        *args: *PosArgsT,
        name: str | None = None,
    ) -> None:
        assert self._raw is not None, "start_soon outside `async with`"
        self._live += 1
        label = name or str(getattr(fn, "__qualname__", repr(fn)))
        self._clock._spawn(self._raw, fn, tuple(args), self._scopes, label, self)

    def cancel(self) -> None:
        assert self._vscope is not None
        self._clock._cancel(self._vscope)

    def _child_done(self) -> bool:
        self._live -= 1
        if self._live == 0 and self._joining:
            self._joining = False
            return True
        return False


class _VirtualEvent:
    def __init__(self, clock: VirtualClock) -> None:
        self._clock = clock
        self._set = False
        self._waiters: list[_Waiter] = []

    def set(self) -> None:
        if self._set:
            return
        self._set = True
        for waiter in self._waiters:
            self._clock._wake_soon(waiter)
        self._waiters.clear()

    def is_set(self) -> bool:
        return self._set

    async def wait(self) -> None:
        while not self._set:
            waiter = self._clock._waiter("event.wait()")
            self._waiters.append(waiter)
            try:
                await self._clock._park(waiter)
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)


class Queue(Generic[T]):
    """An unbounded FIFO queue for either clock; `get` blocks through `clock.event()`.

    >>> import anyio
    >>> clock = VirtualClock()
    >>> async def main() -> int:
    ...     queue: Queue[int] = Queue(clock)
    ...     queue.put_nowait(41)
    ...     return await queue.get() + 1
    >>> anyio.run(clock.run, main)
    42
    """

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._items: deque[T] = deque()
        self._getters: deque[ClockEvent] = deque()

    def __len__(self) -> int:
        return len(self._items)

    def put_nowait(self, item: T) -> None:
        """Append `item` and wake the longest-waiting getter."""
        self._items.append(item)
        if self._getters:
            self._getters.popleft().set()

    async def get(self) -> T:
        """Remove and return the oldest item, waiting for one if the queue is empty."""
        while not self._items:
            ready = self._clock.event()
            self._getters.append(ready)
            try:
                await ready.wait()
            except BaseException:
                if ready in self._getters:
                    self._getters.remove(ready)
                elif self._items and self._getters:
                    # We were handed an item's wakeup but are leaving: pass it on.
                    self._getters.popleft().set()
                raise
        return self._items.popleft()


class Lock:
    """A FIFO mutual-exclusion lock for either clock (`async with lock: ...`)."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._locked = False
        self._waiters: deque[ClockEvent] = deque()

    def locked(self) -> bool:
        """Whether some task holds the lock."""
        return self._locked

    async def acquire(self) -> None:
        """Wait until the lock is free, then take it."""
        while self._locked:
            turn = self._clock.event()
            self._waiters.append(turn)
            try:
                await turn.wait()
            except BaseException:
                if turn in self._waiters:
                    self._waiters.remove(turn)
                elif not self._locked and self._waiters:
                    self._waiters.popleft().set()
                raise
        self._locked = True

    def release(self) -> None:
        """Free the lock and wake the longest-waiting task."""
        self._locked = False
        if self._waiters:
            self._waiters.popleft().set()

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

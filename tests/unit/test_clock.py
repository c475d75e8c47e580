import asyncio

from servelab.clock import NS_PER_S, VirtualClock, WallClock


def test_virtual_time_jumps_to_timers_exactly():
    clock = VirtualClock()
    seen: list[tuple[str, int]] = []

    async def sleeper(name: str, dt: float, n: int) -> None:
        for _ in range(n):
            await clock.sleep(dt)
            seen.append((name, clock.now()))

    async def main():
        await asyncio.gather(sleeper("a", 0.001, 1000), sleeper("b", 0.25, 4))

    clock.run(main)
    a = [t for n, t in seen if n == "a"]
    assert a[-1] == NS_PER_S and a[0] == NS_PER_S // 1000
    assert [t for n, t in seen if n == "b"] == [NS_PER_S // 4 * k for k in range(1, 5)]


def test_sleep_until_is_absolute():
    clock = VirtualClock(start_ns=5)

    async def main():
        await clock.sleep_until(3 * NS_PER_S + 7)
        return clock.now()

    assert clock.run(main) == 3 * NS_PER_S + 7


def test_wall_clock_is_monotonic_ns():
    c = WallClock(use_uvloop=False)

    async def main():
        t0 = c.now()
        await c.sleep(0.01)
        return c.now() - t0

    dt = c.run(main)
    assert isinstance(dt, int) and dt >= 9_000_000


def _run_guarded(fn, timeout_s: float = 20.0):
    """Run ``fn`` in a daemon thread: the old clock spun forever on a deadlock, so never block the suite."""
    import threading

    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            box["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(timeout_s)
    assert not t.is_alive(), f"VirtualClock.run still spinning after {timeout_s} s (deadlock not detected)"
    return box


def test_deadlock_raises_naming_the_pending_tasks():
    from servelab.errors import ServelabError, SimulationDeadlock

    clock = VirtualClock()
    cleaned: list[str] = []

    async def waiter(ev: asyncio.Event) -> None:
        try:
            await ev.wait()
        finally:
            cleaned.append("waiter")

    async def main():
        ev = asyncio.Event()  # nothing ever sets it
        task = asyncio.get_running_loop().create_task(waiter(ev), name="stuck-waiter")
        await clock.sleep(1.5)
        await task

    box = _run_guarded(lambda: clock.run(main))
    err = box.get("error")
    assert isinstance(err, SimulationDeadlock), box
    assert isinstance(err, ServelabError)
    assert err.at_ns == 1_500_000_000 and clock.now() == 1_500_000_000
    assert len(err.pending) == 2
    assert any(p.startswith("stuck-waiter (waiter at ") and "test_clock.py" in p for p in err.pending)
    assert "stuck-waiter" in str(err) and "t=1.500000000 s" in str(err)
    assert cleaned == ["waiter"]  # the stuck tasks were cancelled and unwound


def test_worker_thread_is_not_a_deadlock():
    clock = VirtualClock()

    def slow() -> int:
        import time as _time

        _time.sleep(0.2)  # longer than the idle poll: the loop must keep waiting for the thread
        return 7

    async def main():
        await clock.sleep(2.0)
        return await asyncio.get_running_loop().run_in_executor(None, slow), clock.now()

    box = _run_guarded(lambda: clock.run(main))
    assert box.get("value") == (7, 2 * NS_PER_S), box

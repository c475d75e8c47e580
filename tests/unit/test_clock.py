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

"""Where telemetry comes from: an HTTP /metrics page, the in-process simulator, NVML."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from servelab.telemetry.parse import Sample

if TYPE_CHECKING:
    import aiohttp


def metrics_url_for(base_url: str) -> str:
    """``http://host:8000/v1`` -> ``http://host:8000/metrics``."""
    u = base_url.rstrip("/")
    if u.endswith("/v1"):
        u = u[: -len("/v1")]
    return u + "/metrics"


class HttpMetrics:
    """GET a Prometheus page with a short timeout (aiohttp; not a hot path). aiohttp is imported when a page
    source is made: a run that scrapes no HTTP page (telemetry off, the simulator) never loads it (10 MB of
    RSS, 0.1 s). Not on the first fetch: that runs on the event loop during the load, and a 0.1 s import
    there is timer lag that makes the run INVALID (it did, against vLLM, 2 runs in 3)."""

    def __init__(self, url: str, headers: dict[str, str] | None = None, timeout_s: float = 5.0) -> None:
        self.url = url
        self.headers = headers or {}
        import aiohttp  # here, before the load starts (see above)

        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    async def __call__(self) -> str:
        if self._session is None:
            import aiohttp  # already loaded by __init__

            self._session = aiohttp.ClientSession(timeout=self._timeout)
        async with self._session.get(self.url, headers=self.headers) as r:
            if r.status != 200:
                raise RuntimeError(f"GET {self.url} answered HTTP {r.status}")
            return await r.text()

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class NvmlSampler:
    """GPU counters through NVML (nvidia-ml-py), when the machine has an NVIDIA GPU; else unavailable."""

    def __init__(self) -> None:
        self.available = False
        self._nv: Any = None
        self._handles: list[Any] = []
        try:
            import pynvml  # type: ignore[import-not-found]

            pynvml.nvmlInit()
            self._nv = pynvml
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
            self.available = bool(self._handles)
        except Exception:  # noqa: BLE001 - no library, no driver or no GPU: simply unavailable
            self.available = False

    def sample(self) -> list[Sample]:
        nv = self._nv
        out: list[Sample] = []
        for i, h in enumerate(self._handles):
            lab = (("gpu", str(i)),)
            util = nv.nvmlDeviceGetUtilizationRates(h)
            mem = nv.nvmlDeviceGetMemoryInfo(h)
            out.append(Sample("nvml_gpu_utilization", "gpu_utilization", lab, util.gpu / 100.0))
            out.append(Sample("nvml_memory_used", "gpu_memory_used_bytes", lab, float(mem.used)))
            out.append(
                Sample("nvml_power_usage", "gpu_power_watts", lab, nv.nvmlDeviceGetPowerUsage(h) / 1000.0)
            )
            out.append(Sample("nvml_sm_clock", "gpu_sm_clock_mhz", lab,
                              float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))))
        return out

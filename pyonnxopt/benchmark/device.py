"""Peak device (GPU) memory of the current process, through NVML (pynvml).

onnxruntime's Python API does not expose its CUDA arena's statistics, so the
figure comes from the driver: the memory NVML lists for this process id
(after the runs: onnxruntime's arena keeps what it grabbed, so that is its
peak), or, where NVML cannot see this process (a container's own process
ids), the growth of the device's used memory since `start()`. Every other
case is None with the reason.

Imported by the cold worker, which runs without the pyonnxopt package: no
pyonnxopt imports here."""

from __future__ import annotations

import os
from typing import Optional, Tuple

MIB = 1024 * 1024


class DeviceMemory:
    def __init__(self, provider: str):
        self.provider = provider
        self.nvml = None
        self.reason: Optional[str] = None
        self.baseline = None
        if provider == "cpu":
            self.reason = "the cpu provider uses no device memory"
            return
        try:
            import pynvml
        except ImportError:
            self.reason = "pynvml is not installed (pip install nvidia-ml-py to measure it)"
            return
        try:
            pynvml.nvmlInit()
        except Exception as e:  # no driver, no device
            self.reason = f"NVML cannot start: {str(e).strip() or type(e).__name__}"
            return
        self.nvml = pynvml

    def _handles(self):
        n = self.nvml
        return [n.nvmlDeviceGetHandleByIndex(i) for i in range(n.nvmlDeviceGetCount())]

    def _used(self) -> int:
        return sum(self.nvml.nvmlDeviceGetMemoryInfo(h).used for h in self._handles())

    def start(self) -> None:
        """Before the session exists: the baseline of the device-wide fallback."""
        if self.nvml is not None:
            self.baseline = self._used()

    def peak_mb(self) -> Tuple[Optional[float], Optional[str]]:
        """(MiB, None), or (None, why not) / (MiB, how it was measured when not per process)."""
        if self.nvml is None:
            return None, self.reason
        n, pid = self.nvml, os.getpid()
        mine = 0
        for h in self._handles():
            try:
                procs = n.nvmlDeviceGetComputeRunningProcesses(h)
            except Exception:
                procs = []
            mine += sum(p.usedGpuMemory or 0 for p in procs if p.pid == pid)
        if mine:
            return mine / MIB, None
        if self.baseline is None:
            return None, "NVML does not list this process and no baseline was taken"
        return max(0, self._used() - self.baseline) / MIB, "device-wide growth (NVML does not list this process id)"

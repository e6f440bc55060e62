"""Throughput figures: model FLOP utilization against the GPU's peak, and memory in use."""
from __future__ import annotations

import resource

import torch

# dense bf16 tensor-core peak per GPU, TFLOP/s (vendor datasheets; no sparsity)
PEAK_BF16_TFLOPS = {
    "H200": 989.0, "H100 SXM": 989.0, "H100 NVL": 835.0, "H100 PCIe": 756.0, "H100": 989.0, "H800": 989.0,
    "H20": 148.0, "A100": 312.0, "A800": 312.0, "L40S": 362.0, "L40": 181.0, "L20": 119.5, "A40": 150.0,
    "A30": 165.0, "A10": 125.0, "RTX 4090": 165.2, "RTX 3090": 71.0, "V100": 125.0, "T4": 65.0,
}


def peak_tflops(device_name: str, override: float | None = None) -> float | None:
    """The peak for this GPU name (longest matching key), the override when given, None when unknown."""
    if override:
        return override
    matches = [k for k in PEAK_BF16_TFLOPS if k.lower() in device_name.lower()]
    return PEAK_BF16_TFLOPS[max(matches, key=len)] if matches else None


def mfu(flops_per_token: float, tokens_per_s: float, world_size: int, peak: float | None) -> float | None:
    return flops_per_token * tokens_per_s / (world_size * peak * 1e12) if peak else None


def memory_gb() -> dict[str, float]:
    """GPU: peak allocated and reserved on this rank's device. CPU: this process's peak RSS."""
    if torch.cuda.is_available():
        return {"gpu_mem_allocated_gb": torch.cuda.max_memory_allocated() / 2**30,
                "gpu_mem_reserved_gb": torch.cuda.max_memory_reserved() / 2**30}
    return {"rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}


def device_name() -> str:
    return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"

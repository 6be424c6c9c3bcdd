"""GPU backends: real NVML and the simulated GPUs of local mode."""

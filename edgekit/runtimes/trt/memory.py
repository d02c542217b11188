"""CUDA for the TensorRT backend: the current device, device facts, and device/pinned host
buffers — torch.cuda when importable with CUDA, else cuda-python's runtime API (``cuda.bindings``
from 12.6, ``cuda.cudart`` before). Both are imported lazily."""

from __future__ import annotations

import ctypes
import importlib
import math
import weakref
from typing import Any

import numpy as np

from edgekit.errors import MissingDependency, TargetUnavailable

CUDA_HINT = (
    "pip install 'edgekit[trt]' on x86 (brings cuda-python); on Jetson pip install the cuda-python of the "
    "JetPack's CUDA major ('cuda-python>=12,<13' on JetPack 6, 'cuda-python>=11.8,<12' on JetPack 5), "
    "or use a torch build with CUDA"
)


def gpu_facts(device: int = 0) -> tuple[str, str]:
    """``(name, "major.minor")`` of CUDA device ``device`` via torch.cuda or cuda-python."""
    torch = _import_optional("torch")
    if torch is not None and torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability(device)
        return torch.cuda.get_device_name(device), f"{major}.{minor}"
    cudart = _import_cudart()
    if cudart is None:
        raise MissingDependency(
            "reading the GPU needs torch with CUDA or cuda-python; neither is usable", hint=CUDA_HINT
        )
    _cuda_device_count_or_raise(cudart)
    props = _cuda_check(cudart.cudaGetDeviceProperties(device))
    name = props.name.decode(errors="replace") if isinstance(props.name, bytes) else str(props.name)
    return name.rstrip("\x00"), f"{props.major}.{props.minor}"


def select_device(device: int) -> None:
    """Make CUDA device ``device`` current for this thread: TensorRT builds for, deserializes on
    and enqueues to the current device."""
    torch = _import_optional("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.set_device(device)
        return
    cudart = _import_cudart()
    if cudart is None:
        raise MissingDependency(
            "selecting a CUDA device needs torch with CUDA or cuda-python; neither is usable", hint=CUDA_HINT
        )
    _cuda_device_count_or_raise(cudart)
    _cuda_check(cudart.cudaSetDevice(device))


def cuda_backend(device: int) -> Any:
    torch = _import_optional("torch")
    if torch is not None and torch.cuda.is_available():
        return _TorchCuda(torch, device)
    cudart = _import_cudart()
    if cudart is not None:
        return _CudaPython(cudart, device)
    raise MissingDependency(
        "TensorRT device buffers need torch with CUDA or cuda-python; neither is usable", hint=CUDA_HINT
    )


class _TorchCuda:
    """Device buffers and pinned host tensors from torch; a returned numpy array keeps its host
    tensor alive (``Tensor.numpy()`` shares memory and holds a reference)."""

    def __init__(self, torch: Any, device: int):
        self.torch = torch
        self.device = torch.device("cuda", device)
        self.stream = torch.cuda.Stream(device=self.device)
        self.stream_handle = self.stream.cuda_stream

    def make_current(self) -> None:
        self.torch.cuda.set_device(self.device)

    def _dtype(self, dtype: str) -> Any:
        return getattr(self.torch, "bool" if dtype == "bool" else dtype)

    def alloc(self, shape: tuple[int, ...], dtype: str) -> Any:
        return self.torch.empty(shape, dtype=self._dtype(dtype), device=self.device)

    def ptr(self, buffer: Any) -> int:
        return buffer.data_ptr()

    def alloc_host(self, shape: tuple[int, ...], dtype: str) -> Any:
        return self.torch.empty(shape, dtype=self._dtype(dtype), pin_memory=True)

    def host_array(self, buffer: Any) -> np.ndarray:
        return buffer.numpy()  # shares the pinned memory

    def htod(self, buffer: Any, array: np.ndarray) -> None:
        with self.torch.cuda.stream(self.stream):
            buffer.copy_(self.torch.from_numpy(array), non_blocking=True)

    def dtoh(self, host: Any, buffer: Any) -> None:
        with self.torch.cuda.stream(self.stream):
            host.copy_(buffer, non_blocking=True)

    def synchronize(self) -> None:
        self.stream.synchronize()

    def close(self) -> None:
        self.stream = None


class _CudaPython:
    """cuda-python's runtime API. Device memory is freed by ``close``; pinned host memory is
    freed only when the last numpy array viewing it is gone (a finalizer on the ctypes buffer
    every such array keeps as its base), since ``run()`` hands those arrays to the caller."""

    def __init__(self, cudart: Any, device: int):
        self.cudart = cudart
        self.device_index = device
        self.stream = None
        self._device_ptrs: list[int] = []
        _cuda_device_count_or_raise(cudart)
        _cuda_check(cudart.cudaSetDevice(device))
        self.stream = _cuda_check(cudart.cudaStreamCreate())
        self.stream_handle = int(self.stream)

    def make_current(self) -> None:
        _cuda_check(self.cudart.cudaSetDevice(self.device_index))

    def alloc(self, shape: tuple[int, ...], dtype: str) -> tuple[int, int]:
        nbytes = max(1, math.prod(shape) * np.dtype(dtype).itemsize)
        ptr = int(_cuda_check(self.cudart.cudaMalloc(nbytes)))
        self._device_ptrs.append(ptr)
        return ptr, nbytes

    def ptr(self, buffer: tuple[int, int]) -> int:
        return buffer[0]

    def alloc_host(self, shape: tuple[int, ...], dtype: str) -> np.ndarray:
        count = math.prod(shape)
        nbytes = max(1, count * np.dtype(dtype).itemsize)
        ptr = int(_cuda_check(self.cudart.cudaMallocHost(nbytes)))
        raw = (ctypes.c_byte * nbytes).from_address(ptr)
        # Every array made from raw keeps raw alive (its .base chain), so the memory is freed
        # after the last view, not at close(). Not at interpreter exit: the process frees it.
        weakref.finalize(raw, _free_host, self.cudart, ptr).atexit = False
        # A ctypes array exports the buffer protocol; numpy's stub (for Python < 3.12, no
        # typing.Buffer) lists only bytes-like types.
        return np.frombuffer(raw, dtype=dtype, count=count).reshape(shape)  # type: ignore[call-overload]

    def host_array(self, buffer: np.ndarray) -> np.ndarray:
        return buffer

    def htod(self, buffer: tuple[int, int], array: np.ndarray) -> None:
        kind = self.cudart.cudaMemcpyKind.cudaMemcpyHostToDevice
        _cuda_check(self.cudart.cudaMemcpyAsync(buffer[0], array.ctypes.data, array.nbytes, kind, self.stream))

    def dtoh(self, host: np.ndarray, buffer: tuple[int, int]) -> None:
        kind = self.cudart.cudaMemcpyKind.cudaMemcpyDeviceToHost
        _cuda_check(self.cudart.cudaMemcpyAsync(host.ctypes.data, buffer[0], host.nbytes, kind, self.stream))

    def synchronize(self) -> None:
        _cuda_check(self.cudart.cudaStreamSynchronize(self.stream))

    def close(self) -> None:
        for ptr in self._device_ptrs:
            self.cudart.cudaFree(ptr)
        self._device_ptrs = []
        if self.stream is not None:
            self.cudart.cudaStreamDestroy(self.stream)
            self.stream = None


def _free_host(cudart: Any, ptr: int) -> None:
    cudart.cudaFreeHost(ptr)


def _import_optional(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


def _import_cudart() -> Any:
    # cuda-python >= 12.6 moved the runtime bindings to cuda.bindings; older ones have cuda.cudart.
    return _import_optional("cuda.bindings.runtime") or _import_optional("cuda.cudart")


def _cuda_check(result: tuple) -> Any:
    """Unpack a cuda-python ``(err, *values)`` tuple, raising on an error code."""
    err, *values = result
    if int(err) != 0:
        raise RuntimeError(f"CUDA call failed: {err}")
    return values[0] if len(values) == 1 else tuple(values) or None


def _cuda_device_count_or_raise(cudart: Any) -> None:
    err, count = cudart.cudaGetDeviceCount()
    if int(err) != 0 or count == 0:
        raise TargetUnavailable(
            f"no CUDA GPU is visible ({err})", hint="check the driver (nvidia-smi) and CUDA_VISIBLE_DEVICES"
        )

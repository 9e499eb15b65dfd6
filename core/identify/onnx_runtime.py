"""The forward pass of a torch backbone through ONNX Runtime (CPU), with a checked, cached export.

:func:`build_onnx_forward` exports ``model`` (BatchNorm folded, the same L2 normalisation as
:meth:`TorchBackbone.forward_embed`) and opens it in an ``onnxruntime.InferenceSession``. The export lives in the
feature cache beside a SHA-256 sidecar: a file that does not match it is exported again, never opened. Every
session is checked on a seeded batch against torch to :data:`TOLERANCE`, else the caller falls back to torch.
The runtime is not part of the feature fingerprint (both give the same features to 1e-4).
``ROSETTE_RUNTIME`` chooses the runtime when no keyword option does (:func:`requested_runtime`).

The export's settings and cache layout: docs/backbones.md."""

from __future__ import annotations

import copy
import hashlib
import io
import json
import logging
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from core.identify.features import atomic_write

log = logging.getLogger(__name__)

RUNTIMES = ("auto", "torch", "onnx")
ENV_VAR = "ROSETTE_RUNTIME"
#: largest |onnx - torch| allowed on the L2-normalised features of the check batch
TOLERANCE = 1e-4
OPSET = 17
EXPORT_FORMAT = "rosette-onnx-2"  # bump when the exported graph changes (input/output names, wrapper)
MODEL_FILE = "model.onnx"
META_FILE = "model.json"
SUBDIR = "onnx-runtime"


def requested_runtime(option: str | None = None) -> str:
    """The runtime asked for: ``option`` when it is ``torch``/``onnx``, else ``$ROSETTE_RUNTIME``, else ``auto``."""
    for value, where in ((option, "runtime option"), (os.environ.get(ENV_VAR), ENV_VAR)):
        if value is None or value == "":
            continue
        value = str(value).strip().lower()
        if value not in RUNTIMES:
            raise ValueError(f"{where} must be one of {RUNTIMES}, got {value!r}")
        if value != "auto":
            return value
    return "auto"


def usable_cores() -> int:
    """CPU cores this process may run on (affinity-aware)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not on Linux
        return max(1, os.cpu_count() or 1)


def import_onnxruntime() -> Any:
    """``onnxruntime`` or ImportError (a separate function so tests can make it fail)."""
    import onnxruntime  # deferred: heavy ML library, optional (torch is the fallback)

    return onnxruntime


class _Embedder(nn.Module):
    """model(x) -> flatten -> L2-normalise: exactly :meth:`TorchBackbone.forward_embed`."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        feats = self.model(x)
        if feats.ndim != 2:
            feats = feats.flatten(1)
        return nn.functional.normalize(feats.float(), dim=1, eps=1e-12)


class OnnxForward:
    """A checked ONNX Runtime session: ``forward(x)`` with x N x 3 x H x W float32 (preprocessed) -> N x D."""

    def __init__(self, session: Any, *, path: Path | None, threads: int, max_diff: float) -> None:
        self.session = session
        self.path = path
        self.threads = threads
        self.max_diff = max_diff
        self._input = session.get_inputs()[0].name

    def __repr__(self) -> str:
        return f"OnnxForward(threads={self.threads}, path={self.path}, max_diff={self.max_diff:.2g})"

    def __call__(self, x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=np.float32)
        return np.asarray(self.session.run(None, {self._input: x})[0], dtype=np.float32)


class _StaticSameConv(nn.Module):
    """timm's ``Conv2dSame`` for one fixed input size: constant zero pads + conv. ONNX Runtime fuses such a
    Pad into the Conv (its dynamic-shape version leaves Shape/Ceil/Pad nodes that break the NCHWc layout)."""

    def __init__(self, conv: nn.Conv2d, pads: tuple[int, int, int, int]) -> None:
        super().__init__()
        self.conv = conv
        self.pads = pads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = self.conv
        return nn.functional.conv2d(nn.functional.pad(x, self.pads), c.weight, c.bias, c.stride, 0, c.dilation,
                                    c.groups)


def _same_pad(size: int, kernel: int, stride: int, dilation: int) -> int:
    return max((-(-size // stride) - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)


def static_padding(model: nn.Module, input_size: tuple[int, int]) -> tuple[nn.Module, list[tuple[int, ...]]]:
    """(copy of ``model`` with every timm ``Conv2dSame`` replaced by fixed pads for ``input_size``, those pads
    (left, right, top, bottom) in forward order). Same function for that size; ``model`` is left alone."""
    same = [name for name, m in model.named_modules() if type(m).__name__ == "Conv2dSame"]
    if not same:
        return model, []
    model = copy.deepcopy(model)
    modules = dict(model.named_modules())
    sizes: dict[str, tuple[int, int]] = {}
    order: list[str] = []

    def record(name: str, x: torch.Tensor) -> None:
        sizes[name] = (int(x.shape[-2]), int(x.shape[-1]))
        order.append(name)

    hooks = [modules[name].register_forward_pre_hook(lambda m, args, name=name: record(name, args[0]))
             for name in same]
    try:
        with torch.inference_mode():
            model(torch.zeros((1, 3, *input_size), dtype=torch.float32))
    finally:
        for h in hooks:
            h.remove()
    pads: dict[str, tuple[int, int, int, int]] = {}
    for name in same:
        conv = modules[name]
        ih, iw = sizes[name]
        ph = _same_pad(ih, conv.weight.shape[-2], conv.stride[0], conv.dilation[0])
        pw = _same_pad(iw, conv.weight.shape[-1], conv.stride[1], conv.dilation[1])
        pads[name] = (pw // 2, pw - pw // 2, ph // 2, ph - ph // 2)
        parent_name, _, child = name.rpartition(".")
        parent = modules[parent_name] if parent_name else model
        setattr(parent, child, _StaticSameConv(conv, pads[name]))
    return model, [pads[name] for name in order]


def _fuse_pads_into_convs(data: bytes, pads_in_order: list[tuple[int, ...]]) -> bytes:
    """Move each exported zero Pad (in forward order, as :func:`static_padding` recorded them) into the pads
    attribute of the Conv it feeds, and drop the dead nodes; unchanged when the graph does not match."""
    try:
        import onnx  # deferred: heavy ML library, only needed for this graph rewrite
    except ImportError:
        return data
    model = onnx.load_from_string(data)
    graph = model.graph
    pad_nodes = [n for n in graph.node if n.op_type == "Pad"]
    consumers: dict[str, list[Any]] = {}
    for n in graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    if len(pad_nodes) != len(pads_in_order):
        return data
    for pad, (left, right, top, bottom) in zip(pad_nodes, pads_in_order):
        users = consumers.get(pad.output[0], [])
        mode = next((a.s for a in pad.attribute if a.name == "mode"), b"constant")
        if len(users) != 1 or users[0].op_type != "Conv" or mode != b"constant":
            return data
        if len(pad.input) > 2 and pad.input[2]:
            return data  # an explicit fill value: not the zero padding recorded
        conv = users[0]
        old = next((list(a.ints) for a in conv.attribute if a.name == "pads"), [0, 0, 0, 0])
        if any(old):
            return data
        for a in list(conv.attribute):
            if a.name in ("pads", "auto_pad"):
                conv.attribute.remove(a)
        conv.attribute.append(onnx.helper.make_attribute("pads", [top, left, bottom, right]))
        conv.input[0] = pad.input[0]
        graph.node.remove(pad)
    # drop nodes whose outputs nobody uses any more (the pads' shape arithmetic)
    while True:
        needed = {o.name for o in graph.output} | {i for n in graph.node for i in n.input}
        dead = [n for n in graph.node if not any(o in needed for o in n.output)]
        if not dead:
            break
        for n in dead:
            graph.node.remove(n)
    return model.SerializeToString()


def onnx_dir(cache_dir: str | os.PathLike[str], fingerprint: str) -> Path:
    """Folder of the export of the backbone with ``fingerprint`` under a feature cache folder."""
    return Path(cache_dir) / fingerprint / SUBDIR


def _export_bytes(model: nn.Module, input_size: tuple[int, int]) -> bytes:
    h, w = input_size
    dummy = torch.zeros((2, 3, h, w), dtype=torch.float32)
    buf = io.BytesIO()
    static, pads = static_padding(model, input_size)
    with warnings.catch_warnings():  # the tracer's warnings concern shapes, fixed here but for the batch
        warnings.simplefilter("ignore")
        torch.onnx.export(_Embedder(static).eval(), (dummy,), buf, dynamo=False, input_names=["pixels"],
                          output_names=["embedding"], opset_version=OPSET, do_constant_folding=True,
                          dynamic_axes={"pixels": {0: "n"}, "embedding": {0: "n"}})
    return _fuse_pads_into_convs(buf.getvalue(), pads)


def _read_verified(folder: Path) -> bytes | None:
    """The exported model's bytes when its sidecar exists and matches (else None: missing, partial or stale)."""
    try:
        meta = json.loads((folder / META_FILE).read_text())
        data = (folder / MODEL_FILE).read_bytes()
    except (OSError, ValueError):
        return None
    if meta.get("format") != EXPORT_FORMAT or meta.get("size") != len(data):
        return None
    if meta.get("sha256") != hashlib.sha256(data).hexdigest():
        return None
    return data


def _write_export(folder: Path, data: bytes) -> None:
    meta = {"format": EXPORT_FORMAT, "sha256": hashlib.sha256(data).hexdigest(), "size": len(data),
            "opset": OPSET, "torch": torch.__version__}
    # sidecar first removed, model written, sidecar last: a crash between the two leaves no valid pair
    (folder / META_FILE).unlink(missing_ok=True)
    atomic_write(folder / MODEL_FILE, lambda fh: fh.write(data))
    blob = json.dumps(meta, indent=2, sort_keys=True).encode("utf-8")
    atomic_write(folder / META_FILE, lambda fh: fh.write(blob))


def _session(ort: Any, data: bytes, threads: int) -> Any:
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # no busy-waiting between runs: the decode/resize threads need those cycles
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.log_severity_level = 3
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def check_batch(input_size: tuple[int, int], *, n: int = 4, seed: int = 0) -> np.ndarray:
    """A seeded N x 3 x H x W batch in the normalised pixel range [-1, 1] (used to compare runtimes)."""
    h, w = input_size
    rng = np.random.default_rng(seed)
    base = rng.uniform(-1.0, 1.0, size=(n, 3, h // 8, w // 8)).astype(np.float32)
    smooth = np.repeat(np.repeat(base, 8, axis=2), 8, axis=3)  # blocky images, closer to photos than noise
    noise = rng.normal(0.0, 0.1, size=(n, 3, h, w)).astype(np.float32)
    out = np.zeros((n, 3, h, w), dtype=np.float32)
    out[:, :, :smooth.shape[2], :smooth.shape[3]] = smooth
    return np.clip(out + noise, -1.0, 1.0)


def torch_features(model: nn.Module, x: np.ndarray) -> np.ndarray:
    """The torch path's L2-normalised features of a preprocessed batch (reference for the check)."""
    with torch.inference_mode():
        feats = _Embedder(model)(torch.from_numpy(x))
    return feats.cpu().numpy().astype(np.float32)


#: Exports made in this process, by (fingerprint, input size): another catalogue (another feature cache) with the
#: same backbone reuses the bytes instead of exporting again; each session is still checked against torch.
_EXPORTED: dict[tuple[str, tuple[int, ...]], bytes] = {}
EXPORT_MEMO_SIZE = 4


def build_onnx_forward(model: nn.Module, *, input_size: tuple[int, int], fingerprint: str,
                       cache_dir: str | os.PathLike[str] | None, threads: int | None = None,
                       tolerance: float = TOLERANCE) -> tuple[OnnxForward | None, str]:
    """(checked ONNX forward, "") or (None, why not) for a CPU model.

    With ``cache_dir`` the export is read from / written to :func:`onnx_dir` (exported once, reused);
    without it the model is exported in memory. The session's features on :func:`check_batch` must equal
    torch's to ``tolerance``.
    """
    try:
        ort = import_onnxruntime()
    except ImportError as exc:
        return None, f"onnxruntime is not installed ({exc})"
    threads = int(threads or usable_cores())
    model = model.eval()
    folder = onnx_dir(cache_dir, fingerprint) if cache_dir is not None else None
    data = _read_verified(folder) if folder is not None else None
    reused = data is not None
    memo_key = (fingerprint, tuple(input_size))
    try:
        if data is None:
            data = _EXPORTED.get(memo_key) or _export_bytes(model, input_size)
        session = _session(ort, data, threads)
        x = check_batch(input_size)
        got = np.asarray(session.run(None, {session.get_inputs()[0].name: x})[0], dtype=np.float32)
        want = torch_features(model, x)
    except Exception as exc:  # noqa: BLE001 - any export/runtime failure means: use torch
        return None, f"ONNX export or session failed: {type(exc).__name__}: {exc}"
    if got.shape != want.shape:
        return None, f"ONNX features have shape {got.shape}, torch's {want.shape}"
    max_diff = float(np.max(np.abs(got - want))) if got.size else 0.0
    if not np.isfinite(max_diff) or max_diff > tolerance:
        if folder is not None:
            (folder / META_FILE).unlink(missing_ok=True)  # never reuse an export that failed the check
        return None, f"ONNX features differ from torch's by {max_diff:.2g} (> {tolerance:g}) on the check batch"
    _EXPORTED[memo_key] = data
    while len(_EXPORTED) > EXPORT_MEMO_SIZE:  # oldest first out
        _EXPORTED.pop(next(iter(_EXPORTED)))
    path = None
    if folder is not None:
        path = folder / MODEL_FILE
        if not reused:
            try:
                _write_export(folder, data)
            except OSError as exc:  # the session works; only the reuse is lost
                log.warning("could not save the ONNX export in %s: %s", folder, exc)
                path = None
    return OnnxForward(session, path=path, threads=threads, max_diff=max_diff), ""

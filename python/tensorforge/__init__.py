"""TensorForge from Python: the analytical model, overflow-safe kernels on NumPy arrays, an
onnxruntime-style ``Session`` over the fused executor, and measurement and policy (``bench``,
``Store``, ``gate``, ``report``) — the Rust libraries themselves, not the command line.

Results of the model and the policy are :class:`Result` objects: attribute access over the
JSON the CLI's ``--json`` prints, with ``to_dict()`` returning exactly that JSON. Lists of
rows (``result.gemms``, ``Store().runs()``) are lists of dicts' objects, so
``pandas.DataFrame([r.to_dict() for r in rows])`` or ``pandas.DataFrame(result.to_dict()["gemms"])``
gives a table without pandas being a dependency.

Bad input raises ``ValueError`` with the library's one-line message; a file or store that
cannot be reached raises ``OSError``; an internal failure raises ``RuntimeError``.
"""

from __future__ import annotations

import json as _json
import os as _os
from collections.abc import Mapping as _Mapping
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from . import _native
from ._native import (  # noqa: F401  (re-exported)
    NodeArg,
    SCHEMA_VERSION,
    Session,
    __version__,
    dequantize,
    log_softmax,
    logaddexp,
    logaddexp2,
    logsumexp,
    quantize,
    requantize,
    rmsnorm_swiglu,
    softmax,
)

__all__ = [
    "Result",
    "Session",
    "NodeArg",
    "Store",
    "analyze_gemm",
    "analyze_conv2d",
    "analyze_transformer",
    "analyze_model",
    "serve",
    "explore_gemm",
    "hardware_presets",
    "hardware",
    "fuse_report",
    "plan_memory",
    "memory_traffic",
    "compare",
    "bench",
    "gate",
    "gate_history",
    "report",
    "logaddexp",
    "logaddexp2",
    "logsumexp",
    "softmax",
    "log_softmax",
    "quantize",
    "dequantize",
    "requantize",
    "rmsnorm_swiglu",
    "SCHEMA_VERSION",
    "__version__",
]

PathLike = Union[str, "_os.PathLike[str]"]


class Result(_Mapping):
    """A library result: attributes over its JSON object, ``to_dict()`` for the object itself.

    Nested objects are ``Result`` objects too, lists of objects are lists of ``Result``; every
    other value (numbers, strings, lists of numbers, None) is returned as the JSON gives it.
    A ``Result`` is a read-only mapping, so ``pandas.DataFrame(list_of_results)`` is a table
    with one column per field.
    """

    __slots__ = ("_d",)

    def __init__(self, d: Mapping[str, Any]):
        object.__setattr__(self, "_d", dict(d))

    @staticmethod
    def _wrap(v: Any) -> Any:
        if isinstance(v, dict):
            return Result(v)
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            return [Result(x) for x in v]
        return v

    def __getattr__(self, name: str) -> Any:
        d = object.__getattribute__(self, "_d")
        if name in d:
            return Result._wrap(d[name])
        raise AttributeError(
            f"{name!r}: this result has no such field; it has {sorted(d)}"
        )

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a Result is read-only; use to_dict() for a mutable copy")

    def __getitem__(self, key: str) -> Any:
        return Result._wrap(self._d[key])

    def __iter__(self):
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __contains__(self, key: object) -> bool:
        return key in self._d

    def __dir__(self) -> List[str]:
        return sorted(set(self._d) | {"to_dict", "keys", "items", "values", "get"})

    def to_dict(self) -> Dict[str, Any]:
        """The JSON object the CLI's ``--json`` prints for the same arguments (a deep copy)."""
        return _json.loads(_json.dumps(self._d))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Result):
            return other._d == self._d
        return isinstance(other, dict) and other == self._d

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        keys = ", ".join(list(self._d)[:8])
        more = ", ..." if len(self._d) > 8 else ""
        return f"Result({keys}{more})"


def _result(text: str) -> Any:
    return Result._wrap(_json.loads(text))


def _tile(tile: Union[None, str, Sequence[int]]) -> Optional[str]:
    if tile is None or isinstance(tile, str):
        return tile
    return "x".join(str(int(t)) for t in tile)


def _pair(v: Union[None, int, str, Sequence[int]], name: str) -> Optional[Tuple[int, int]]:
    """``N``, ``(H, W)`` or ``"HxW"`` as a pair, as the CLI's flags read them."""
    if v is None:
        return None
    if isinstance(v, int):
        return (v, v)
    if isinstance(v, str):
        parts = v.lower().replace("×", "x").split("x")
        try:
            nums = [int(p) for p in parts]
        except ValueError:
            raise ValueError(f"invalid value for `{name}`: `{v}` (expected N or HxW)") from None
        if len(nums) == 1:
            return (nums[0], nums[0])
        if len(nums) == 2:
            return (nums[0], nums[1])
        raise ValueError(f"invalid value for `{name}`: `{v}` (expected N or HxW)")
    t = tuple(int(x) for x in v)
    if len(t) != 2:
        raise ValueError(f"invalid value for `{name}`: {v!r} (expected two integers)")
    return t  # type: ignore[return-value]


def _config(config: Union[PathLike, Mapping[str, Any]]) -> Tuple[str, str]:
    """A Hugging Face config as (text, source name): a dict, or a path to config.json."""
    if isinstance(config, Mapping):
        return _json.dumps(dict(config)), "<config dict>"
    path = _os.fspath(config)
    with open(path, "r", encoding="utf-8") as f:
        return f.read(), path


def analyze_gemm(
    m: Optional[int] = None,
    n: Optional[int] = None,
    k: Optional[int] = None,
    *,
    batch: Optional[int] = None,
    dtype: Optional[str] = None,
    accumulate: bool = False,
    preset: Optional[str] = None,
    hw: Optional[str] = None,
    hw_file: Optional[PathLike] = None,
    pe: Union[None, str, Sequence[int]] = None,
    clock_hz: Optional[float] = None,
    sram_bytes: Optional[int] = None,
    tile: Union[None, str, Sequence[int]] = None,
    dataflow: Optional[str] = None,
    fill_drain: bool = False,
) -> Result:
    """Op counts, bytes, roofline, PE mapping, SRAM fit and (with ``tile``) the DRAM traffic of
    every loop order of C[M×N] = A[M×K]·B[K×N] on a chip (``analyze gemm --json``)."""
    return _result(
        _native._analyze_gemm(
            m, n, k, batch=batch, dtype=dtype, accumulate=accumulate, preset=preset, hw=hw,
            hw_file=_os.fspath(hw_file) if hw_file is not None else None,
            pe=_pair(pe, "pe"), clock_hz=clock_hz, sram_bytes=sram_bytes, tile=_tile(tile),
            dataflow=dataflow, fill_drain=fill_drain,
        )
    )


def analyze_conv2d(
    *,
    preset: Optional[str] = None,
    batch: Optional[int] = None,
    cin: Optional[int] = None,
    cout: Optional[int] = None,
    height: Optional[int] = None,
    width: Optional[int] = None,
    kernel: Union[None, int, str, Sequence[int]] = None,
    stride: Union[None, int, str, Sequence[int]] = None,
    pad: Union[None, int, str, Sequence[int]] = None,
    dilation: Union[None, int, str, Sequence[int]] = None,
    groups: Optional[int] = None,
    dtype: Optional[str] = None,
    hw: Optional[str] = None,
    hw_file: Optional[PathLike] = None,
    pe: Union[None, str, Sequence[int]] = None,
    clock_hz: Optional[float] = None,
    sram_bytes: Optional[int] = None,
    tile: Union[None, str, Sequence[int]] = None,
    dataflow: Optional[str] = None,
    fill_drain: bool = False,
) -> Result:
    """A 2-D convolution lowered to GEMM, implicit-GEMM and im2col traffic
    (``analyze conv2d --json``)."""
    return _result(
        _native._analyze_conv2d(
            preset=preset, batch=batch, cin=cin, cout=cout, height=height, width=width,
            kernel=_pair(kernel, "kernel"), stride=_pair(stride, "stride"),
            pad=_pair(pad, "pad"), dilation=_pair(dilation, "dilation"), groups=groups,
            dtype=dtype, hw=hw, hw_file=_os.fspath(hw_file) if hw_file is not None else None,
            pe=_pair(pe, "pe"), clock_hz=clock_hz, sram_bytes=sram_bytes, tile=_tile(tile),
            dataflow=dataflow, fill_drain=fill_drain,
        )
    )


def analyze_transformer(preset: Optional[str] = None, *, hw_file: Optional[PathLike] = None, **fields: Any) -> Result:
    """One transformer block from a preset (``transformer_small`` ...) or its widths (``seq``,
    ``d_model``, ``heads``, ``d_ff``), with the CLI's block flags as keywords (``kv_heads``,
    ``head_dim``, ``mlp``, ``norm``, ``batch``, ``phase``, ``kv_cache_len``, ``dtype``,
    ``causal``, ``attention_kernel``, ``weight_dtype``, ``group_size``, ``zero_points``,
    ``kv_dtype``, ``hw``) (``analyze transformer --json``)."""
    return _result(
        _native._analyze_transformer(
            preset, hw_file=_os.fspath(hw_file) if hw_file is not None else None, **fields
        )
    )


def analyze_model(config: Union[PathLike, Mapping[str, Any]], *, hw_file: Optional[PathLike] = None, **fields: Any) -> Result:
    """A whole decoder from a Hugging Face config (a dict or a path to config.json): parameter
    count, FLOPs, bytes and time per phase (``analyze model --config FILE --json``). Keywords:
    ``batch``, ``seq`` (required in prefill), ``phase``, ``kv_cache_len``, ``dtype``,
    ``causal``, ``attention_kernel``, ``weight_dtype``, ``group_size``, ``zero_points``,
    ``kv_dtype``, ``mla_form``, ``routing``, ``lm_head_tokens``, ``hw``."""
    text, source = _config(config)
    return _result(
        _native._analyze_model(
            text, source, hw_file=_os.fspath(hw_file) if hw_file is not None else None, **fields
        )
    )


def serve(config: Union[PathLike, Mapping[str, Any]], *, hw_file: Optional[PathLike] = None, **fields: Any) -> Result:
    """The serving view of a Hugging Face model: fit, tokens/s and latency per batch and
    context under a ``tp``/``pp``/``ep``/``dp`` plan (``serve --config FILE --json``).
    Keywords: ``hw``, ``tp``, ``pp``, ``ep``, ``dp``, ``batch`` and ``context`` (lists),
    ``dtype``, ``weight_dtype``, ``group_size``, ``zero_points``, ``kv_dtype``,
    ``attention_kernel``, ``mla_form``, ``routing``."""
    text, source = _config(config)
    return _result(
        _native._serve(
            text, source, hw_file=_os.fspath(hw_file) if hw_file is not None else None, **fields
        )
    )


def explore_gemm(
    m: Optional[int] = None,
    n: Optional[int] = None,
    k: Optional[int] = None,
    *,
    tile_m: Sequence[int],
    tile_n: Sequence[int],
    tile_k: Sequence[int],
    pe: Optional[Sequence[Union[str, Sequence[int]]]] = None,
    schedules: Union[None, str, Sequence[str]] = None,
    dataflows: Union[None, str, Sequence[str]] = None,
    hw_file: Optional[PathLike] = None,
    **fields: Any,
) -> Result:
    """Bounded exploration of the candidates you supply (tiles × PE shapes × loop orders ×
    dataflows), ranked, with why the winner wins (``explore gemm --json``). Other keywords:
    ``batch``, ``dtype``, ``preset``, ``double_buffer``, ``fill_drain``, ``sram_bytes``,
    ``clock_hz``, ``max_candidates``, ``top``, ``hw``, ``rank`` (``"latency"``, the default,
    ``"energy"`` or ``"edp"``: energy needs sourced energies on the chip's levels)."""
    as_list = lambda v: [v] if isinstance(v, str) else (list(v) if v is not None else None)  # noqa: E731
    return _result(
        _native._explore_gemm(
            m, n, k, tile_m=list(tile_m), tile_n=list(tile_n), tile_k=list(tile_k),
            pe=[_pair(p, "pe") for p in pe] if pe is not None else None,
            schedules=as_list(schedules), dataflows=as_list(dataflows),
            hw_file=_os.fspath(hw_file) if hw_file is not None else None, **fields,
        )
    )


def hardware_presets() -> List[Result]:
    """Every hardware preset (``hw list --json``'s ``presets``)."""
    return _result(_native._hw_list()).presets


def hardware(name: Optional[str] = None, *, hw_file: Optional[PathLike] = None) -> Result:
    """One chip: a preset by name, or a hardware file validated (``hw show NAME --json``)."""
    return _result(
        _native._hw_show(name, hw_file=_os.fspath(hw_file) if hw_file is not None else None)
    )


def fuse_report(path: PathLike, *, hw: Optional[str] = None, hw_file: Optional[PathLike] = None, dims: Optional[Mapping[str, int]] = None) -> Result:
    """The fusion compiler's report on a graph (JSON or ONNX): fused kernels, their traffic
    and time on ``hw``, the unfused comparison, every decision with its reason
    (``fuse GRAPH --json``)."""
    return _result(
        _native._fuse_report(
            _os.fspath(path), hw=hw,
            hw_file=_os.fspath(hw_file) if hw_file is not None else None,
            dims=dict(dims) if dims else None,
        )
    )


def plan_memory(path: PathLike, *, align: int = 64, unfused: bool = False, capacity_bytes: Optional[int] = None, dims: Optional[Mapping[str, int]] = None) -> Result:
    """The static memory plan of a graph: each tensor's offset and lifetime, the peak
    (``plan-memory GRAPH --json``)."""
    return _result(
        _native._plan_memory(
            _os.fspath(path), align=align, unfused=unfused, capacity_bytes=capacity_bytes,
            dims=dict(dims) if dims else None,
        )
    )


def memory_traffic(*, seq: int = 4096, dim: int = 8192, ffn: Optional[int] = None, dtype: str = "fp16", hw: Optional[str] = None, hw_file: Optional[PathLike] = None) -> Result:
    """DRAM traffic of RMSNorm → SwiGLU unfused and fused, activations only and with the
    weights (``memory-traffic --json``)."""
    return _result(
        _native._memory_traffic(
            seq=seq, dim=dim, ffn=ffn, dtype=dtype, hw=hw,
            hw_file=_os.fspath(hw_file) if hw_file is not None else None,
        )
    )


Record = Dict[str, Any]


def _records_json(records: Iterable[Union[Record, Result]]) -> str:
    return _json.dumps([r.to_dict() if isinstance(r, Result) else r for r in records])


class Store:
    """The record store: an SQLite file path or a ``postgres://`` URL, as the CLI's
    ``--store`` (default: the CLI's default store). Records are dicts in the record format."""

    def __init__(self, location: Optional[PathLike] = None):
        self._s = _native.Store(_os.fspath(location) if location is not None else None)

    def describe(self) -> str:
        """Where the store is (a URL's password is never shown)."""
        return self._s.describe()

    def __repr__(self) -> str:
        return f"Store({self.describe()})"

    def runs(self) -> List[Result]:
        """Every run, newest first."""
        return _result(self._s._runs()) or []

    def records(self, run_id: str) -> List[Record]:
        """The records of one run."""
        return _json.loads(self._s._run_records(run_id))

    def insert_run(self, records: Iterable[Union[Record, Result]]) -> Result:
        """Store one run's records (all share one run id)."""
        return _result(self._s._insert_run(_records_json(records)))

    def history(self, candidate: Iterable[Union[Record, Result]], runs: int = 5) -> List[Record]:
        """The newest ``runs`` comparable runs of each of ``candidate``'s workloads (same
        fingerprint, machine and threads), the candidate's own run left out."""
        return _json.loads(self._s._history(_records_json(candidate), runs))


def bench(
    workloads: Union[str, Sequence[str]],
    *,
    threads: int = 1,
    iterations: int = 10,
    warmup: int = 3,
    time_budget_ms: int = 200,
    rotate: bool = True,
    labels: Optional[Mapping[str, str]] = None,
    store: Optional[PathLike] = None,
) -> List[Record]:
    """Measure workload specs (``gemm:m=256:n=256:k=256``, ``kernel:softmax:rows=R:cols=C``, a preset; see
    ``tensorforge workloads list``) with the CPU harness; records with identity and context,
    stored when ``store`` is given. No callgrind counts (``tensorforge bench --record`` takes
    them)."""
    ws = [workloads] if isinstance(workloads, str) else list(workloads)
    return _json.loads(
        _native._bench(
            ws, threads=threads, iterations=iterations, warmup=warmup,
            time_budget_ms=time_budget_ms, rotate=rotate,
            labels=dict(labels) if labels else None,
            store=_os.fspath(store) if store is not None else None,
        )
    )


def gate(
    baseline: Iterable[Union[Record, Result]],
    candidate: Iterable[Union[Record, Result]],
    *,
    policy: Optional[PathLike] = None,
    today: Optional[str] = None,
) -> Result:
    """The regression gate over two lists of records: per-workload verdicts and the overall
    one, ``exit_code`` 0 pass, 1 fail, 3 inconclusive — the CLI's ``gate`` decision. Missing
    evidence or an identity mismatch is never a pass."""
    return _result(
        _native._gate(
            _records_json(baseline), _records_json(candidate),
            policy=_os.fspath(policy) if policy is not None else None, today=today,
        )
    )


def gate_history(
    store: Union[Store, PathLike, None],
    candidate: Iterable[Union[Record, Result]],
    *,
    runs: int = 5,
    policy: Optional[PathLike] = None,
    today: Optional[str] = None,
) -> Result:
    """``gate --history N``: the candidate against the newest ``runs`` comparable runs in the
    store."""
    st = store if isinstance(store, Store) else Store(store)
    cand = list(candidate)
    return gate(st.history(cand, runs), cand, policy=policy, today=today)


def report(
    baseline: Iterable[Union[Record, Result]],
    candidate: Iterable[Union[Record, Result]],
    *,
    format: str = "markdown",
    policy: Optional[PathLike] = None,
    today: Optional[str] = None,
) -> str:
    """The impact report of the gate over the two lists (``markdown`` or ``html``)."""
    return _native._report(
        _records_json(baseline), _records_json(candidate), format=format,
        policy=_os.fspath(policy) if policy is not None else None, today=today,
    )


def compare(
    baseline: str,
    candidate: str,
    *,
    mode: str = "wall",
    name: str = "command",
    rounds: Optional[int] = None,
    max_rounds: Optional[int] = None,
    order: Optional[str] = None,
    timeout_s: float = 600.0,
    policy: Optional[PathLike] = None,
) -> Result:
    """Two shell commands measured in alternating rounds in this process and decided by the
    policy's paired test (``compare --json``): ``result.exit_code`` 0 pass, 1 regression,
    3 inconclusive; a command that fails or times out raises ``ValueError``."""
    return _result(
        _native._compare(
            baseline, candidate, mode=mode, name=name, rounds=rounds, max_rounds=max_rounds,
            order=order, timeout_s=timeout_s,
            policy=_os.fspath(policy) if policy is not None else None,
        )
    )

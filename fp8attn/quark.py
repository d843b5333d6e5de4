"""Attention scales of Quark FP8 checkpoints ("FP8-KV", "FP8-QKV-Prob"), read from and written to safetensors.

A Quark checkpoint stores, per decoder layer, 0-dim (or 1-element) dequantization scales
(real ≈ fp8 × scale, OCP e4m3fn convention, amax / 448) under these names:

    <prefix>.layers.<i>.self_attn.q_proj.output_scale   -> q_descale   (the query after the projection)
    <prefix>.layers.<i>.self_attn.k_proj.output_scale   -> k_descale
    <prefix>.layers.<i>.self_attn.v_proj.output_scale   -> v_descale
    <prefix>.layers.<i>.self_attn.prob_output_scale     -> p_scale     (softmax probabilities, ≈ 1/448)
    <prefix>.layers.<i>.self_attn.o_proj.input_scale    -> out_scale   (the attention output = o_proj's input)

`read_attention_scales` finds them in a file or a checkpoint directory (sharded or not, plus any
extra scale file such as the one `python -m fp8attn.calibrate` writes), reads only those tensors,
returns them as float32 tensors of one element, and reports the ones that are absent: nothing is
invented (what replaces an absent scale is the caller's policy: vLLM 0.32/0.33 use 1.0 for a missing q
scale, and so does fp8attn's transformers integration).
Quark always calibrates for e4m3fn (max 448); on an e4m3fnuz device (MI300) the same bits are worth
half as much, so every scale is doubled (``fp8_dtype=torch.float8_e4m3fnuz``), as vLLM does at load.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

import torch

__all__ = [
    "SCALE_SUFFIXES",
    "AttentionScales",
    "QuarkScales",
    "quark_scale_name",
    "read_attention_scales",
    "write_attention_scales",
]

#: which op argument each Quark tensor feeds, keyed by AttentionScales field
SCALE_SUFFIXES: dict[str, str] = {
    "q": "q_proj.output_scale",
    "k": "k_proj.output_scale",
    "v": "v_proj.output_scale",
    "p": "prob_output_scale",
    "o": "o_proj.input_scale",
}

_ATTN_RE = re.compile(r"^(?P<module>(?P<prefix>.*?)(?P<idx>\d+)\.self_attn)\.")
_FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e4m3fnuz)


@dataclass
class AttentionScales:
    """Dequantization scales of one attention layer, float32 tensors of shape [1]; None if absent."""

    q: torch.Tensor | None = None
    k: torch.Tensor | None = None
    v: torch.Tensor | None = None
    p: torch.Tensor | None = None
    o: torch.Tensor | None = None

    def missing(self) -> list[str]:
        return [f.name for f in fields(self) if getattr(self, f.name) is None]

    def as_floats(self) -> dict[str, float | None]:
        return {f.name: (None if (t := getattr(self, f.name)) is None else float(t.item())) for f in fields(self)}

    def map(self, fn) -> AttentionScales:
        return AttentionScales(**{f.name: (None if (t := getattr(self, f.name)) is None else fn(t))
                                  for f in fields(self)})

    def to(self, device: torch.device | str) -> AttentionScales:
        return self.map(lambda t: t.to(device))


@dataclass
class QuarkScales:
    """The attention scales of a checkpoint, keyed by attention module path ("model.layers.0.self_attn")."""

    layers: dict[str, AttentionScales]
    fp8_dtype: torch.dtype = torch.float8_e4m3fn
    missing: list[str] = field(default_factory=list)  # full tensor names that were looked for and absent
    source: list[str] = field(default_factory=list)  # files read

    def __len__(self) -> int:
        return len(self.layers)

    def __getitem__(self, key: int | str) -> AttentionScales:
        if isinstance(key, str):
            return self.layers[key]
        hits = [m for m in self.layers if _layer_index(m) == key]
        if len(hits) != 1:
            raise KeyError(f"layer index {key} matches {len(hits)} attention modules: {hits}")
        return self.layers[hits[0]]

    def complete(self, which: Iterable[str] = SCALE_SUFFIXES) -> bool:
        """True if every layer has every scale in `which` (a subset of "qkvpo")."""
        return all(getattr(s, w) is not None for s in self.layers.values() for w in which)

    def to_fnuz(self) -> QuarkScales:
        """The same scales for an e4m3fnuz device (each doubled); identity if already fnuz."""
        if self.fp8_dtype == torch.float8_e4m3fnuz:
            return self
        from .quant import fn_scale_to_fnuz

        return replace(self, layers={m: s.map(fn_scale_to_fnuz) for m, s in self.layers.items()},
                       fp8_dtype=torch.float8_e4m3fnuz)

    def summary(self) -> str:
        lines = [f"{len(self.layers)} attention layers, scales for {_dtype_name(self.fp8_dtype)}"]
        for m, s in self.layers.items():
            vals = " ".join(f"{k}={'absent' if v is None else f'{v:.4g}'}" for k, v in s.as_floats().items())
            lines.append(f"  {m}: {vals}")
        if self.missing:
            lines.append(f"  absent: {len(self.missing)} tensors, e.g. {self.missing[0]}")
        return "\n".join(lines)


def quark_scale_name(module: str, which: str) -> str:
    """Quark's tensor name for scale `which` ("q", "k", "v", "p", "o") of attention module `module`."""
    return f"{module}.{SCALE_SUFFIXES[which]}"


def _layer_index(module: str) -> int:
    m = _ATTN_RE.match(module + ".")
    return int(m.group("idx")) if m else -1


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _checkpoint_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise FileNotFoundError(f"path: no such file or directory: {path}")
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"path: no *.safetensors file in {path}")
    return files


def _num_layers_from_config(path: Path) -> int | None:
    cfg_path = (path if path.is_dir() else path.parent) / "config.json"
    if not cfg_path.is_file():
        return None
    cfg = json.loads(cfg_path.read_text())
    for c in (cfg, cfg.get("text_config") or {}):
        if isinstance(c.get("num_hidden_layers"), int):
            return c["num_hidden_layers"]
    return None


def _to_scale(t: torch.Tensor, name: str) -> torch.Tensor:
    if t.numel() != 1:
        raise ValueError(f"{name}: a per-tensor scale must have 1 element, got shape {tuple(t.shape)}")
    if not t.dtype.is_floating_point:
        raise TypeError(f"{name}: a scale must be a floating-point tensor, got {t.dtype}")
    v = t.reshape(1).to(torch.float32)
    x = float(v.item())
    if not (math.isfinite(x) and x > 0):
        raise ValueError(f"{name}: a scale must be positive and finite, got {x}")
    return v


def read_attention_scales(
    path: str | Path,
    *,
    fp8_dtype: torch.dtype = torch.float8_e4m3fn,
    num_layers: int | None = None,
) -> QuarkScales:
    """Read the attention scales of a Quark-style FP8 checkpoint.

    path: a .safetensors file, or a checkpoint directory (every *.safetensors in it is searched:
      shards and extra scale files alike; the same name in two files must hold the same value).
    fp8_dtype: the FP8 type the scales will be used with; float8_e4m3fnuz doubles them (Quark
      exports e4m3fn-convention scales).
    num_layers: how many decoder layers to expect; default: config.json's num_hidden_layers beside
      the file, else every layer index seen in any ``*.<i>.self_attn.*`` tensor name.

    Only the scale tensors are read. Layers that have no scale are still listed (all None) when the
    checkpoint has attention weights for them, and their names are reported in ``missing``.
    """
    from safetensors import safe_open

    if fp8_dtype not in _FP8_DTYPES:
        raise TypeError(f"fp8_dtype: expected torch.float8_e4m3fn or torch.float8_e4m3fnuz, got {fp8_dtype}")
    path = Path(path)
    files = _checkpoint_files(path)
    wanted_suffixes = {"." + s: w for w, s in SCALE_SUFFIXES.items()}
    modules: dict[str, int] = {}  # attention module path -> layer index
    found: dict[str, tuple[torch.Tensor, Path]] = {}
    for f in files:
        with safe_open(str(f), framework="pt") as sf:
            for name in sf.keys():
                m = _ATTN_RE.match(name)
                if not m:
                    continue
                modules.setdefault(m.group("module"), int(m.group("idx")))
                rest = name[len(m.group("module")):]
                if rest in wanted_suffixes:
                    t = _to_scale(sf.get_tensor(name), name)
                    if name in found and not torch.equal(found[name][0], t):
                        raise ValueError(f"{name}: different values in {found[name][1]} and {f}")
                    found[name] = (t, f)

    if not modules:
        raise ValueError(f"path: no '*.<layer>.self_attn.*' tensor in {', '.join(map(str, files))}")
    # Several stacks (e.g. a vision tower) may have attention layers: keep those of the prefix
    # holding scales, else the one with the most layers.
    by_prefix: dict[str, list[str]] = {}
    for mod in modules:
        by_prefix.setdefault(_ATTN_RE.match(mod + ".").group("prefix"), []).append(mod)
    scaled = {p for p, mods in by_prefix.items() if any(n.startswith(mods_i + ".") for mods_i in mods for n in found)}
    if len(scaled) == 1:
        prefix = scaled.pop()
    elif scaled:
        raise ValueError(f"path: attention scales under several prefixes {sorted(scaled)}; pass a single stack")
    else:
        prefix = max(by_prefix, key=lambda p: len(by_prefix[p]))
    if num_layers is None:
        num_layers = _num_layers_from_config(path)
    if num_layers is None:
        num_layers = max(modules[m] for m in by_prefix[prefix]) + 1

    layers: dict[str, AttentionScales] = {}
    missing: list[str] = []
    for i in range(num_layers):
        module = f"{prefix}{i}.self_attn"
        s = AttentionScales()
        for w in SCALE_SUFFIXES:
            name = quark_scale_name(module, w)
            if name in found:
                setattr(s, w, found[name][0])
            else:
                missing.append(name)
        layers[module] = s
    out = QuarkScales(layers=layers, fp8_dtype=torch.float8_e4m3fn, missing=missing,
                      source=[str(f) for f in files])
    return out.to_fnuz() if fp8_dtype == torch.float8_e4m3fnuz else out


def write_attention_scales(
    path: str | Path,
    scales: QuarkScales | Mapping[str, AttentionScales | Mapping[str, float | torch.Tensor | None]],
    *,
    dtype: torch.dtype = torch.float32,
    metadata: Mapping[str, str] | None = None,
) -> list[str]:
    """Write attention scales under Quark's names (0-dim tensors of `dtype`) into a safetensors file.

    scales: a QuarkScales (must be in the e4m3fn convention, as Quark writes them) or a mapping from
      attention module path ("model.layers.0.self_attn") to an AttentionScales or {"q": .., ...}.
    Absent (None) scales are not written. Returns the names written.
    """
    from safetensors.torch import save_file

    if isinstance(scales, QuarkScales):
        if scales.fp8_dtype != torch.float8_e4m3fn:
            raise ValueError("scales: write e4m3fn-convention scales (as Quark does), not fnuz-doubled ones")
        scales = scales.layers
    tensors: dict[str, torch.Tensor] = {}
    for module, s in scales.items():
        vals = s.as_floats() if isinstance(s, AttentionScales) else dict(s)
        for w, v in vals.items():
            if w not in SCALE_SUFFIXES:
                raise KeyError(f"scales[{module!r}]: unknown scale {w!r}; expected one of {list(SCALE_SUFFIXES)}")
            if v is None:
                continue
            name = quark_scale_name(module, w)
            t = torch.as_tensor(v, dtype=torch.float32).reshape(())
            _to_scale(t, name)
            tensors[name] = t.to(dtype)
    meta = {"format": "pt"}
    meta.update(metadata or {})
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path), metadata=meta)
    return sorted(tensors)

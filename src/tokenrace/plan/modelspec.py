"""What the planner knows about a model, read from a Hugging Face config.json or a GGUF file.

Only the text decoder is described: vision towers and audio encoders are not counted. Parameters are
counted from the architecture (so a catalog row can be checked against its published size), split
into the parts that behave differently at run time: the token embedding (one row read per token),
the LM head (read whole every step), dense layer weights, and routed experts (only top-k read).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokenrace.errors import InvalidInput, UsageError
from tokenrace.plan.gguf_header import GGUFHeader, LongArray, read_header
from tokenrace.plan.precision import PRECISIONS, Precision, precision_for_gguf_file_type

MAX_CONFIG_BYTES = 16 * 2**20
# Architectures whose MLP has two matrices (up, down) instead of the gated three (gate, up, down).
UNGATED_MLP = {"gpt2", "gpt_neox", "gptj", "gpt_bigcode", "falcon", "opt", "bloom", "phi", "starcoder2", "mpt"}
# Architectures with a bias on the q, k and v projections.
QKV_BIAS = {"qwen2", "qwen2_moe", "qwen2_vl"}


@dataclass(frozen=True)
class AttentionGroup:
    """Layers that share one KV layout. `window` is set for sliding-window layers."""

    layers: int
    q_heads: int
    kv_heads: int
    head_dim: int
    window: int | None = None
    k_eq_v: bool = False  # the layer stores one tensor that serves as both K and V
    stores_kv: bool = True  # False when the layer reuses another layer's cache

    @property
    def kind(self) -> str:
        return f"sliding {self.window}" if self.window else "global"

    def tensors_per_token(self) -> int:
        """K and V, or one tensor when the config shares K=V."""
        return 1 if self.k_eq_v else 2

    def cached_tokens(self, context: int) -> int:
        """A sliding layer keeps at most `window` tokens; a global layer keeps them all."""
        if not self.stores_kv:
            return 0
        return min(context, self.window) if self.window else context


@dataclass(frozen=True)
class ParamCounts:
    embedding: int  # input token embedding
    lm_head: int  # separate output matrix; 0 when tied to the embedding
    dense: int  # attention, norms, dense MLPs, shared experts, routers
    experts: int  # all routed experts together; 0 for a dense model

    @property
    def total(self) -> int:
        return self.embedding + self.lm_head + self.dense + self.experts


@dataclass(frozen=True)
class MoE:
    experts: int
    active: int  # experts each token is routed to (top-k)

    def fraction_read(self, tokens: int) -> float:
        """Share of expert weights a step touches: k/E for one token; for a batch, the expected share of
        distinct experts hit when routing is balanced and independent: 1 - (1 - k/E)^tokens."""
        return 1.0 - (1.0 - self.active / self.experts) ** max(tokens, 1)


@dataclass(frozen=True)
class WeightBytes:
    embedding: float
    lm_head: float
    dense: float
    experts: float

    @property
    def total(self) -> float:
        return self.embedding + self.lm_head + self.dense + self.experts


@dataclass(frozen=True)
class GGUFInfo:
    path: str
    file_bytes: int
    file_type: str  # gguf.LlamaFileType name, e.g. MOSTLY_Q4_1
    precision: str  # our precision name for the file type (its lower-case GGML name when we have no row)
    weights: WeightBytes  # exact tensor bytes by part
    tensor_types: tuple[tuple[str, int], ...]  # (GGML type, tensor count), most common first


@dataclass(frozen=True)
class ModelSpec:
    name: str
    source: str
    architecture: str
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    vocab_size: int
    tie_embeddings: bool
    max_context: int | None
    attention: tuple[AttentionGroup, ...]
    params: ParamCounts
    moe: MoE | None = None
    native_precision: str = "bf16"
    gguf: GGUFInfo | None = None
    params_published: float | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def params_total(self) -> int:
        return self.params.total

    @property
    def params_active(self) -> float:
        """Parameters one token uses: everything but the routed experts it is not sent to."""
        p = self.params
        share = self.moe.active / self.moe.experts if self.moe else 1.0
        return p.embedding + p.lm_head + p.dense + p.experts * share

    @property
    def weights_bytes(self) -> int:
        """Weights at the model's own precision (a GGUF file: its real tensor bytes)."""
        return int(self.weight_bytes(None).total)

    def kv_head_counts(self) -> tuple[int, ...]:
        return tuple(sorted({g.kv_heads for g in self.attention if g.stores_kv}))

    def weight_bytes(self, precision: Precision | None) -> WeightBytes:
        """Bytes by part at `precision`; None (or the file's own type) uses a GGUF file's real tensors."""
        if self.gguf and (precision is None or precision.name == self.gguf.precision):
            return self.gguf.weights
        prec = precision or PRECISIONS[self.native_precision]
        emb, lin = prec.embedding_bits / 8, prec.bits_per_weight / 8
        p = self.params
        return WeightBytes(p.embedding * emb, p.lm_head * emb, p.dense * lin, p.experts * lin)

    def describe(self) -> str:
        size = f"{self.params_total / 1e9:.3g}B params"
        if self.moe:
            size += f" ({self.params_active / 1e9:.3g}B active, {self.moe.active} of {self.moe.experts} experts)"
        kinds = ", ".join(f"{g.layers} {g.kind}" for g in self.attention)
        return f"{size}, {self.num_layers} layers ({kinds})"


# ---------------------------------------------------------------------------------------------
# Hugging Face config.json


def _pick(cfgs: tuple[Mapping[str, Any], ...], *keys: str) -> Any:
    for cfg in cfgs:
        for key in keys:
            if cfg.get(key) is not None:
                return cfg[key]
    return None


def _int(cfgs: tuple[Mapping[str, Any], ...], *keys: str, required: bool = False) -> int | None:
    value = _pick(cfgs, *keys)
    if value is None:
        if required:
            raise UsageError(f"config: missing {keys[0]} (also tried {', '.join(keys[1:]) or 'nothing else'})")
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UsageError(f"config: {keys[0]} should be a number, got {value!r}")
    return int(value)


def _layer_types(cfgs: tuple[Mapping[str, Any], ...], layers: int, model_type: str) -> list[str]:
    """'sliding' or 'global' for each layer."""
    explicit = _pick(cfgs, "layer_types")
    if explicit:
        kinds = [_normalise_layer_type(t) for t in explicit]
        if len(kinds) != layers:
            raise UsageError(f"config: layer_types has {len(kinds)} entries for {layers} layers")
        return kinds
    window = _pick(cfgs, "sliding_window")
    if not window or _pick(cfgs, "use_sliding_window") is False:
        return ["global"] * layers
    pattern = _int(cfgs, "sliding_window_pattern")
    if pattern is None and model_type.startswith("gemma2"):
        pattern = 2
    if pattern is None and model_type.startswith("gemma3"):
        pattern = 6  # Gemma 3: five local layers, then one global
    if pattern is None:
        return ["sliding"] * layers  # Mistral v0.1: every layer slides
    return ["global" if (i + 1) % pattern == 0 else "sliding" for i in range(layers)]


def _normalise_layer_type(kind: Any) -> str:
    text = str(kind).lower()
    if text in {"sliding_attention", "sliding", "local", "local_sliding", "swa"}:
        return "sliding"
    if text in {"full_attention", "full", "global", "attention"}:
        return "global"
    raise UsageError(f"config: layer type {kind!r} is not modelled (only sliding and full attention are)")


def _attention_groups(cfgs: tuple[Mapping[str, Any], ...], layers: int, model_type: str) -> tuple[AttentionGroup, ...]:
    heads = _int(cfgs, "num_attention_heads", "n_head", "num_heads", required=True) or 1
    hidden = _int(cfgs, "hidden_size", "n_embd", "d_model", required=True) or 1
    kv = _int(cfgs, "num_key_value_heads", "num_kv_heads", "n_head_kv") or (1 if _pick(cfgs, "multi_query") else heads)
    head_dim = _int(cfgs, "head_dim") or hidden // heads
    k_eq_v = bool(_pick(cfgs, "attention_k_eq_v"))
    # Gemma 4: global layers can use their own head size and, with K=V sharing, their own KV-head count.
    global_dim = _int(cfgs, "global_head_dim") or head_dim
    global_kv = (_int(cfgs, "num_global_key_value_heads") or kv) if k_eq_v else kv
    window = _int(cfgs, "sliding_window")
    shared = _int(cfgs, "num_kv_shared_layers") or 0  # the last N layers reuse earlier layers' caches
    per_layer = []
    for i, kind in enumerate(_layer_types(cfgs, layers, model_type)):
        stores = i < layers - shared
        if kind == "sliding":
            per_layer.append(AttentionGroup(1, heads, kv, head_dim, window, False, stores))
        else:
            per_layer.append(AttentionGroup(1, heads, global_kv, global_dim, None, k_eq_v, stores))
    counts = Counter(per_layer)
    return tuple(
        AttentionGroup(n, g.q_heads, g.kv_heads, g.head_dim, g.window, g.k_eq_v, g.stores_kv) for g, n in counts.items()
    )


def _attention_params(groups: tuple[AttentionGroup, ...], hidden: int, bias: bool) -> int:
    total = 0
    for g in groups:
        q = hidden * g.q_heads * g.head_dim
        k = hidden * g.kv_heads * g.head_dim
        v = 0 if g.k_eq_v else k
        o = g.q_heads * g.head_dim * hidden
        b = (g.q_heads + g.tensors_per_token() * g.kv_heads) * g.head_dim if bias else 0
        total += g.layers * (q + k + v + o + b)
    return total


def _moe(cfgs: tuple[Mapping[str, Any], ...], model_type: str) -> MoE | None:
    if model_type.startswith("gemma4") and not _pick(cfgs, "enable_moe_block"):
        return None
    experts = _int(cfgs, "num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
    if not experts or experts <= 1:
        return None
    active = _int(cfgs, "num_experts_per_tok", "top_k_experts", "moe_top_k", "num_selected_experts")
    if not active:
        raise UsageError("config: a mixture-of-experts model without num_experts_per_tok")
    return MoE(experts, active)


def _mlp_params(
    cfgs: tuple[Mapping[str, Any], ...], hidden: int, layers: int, model_type: str, moe: MoE | None
) -> tuple[int, int]:
    """(dense MLP params, routed-expert params) over all layers."""
    inter = _int(cfgs, "intermediate_size", "n_inner", "ffn_hidden_size") or 4 * hidden
    mats = 2 if model_type in UNGATED_MLP else 3
    if moe is None:
        return layers * mats * hidden * inter, 0
    expert_inter = _int(cfgs, "moe_intermediate_size", "expert_intermediate_size") or inter
    dense_inter = inter if model_type.startswith("gemma4") else 0  # Gemma 4 MoE keeps a dense MLP too
    dense_inter += _int(cfgs, "shared_expert_intermediate_size") or 0
    dense_inter += (_int(cfgs, "n_shared_experts") or 0) * expert_inter
    router = hidden * moe.experts
    dense = layers * (mats * hidden * dense_inter + router)
    return dense, layers * moe.experts * mats * hidden * expert_inter


def _native_precision(cfgs: tuple[Mapping[str, Any], ...]) -> str:
    quant = _pick(cfgs, "quantization_config")
    if isinstance(quant, Mapping):
        method = str(quant.get("quant_method", "")).lower()
        bits = quant.get("bits") or quant.get("w_bit")
        if method == "awq":
            return "awq-int4"
        if method == "gptq":
            return "gptq-int8" if bits == 8 else "gptq-int4"
        if method in {"fp8", "fbgemm_fp8"}:
            return "fp8"
    dtype = str(_pick(cfgs, "torch_dtype", "dtype") or "bfloat16").lower()
    return {"float16": "fp16", "float32": "fp32", "bfloat16": "bf16"}.get(dtype, "bf16")


def from_hf_config(
    config: Mapping[str, Any], *, name: str, source: str, params_published: float | None = None
) -> ModelSpec:
    """A ModelSpec from a config.json dict (a multimodal config's text_config is used when present)."""
    if not isinstance(config, Mapping):
        raise UsageError(f"{source}: a config.json should hold a JSON object")
    text = config.get("text_config")
    cfgs: tuple[Mapping[str, Any], ...] = (text, config) if isinstance(text, Mapping) else (config,)
    if _pick(cfgs, "kv_lora_rank") is not None:
        raise UsageError(f"{name}: multi-head latent attention (kv_lora_rank) is not modelled yet")
    model_type = str(_pick(cfgs, "model_type") or "unknown").lower()
    hidden = _int(cfgs, "hidden_size", "n_embd", "d_model", required=True) or 0
    layers = _int(cfgs, "num_hidden_layers", "n_layer", "num_layers", required=True) or 0
    vocab = _int(cfgs, "vocab_size", required=True) or 0
    heads = _int(cfgs, "num_attention_heads", "n_head", "num_heads", required=True) or 0
    groups = _attention_groups(cfgs, layers, model_type)
    moe = _moe(cfgs, model_type)
    dense_mlp, experts = _mlp_params(cfgs, hidden, layers, model_type, moe)
    norms = 2 * hidden * layers + hidden
    dense = (
        _attention_params(groups, hidden, model_type in QKV_BIAS or bool(_pick(cfgs, "attention_bias")))
        + dense_mlp
        + norms
    )
    tied = bool(_pick(cfgs, "tie_word_embeddings") if _pick(cfgs, "tie_word_embeddings") is not None else True)
    notes = ["text decoder only: the vision encoder is not counted"] if "vision_config" in config else []
    return ModelSpec(
        name=name,
        source=source,
        architecture=model_type,
        hidden_size=hidden,
        num_layers=layers,
        num_heads=heads,
        intermediate_size=_int(cfgs, "intermediate_size", "n_inner", "ffn_hidden_size") or 4 * hidden,
        vocab_size=vocab,
        tie_embeddings=tied,
        max_context=_int(cfgs, "max_position_embeddings", "n_positions", "max_seq_len"),
        attention=groups,
        params=ParamCounts(vocab * hidden, 0 if tied else vocab * hidden, dense, experts),
        moe=moe,
        native_precision=_native_precision(cfgs),
        params_published=params_published,
        notes=tuple(notes),
    )


def read_config_file(path: Path) -> ModelSpec:
    """A config.json file, or a folder holding one."""
    file = path / "config.json" if path.is_dir() else path
    try:
        if file.stat().st_size > MAX_CONFIG_BYTES:  # a weights file, not a config: never read it whole
            raise InvalidInput("model", f"{file} is too large to be a config.json")
        config = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InvalidInput("model", f"no config.json in {path}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InvalidInput("model", f"cannot read {file}: {err}") from None
    name = str(config.get("_name_or_path") or "") or (path.name if path.is_dir() else file.parent.name)
    return from_hf_config(config, name=name, source=f"config.json: {file}")


# ---------------------------------------------------------------------------------------------
# GGUF


def _gguf_weights(header: GGUFHeader) -> tuple[ParamCounts, WeightBytes, Counter[str]]:
    params = {"embedding": 0, "lm_head": 0, "dense": 0, "experts": 0}
    sizes = dict.fromkeys(params, 0)
    types: Counter[str] = Counter()
    for t in header.tensors:
        part = {"token_embd.weight": "embedding", "output.weight": "lm_head"}.get(t.name)
        part = part or ("experts" if "_exps" in t.name else "dense")
        params[part] += t.n_elements
        sizes[part] += t.n_bytes
        types[t.type_name] += 1
    return ParamCounts(**params), WeightBytes(**{k: float(v) for k, v in sizes.items()}), types


def _gguf_layer_kinds(meta: Mapping[str, Any], arch: str, layers: int, window: int | None) -> list[str]:
    if not window:
        return ["global"] * layers
    pattern = meta.get(f"{arch}.attention.sliding_window_pattern")
    if isinstance(pattern, list) and len(pattern) == layers:
        return ["sliding" if p else "global" for p in pattern]
    step = pattern if isinstance(pattern, int) else {"gemma2": 2, "gemma3": 6}.get(arch)
    if step:
        return ["global" if (i + 1) % step == 0 else "sliding" for i in range(layers)]
    return ["sliding"] * layers


def _gguf_groups(
    meta: Mapping[str, Any], arch: str, layers: int, heads: int, hidden: int
) -> tuple[AttentionGroup, ...]:
    kv_field = meta.get(f"{arch}.attention.head_count_kv")
    kv_list = kv_field if isinstance(kv_field, list) else [kv_field or heads] * layers
    head_dim = meta.get(f"{arch}.attention.key_length") or hidden // heads
    window = meta.get(f"{arch}.attention.sliding_window")
    kinds = _gguf_layer_kinds(meta, arch, layers, window)
    per_layer = [
        AttentionGroup(1, heads, int(kv), int(head_dim), window if kind == "sliding" else None)
        for kv, kind in zip(kv_list, kinds, strict=False)
        if int(kv) > 0
    ]
    counts = Counter(per_layer)
    return tuple(AttentionGroup(n, g.q_heads, g.kv_heads, g.head_dim, g.window) for g, n in counts.items())


def _gguf_file_type(meta: Mapping[str, Any], types: Counter[str]) -> str:
    import gguf  # noqa: PLC0415 - import cost: gguf (~0.3 s) only when a GGUF file is read

    ftype_id = meta.get("general.file_type")
    try:
        return gguf.LlamaFileType(ftype_id).name if ftype_id is not None else f"MOSTLY_{types.most_common(1)[0][0]}"
    except ValueError:
        return f"FILE_TYPE_{ftype_id}"


def read_gguf(path: Path) -> ModelSpec:
    """Architecture from a GGUF file's metadata; sizes from its tensors (exact, scales included)."""
    meta = (header := read_header(path)).metadata
    arch = str(meta.get("general.architecture") or "llama")
    hidden = int(meta.get(f"{arch}.embedding_length") or 0)
    layers = int(meta.get(f"{arch}.block_count") or 0)
    heads = int(meta.get(f"{arch}.attention.head_count") or 0)
    if not (hidden and layers and heads):
        raise InvalidInput("model", f"{path} lacks {arch}.embedding_length / block_count / attention.head_count")
    params, weights, types = _gguf_weights(header)
    tokens = meta.get("tokenizer.ggml.tokens")
    vocab = meta.get(f"{arch}.vocab_size") or (tokens.length if isinstance(tokens, LongArray) else len(tokens or []))
    ftype = _gguf_file_type(meta, types)
    experts, used = meta.get(f"{arch}.expert_count"), meta.get(f"{arch}.expert_used_count")
    prec = precision_for_gguf_file_type(ftype)
    prec_name = prec.name if prec else ftype.removeprefix("MOSTLY_").removeprefix("ALL_").lower()
    label = " ".join(str(v) for v in (meta.get("general.basename"), meta.get("general.size_label")) if v)
    ffn = meta.get(f"{arch}.feed_forward_length")
    return ModelSpec(
        name=label or path.stem,
        source=f"GGUF metadata: {path}",
        architecture=arch,
        hidden_size=hidden,
        num_layers=layers,
        num_heads=heads,
        intermediate_size=int(max(ffn) if isinstance(ffn, list) else ffn or 4 * hidden),
        vocab_size=int(vocab or params.embedding // hidden),
        tie_embeddings=params.lm_head == 0,
        max_context=meta.get(f"{arch}.context_length"),
        attention=_gguf_groups(meta, arch, layers, heads, hidden),
        params=params,
        moe=MoE(int(experts), int(used)) if experts and used and experts > 1 else None,
        native_precision=prec_name,
        gguf=GGUFInfo(str(path), path.stat().st_size, ftype, prec_name, weights, tuple(types.most_common())),
        params_published=float(params.total),
    )

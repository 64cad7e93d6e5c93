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
from typing import Annotated, Any

from pydantic import AliasChoices, BaseModel, BeforeValidator, Field, JsonValue, ValidationError, model_validator

from tokenrace.errors import InvalidInput, UsageError
from tokenrace.plan.gguf_header import GGUFHeader, GGUFValue, LongArray, read_header
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


def _count(value: object) -> int | None:
    """A size field: a number (a float is truncated), never a flag or text."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"should be a number, got {value!r}")
    return int(value)


def _flag(value: object) -> bool | None:
    return None if value is None else bool(value)


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _names(value: object) -> list[str]:
    if not isinstance(value, list):
        raise ValueError(f"should be a list, got {value!r}")
    return [str(v) for v in value]


Count = Annotated[int | None, BeforeValidator(_count)]
Flag = Annotated[bool | None, BeforeValidator(_flag)]
Text = Annotated[str | None, BeforeValidator(_text)]


def _one_of(*names: str) -> Any:
    """A field read from the first of these keys the config has (the names architectures use)."""
    return Field(None, validation_alias=AliasChoices(*names))


def _number_or_none(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


class QuantizationConfig(BaseModel):
    quant_method: Text = None
    bits: Annotated[float | None, BeforeValidator(_number_or_none)] = None
    w_bit: Annotated[float | None, BeforeValidator(_number_or_none)] = None


class HFConfig(BaseModel):
    """The fields of a config.json the planner reads; a multimodal config's text part is `text_config`.

    Each field takes the first of its names that the file sets to something other than null."""

    model_type: Text = None
    hidden_size: Count = _one_of("hidden_size", "n_embd", "d_model")
    num_hidden_layers: Count = _one_of("num_hidden_layers", "n_layer", "num_layers")
    num_attention_heads: Count = _one_of("num_attention_heads", "n_head", "num_heads")
    num_key_value_heads: Count = _one_of("num_key_value_heads", "num_kv_heads", "n_head_kv")
    multi_query: Flag = None
    head_dim: Count = None
    vocab_size: Count = None
    intermediate_size: Count = _one_of("intermediate_size", "n_inner", "ffn_hidden_size")
    max_position_embeddings: Count = _one_of("max_position_embeddings", "n_positions", "max_seq_len")
    tie_word_embeddings: Flag = None
    attention_bias: Flag = None
    # Sliding windows and per-layer attention kinds
    layer_types: Annotated[list[str] | None, BeforeValidator(_names)] = None
    sliding_window: Count = None
    use_sliding_window: Annotated[bool | None, BeforeValidator(lambda v: v if isinstance(v, bool) else None)] = None
    sliding_window_pattern: Count = None
    # Gemma 4: global layers with their own head size, K=V sharing, layers that reuse another's cache
    global_head_dim: Count = None
    attention_k_eq_v: Flag = None
    num_global_key_value_heads: Count = None
    num_kv_shared_layers: Count = None
    # Mixture of experts
    enable_moe_block: Flag = None
    num_experts: Count = _one_of("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
    num_experts_per_tok: Count = _one_of("num_experts_per_tok", "top_k_experts", "moe_top_k", "num_selected_experts")
    moe_intermediate_size: Count = _one_of("moe_intermediate_size", "expert_intermediate_size")
    shared_expert_intermediate_size: Count = None
    n_shared_experts: Count = None
    # Precision
    quantization_config: QuantizationConfig | None = None
    torch_dtype: Text = _one_of("torch_dtype", "dtype")
    kv_lora_rank: JsonValue = None  # multi-head latent attention: not modelled
    # Only read at the top level
    text_config: HFConfig | None = None
    vision_config: JsonValue = None
    name_or_path: Text = Field(None, alias="_name_or_path")

    @model_validator(mode="before")
    @classmethod
    def _nulls_are_absent(cls, data: object) -> object:
        """A key set to null counts as missing, so the next name for the field is tried."""
        if not isinstance(data, dict):
            return data
        kept = {k: v for k, v in data.items() if v is not None}
        for key in ("text_config", "quantization_config"):
            if not isinstance(kept.get(key), dict):
                kept.pop(key, None)
        return kept

    @classmethod
    def parse(cls, config: object, source: str) -> HFConfig:
        """A config.json's object, or a UsageError naming the field that is wrong."""
        if not isinstance(config, dict):
            raise UsageError(f"{source}: a config.json should hold a JSON object")
        try:
            return cls.model_validate(config)
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise UsageError(f"config: {where} {first['msg'].removeprefix('Value error, ')}") from None

    def text(self) -> HFConfig:
        """The text decoder's fields: text_config's where it sets them, else the top level's."""
        if self.text_config is None:
            return self
        inner = self.text_config
        merged = {name: getattr(inner, name) for name in type(self).model_fields if getattr(inner, name) is not None}
        return self.model_copy(update=merged)


def _required(value: int | None, field: str, *others: str) -> int:
    if value is None:
        raise UsageError(f"config: missing {field} (also tried {', '.join(others) or 'nothing else'})")
    return value


def _layer_types(cfg: HFConfig, layers: int, model_type: str) -> list[str]:
    """'sliding' or 'global' for each layer."""
    if cfg.layer_types:
        kinds = [_normalise_layer_type(t) for t in cfg.layer_types]
        if len(kinds) != layers:
            raise UsageError(f"config: layer_types has {len(kinds)} entries for {layers} layers")
        return kinds
    if not cfg.sliding_window or cfg.use_sliding_window is False:
        return ["global"] * layers
    pattern = cfg.sliding_window_pattern
    if pattern is None and model_type.startswith("gemma2"):
        pattern = 2
    if pattern is None and model_type.startswith("gemma3"):
        pattern = 6  # Gemma 3: five local layers, then one global
    if pattern is None:
        return ["sliding"] * layers  # Mistral v0.1: every layer slides
    return ["global" if (i + 1) % pattern == 0 else "sliding" for i in range(layers)]


def _normalise_layer_type(kind: str) -> str:
    text = kind.lower()
    if text in {"sliding_attention", "sliding", "local", "local_sliding", "swa"}:
        return "sliding"
    if text in {"full_attention", "full", "global", "attention"}:
        return "global"
    raise UsageError(f"config: layer type {kind!r} is not modelled (only sliding and full attention are)")


def _attention_groups(cfg: HFConfig, layers: int, model_type: str) -> tuple[AttentionGroup, ...]:
    heads = cfg.num_attention_heads or 1
    hidden = cfg.hidden_size or 1
    kv = cfg.num_key_value_heads or (1 if cfg.multi_query else heads)
    head_dim = cfg.head_dim or hidden // heads
    k_eq_v = bool(cfg.attention_k_eq_v)
    # Gemma 4: global layers can use their own head size and, with K=V sharing, their own KV-head count.
    global_dim = cfg.global_head_dim or head_dim
    global_kv = (cfg.num_global_key_value_heads or kv) if k_eq_v else kv
    window = cfg.sliding_window
    shared = cfg.num_kv_shared_layers or 0  # the last N layers reuse earlier layers' caches
    per_layer = []
    for i, kind in enumerate(_layer_types(cfg, layers, model_type)):
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


def _moe(cfg: HFConfig, model_type: str) -> MoE | None:
    if model_type.startswith("gemma4") and not cfg.enable_moe_block:
        return None
    experts = cfg.num_experts
    if not experts or experts <= 1:
        return None
    active = cfg.num_experts_per_tok
    if not active:
        raise UsageError("config: a mixture-of-experts model without num_experts_per_tok")
    return MoE(experts, active)


def _mlp_params(cfg: HFConfig, hidden: int, layers: int, model_type: str, moe: MoE | None) -> tuple[int, int]:
    """(dense MLP params, routed-expert params) over all layers."""
    inter = cfg.intermediate_size or 4 * hidden
    mats = 2 if model_type in UNGATED_MLP else 3
    if moe is None:
        return layers * mats * hidden * inter, 0
    expert_inter = cfg.moe_intermediate_size or inter
    dense_inter = inter if model_type.startswith("gemma4") else 0  # Gemma 4 MoE keeps a dense MLP too
    dense_inter += cfg.shared_expert_intermediate_size or 0
    dense_inter += (cfg.n_shared_experts or 0) * expert_inter
    router = hidden * moe.experts
    dense = layers * (mats * hidden * dense_inter + router)
    return dense, layers * moe.experts * mats * hidden * expert_inter


def _native_precision(cfg: HFConfig) -> str:
    quant = cfg.quantization_config
    if quant is not None:
        method = (quant.quant_method or "").lower()
        bits = quant.bits or quant.w_bit
        if method == "awq":
            return "awq-int4"
        if method == "gptq":
            return "gptq-int8" if bits == 8 else "gptq-int4"
        if method in {"fp8", "fbgemm_fp8"}:
            return "fp8"
    dtype = (cfg.torch_dtype or "bfloat16").lower()
    return {"float16": "fp16", "float32": "fp32", "bfloat16": "bf16"}.get(dtype, "bf16")


def from_hf_config(config: object, *, name: str, source: str, params_published: float | None = None) -> ModelSpec:
    """A ModelSpec from a config.json: an `HFConfig`, or the JSON object as read (checked here); a
    multimodal config's text_config is used when present."""
    top = config if isinstance(config, HFConfig) else HFConfig.parse(config, source)
    cfg = top.text()
    if cfg.kv_lora_rank is not None:
        raise UsageError(f"{name}: multi-head latent attention (kv_lora_rank) is not modelled yet")
    model_type = (cfg.model_type or "unknown").lower()
    hidden = _required(cfg.hidden_size, "hidden_size", "n_embd", "d_model")
    layers = _required(cfg.num_hidden_layers, "num_hidden_layers", "n_layer", "num_layers")
    vocab = _required(cfg.vocab_size, "vocab_size")
    heads = _required(cfg.num_attention_heads, "num_attention_heads", "n_head", "num_heads")
    groups = _attention_groups(cfg, layers, model_type)
    moe = _moe(cfg, model_type)
    dense_mlp, experts = _mlp_params(cfg, hidden, layers, model_type, moe)
    norms = 2 * hidden * layers + hidden
    bias = model_type in QKV_BIAS or bool(cfg.attention_bias)
    dense = _attention_params(groups, hidden, bias) + dense_mlp + norms
    tied = cfg.tie_word_embeddings if cfg.tie_word_embeddings is not None else True
    notes = ["text decoder only: the vision encoder is not counted"] if top.vision_config is not None else []
    return ModelSpec(
        name=name,
        source=source,
        architecture=model_type,
        hidden_size=hidden,
        num_layers=layers,
        num_heads=heads,
        intermediate_size=cfg.intermediate_size or 4 * hidden,
        vocab_size=vocab,
        tie_embeddings=tied,
        max_context=cfg.max_position_embeddings,
        attention=groups,
        params=ParamCounts(vocab * hidden, 0 if tied else vocab * hidden, dense, experts),
        moe=moe,
        native_precision=_native_precision(cfg),
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
    source = f"config.json: {file}"
    parsed = HFConfig.parse(config, source)
    name = parsed.name_or_path or (path.name if path.is_dir() else file.parent.name)
    return from_hf_config(parsed, name=name, source=source)


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


@dataclass(frozen=True)
class GGUFArch:
    """The metadata keys the planner reads from a GGUF file (`{arch}.embedding_length` and the like)."""

    arch: str
    hidden: int
    layers: int
    heads: int
    kv_heads: tuple[int, ...]  # per layer (0: a layer without attention)
    head_dim: int
    window: int | None
    window_pattern: int | tuple[bool, ...] | None  # every Nth layer is global, or sliding per layer
    vocab: int | None  # {arch}.vocab_size, else the tokenizer's token count
    ffn: int | None  # the widest feed-forward layer
    context: int | None
    experts: int | None
    experts_used: int | None
    file_type: int | None
    label: str  # general.basename and general.size_label

    @classmethod
    def read(cls, meta: Mapping[str, GGUFValue], path: Path) -> GGUFArch:
        arch = _meta_str(meta, "general.architecture") or "llama"

        def number(key: str) -> int | None:
            return _meta_int(meta, f"{arch}.{key}")

        hidden, layers, heads = number("embedding_length"), number("block_count"), number("attention.head_count")
        if not (hidden and layers and heads):
            raise InvalidInput("model", f"{path} lacks {arch}.embedding_length / block_count / attention.head_count")
        kv_field = meta.get(f"{arch}.attention.head_count_kv")
        kv = (
            _meta_ints(kv_field)
            if isinstance(kv_field, list)
            else (number("attention.head_count_kv") or heads,) * layers
        )
        pattern = meta.get(f"{arch}.attention.sliding_window_pattern")
        tokens = meta.get("tokenizer.ggml.tokens")
        token_count = tokens.length if isinstance(tokens, LongArray) else len(tokens) if isinstance(tokens, list) else 0
        ffn = meta.get(f"{arch}.feed_forward_length")
        return cls(
            arch=arch,
            hidden=hidden,
            layers=layers,
            heads=heads,
            kv_heads=kv,
            head_dim=number("attention.key_length") or hidden // heads,
            window=number("attention.sliding_window"),
            window_pattern=tuple(bool(p) for p in pattern) if isinstance(pattern, list) else _int_value(pattern),
            vocab=number("vocab_size") or token_count or None,
            ffn=max(_meta_ints(ffn), default=None) if isinstance(ffn, list) else number("feed_forward_length"),
            context=number("context_length"),
            experts=number("expert_count"),
            experts_used=number("expert_used_count"),
            file_type=_meta_int(meta, "general.file_type"),
            label=" ".join(
                v for v in (_meta_str(meta, "general.basename"), _meta_str(meta, "general.size_label")) if v
            ),
        )


def _int_value(value: GGUFValue | None) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _meta_int(meta: Mapping[str, GGUFValue], key: str) -> int | None:
    return _int_value(meta.get(key))


def _meta_ints(values: list[GGUFValue]) -> tuple[int, ...]:
    return tuple(int(v) for v in values if isinstance(v, (int, float)))


def _meta_str(meta: Mapping[str, GGUFValue], key: str) -> str | None:
    value = meta.get(key)
    return None if value is None or isinstance(value, (list, LongArray)) else str(value)


def _gguf_layer_kinds(g: GGUFArch) -> list[str]:
    if not g.window:
        return ["global"] * g.layers
    pattern = g.window_pattern
    if isinstance(pattern, tuple) and len(pattern) == g.layers:
        return ["sliding" if p else "global" for p in pattern]
    step = pattern if isinstance(pattern, int) else {"gemma2": 2, "gemma3": 6}.get(g.arch)
    if step:
        return ["global" if (i + 1) % step == 0 else "sliding" for i in range(g.layers)]
    return ["sliding"] * g.layers


def _gguf_groups(g: GGUFArch) -> tuple[AttentionGroup, ...]:
    kinds = _gguf_layer_kinds(g)
    per_layer = [
        AttentionGroup(1, g.heads, kv, g.head_dim, g.window if kind == "sliding" else None)
        for kv, kind in zip(g.kv_heads, kinds, strict=False)
        if kv > 0
    ]
    counts = Counter(per_layer)
    return tuple(AttentionGroup(n, a.q_heads, a.kv_heads, a.head_dim, a.window) for a, n in counts.items())


def _gguf_file_type(ftype_id: int | None, types: Counter[str]) -> str:
    import gguf  # noqa: PLC0415 - import cost: gguf (~0.3 s) only when a GGUF file is read

    try:
        return gguf.LlamaFileType(ftype_id).name if ftype_id is not None else f"MOSTLY_{types.most_common(1)[0][0]}"
    except ValueError:
        return f"FILE_TYPE_{ftype_id}"


def read_gguf(path: Path) -> ModelSpec:
    """Architecture from a GGUF file's metadata; sizes from its tensors (exact, scales included)."""
    header = read_header(path)
    g = GGUFArch.read(header.metadata, path)
    params, weights, types = _gguf_weights(header)
    ftype = _gguf_file_type(g.file_type, types)
    prec = precision_for_gguf_file_type(ftype)
    prec_name = prec.name if prec else ftype.removeprefix("MOSTLY_").removeprefix("ALL_").lower()
    experts, used = g.experts, g.experts_used
    return ModelSpec(
        name=g.label or path.stem,
        source=f"GGUF metadata: {path}",
        architecture=g.arch,
        hidden_size=g.hidden,
        num_layers=g.layers,
        num_heads=g.heads,
        intermediate_size=g.ffn or 4 * g.hidden,
        vocab_size=g.vocab or params.embedding // g.hidden,
        tie_embeddings=params.lm_head == 0,
        max_context=g.context,
        attention=_gguf_groups(g),
        params=params,
        moe=MoE(experts, used) if experts and used and experts > 1 else None,
        native_precision=prec_name,
        gguf=GGUFInfo(str(path), path.stat().st_size, ftype, prec_name, weights, tuple(types.most_common())),
        params_published=float(params.total),
    )

"""Reading local model files: a real GGUF and real config.json files."""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import pytest

from tokenrace.errors import UsageError
from tokenrace.plan import load_model, plan
from tokenrace.plan.gguf_header import LongArray, read_header
from tokenrace.plan.memory import kv_bytes_per_sequence
from tokenrace.plan.modelspec import from_hf_config


def test_real_gguf_metadata_and_sizes(smollm2_gguf: Path) -> None:
    spec = load_model(str(smollm2_gguf))
    assert (spec.architecture, spec.num_layers, spec.num_heads, spec.hidden_size, spec.vocab_size) == (
        "llama",
        30,
        9,
        576,
        49152,
    )
    assert [(g.layers, g.kv_heads, g.head_dim, g.window) for g in spec.attention] == [(30, 3, 64, None)]
    assert spec.tie_embeddings and spec.max_context == 8192
    assert spec.gguf is not None
    assert spec.gguf.file_type == "MOSTLY_Q4_1" and spec.native_precision == "q4_1"
    assert spec.gguf.file_bytes == smollm2_gguf.stat().st_size
    # Tensor bytes: the weights as stored, scales included, without the tokenizer and metadata.
    assert 0.95 * spec.gguf.file_bytes < spec.weights_bytes < spec.gguf.file_bytes
    assert dict(spec.gguf.tensor_types)["Q4_1"] == 210


def test_gguf_params_equal_the_catalog_count(smollm2_gguf: Path) -> None:
    """The parameter counter, checked against a real file's tensor elements: exactly equal."""
    assert load_model(str(smollm2_gguf)).params_total == load_model("smollm2-135m").params_total == 134_515_008


def test_gguf_plans_use_the_file_bytes(smollm2_gguf: Path) -> None:
    spec = load_model(str(smollm2_gguf))
    r = plan(spec, "H100-SXM", context=512)
    assert r.weights_bytes == spec.gguf.weights.total
    assert r.precision.name == "q4_1"
    what_if = plan(spec, "H100-SXM", context=512, precision="fp16")
    assert what_if.weights_bytes == spec.params_total * 2
    assert any("not the file's own" in n for n in what_if.notes)


def test_a_gguf_folder_loads_its_file(smollm2_gguf: Path) -> None:
    assert load_model(str(smollm2_gguf.parent)).gguf is not None


def test_real_config_json(fixtures: Path) -> None:
    by_dir = load_model(str(fixtures / "smollm2-135m-instruct"))
    by_file = load_model(str(fixtures / "smollm2-135m-instruct" / "config.json"))
    assert by_dir.params == by_file.params == load_model("smollm2-135m").params
    assert by_dir.native_precision == "bf16" and by_dir.max_context == 8192


def test_multimodal_config_with_layer_types(fixtures: Path) -> None:
    """Gemma 4 31B: text_config, layer_types, global_head_dim, K=V global layers."""
    spec = load_model(str(fixtures / "gemma-4-31b-it"))
    catalog = load_model("gemma-4-31b")
    assert spec.params == catalog.params
    assert kv_bytes_per_sequence(spec, 8192, 2) == kv_bytes_per_sequence(catalog, 8192, 2)
    assert any("vision" in n for n in spec.notes)


def test_config_mistakes_are_usage_errors(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 64}))
    with pytest.raises(UsageError, match="missing num_hidden_layers"):
        load_model(str(tmp_path))
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(UsageError, match="cannot read"):
        load_model(str(tmp_path))
    with pytest.raises(UsageError, match="latent attention"):
        from_hf_config({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 10, "kv_lora_rank": 16},
                       name="deepseek", source="test")  # fmt: skip


def test_quantized_checkpoint_config_sets_the_precision() -> None:
    base = {
        "model_type": "llama",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "vocab_size": 10,
    }
    awq = from_hf_config({**base, "quantization_config": {"quant_method": "awq", "bits": 4}}, name="x", source="t")
    fp8 = from_hf_config({**base, "quantization_config": {"quant_method": "fp8"}}, name="x", source="t")
    assert (awq.native_precision, fp8.native_precision) == ("awq-int4", "fp8")


def test_moe_config_fields() -> None:
    qwen_moe = from_hf_config(
        {"model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4,
         "head_dim": 128, "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
         "vocab_size": 151936, "tie_word_embeddings": False},
        name="Qwen3-30B-A3B", source="test",
    )  # fmt: skip
    assert qwen_moe.params_total == pytest.approx(30.5e9, rel=0.02)
    assert qwen_moe.params_active == pytest.approx(3.3e9, rel=0.05)


@pytest.mark.slow
def test_header_reader_agrees_with_the_gguf_package(smollm2_gguf: Path) -> None:
    """Our fast header reader against gguf.GGUFReader (which parses every array, so it is slow)."""

    ours, theirs = read_header(smollm2_gguf), gguf.GGUFReader(str(smollm2_gguf))
    assert [(t.name, t.n_elements, t.n_bytes, t.type_name) for t in ours.tensors] == [
        (t.name, int(t.n_elements), int(t.n_bytes), t.tensor_type.name) for t in theirs.tensors
    ]
    assert ours.metadata["llama.attention.head_count_kv"] == theirs.fields["llama.attention.head_count_kv"].contents()
    assert ours.metadata["tokenizer.ggml.tokens"] == LongArray(49152)


def test_large_or_fake_files_are_refused_without_reading_them(tmp_path: Path) -> None:
    fake = tmp_path / "model.gguf"
    with open(fake, "wb") as fh:
        fh.truncate(4 * 2**30)  # sparse: nothing on disk
    with pytest.raises(UsageError, match="GGUF magic"):
        load_model(str(fake))
    blob = tmp_path / "weights.bin"
    with open(blob, "wb") as fh:
        fh.truncate(4 * 2**30)
    with pytest.raises(UsageError, match=r"too large to be a config\.json"):
        load_model(str(blob))

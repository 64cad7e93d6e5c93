from __future__ import annotations

import json
import re
from importlib import resources

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from tokenrace.doctor import knowledge
from tokenrace.doctor.knowledge import KnowledgeBase, explain
from tokenrace.doctor.registry import registered
from tokenrace.errors import UsageError

# The examples, and other messages people paste: text -> the entry that must rank first.
EXAMPLES = {
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.": "smi-no-driver",
    "couldn't communicate with the NVIDIA driver": "smi-no-driver",
    "nvidia-smi 报 couldnt communicate with the NVIDIA driver": "smi-no-driver",
    "RuntimeError: CUDA error: no kernel image is available for execution on the device": "no-kernel-image",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.11 GiB total capacity)": "cuda-oom",
    "ValueError: The model's max seq len (131072) is larger than the maximum number of tokens that can be stored in KV cache (43520).": "cuda-oom",
    "0xe6000000": "win-installer-0xe6000000",
    "NVIDIA Installer cannot continue (0xE6000000)": "win-installer-0xe6000000",
    "NVIDIA App installer failed 0x80070002": "win-installer-0x80070002",
    "Error code: 404 - {'error': {'message': 'The model `gemma-4-31b` does not exist or you do not have access to it.', 'code': 'model_not_found'}}": "api-404-model",
    "404 model not found": "api-404-model",
    "429 Too Many Requests": "api-429",
    "Error code: 429 - {'error': {'message': 'Rate limit reached for model `llama-3.3-70b-versatile`', 'code': 'rate_limit_exceeded'}}": "api-429",
    "401 Unauthorized: Invalid API Key": "api-401",
    "Failed to initialize NVML: Driver/library version mismatch": "nvml-version-mismatch",
    "modprobe: ERROR: could not insert 'nvidia': Key was rejected by service": "secure-boot-unsigned",
    "Lockdown: modprobe: unsigned module loading is restricted; see man kernel_lockdown.7": "secure-boot-unsigned",
    "modprobe: FATAL: Module nvidia not found in directory /lib/modules/6.8.0-45-generic": "dkms-kernel-mismatch",
    'docker: Error response from daemon: could not select device driver "" with capabilities: [[gpu]].': "container-no-gpu",
    "CUDA driver version is insufficient for CUDA runtime version": "toolkit-newer-than-driver",
    "The NVIDIA driver on your system is too old (found version 11040)": "toolkit-newer-than-driver",
    "AssertionError: Torch not compiled with CUDA enabled": "torch-cuda-mismatch",
    "torch.cuda.is_available() returns False": "torch-cuda-unavailable",
    "bash: nvcc: command not found": "nvcc-not-found",
    "bash: nvidia-smi: command not found": "smi-not-found",
    "No devices were found": "no-nvidia-gpu",
    "Unable to determine the device handle for GPU0000:01:00.0: Unknown Error. GPU is lost": "gpu-fallen-off-bus",
    "NVRM: The NVIDIA probe routine was not called for 1 device(s).": "nouveau-conflict",
}


@pytest.mark.parametrize(("text", "expected"), sorted(EXAMPLES.items()))
def test_explain_examples(text: str, expected: str) -> None:
    matches = explain(text)
    assert matches and matches[0].exact
    assert matches[0].entry.id == expected, [m.entry.id for m in matches]


def test_every_entry_is_complete_and_points_at_real_checks() -> None:
    check_ids = {spec.id for spec in registered()}
    for item in knowledge.load_knowledge().entries:
        assert item.cause.endswith(".") and item.fix.endswith((".", ")"))
        assert set(item.checks) <= check_ids, item.id


def test_every_check_fix_from_the_knowledge_base_exists() -> None:
    source = "".join(
        p.read_text() for p in resources.files("tokenrace.doctor.checks").iterdir() if p.name.endswith(".py")
    )
    ids = {item.id for item in knowledge.load_knowledge().entries}
    used = set(re.findall(r'"([a-z0-9]+(?:-[a-z0-9]+)+)"', source)) & ids
    assert used, "checks use knowledge entries"
    for kb_id in re.findall(r'from_kb\([^)]*?"([a-z0-9-]+)"', source.replace("\n", " ")):
        assert kb_id in ids, kb_id


def test_most_entries_come_from_the_guides() -> None:
    sources = [item.source for item in knowledge.load_knowledge().entries]
    assert sources.count("guides") > 2 * sources.count("vendor docs")


def test_fuzzy_fallback_and_no_match() -> None:
    fuzzy = explain("my secure boot keeps the nvidia module unsigned")
    assert fuzzy and not fuzzy[0].exact and fuzzy[0].entry.id == "secure-boot-unsigned"
    assert explain("qwerty zzz") == []
    with pytest.raises(UsageError):
        explain("   ")


def test_best_needs_a_specific_match() -> None:
    assert knowledge.best("nothing to see") is None
    assert knowledge.best("") is None
    found = knowledge.best("Failed to initialize NVML: Driver/library version mismatch")
    assert found is not None and found.id == "nvml-version-mismatch"


def test_validation_rejects_bad_entries() -> None:
    good = json.loads(resources.files("tokenrace.doctor").joinpath("knowledge.json").read_text())
    bad_regex = json.loads(json.dumps(good))
    bad_regex["entries"][0]["patterns"] = ["(unclosed"]
    with pytest.raises(ValidationError):
        KnowledgeBase.model_validate(bad_regex)
    duplicate = json.loads(json.dumps(good))
    duplicate["entries"].append(duplicate["entries"][0])
    with pytest.raises(ValidationError):
        KnowledgeBase.model_validate(duplicate)
    bad_source = json.loads(json.dumps(good))
    bad_source["entries"][0]["source"] = "blog"
    with pytest.raises(ValidationError):
        KnowledgeBase.model_validate(bad_source)


@pytest.mark.slow
@given(st.text(min_size=1, max_size=300).filter(lambda s: s.strip()))
def test_explain_never_raises(text: str) -> None:
    for match in explain(text):
        assert match.score > 0

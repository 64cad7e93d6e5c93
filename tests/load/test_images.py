"""Images in requests: generated, from a folder, from datasets; what the server receives; records."""

from __future__ import annotations

import asyncio
import base64
import io
import json
from pathlib import Path
from typing import Any

import pytest
from PIL import Image as PILImage
from tests.conftest import in_process, tokenrace

from tokenrace.client.images import ImageTally, anthropic_part, responses_part, with_images
from tokenrace.client.openai import OpenAIClient, Prompt, RequestOptions
from tokenrace.errors import InvalidInput
from tokenrace.fakes.fake_server import spawn_fake_server
from tokenrace.load.prompts import builtin, from_jsonl
from tokenrace.load.workload import Prompts, Sessions, TraceLoad, WorkloadSpec, build_workload
from tokenrace.load.workloads.images import ImageSpec, attach, build_bank, decode, generate, read_dir
from tokenrace.load.workloads.sessions import TurnsSpec, load_messages_jsonl, load_sharegpt, session_prompt
from tokenrace.model.summary import Summary
from tokenrace.report.tables import headline_lines
from tokenrace.units import parse_sizes

UNREACHABLE = "http://127.0.0.1:9"


def _png(path: Path, size: tuple[int, int] = (8, 6), color: str = "red") -> Path:
    PILImage.new("RGB", size, color).save(path, "PNG")
    return path


@pytest.mark.parametrize("fmt", ["png", "jpeg"])
def test_generated_images_have_the_asked_size_and_format_and_differ(fmt: str) -> None:
    a = generate((64, 48), fmt, 0, 1, 0)  # type: ignore[arg-type]
    b = generate((64, 48), fmt, 0, 2, 0)  # type: ignore[arg-type]
    again = generate((64, 48), fmt, 0, 1, 0)  # type: ignore[arg-type]
    with PILImage.open(io.BytesIO(base64.b64decode(a.b64))) as picture:
        assert picture.size == (64, 48) and picture.format == fmt.upper()
    assert a.b64 != b.b64 and a.b64 == again.b64  # distinct per request, reproducible from the seed
    assert (a.width, a.height, a.pixels, a.mime) == (64, 48, 64 * 48, f"image/{fmt}")
    assert a.nbytes == len(base64.b64decode(a.b64))


def test_sizes_cycle_and_the_share_leaves_some_requests_without() -> None:
    bank = build_bank(ImageSpec(count=2, sizes=parse_sizes("16x8,8x4"), share=0.5), 40, seed=3)
    sets = [bank.for_request(i) for i in range(40)]
    with_images = [s for s in sets if s]
    assert 8 < len(with_images) < 32 and all(len(s) == 2 for s in with_images)
    assert [(i.width, i.height) for i in with_images[0]] == [(16, 8), (8, 4)]
    assert not bank.repeats and bank.note() is None
    pool = build_bank(ImageSpec(count=1, sizes=((4, 4),)), None, seed=0)
    assert pool.repeats and "repeated" in (pool.note() or "")


def test_bad_sizes_and_shares_name_their_input() -> None:
    for text in ("512", "axb", "512x"):
        with pytest.raises(InvalidInput) as err:
            parse_sizes(text)
        assert err.value.param == "image_size"
    with pytest.raises(InvalidInput) as err:
        ImageSpec(share=0).validate()
    assert err.value.param == "image_share"
    with pytest.raises(InvalidInput) as err:
        ImageSpec(count=0).validate()
    assert err.value.param == "images"


def test_a_file_that_is_not_an_image_is_refused(tmp_path: Path) -> None:
    (tmp_path / "fake.png").write_text("not an image")
    with pytest.raises(InvalidInput) as err:
        read_dir(str(tmp_path))
    assert err.value.param == "image_dir" and "fake.png" in err.value.problem
    with pytest.raises(InvalidInput):
        decode(b"GIF89a-broken", "x", "prompts")


def test_image_parts_in_every_api_shape() -> None:
    image = generate((4, 4), "png", 0, 0, 0)
    messages = with_images([{"role": "user", "content": "look"}], [image])
    parts = messages[0]["content"]
    assert isinstance(parts, list)
    picture = parts[1]
    assert parts[0] == {"type": "text", "text": "look"} and picture["type"] == "image_url"
    assert isinstance(picture["image_url"], dict) and picture["image_url"]["url"].startswith("data:image/png;")
    assert responses_part(picture) == {"type": "input_image", "image_url": image.data_url()}
    assert anthropic_part(picture) == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": image.b64},
    }
    assert ImageTally.of([image, image]) == ImageTally(2, 2 * image.nbytes, 32)


def test_datasets_carry_images(tmp_path: Path) -> None:
    _png(tmp_path / "cat.png", (10, 20))
    url = "data:image/png;base64," + base64.b64encode((tmp_path / "cat.png").read_bytes()).decode()
    prompts = tmp_path / "p.jsonl"
    parts = [{"type": "text", "text": "what?"}, {"type": "image_url", "image_url": {"url": url}}]
    prompts.write_text(
        json.dumps({"messages": [{"role": "user", "content": parts}]})
        + "\n"
        + json.dumps({"prompt": "<describe>", "image": "cat.png"})
        + "\n"
        + json.dumps(
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": "http://x/y.png"}]}]}
        )
        + "\n"
    )
    passed, named, remote = from_jsonl(prompts).prompts
    assert passed.messages is not None and passed.messages[0]["content"] == parts  # passed through as given
    assert passed.images == ImageTally(1, (tmp_path / "cat.png").stat().st_size, 200)
    assert named.images is not None and named.images.count == 1 and named.images.pixels == 200
    assert remote.images == ImageTally(1, None, None)  # a URL the client never reads: sizes unknown
    sharegpt = tmp_path / "s.json"
    sharegpt.write_text(
        json.dumps(
            [{"id": "a", "image": "cat.png", "conversations": [{"from": "human", "value": "<image>\nWhat is it?"}]}]
        )
    )
    conversation = load_sharegpt(sharegpt).conversations[0]
    prompt = session_prompt(conversation, 1, [])
    assert prompt.messages is not None and prompt.images == ImageTally(1, (tmp_path / "cat.png").stat().st_size, 200)
    assert prompt.messages[-1]["content"][0] == {"type": "text", "text": "What is it?"}
    jsonl = tmp_path / "m.jsonl"
    jsonl.write_text(
        json.dumps(
            {
                "messages": [
                    {"role": "user", "content": parts},
                    {"role": "assistant", "content": "a cat"},
                    {"role": "user", "content": "sure?"},
                ]
            }
        )
        + "\n"
    )
    conversation = load_messages_jsonl(jsonl).conversations[0]
    second = session_prompt(conversation, 2, ["a cat"])
    assert second.images is not None and second.images.count == 1  # the first turn's image stays in the history
    assert second.messages is not None and second.messages[0]["content"] == parts


def test_a_dataset_image_that_is_not_an_image_names_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "bad.png").write_text("nope")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "x", "image": "bad.png"}) + "\n")
    code, _, err = in_process(capsys, "bench", "--url", UNREACHABLE, "--prompts", str(prompts), "--requests", "2")
    assert code == 2 and err.startswith("error: --prompts") and "bad.png" in err, err
    sessions = tmp_path / "s.json"
    sessions.write_text(json.dumps([{"image": "bad.png", "conversations": [{"from": "human", "value": "x"}]}]))
    code, _, err = in_process(capsys, "bench", "--url", UNREACHABLE, "--sessions", str(sessions))
    assert code == 2 and err.startswith("error: --sessions") and "bad.png" in err, err


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--images", "1", "--api", "completions"], "--images"),
        (["--images", "0"], "--images"),
        (["--images", "1", "--image-share", "1.5"], "--image-share"),
        (["--images", "1", "--image-size", "12"], "--image-size"),
        (["--image-dir", "/no/such/dir"], "--image-dir"),
        (["--image-size", "8x8"], "--image-size"),
    ],
)
def test_bad_image_flags_exit_2_before_any_request(
    args: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = in_process(capsys, "bench", "--url", UNREACHABLE, "--requests", "2", *args)
    assert code == 2 and err.startswith(f"error: {flag}"), err
    assert "127.0.0.1:9" not in err


def _log(server: Any, api: str = "chat") -> list[dict[str, Any]]:
    path = {"chat": "/chat/completions"}.get(api, f"/{api}")
    return [e for e in server.log() if e["path"].endswith(path)]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fmt", "api"), [("png", "chat"), ("jpeg", "chat"), ("png", "responses"), ("jpeg", "messages")]
)
def test_the_server_receives_n_distinct_decodable_images_per_request(tmp_path: Path, fmt: str, api: str) -> None:
    """Each API's shape: OpenAI image_url data URLs, Responses input_image, Anthropic base64 image blocks."""
    with spawn_fake_server({"ttft_ms": 5, "itl_ms": 1, "output_tokens": 4}) as server:
        out = tmp_path / "run"
        p = tokenrace(
            "bench", "--url", server.url, "--requests", "6", "--concurrency", "2", "--images", "2",
            "--image-size", "64x48,32x32", "--image-format", fmt, "--api", api, "-o", str(out),
        )  # fmt: skip
        assert p.returncode == 0, p.stderr
        log = _log(server, api)
    assert len(log) == 7  # the cold request and six measured
    seen: set[str] = set()
    for entry in log:
        images = entry["images"]
        assert [(i["width"], i["height"], i["format"]) for i in images] == [
            (64, 48, fmt.upper()),
            (32, 32, fmt.upper()),
        ]
        seen.update(i["sha256"] for i in images)
    assert len(seen) == 14  # every image of every request differs
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert all(r["images"] == 2 and r["image_pixels"] == 64 * 48 + 32 * 32 for r in records)
    sent = {e["id"]: sum(i["bytes"] for i in e["images"]) for e in log}
    assert all(r["image_bytes"] == sent[r["response_id"]] for r in records)


@pytest.mark.slow
def test_ttft_split_by_image_count_with_the_difference(tmp_path: Path) -> None:
    with spawn_fake_server({"ttft_ms": 20, "itl_ms": 1, "output_tokens": 4, "image_ms": 60}) as server:
        out = tmp_path / "run"
        p = tokenrace(
            "bench", "--url", server.url, "--requests", "24", "--concurrency", "2", "--images", "1",
            "--image-size", "32x32", "--image-share", "0.5", "--seed", "1", "-o", str(out), "--json",
        )  # fmt: skip
        assert p.returncode == 0, p.stderr
    summary = json.loads((out / "summary.json").read_text())
    images = summary["images"]
    by = {g["images"]: g for g in images["by_count"]}
    assert set(by) == {0, 1} and by[0]["requests"] + by[1]["requests"] == 24
    assert by[0]["ttft_ms"]["p50"] < 45 and 75 < by[1]["ttft_ms"]["p50"] < 140  # 20 ms, and 20 + 60 ms per image
    diff = images["ttft_difference_ms"]
    assert 45 < diff["difference"] < 100 and diff["ci_low"] <= diff["difference"] <= diff["ci_high"]
    assert images["requests_with_images"] == by[1]["requests"]
    assert any(line.startswith("images: TTFT p50 with − without = ") for line in _headline(out))


def _headline(out: Path) -> list[str]:

    return headline_lines(Summary.model_validate_json((out / "summary.json").read_text()))


@pytest.mark.slow
def test_a_server_that_refuses_images_gives_error_records_with_a_hint(tmp_path: Path) -> None:
    with spawn_fake_server({"ttft_ms": 5, "itl_ms": 1, "output_tokens": 4, "refuse_images": True}) as server:
        out = tmp_path / "run"
        p = tokenrace(
            "bench", "--url", server.url, "--requests", "3", "--images", "1", "--image-size", "8x8", "-o", str(out)
        )
    assert p.returncode == 1, p.stderr  # every request failed: a failed run, not a crash
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert records and all(r["status"] == 400 and r["error_kind"] == "http_400" for r in records)
    message = records[-1]["error_message"]
    assert "does not support image input" in message and "carried 1 image" in message
    assert "Traceback" not in p.stderr


def test_each_api_builder_puts_the_images_in_its_own_shape() -> None:

    image = generate((4, 4), "png", 0, 0, 0)
    prompt = attach(Prompt(text="look"), [image])

    def parts(api: str) -> list[dict[str, Any]]:
        body = OpenAIClient("http://x/v1", "m", options=RequestOptions(api=api)).body(prompt)
        content: list[dict[str, Any]] = (body.get("messages") or body.get("input"))[-1]["content"]
        return content

    assert [p["type"] for p in parts("chat")] == ["text", "image_url"]
    assert parts("responses") == [
        {"type": "input_text", "text": "look"},
        {"type": "input_image", "image_url": image.data_url()},
    ]
    assert parts("messages")[1] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": image.b64},
    }


def test_sessions_and_traces_get_images_per_request(tmp_path: Path) -> None:

    spec = ImageSpec(count=1, sizes=((8, 8),))
    built = asyncio.run(build_workload(WorkloadSpec(turns=TurnsSpec(3), images=spec), builtin(), None, 0, 2))
    assert isinstance(built.workload, Sessions)
    first, second = (built.workload.turn_prompt(0, t, ["a"] * (t - 1)) for t in (1, 2))
    assert first.images is not None and first.images.count == 1
    assert second.images is not None and second.images.count == 2  # turn 1's image stays in the history
    assert second.messages is not None
    urls = [
        p["image_url"]["url"]
        for m in second.messages
        if isinstance(m["content"], list)
        for p in m["content"]
        if p["type"] == "image_url"
    ]
    assert len(set(urls)) == 2  # a fresh image on each turn
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        "".join(json.dumps({"timestamp_s": i, "input_tokens": 8, "output_tokens": 4}) + "\n" for i in range(3))
    )
    built = asyncio.run(
        build_workload(WorkloadSpec(trace_file=str(trace), trace_format="jsonl", images=spec), builtin(), None, 0, 1)
    )
    assert isinstance(built.workload, TraceLoad)
    picked = [built.workload.pick(i) for i in range(3)]
    assert all(p.images is not None and p.images.count == 1 for p in picked) and not built.notes


def test_two_runs_never_send_the_same_image() -> None:

    spec = WorkloadSpec(images=ImageSpec(count=1, sizes=((8, 8),)))
    runs = [asyncio.run(build_workload(spec, builtin(), None, 0, 1, requests=3)).workload for _ in range(2)]
    assert all(isinstance(w, Prompts) and w.images is not None for w in runs)
    a, b = (w.images.for_request(0)[0].b64 for w in runs if isinstance(w, Prompts) and w.images is not None)
    assert a != b  # same seed, another run: another image (a server's cache outlives a run)

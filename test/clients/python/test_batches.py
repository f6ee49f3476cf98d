"""Files and batches through the official client: upload JSONL, create, poll to completion, page, cancel,
download the output and error files, 404 across accounts; replies validated against the spec."""
from __future__ import annotations

import io
import json
import time

import openai
import pytest

from gateway import cost_nano


def chat_line(i: int, **extra) -> dict:
    return {"custom_id": f"req-{i}", "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": "sim-chat", "messages": [{"role": "user", "content": f"Batch line {i}."}], "max_tokens": 16, **extra}}


def jsonl(lines: list[dict]) -> bytes:
    return ("\n".join(json.dumps(x) for x in lines) + "\n").encode()


def wait(client: openai.OpenAI, batch_id: str, until=None, timeout: float = 90.0):
    until = until or (lambda b: b.status in ("completed", "failed", "cancelled", "expired"))
    deadline = time.monotonic() + timeout
    while True:
        b = client.batches.retrieve(batch_id)
        if until(b):
            return b
        assert time.monotonic() < deadline, f"batch {batch_id} still {b.status}"
        time.sleep(0.2)


def test_a_batch_runs_to_completion_and_bills_exactly_the_lines_that_ran(gateway, account, client, spec):
    before = gateway.balance(account.key)
    lines = [chat_line(i) for i in range(12)] + [chat_line(12, model="no-such-model")]
    raw = client.files.with_raw_response.create(file=("in.jsonl", io.BytesIO(jsonl(lines))), purpose="batch")
    spec.assert_valid("OpenAIFile", raw.http_response.json())
    f = raw.parse()
    assert f.purpose == "batch" and f.bytes == len(jsonl(lines))
    assert client.files.retrieve(f.id).id == f.id

    raw = client.batches.with_raw_response.create(input_file_id=f.id, endpoint="/v1/chat/completions",
                                                  completion_window="24h", metadata={"run": "py"})
    spec.assert_valid("Batch", raw.http_response.json())
    created = raw.parse()
    assert created.status == "validating" and created.metadata == {"run": "py"}

    done = wait(client, created.id)
    status, _, body = gateway.http("GET", f"/v1/batches/{created.id}", account.key)
    spec.assert_valid("Batch", json.loads(body))
    assert done.status == "completed"
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (13, 12, 1)

    out = [json.loads(x) for x in client.files.content(done.output_file_id).text.splitlines() if x]
    errs = [json.loads(x) for x in client.files.content(done.error_file_id).text.splitlines() if x]
    assert [o["custom_id"] for o in out] == [f"req-{i}" for i in range(12)]
    for o in out:
        assert o["response"]["status_code"] == 200 and o["error"] is None
        spec.assert_valid("CreateChatCompletionResponse", o["response"]["body"])
    assert [(e["custom_id"], e["response"]["status_code"], e["response"]["body"]["error"]["code"]) for e in errs] == [("req-12", 404, "model_not_found")]
    assert client.files.retrieve(done.output_file_id).purpose == "batch_output"

    usage = [o["response"]["body"]["usage"] for o in out]
    assert done.usage.input_tokens == sum(u["prompt_tokens"] for u in usage)
    assert done.usage.output_tokens == sum(u["completion_tokens"] for u in usage)
    gateway.assert_debited(account.key, before, sum(cost_nano("sim-chat", u["prompt_tokens"], u["completion_tokens"]) for u in usage))


def test_batches_page_newest_first(gateway, account, client, spec):
    f = client.files.create(file=("p.jsonl", io.BytesIO(jsonl([chat_line(0)]))), purpose="batch")
    ids = [client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h").id for _ in range(3)]
    status, _, body = gateway.http("GET", "/v1/batches?limit=2", account.key)
    page = json.loads(body)
    spec.assert_valid("ListBatchesResponse", page)
    assert [b["id"] for b in page["data"]] == ids[::-1][:2] and page["has_more"] is True
    seen = [b.id for b in client.batches.list(limit=2)]  # the client follows `after` through every page
    assert seen == ids[::-1]
    for i in ids:
        wait(client, i)


def test_a_cancelled_batch_stops_and_lists_the_lines_it_did_not_run(gateway, account, client):
    f = client.files.create(file=("c.jsonl", io.BytesIO(jsonl([chat_line(i) for i in range(400)]))), purpose="batch")
    b = client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    wait(client, b.id, lambda x: x.status == "in_progress")
    assert client.batches.cancel(b.id).status in ("cancelling", "cancelled")
    done = wait(client, b.id)
    assert done.status == "cancelled" and done.cancelled_at
    assert done.request_counts.completed + done.request_counts.failed == 400
    if done.request_counts.failed:
        errs = [json.loads(x) for x in client.files.content(done.error_file_id).text.splitlines() if x]
        assert all(e["error"]["code"] == "batch_cancelled" for e in errs)


def test_files_list_and_delete(gateway, account, client, spec):
    f = client.files.create(file=("d.jsonl", io.BytesIO(jsonl([chat_line(0)]))), purpose="batch")
    status, _, body = gateway.http("GET", "/v1/files?purpose=batch", account.key)
    spec.assert_valid("ListFilesResponse", json.loads(body))
    assert f.id in [x.id for x in client.files.list(purpose="batch")]
    deleted = client.files.delete(f.id)
    assert deleted.deleted is True and deleted.id == f.id
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(f.id)


def test_another_accounts_files_and_batches_are_not_found(gateway, account, client):
    f = client.files.create(file=("i.jsonl", io.BytesIO(jsonl([chat_line(0)]))), purpose="batch")
    b = client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    other = gateway.client(gateway.account("5").key)
    for call in (lambda: other.files.retrieve(f.id), lambda: other.files.content(f.id), lambda: other.files.delete(f.id),
                 lambda: other.batches.retrieve(b.id), lambda: other.batches.cancel(b.id),
                 lambda: other.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")):
        with pytest.raises(openai.NotFoundError):
            call()
    wait(client, b.id)

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from gateway import REPO, Account, Gateway
from openapi_spec import OpenAISpec

# The specs live in shared/specs beside the repository; TOLLGATE_SPECS names another folder (a worktree's run).
SPECS = Path(os.environ.get("TOLLGATE_SPECS") or REPO.parent / "shared" / "specs")
SPEC_PATH = SPECS / "openai-openapi.yaml"


@pytest.fixture(scope="session")
def gateway() -> Iterator[Gateway]:
    gw = Gateway().start()
    try:
        yield gw
    finally:
        gw.stop()


@pytest.fixture(scope="session")
def spec() -> OpenAISpec:
    return OpenAISpec(SPEC_PATH)


@pytest.fixture
def account(gateway: Gateway) -> Account:
    """A fresh account with $5 and one key with every scope and the default limits."""
    return gateway.account("5")


@pytest.fixture
def client(gateway: Gateway, account: Account) -> openai.OpenAI:
    return gateway.client(account.key)

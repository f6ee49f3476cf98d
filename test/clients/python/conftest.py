from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from gateway import REPO, Account, Gateway
from openapi_spec import OpenAISpec

SPEC_PATH = REPO.parent / "shared" / "specs" / "openai-openapi.yaml"


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

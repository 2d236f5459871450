"""Session cost: prices come from the [llm] settings unless the caller passes them."""

from __future__ import annotations

import pytest

from memstrata.agent.turn import Pricing
from memstrata.config import Config
from memstrata.llm import TokenUsage


def test_no_prices_means_no_cost() -> None:
    """With the defaults no price is known, so no cost is recorded."""
    assert Pricing.from_config(Config.load()) is None


def test_prices_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Prices set in the environment price cached, written and plain tokens differently."""
    monkeypatch.setenv("MEMSTRATA_LLM__INPUT_PRICE_PER_MTOK", "3")
    monkeypatch.setenv("MEMSTRATA_LLM__OUTPUT_PRICE_PER_MTOK", "15")
    pricing = Pricing.from_config(Config.load())
    assert pricing == Pricing(3.0, 15.0, 0.1, 1.25)
    usage = TokenUsage(
        prompt_tokens=1_000_000,
        completion_tokens=100_000,
        cached_tokens=800_000,
        cache_write_tokens=100_000,
    )
    # 100k plain + 800k * 0.1 + 100k * 1.25 = 305k input-priced tokens; 100k output tokens.
    assert pricing.cost(usage) == pytest.approx(0.305 * 3 + 0.1 * 15)

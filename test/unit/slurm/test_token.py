"""Tokens the operator mints for slurmrestd: what slurmctld's auth/jwt checks, and when a new one is minted."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import jwt
import pytest

from slurmctl.slurm import TokenSource, mint_token

KEY = b"0123456789abcdef0123456789abcdef"
T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def test_a_token_carries_iat_exp_and_the_user_signed_hs256() -> None:
    token = mint_token(KEY, user="slurm", lifetime=timedelta(minutes=30), now=T0)
    assert jwt.get_unverified_header(token)["alg"] == "HS256"
    claims = jwt.decode(token, KEY, algorithms=["HS256"], options={"verify_exp": False})
    assert claims == {"iat": int(T0.timestamp()), "exp": int(T0.timestamp()) + 1800, "sun": "slurm"}


def test_a_token_does_not_verify_with_another_key() -> None:
    token = mint_token(KEY, user="slurm", lifetime=timedelta(minutes=30), now=datetime.now(UTC))
    with pytest.raises(jwt.InvalidSignatureError):
        jwt.decode(token, b"another key, as long as the first", algorithms=["HS256"])


@pytest.mark.parametrize(("key", "lifetime"), [(b"", timedelta(minutes=1)), (KEY, timedelta(0))])
def test_no_token_without_a_key_or_a_lifetime(key: bytes, lifetime: timedelta) -> None:
    with pytest.raises(ValueError):
        mint_token(key, user="slurm", lifetime=lifetime, now=T0)


class FakeClock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def test_the_token_is_reused_until_a_quarter_of_its_life_is_left() -> None:
    clock = FakeClock()
    source = TokenSource(KEY, user="slurm", lifetime=timedelta(minutes=20), clock=clock)
    first = source()
    clock.now = T0 + timedelta(minutes=14, seconds=59)
    assert source() == first
    clock.now = T0 + timedelta(minutes=15)
    second = source()
    assert second != first
    assert jwt.decode(second, KEY, algorithms=["HS256"], options={"verify_exp": False})["iat"] == int(
        clock.now.timestamp()
    )


def test_a_long_lived_token_is_renewed_five_minutes_before_it_expires() -> None:
    clock = FakeClock()
    source = TokenSource(KEY, user="slurm", lifetime=timedelta(hours=2), clock=clock)
    first = source()
    clock.now = T0 + timedelta(hours=1, minutes=54, seconds=59)
    assert source() == first
    clock.now = T0 + timedelta(hours=1, minutes=55)
    assert source() != first


def test_the_source_never_shows_the_key_or_the_token() -> None:
    source = TokenSource(KEY, user="slurm")
    token = source()
    shown = repr(source) + str(source)
    assert KEY.decode() not in shown and token not in shown
    assert "slurm" in shown

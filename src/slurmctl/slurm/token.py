"""JSON Web Tokens for slurmrestd, minted from the cluster's JWT key (what `scontrol token` does, without slurmctld).

Slurm's auth/jwt accepts HS256 tokens carrying `iat`, `exp` and `sun` (the Slurm user name), signed with the key in
`AuthAltParameters=jwt_key=`. The operator holds that key, so it mints its own tokens instead of asking slurmctld for
one over a channel it would first have to authenticate. Neither the key nor a token is ever logged.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import jwt

DEFAULT_LIFETIME = timedelta(minutes=30)
ALGORITHM = "HS256"


def utc_now() -> datetime:
    return datetime.now(UTC)


def mint_token(key: bytes, *, user: str, lifetime: timedelta, now: datetime) -> str:
    """An HS256 token for Slurm user `user`, valid from `now` for `lifetime` (claims iat, exp, sun)."""
    if not key:
        raise ValueError("the JWT key is empty")
    if lifetime <= timedelta(0):
        raise ValueError(f"token lifetime must be positive, got {lifetime}")
    iat = int(now.timestamp())
    exp = int((now + lifetime).timestamp())
    return jwt.encode({"iat": iat, "exp": exp, "sun": user}, key, algorithm=ALGORITHM)


class TokenSource:
    """A token that is always valid for a while longer: minted on first use, minted again once less than a quarter
    of its lifetime (at most 5 minutes) is left, so a request never carries a token that expires in flight.

    `clock` gives the current time as an aware datetime; tests pass a fake one."""

    def __init__(
        self,
        key: bytes,
        *,
        user: str,
        lifetime: timedelta = DEFAULT_LIFETIME,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        if not key:
            raise ValueError("the JWT key is empty")
        if lifetime <= timedelta(seconds=1):
            raise ValueError(f"token lifetime must be longer than a second, got {lifetime}")
        self._key = key
        self.user = user
        self._lifetime = lifetime
        self._margin = min(lifetime / 4, timedelta(minutes=5))
        self._clock = clock
        self._token = ""
        self._expires: datetime | None = None

    def __call__(self) -> str:
        now = self._clock()
        if self._expires is None or now >= self._expires - self._margin:
            self._token = mint_token(self._key, user=self.user, lifetime=self._lifetime, now=now)
            self._expires = now + self._lifetime
        return self._token

    def __repr__(self) -> str:
        # Never the key or the token.
        return f"TokenSource(user={self.user!r}, lifetime={self._lifetime})"

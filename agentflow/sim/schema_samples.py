"""The sample words and ``format`` values :mod:`agentflow.sim.arguments` draws strings from."""

from __future__ import annotations

__all__ = ["FORMATS", "WORDS"]

#: Words for generated strings and extra object keys.
WORDS = (
    "alpha",
    "beta",
    "delta",
    "main",
    "src",
    "test",
    "config",
    "build",
    "cache",
    "fleet",
    "agent",
    "token",
    "index",
    "report",
    "value",
    "query",
)
#: Sample values of the string ``format`` values tool schemas use (pydantic's among them).
FORMATS: dict[str, tuple[str, ...]] = {
    "date": ("2025-01-15", "2024-11-30", "2026-03-02"),
    "date-time": ("2025-01-15T09:30:00Z", "2024-11-30T18:05:12Z"),
    "time": ("09:30:00", "18:05:12"),
    "email": ("agent@example.com", "ops@example.org"),
    "uri": ("https://example.com/docs", "https://example.org/api/v1"),
    "url": ("https://example.com/docs",),
    "uuid": ("0b8e6f3c-2a51-4f7e-9c3d-5a1b2c3d4e5f", "7d9f1e2a-3b4c-4d5e-8f60-718293a4b5c6"),
    # pydantic's UUID1 ... UUID8 check the version: a UUID of each.
    "uuid1": ("6ba7b810-9dad-11d1-80b4-00c04fd430c8",),
    "uuid3": ("9073926b-929f-31c2-abc9-fad77ae3e8eb",),
    "uuid4": ("0b8e6f3c-2a51-4f7e-9c3d-5a1b2c3d4e5f", "7d9f1e2a-3b4c-4d5e-8f60-718293a4b5c6"),
    "uuid5": ("cfbff0d1-9375-5685-968c-48ce8b15ae17",),
    "uuid6": ("1ef21d2f-1207-6660-8c4f-419efbd44d48",),
    "uuid7": ("01909f10-b5ae-7c2a-9f3e-5d2a6b7c8d9e",),
    "uuid8": ("2489e9ad-2ee2-8e00-8ec9-32d5f69181c0",),
    "duration": ("PT1H30M", "P2DT4H", "PT45S"),  # ISO 8601: a timedelta's schema
    "ipv4": ("10.0.0.7", "192.168.1.20"),
    "hostname": ("node-1.example.com", "localhost"),
}

"""Shared test set-up: headless matplotlib, and Hypothesis profiles.

CI sets CI=true, which selects the derandomised profile: the same examples on
every run, and no deadline (the first call into a Numba kernel compiles it).
"""

import os

os.environ.setdefault("MPLBACKEND", "Agg")

from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))

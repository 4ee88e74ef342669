"""Is a sample drawn from a given distribution? Pearson's chi-square goodness-of-fit test (standard library only).

What "lossless in distribution" is tested with: the joint distribution of the
first few tokens a speculative engine samples against the exact distribution
plain sampling draws them from. Cells whose expected count is below
:data:`MIN_EXPECTED` are pooled into one (the chi-square approximation needs
expected counts of about 5 or more); observations outside every expected cell
are a failure outright (plain sampling cannot produce them). The critical
value is the Wilson-Hilferty approximation of the chi-square quantile, within
about 1% of the exact quantile from 10 degrees of freedom up.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist
from typing import Hashable, Mapping

MIN_EXPECTED = 5.0


@dataclass(frozen=True)
class Verdict:
    """The test's outcome: ``statistic`` against ``critical`` at ``degrees`` degrees of freedom."""

    statistic: float
    critical: float
    degrees: int
    samples: int
    impossible: int  # observations outside the expected distribution's support

    @property
    def consistent(self) -> bool:
        """True when the sample does not reject the distribution at the chosen false-positive rate."""
        return self.impossible == 0 and self.statistic <= self.critical

    def __str__(self) -> str:
        return (f"chi-square {self.statistic:.1f} vs critical {self.critical:.1f} at {self.degrees} degrees of freedom, "
                f"{self.samples} samples, {self.impossible} outside the support")


def chi_square_critical(degrees: int, false_positive_rate: float) -> float:
    """The ``1 - false_positive_rate`` quantile of chi-square with ``degrees`` degrees of freedom (Wilson-Hilferty)."""
    z = NormalDist().inv_cdf(1.0 - false_positive_rate)
    term = 2.0 / (9.0 * degrees)
    return degrees * (1.0 - term + z * term ** 0.5) ** 3


def goodness_of_fit(observed: Mapping[Hashable, int], expected: Mapping[Hashable, float],
                    false_positive_rate: float) -> Verdict:
    """Test ``observed`` counts per outcome against ``expected`` probabilities
    (summing to 1 over the support; outcomes missing from it have probability 0)."""
    total = sum(observed.values())
    impossible = sum(count for outcome, count in observed.items() if expected.get(outcome, 0.0) <= 0.0)
    cells, pooled_expected, pooled_observed = [], 0.0, 0
    for outcome, probability in expected.items():
        if probability <= 0.0:
            continue
        mean = probability * total
        if mean < MIN_EXPECTED:
            pooled_expected += mean
            pooled_observed += observed.get(outcome, 0)
        else:
            cells.append((observed.get(outcome, 0), mean))
    if pooled_expected > 0.0:
        cells.append((pooled_observed, pooled_expected))
    statistic = sum((seen - mean) ** 2 / mean for seen, mean in cells)
    degrees = max(len(cells) - 1, 1)
    return Verdict(statistic, chi_square_critical(degrees, false_positive_rate), degrees, total, impossible)

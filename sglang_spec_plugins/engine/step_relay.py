"""What each request committed at its latest step, kept on the device for the step after it.

Under SGLang's overlap scheduler the next step is prepared before the
scheduler has read the last one's tokens: ``req.output_ids`` lags, by the
tokens of the step still in flight. :class:`StepRelay` keeps each request's
latest committed tokens (its step's row and count) in device buffers indexed
by the request's pool slot, written by the step on the device, so the next
step reads them without the scheduler: on the device (:meth:`roots`, no wait)
or, where it drafts on the host, once per step (:meth:`read`: waits for the
step before, which the scheduler has already waited for up to its publish).

How many tokens are in flight is read off the batch, not guessed: SGLang's
``batch.seq_lens`` counts the tokens whose KV is written, every committed
token but the last (the next chain's root), so a request has committed
``seq_len + 1`` tokens in all, of which the host's ``req`` shows
``len(origin_input_ids) + len(output_ids)``; the rest are the tail of its
relayed row. Without overlap the host shows them all and nothing is read back.
"""

from __future__ import annotations

from typing import Any, List, Sequence, Tuple

from ..errors import EngineError


class StepRelay:
    """Per request slot: the latest step's row (``stride`` tokens) and how many of them it committed."""

    def __init__(self, slots: int, stride: int, device: Any):
        import torch

        self.rows = torch.zeros((slots, stride), dtype=torch.int64, device=device)
        self.counts = torch.ones((slots,), dtype=torch.int32, device=device)

    def keep(self, req_pool_indices: Any, rows: Any, counts: Any) -> None:
        """Record a step's ``rows`` ``(bs, w)`` (``w <= stride``; the rest of each slot's
        row becomes -1) and ``counts`` ``(bs,)``, on the device."""
        import torch

        slots = req_pool_indices.long()
        padded = torch.nn.functional.pad(rows.to(self.rows.dtype), (0, self.rows.shape[1] - rows.shape[1]), value=-1)
        self.rows[slots] = padded
        self.counts[slots] = counts.to(self.counts.dtype)

    def roots(self, req_pool_indices: Any) -> Any:
        """Each request's last committed token ``(bs,)``, on the device: the root of its next chain."""
        slots = req_pool_indices.long()
        return self.rows[slots, (self.counts[slots] - 1).long()]

    def in_flight(self, batch: Any) -> List[int]:
        """Per request of ``batch``: how many of its committed tokens the host's ``req`` does not show yet."""
        totals = batch.seq_lens_cpu if getattr(batch, "seq_lens_cpu", None) is not None else batch.seq_lens.cpu()
        return [int(total) + 1 - len(req.origin_input_ids) - len(req.output_ids)
                for total, req in zip(totals.tolist(), batch.reqs)]

    def read(self, req_pool_indices: Any) -> List[Tuple[int, List[int]]]:
        """``(count, row)`` of these slots' latest step, on the host (one copy; waits for that step)."""
        import torch

        slots = req_pool_indices.long()
        both = torch.cat([self.counts[slots].unsqueeze(1).to(self.rows.dtype), self.rows[slots]], dim=1).tolist()
        return [(row[0], row[1:]) for row in both]

    @staticmethod
    def tails(latest: Sequence[Tuple[int, Sequence[int]]], missing: Sequence[int]) -> List[List[int]]:
        """The tokens each request committed that the host does not show yet: the last
        ``missing[i]`` of those its latest step committed (``latest``: :meth:`read`)."""
        tails = []
        for (count, row), gap in zip(latest, missing):
            if not 0 <= gap <= count:
                raise EngineError(f"a request shows {gap} committed tokens missing on the host, but its latest step "
                                  f"committed {count}: the scheduler is more than one step behind")
            tails.append(list(row[count - gap:count]))
        return tails

    @staticmethod
    def past(latest: Sequence[Tuple[int, Sequence[int]]]) -> List[List[int]]:
        """Each request's latest row past what it committed (up to the row's end)."""
        found = []
        for count, row in latest:
            rest = list(row[count:])
            found.append(rest[:rest.index(-1)] if -1 in rest else rest)
        return found

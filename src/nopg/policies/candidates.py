"""Several parameter sets of one policy module acting on one batch of states.

A CMA-ES generation (:mod:`nopg.train.search`) scores many candidates of the same policy; rolling each
out in the model alone costs one model step per candidate and time step, most of it fixed
overhead of small operations. :class:`CandidatePolicies` lets one rollout carry every
candidate's states together: row ``i`` of the batch belongs to candidate ``owner[i]``, the rows of
one candidate are consecutive, and each candidate's rows go through a copy of the policy holding
its parameters in one call, so each row's action is computed exactly as the policy alone would
compute it for the same rows. (Copies, not :func:`torch.func.functional_call`, whose rebinding of
the parameters at every call cost more than the forward pass of a small policy.)
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import nn

__all__ = ["CandidatePolicies"]


class CandidatePolicies(nn.Module):
    """``policy`` with each of ``params`` (name -> tensor, as ``policy.named_parameters()``),
    acting on a batch whose rows belong to the candidates in ``owner`` order.

    Parameters
    ----------
    policy : nn.Module
        The policy module (its buffers are shared by every candidate).
    params : sequence of dict
        One parameter set per candidate.
    rows_each : int
        The rows each candidate starts with (its initial states): ``owner`` is
        ``[0]*rows_each + [1]*rows_each + ...`` until :meth:`keep` drops some.
    """

    def __init__(self, policy: nn.Module, params: Sequence[dict[str, torch.Tensor]],
                 rows_each: int) -> None:
        super().__init__()
        if not params:
            raise ValueError("CandidatePolicies needs at least one parameter set")
        self.policy = policy
        self.members = nn.ModuleList()
        for p in params:
            member = copy.deepcopy(policy)
            with torch.no_grad():
                for name, value in member.named_parameters():
                    value.copy_(p[name])
            self.members.append(member)
        self.owner = torch.arange(len(self.members)).repeat_interleave(int(rows_each))

    def __len__(self) -> int:
        return len(self.members)

    def keep(self, rows: torch.Tensor) -> None:
        """Keep the batch rows where ``rows`` (bool, one per current row) is true."""
        self.owner = self.owner[rows.to(self.owner.device)]

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        if states.shape[0] != self.owner.shape[0]:
            raise ValueError(f"{states.shape[0]} states for {self.owner.shape[0]} candidate rows")
        counts = torch.bincount(self.owner, minlength=len(self.members)).tolist()
        outs = [self.members[p](chunk) for p, chunk in enumerate(torch.split(states, counts))
                if counts[p]]
        return torch.cat(outs) if outs else states.new_empty(0, 0)

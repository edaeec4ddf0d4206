"""Autograd of the index-gathering operators (gather_points, group_points).

Both copy features[b, c, idx[...]] and share one shape of derivative: the backward is a
deterministic scatter-add (``pcops::_<op>_backward(grad_out, idx, count)``), which is linear in
grad_out, so its own gradient is the forward gather again.
"""

from __future__ import annotations

from typing import Callable

import torch


def register(op: str, forward: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
    """Registers autograd for ``pcops::<op>`` and ``pcops::_<op>_backward``; ``forward`` is the
    Python wrapper of the gather (used for the double backward)."""
    backward_op = getattr(torch.ops.pcops, f"_{op}_backward")

    def setup_context(ctx, inputs, output):
        features, idx = inputs
        ctx.save_for_backward(idx)
        ctx.count = features.shape[2]
        ctx.set_materialize_grads(False)

    def backward(ctx, grad_out):
        (idx,) = ctx.saved_tensors
        if grad_out is None or not ctx.needs_input_grad[0]:
            return None, None
        return backward_op(grad_out, idx, ctx.count), None

    def setup_context_backward(ctx, inputs, output):
        _, idx, _ = inputs
        ctx.save_for_backward(idx)
        ctx.set_materialize_grads(False)

    def backward_backward(ctx, grad_grad):
        (idx,) = ctx.saved_tensors
        if grad_grad is None or not ctx.needs_input_grad[0]:
            return None, None, None
        return forward(grad_grad, idx), None, None

    torch.library.register_autograd(f"pcops::{op}", backward, setup_context=setup_context)
    torch.library.register_autograd(f"pcops::_{op}_backward", backward_backward,
                                    setup_context=setup_context_backward)

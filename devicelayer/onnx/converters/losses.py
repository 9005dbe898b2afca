"""Losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (log_softmax over the classes, then the
negative log-likelihood; its optional second output is the log-probabilities)."""

from __future__ import annotations

from .base import converter, pick


@converter("NegativeLogLikelihoodLoss")
def _nll_loss(ctx, attrs):
    return [ctx.op("nll_loss", ctx.values()[:3], **pick(attrs, "reduction", "ignore_index"))]


@converter("SoftmaxCrossEntropyLoss")
def _softmax_cross_entropy(ctx, attrs):
    log_prob = ctx.op("log_softmax", [ctx.raw(0)], "log_prob", axis=1)
    rest = [ctx.raw(i) for i in (1, 2) if ctx.has(i)]
    loss = ctx.op("nll_loss", [log_prob, *rest], **pick(attrs, "reduction", "ignore_index"))
    return [loss, log_prob]

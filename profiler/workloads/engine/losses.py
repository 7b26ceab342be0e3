"""Categorical cross-entropy; fused with softmax when the model ends in one."""

import numpy as np

import kernels as K


class CategoricalCrossentropy:
    def __init__(self, from_logits=True):
        self.from_logits = from_logits
        self.ws = K.Workspace()

    def __call__(self, outputs, target):
        """(mean loss, probabilities, d loss / d outputs)."""
        if outputs.shape != target.shape:
            raise ValueError(f"labels have shape {target.shape} but the model outputs {outputs.shape}; "
                             f"labels must be one-hot (N, classes)")
        if self.from_logits:
            return K.softmax_cross_entropy(outputs, target, probs_out=self.ws.take("p", outputs.shape),
                                           grad_out=self.ws.take("g", outputs.shape))
        p = np.clip(outputs, 1e-7, 1.0)
        loss = float(-(target * np.log(p)).sum() / len(p))
        return loss, outputs, (-target / p / len(p)).astype(np.float32)

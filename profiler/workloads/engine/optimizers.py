"""SGD (momentum), Adam, RMSprop, Adadelta: Keras' defaults, in-place fused updates, no allocation."""

import math

import kernels as K

from .checks import fraction, positive


class Optimizer:
    slots = 0

    def __init__(self, lr):
        self.lr, self.iterations, self.state = positive("learning rate", lr), 0, {}

    def step(self, params, grads):
        self.iterations += 1
        for p, g in zip(params, grads):
            slots = self.state.get(id(p))
            if slots is None:
                slots = self.state[id(p)] = [K.aligned_zeros(p.shape, p.dtype) for _ in range(self.slots)]
            self.update(p, g, *slots)


class SGD(Optimizer):
    slots = 1

    def __init__(self, lr=0.01, momentum=0.0):
        super().__init__(lr)
        self.momentum = fraction("SGD momentum", momentum)

    def update(self, p, g, velocity):
        K.sgd_update(p, g, velocity, lr=self.lr, momentum=self.momentum)


class Adam(Optimizer):
    slots = 2

    def __init__(self, lr=0.001, beta1=0.9, beta2=0.999, eps=1e-7):
        super().__init__(lr)
        self.beta1, self.beta2 = fraction("Adam beta1", beta1), fraction("Adam beta2", beta2)
        self.eps = positive("Adam eps", eps)

    def update(self, p, g, m, v):
        t = self.iterations
        lr_t = self.lr * math.sqrt(1 - self.beta2 ** t) / (1 - self.beta1 ** t)
        K.adam_update(p, g, m, v, lr_t=lr_t, beta1=self.beta1, beta2=self.beta2, eps=self.eps)


class RMSprop(Optimizer):
    slots = 1

    def __init__(self, lr=0.001, rho=0.9, eps=1e-7):
        super().__init__(lr)
        self.rho, self.eps = fraction("RMSprop rho", rho), positive("RMSprop eps", eps)

    def update(self, p, g, avg_sq):
        K.rmsprop_update(p, g, avg_sq, lr=self.lr, rho=self.rho, eps=self.eps)


class Adadelta(Optimizer):
    slots = 2

    def __init__(self, lr=1.0, rho=0.95, eps=1e-7):
        super().__init__(lr)
        self.rho, self.eps = fraction("Adadelta rho", rho), positive("Adadelta eps", eps)

    def update(self, p, g, avg_sq, avg_step):
        K.adadelta_update(p, g, avg_sq, avg_step, lr=self.lr, rho=self.rho, eps=self.eps)


OPTIMIZERS = {"sgd": SGD, "adam": Adam, "rmsprop": RMSprop, "adadelta": Adadelta}


def get(name, **kwargs):
    optimizer = OPTIMIZERS.get(name.lower()) if isinstance(name, str) else None
    if optimizer is None:
        raise ValueError(f"unknown optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")
    return optimizer(**kwargs)

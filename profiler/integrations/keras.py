"""Keras 3: a callback that marks epochs and train batches as steps.

    with Session("runs/mine") as session:
        model.fit(x, y, epochs=5, callbacks=[ProfilerCallback(session)])

An epoch runs from on_epoch_begin to on_epoch_end, so it includes the validation pass at its end;
a step runs from the end of one train batch (or the epoch's start) to the end of the next, so it
holds the batch's fetch from the data pipeline as well as its training, as a PyTorch step does
(profiler.integrations.torch); the time from the last batch to the epoch's end (validation) is in
no step. `profiler run` injects the callback into every Model.fit without an edit (inject()).
"""

import contextlib
import functools
import inspect

import keras


class ProfilerCallback(keras.callbacks.Callback):
    def __init__(self, session):
        super().__init__()
        self.session = session

    def on_train_begin(self, logs=None):
        self.session.abandon_epoch()   # one a fit that raised left open (Keras calls no callback then)

    def on_epoch_begin(self, epoch, logs=None):
        self.session.begin_epoch()
        self.session.begin_step()

    def on_epoch_end(self, epoch, logs=None):
        self.session.end_epoch()   # drops the step open since the last batch

    def on_train_batch_end(self, batch, logs=None):
        self.session.end_step()
        self.session.begin_step()


def _flat(callbacks):
    """fit's `callbacks` as a list: a callback, or lists and tuples of them nested, as Keras
    flattens them (None: none)."""
    if callbacks is None:
        return []
    if isinstance(callbacks, (list, tuple)):
        return [c for item in callbacks for c in _flat(item)]
    return [callbacks]


@contextlib.contextmanager
def _joined(callbacks, callback):
    """A CallbackList the script built itself (which fit uses as it is) with `callback` among its
    callbacks for the block, its train batches' callbacks called in the training thread (a list of
    callbacks with no batch hooks of their own may call them in a thread pool, where no step would
    be seen); both as they were afterwards. None: nothing to join."""
    if callbacks is None:
        yield
        return
    asynchronous = getattr(callbacks, "_async_train", False)
    callbacks.callbacks.append(callback)
    callbacks._async_train = False
    try:
        yield
    finally:
        callbacks._async_train = asynchronous
        if callback in callbacks.callbacks:
            callbacks.callbacks.remove(callback)


def inject(session):
    """Give every keras.Model.fit a ProfilerCallback(session); an epoch left open by an exception
    inside fit is abandoned (Session.abandon_epoch: written flagged unfinished if the run then
    stops on it). A fit called inside another (a callback fitting a probe model at each epoch's
    end) is left alone: its time is the outer epoch's. Returns the function that undoes it."""
    model = keras.Model
    own = model.__dict__.get("fit")
    fit = model.fit
    signature = inspect.signature(fit)
    fitting = False   # one flag for the process: a fit in another thread meanwhile goes unmarked,
                      # as Marks leaves it

    @functools.wraps(fit)
    def profiled_fit(*args, **kwargs):
        nonlocal fitting
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:   # a misspelt argument: Keras's own error, as without the profiler
            bound = None
        if fitting or bound is None:
            return fit(*args, **kwargs)
        callbacks = bound.arguments.get("callbacks")
        callback = ProfilerCallback(session)
        given = callbacks if isinstance(callbacks, keras.callbacks.CallbackList) else None
        if given is None:
            bound.arguments["callbacks"] = [*_flat(callbacks), callback]
        fitting = True
        with _joined(given, callback):
            try:
                return fit(*bound.args, **bound.kwargs)
            finally:
                fitting = False
                session.abandon_epoch()

    model.fit = profiled_fit

    def undo():
        if own is None:
            del model.fit
        else:
            model.fit = own

    return undo

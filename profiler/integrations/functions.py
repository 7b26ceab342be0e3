"""--epoch-fn / --step-fn: each call of a named function is an epoch (or a step).

A name is `module:qualname` (wrapped right after that module is imported, before the script can
take a reference to it) or a qualname in the script itself (`train_epoch`, `Trainer.train_epoch`).
A script's names are bound while it runs, so the launcher compiles the script with a call to a
watcher after each statement at module level (inside if/for/while/with/try bodies too, never
inside functions or classes); the watcher wraps the name as soon as it is bound, before any
later statement can call it, then does nothing. Line numbers, and so tracebacks, are the
script's own. A reference taken in the same statement that binds the name (a decorator that
registers the function) keeps the unwrapped function.
"""

import ast
import difflib
import functools
import inspect

from ..errors import UsageError


_MISSING = object()


def _closest(name, candidates):
    """The one of candidates() closest to `name` (a typo), or None; best effort: the program's own
    objects may raise anywhere (a __dir__ of its own), and a guess never reaches the program."""
    try:
        return next(iter(difflib.get_close_matches(name, candidates(), n=1)), None)
    except Exception:
        return None


def _has(cls, name):
    """Whether class `cls` defines `name` itself; False where its __dict__ cannot be read."""
    try:
        return name in vars(cls)
    except Exception:
        return False


def wrap_calls(fn, begin, end, drop):
    """fn with each call bracketed by begin() and end(); a call that raises calls drop()."""

    @functools.wraps(fn)
    def profiled(*args, **kwargs):
        began = begin()
        try:
            result = fn(*args, **kwargs)
        except BaseException:
            if began:
                drop()
            raise
        if began:
            end()
        return result

    profiled.__profiler_wraps__ = fn
    return profiled


def in_script(spec):
    """A --epoch-fn or --step-fn spec with a "__main__:" prefix dropped (the script runs as __main__,
    where its functions are found by their names); None stays None."""
    return spec[len("__main__:"):] if spec is not None and spec.startswith("__main__:") else spec


class Target:
    """One --epoch-fn or --step-fn: where the function is, and how to wrap it."""

    def __init__(self, spec, option, wrapper, taken=None):
        self.option, self.wrapper = option, wrapper
        self.taken = taken       # the other option's name: never the guess for this one
        module, sep, qualname = spec.rpartition(":")
        self.module = module if sep else None
        self.qualname = qualname
        parts = qualname.split(".")
        dotted = all(part.isidentifier() for part in module.split(".")) if sep else True   # a:b:c is no module
        if not qualname or not all(part.isidentifier() for part in parts) or not dotted:
            raise UsageError(f"{option} {spec!r}: expected NAME, Class.NAME or module:qualname")
        self.parts = parts
        self.done = False
        self.problem = None      # why the name, once bound, could not be wrapped
        self._undo = None
        self._namespace = None   # the last one looked in: the names a never-defined one is told from
        self._meant = None       # the attribute meant, when the one named is missing
        self.home = None         # module:qualname of the function wrapped, when it was defined elsewhere

    @property
    def root(self):
        return self.parts[0]

    @property
    def name(self):
        return self._named(self.qualname)

    def bind(self, namespace):
        """Wrap the function if `namespace` (a module's dict) holds it now; True once settled
        (wrapped, or found to be something that cannot be: see `problem`). Runs while the
        script runs, so it never raises into the script."""
        self._namespace = namespace
        if self.done or self.root not in namespace:
            return self.done
        self.done = True
        owner, name, value = None, self.root, namespace[self.root]
        for depth, part in enumerate(self.parts[1:], 1):
            owner, name = value, part
            value = getattr(value, part, _MISSING)
            if value is _MISSING:
                meant = _closest(part, lambda: [n for n in dir(owner) if not n.startswith("__")])
                self._meant = self._named(".".join([*self.parts[:depth], meant])) if meant else None
                self.problem = f"{getattr(owner, '__name__', type(owner).__name__)} has no attribute {part!r}"
                return True
        raw = value if owner is None else inspect.getattr_static(owner, name)
        function = raw.__func__ if isinstance(raw, (staticmethod, classmethod)) else raw
        if not callable(function):
            self.problem = f"not a function (type {type(function).__name__})"
            return True
        if isinstance(function, type):   # wrapped, it would be no class: no isinstance(), no classmethods
            self.problem = (f"a class, not a function: name the method that runs it "
                            f"({self._named(self.qualname)}.METHOD)")
            return True
        kind = ("a generator function" if inspect.isgeneratorfunction(function) or inspect.isasyncgenfunction(function)
                else "a coroutine function" if inspect.iscoroutinefunction(function) else None)
        if kind:   # its call returns at once, before any of its work runs
            self.problem = f"{kind}, whose call returns before its work runs: name the function that runs it"
            return True
        home = getattr(function, "__module__", None)
        if self.module is None and isinstance(home, str) and home != "__main__":   # imported into the script
            self.home = f"{home}:{getattr(function, '__qualname__', self.qualname)}"
        wrapped = self.wrapper(function)
        if isinstance(raw, (staticmethod, classmethod)):
            wrapped = type(raw)(wrapped)
        if owner is None:
            namespace[name] = wrapped
            self._undo = lambda: namespace.__setitem__(name, raw)
        else:
            setattr(owner, name, wrapped)
            self._undo = lambda: setattr(owner, name, raw)
        return True

    @property
    def misnamed(self):
        """Whether the name marks nothing: never bound, or bound to no function that can be wrapped."""
        return not self.done or self.problem is not None

    def note(self, main=None):
        """A line for the user when nothing was marked through this name, else None; `main` is the
        script's namespace, where a module:qualname that names the script itself is found."""
        if not self.misnamed:
            return None
        if self.done:
            reason, guess = self.problem, self._meant
        elif self.module and self._namespace is not None:   # imported, without that name
            reason, guess = f"module {self.module} defines no {self.root!r}", self._guess()
        elif self.module:   # the script runs as __main__: its functions are never module:qualname
            reason = f"module {self.module} was never imported while the code ran"
            guess = self.qualname if main is not None and self.root in main else None
        else:
            reason = "no such function was defined at the script's top level while the code ran"
            guess = self._guess()
        return (f"{self.option} {self.name}: {reason}; nothing was marked by it"
                + (f" (did you mean {self.option} {guess}?)" if guess else ""))

    def _guess(self):
        """The name the user likely meant, of one never defined: a method of that name in one of the
        namespace's classes (train_epoch for Trainer.train_epoch), else the closest function name."""
        if self._namespace is None:
            return None
        names = {k: v for k, v in self._namespace.items() if not k.startswith("__")}
        classes = [k for k, v in names.items() if isinstance(v, type)]
        method = next((f"{k}.{self.qualname}" for k in classes if _has(names[k], self.root)), None)
        close = _closest(self.root, lambda: [k for k, v in names.items() if callable(v) and k not in classes])
        guess = method or (".".join([close, *self.parts[1:]]) if close else None)
        return None if guess is None or self._named(guess) == self.taken else self._named(guess)

    def _named(self, qualname):
        return f"{self.module}:{qualname}" if self.module else qualname

    def undo(self):
        if self._undo is not None:
            self._undo()
            self._undo = None


class _InsertWatch(ast.NodeTransformer):
    """After every statement at module level, `__profiler_watch__()`."""

    def __init__(self, name):
        self.name = name

    def _call(self, node):
        call = ast.Expr(ast.Call(ast.Name(self.name, ast.Load()), [], []))
        return ast.copy_location(call, node)

    def _body(self, statements):
        out = []
        for statement in statements:
            out.append(self.visit(statement))
            out.append(self._call(statement))
        return out

    def visit_Module(self, node):
        """No call between the docstring and the __future__ imports, which must come first."""
        head = 0
        for statement in node.body:
            docstring = (head == 0 and isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
                         and isinstance(statement.value.value, str))
            if not (docstring or isinstance(statement, ast.ImportFrom) and statement.module == "__future__"):
                break
            head += 1
        node.body = node.body[:head] + self._body(node.body[head:])
        return node

    def generic_visit(self, node):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            return node
        for field in ("body", "orelse", "finalbody"):
            statements = getattr(node, field, None)
            if isinstance(statements, list) and statements and isinstance(statements[0], ast.stmt):
                setattr(node, field, self._body(statements))
        for handler in getattr(node, "handlers", ()):
            handler.body = self._body(handler.body)
        for case in getattr(node, "cases", ()):
            case.body = self._body(case.body)
        return node


WATCH_NAME = "__profiler_watch__"


def compile_with_watch(tree, filename):
    """The script's code with a watch call after each module-level statement."""
    tree = _InsertWatch(WATCH_NAME).visit(tree)
    ast.fix_missing_locations(tree)
    return compile(tree, filename, "exec", dont_inherit=True)


def watcher(targets, namespace):
    """The function the compiled script calls after each statement: binds what it can."""
    pending = [t for t in targets if t.module is None]

    def __profiler_watch__():
        if pending:
            pending[:] = [t for t in pending if not t.bind(namespace)]

    return __profiler_watch__

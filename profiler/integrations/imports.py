"""Run code when a module starts and finishes importing, without importing it ourselves.

The profiled script imports torch, keras or Lightning when it wants to; importing them first
would change what is measured (torch alone adds ~146k GC-tracked objects) and slow every script
that never uses them. A finder at the front of sys.meta_path sees each import by name, lets the
other finders find the module, and wraps the loader's exec_module for that one module so the
callbacks run right after the module's code has run.
"""

import sys
import threading


class ImportWatcher:
    def __init__(self):
        self._started, self._loaded = {}, {}
        self._local = threading.local()
        self.failures = []           # (module, error) of callbacks that raised

    def on_start(self, name, callback):
        """callback() when the import of `name` begins (at once if it is already imported)."""
        if name in sys.modules:
            self._call(name, callback)
        else:
            self._started.setdefault(name, []).append(callback)

    def on_load(self, name, callback):
        """callback(module) when `name` has been imported (at once if it already is)."""
        if name in sys.modules:
            self._call(name, callback, sys.modules[name])
        else:
            self._loaded.setdefault(name, []).append(callback)

    def install(self):
        sys.meta_path.insert(0, self)

    def uninstall(self):
        if self in sys.meta_path:
            sys.meta_path.remove(self)

    def _call(self, name, callback, *args):
        try:
            callback(*args)
        except Exception as e:  # a framework changed its API: the script runs on, unmarked
            self.failures.append((name, f"{type(e).__name__}: {e}"))
            print(f"profiler: could not hook into {name} ({type(e).__name__}: {e}); its epochs are not marked",
                  file=sys.stderr)

    def find_spec(self, fullname, path, target=None):
        if fullname not in self._started and fullname not in self._loaded:
            return None
        if getattr(self._local, "finding", False):
            return None
        for callback in self._started.pop(fullname, ()):
            self._call(fullname, callback)
        callbacks = self._loaded.pop(fullname, None)
        if not callbacks:
            return None
        self._local.finding = True
        try:
            spec = None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
        finally:
            self._local.finding = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            self._loaded[fullname] = callbacks
            return spec
        loader, exec_module = spec.loader, spec.loader.exec_module
        watcher = self

        def exec_then_call(module):
            try:
                exec_module(module)
            finally:
                loader.__dict__.pop("exec_module", None)
            for callback in callbacks:
                watcher._call(fullname, callback, module)

        try:
            loader.exec_module = exec_then_call
        except AttributeError:  # a loader with __slots__: the callbacks wait for another import
            self._loaded[fullname] = callbacks
        return spec

"""The built-in scenarios' names, importable without building the engine (the CLI lists them)."""

SCENARIO_NAMES = ("mlp", "mnist-cnn", "cifar10-cnn")
